"""Alembic migrations on SQLite and PostgreSQL: a new database, one at revision 0001 with data, one made before
migrations (create_all and hand-written ALTERs), and the models agreeing with the migrations."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import memory._tables  # noqa: F401  the memory tables sit on core's metadata
from core.db import INITIAL_REVISION, MIGRATIONS, Base, Store, make_engine
from core.settings import Settings
from tests.harness import PostgresDatabase


def _config(conn: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def _head() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def _revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _differences(engine: sa.Engine, metadata: sa.MetaData) -> list[object]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(ctx, metadata) if not _is_alembic_version(d)]


def _is_alembic_version(diff: object) -> bool:
    return isinstance(diff, tuple) and len(diff) > 1 and getattr(diff[1], "name", None) == "alembic_version"


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """A database of its own for each test: migrations start from an empty (or an old) schema."""
    if request.param == "sqlite":
        yield Settings(var_dir=tmp_path, database_url="")
        return
    admin = os.environ.get("OPSGRAPH_TEST_POSTGRES_URL")
    if not admin:
        pytest.skip("OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)")
    db = PostgresDatabase(admin)
    try:
        yield Settings(var_dir=tmp_path, database_url=db.url)
    finally:
        db.drop()


@pytest.fixture
def engine(settings: Settings) -> Iterator[sa.Engine]:
    engine = make_engine(settings)
    yield engine
    engine.dispose()


def test_the_versions_folder_is_one_chain_from_0001() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    script = ScriptDirectory.from_config(config)
    assert len(script.get_heads()) == 1, "two heads: give the newer revision the older one as down_revision"
    base = [r.revision for r in script.walk_revisions() if r.down_revision is None]
    assert base == [INITIAL_REVISION]


def test_a_new_database_is_at_head_and_matches_the_models(settings: Settings, engine: sa.Engine) -> None:
    Store.from_settings(settings).engine.dispose()
    assert _revision(engine) == _head()
    assert _differences(engine, Base.metadata) == []


def test_a_model_change_without_a_migration_is_found(settings: Settings, engine: sa.Engine) -> None:
    Store.from_settings(settings).engine.dispose()
    changed = sa.MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["tasks"].append_column(sa.Column("labels", sa.Text(), nullable=True))
    diffs = _differences(engine, changed)
    assert any(d[0] == "add_column" and d[3].name == "labels" for d in diffs if isinstance(d, tuple)), diffs


def test_a_database_at_0001_with_data_upgrades_on_start_and_keeps_it(settings: Settings, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        command.upgrade(_config(conn), INITIAL_REVISION)
        conn.execute(
            sa.text(
                "INSERT INTO tasks (id, tenant, goal, inputs, priority, status, source, created_at, updated_at)"
                " VALUES ('t-1', 'acme', 'check disk', '{\"host\": \"db1\"}', 3, 'succeeded', 'api', 1.0, 2.0)"
            )
        )
        conn.execute(
            sa.text("INSERT INTO events (task_id, seq, ts, type, data) VALUES ('t-1', 1, 1.5, 'task_created', '{}')")
        )
    assert _revision(engine) == INITIAL_REVISION
    store = Store.from_settings(settings)
    try:
        assert _revision(engine) == _head()
        task = store.get_task("t-1")
        assert (task.tenant, task.goal, task.inputs, task.priority) == ("acme", "check disk", {"host": "db1"}, 3)
        assert [e.type for e in store.events_after("t-1")] == ["task_created"]
        assert store.create_task("after the upgrade").status == "queued"
    finally:
        store.engine.dispose()


def test_a_database_from_before_migrations_is_adopted(settings: Settings, engine: sa.Engine) -> None:
    """An old create_all database: tables without the columns later ALTERs added, no alembic_version."""
    old = sa.MetaData()
    sa.Table(
        "tasks",
        old,
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant", sa.String(64)),
        sa.Column("goal", sa.Text),
        sa.Column("inputs", sa.JSON),
        sa.Column("status", sa.String(24)),
        sa.Column("created_at", sa.Double),
        sa.Column("updated_at", sa.Double),
    )
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tasks (id, tenant, goal, inputs, status, created_at, updated_at)"
                " VALUES ('old-1', 'default', 'old goal', '{}', 'failed', 1.0, 1.0)"
            )
        )
    store = Store.from_settings(settings)
    try:
        assert _revision(engine) == _head()
        task = store.get_task("old-1")
        assert (task.goal, task.priority, task.source) == ("old goal", 5, "api")  # the ALTERs' defaults
        columns = {c["name"] for c in sa.inspect(engine).get_columns("node_runs")}
        assert {"tenant", "hedge_of", "batch_id"} <= columns
        assert store.create_task("new").status == "queued"
    finally:
        store.engine.dispose()


def test_starting_twice_changes_nothing(settings: Settings, engine: sa.Engine) -> None:
    Store.from_settings(settings).engine.dispose()
    Store.from_settings(settings).engine.dispose()
    assert _revision(engine) == _head()
