"""Alembic's environment: run by core.db.upgrade_database (with a connection) or by the alembic command
(`alembic -c core/migrations/alembic.ini ...`, reading OPSGRAPH_* settings for the database)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from core.db import Base

# The whole database's tables, for autogenerate and the model-versus-migrations test: memory's tables sit on
# core's declarative base. Migrations describe the one database every layer shares, so this file (loaded by
# Alembic, imported by no opsgraph module) reaches up to memory.
import memory._tables  # noqa: F401  isort: skip

target_metadata = Base.metadata


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from core.db import make_engine
    from core.settings import get_settings

    engine = make_engine(get_settings())
    with engine.connect() as conn:
        _run(conn)
        conn.commit()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run them against a database")
run_migrations_online()
