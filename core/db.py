"""The database is the truth: tasks, plans, node runs and events. SQLite by default, PostgreSQL in production.

Every write that two processes may race on (a node's completion, an event's sequence number) is a
conditional statement, so a duplicate completion or a concurrent append cannot corrupt state.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from core.errors import NotFound
from core.jsonvalues import check_json_value
from core.logging import redact, redact_value
from core.metrics import metrics
from core.settings import Settings
from core.types import Event, EventType, NodeStatus, Plan, TaskStatus

try:
    import fcntl
except ImportError:  # Windows: no lock file; start one process first there
    fcntl = None  # type: ignore[assignment]

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")
_FINAL_NODE_STATES = [s.value for s in NodeStatus if s.final]
# a READY attempt has no message yet; only a sent one (or a redelivered running one) may start
_STARTABLE = [NodeStatus.PENDING.value, NodeStatus.QUEUED.value, NodeStatus.RUNNING.value]
_LIVE_TASK_STATES = [s.value for s in TaskStatus if not s.terminal]


class Base(DeclarativeBase):
    pass


class TaskRow(Base):
    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(sa.String(64), index=True)
    goal: Mapped[str] = mapped_column(sa.Text)
    inputs: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    priority: Mapped[int] = mapped_column(sa.Integer, default=5)
    status: Mapped[str] = mapped_column(sa.String(24), index=True)
    source: Mapped[str] = mapped_column(sa.String(24), default="api")  # api | cli | schedule
    # the principal the task runs for: it asks for approval of the task's writes (four-eyes compares it)
    requested_by: Mapped[str | None] = mapped_column(sa.String(160), nullable=True)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    created_at: Mapped[float] = mapped_column(sa.Double)
    updated_at: Mapped[float] = mapped_column(sa.Double)
    finished_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)


class PlanRow(Base):
    __tablename__ = "plans"
    __table_args__ = (sa.UniqueConstraint("task_id", "version"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(sa.Integer)
    source: Mapped[str] = mapped_column(sa.String(24))
    body: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[float] = mapped_column(sa.Double)


class NodeRunRow(Base):
    __tablename__ = "node_runs"
    __table_args__ = (sa.UniqueConstraint("task_id", "node_id", "attempt"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)  # the attempt's idempotency key
    task_id: Mapped[str] = mapped_column(sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(sa.String(64))
    attempt: Mapped[int] = mapped_column(sa.Integer)
    tool: Mapped[str] = mapped_column(sa.String(64))
    args: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    pool: Mapped[str] = mapped_column(sa.String(32))
    queue: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16), index=True)
    deliveries: Mapped[int] = mapped_column(sa.Integer, default=0)
    worker: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    created_at: Mapped[float] = mapped_column(sa.Double)
    queued_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    started_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    # indexed: the release loop's cost model reads what finished since its last pass, several times a second
    finished_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True, index=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    # scheduling: who it runs for, what it is expected to cost, when it may go, what it duplicates
    tenant: Mapped[str] = mapped_column(sa.String(64), default="")
    priority: Mapped[int] = mapped_column(sa.Integer, default=5)
    est_s: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    not_before: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    hedge_of: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    batch_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)

    @property
    def queue_wait_s(self) -> float | None:
        if self.started_at is None or self.queued_at is None:
            return None
        return max(0.0, self.started_at - self.queued_at)

    @property
    def run_s(self) -> float | None:
        if self.finished_at is None or self.started_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (sa.UniqueConstraint("task_id", "seq"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(sa.Integer)
    ts: Mapped[float] = mapped_column(sa.Double)
    type: Mapped[str] = mapped_column(sa.String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)

    def to_event(self) -> Event:
        return Event(task_id=self.task_id, seq=self.seq, ts=self.ts, type=self.type, data=self.data)


class AlertGroupRow(Base):
    """An Alertmanager alert group of a tenant and the investigation it opened (core/alert_groups.py).

    One row per (tenant, group): a repeated notification while it fires is counted on it; a resolved one marks it
    resolved; firing again after that opens a new investigation on the same row."""

    __tablename__ = "alert_groups"
    __table_args__ = (sa.UniqueConstraint("tenant", "key_hash"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(sa.String(64), index=True)
    key_hash: Mapped[str] = mapped_column(sa.String(64))  # sha256 of groupKey: group keys have no length bound
    group_key: Mapped[str] = mapped_column(sa.Text)
    receiver: Mapped[str] = mapped_column(sa.String(255), default="")
    status: Mapped[str] = mapped_column(sa.String(16))  # firing | resolved
    task_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)  # the open (or last) investigation
    labels: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)  # the group's commonLabels
    notifications: Mapped[int] = mapped_column(sa.Integer, default=0)
    investigations: Mapped[int] = mapped_column(sa.Integer, default=0)
    created_at: Mapped[float] = mapped_column(sa.Double)
    last_notified_at: Mapped[float] = mapped_column(sa.Double)
    resolved_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)


class TelemetryRow(Base):
    """One measured action (kind: task, node, llm, cache, policy, tuning): typed columns, so aggregates are SQL
    and rollups are cheap. Raw rows live `TELEMETRY_RAW_RETENTION_S`, then become per-minute rollups."""

    __tablename__ = "telemetry"
    __table_args__ = (sa.Index("ix_telemetry_kind_ts", "kind", "ts"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    ts: Mapped[float] = mapped_column(sa.Double, index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    name: Mapped[str] = mapped_column(sa.String(64), default="")  # tool, cache category, model, author
    pool: Mapped[str] = mapped_column(sa.String(32), default="")
    worker: Mapped[str] = mapped_column(sa.String(255), default="")
    outcome: Mapped[str] = mapped_column(sa.String(24), default="")
    task_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    node_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    tenant: Mapped[str] = mapped_column(sa.String(64), default="")
    attempt: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    wait_s: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    run_s: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    cost: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    tokens_in: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    tokens_out: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    hit: Mapped[bool | None] = mapped_column(sa.Boolean, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)


class TelemetryMinuteRow(Base):
    """Raw telemetry rolled up per minute and (kind, name, pool, outcome), with histograms for quantiles."""

    __tablename__ = "telemetry_minutes"
    __table_args__ = (sa.UniqueConstraint("minute", "kind", "name", "pool", "outcome"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    minute: Mapped[int] = mapped_column(sa.BigInteger, index=True)  # epoch seconds // 60
    kind: Mapped[str] = mapped_column(sa.String(16))
    name: Mapped[str] = mapped_column(sa.String(64))
    pool: Mapped[str] = mapped_column(sa.String(32))
    outcome: Mapped[str] = mapped_column(sa.String(24))
    count: Mapped[int] = mapped_column(sa.Integer, default=0)
    hits: Mapped[int] = mapped_column(sa.Integer, default=0)
    run_sum: Mapped[float] = mapped_column(sa.Double, default=0.0)
    wait_sum: Mapped[float] = mapped_column(sa.Double, default=0.0)
    cost_sum: Mapped[float] = mapped_column(sa.Double, default=0.0)
    tokens_in: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    tokens_out: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    run_hist: Mapped[list[int]] = mapped_column(JsonType, default=list)
    wait_hist: Mapped[list[int]] = mapped_column(JsonType, default=list)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)  # summed numbers (compute_s per pool)


class PolicyRow(Base):
    """One version of the policy document. Versions are never edited: a rollback is a new version."""

    __tablename__ = "policies"

    version: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    body: Mapped[dict[str, Any]] = mapped_column(JsonType)
    author: Mapped[str] = mapped_column(sa.String(16))  # settings | person | tuner
    actor: Mapped[str] = mapped_column(sa.String(64), default="")  # who, when a person
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    window: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)  # telemetry it was based on
    rollback_of: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)  # the version it restores
    prediction: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)  # the tuner's simulation
    created_at: Mapped[float] = mapped_column(sa.Double)


class ScheduleRow(Base):
    """A user's recurring task: a cron expression in a timezone, and the body of the task it submits."""

    __tablename__ = "schedules"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    # the tenant its tasks run for (and the only tenant that sees it); names stay unique across tenants
    tenant: Mapped[str] = mapped_column(sa.String(64), default="default", server_default="default", index=True)
    cron: Mapped[str] = mapped_column(sa.String(128))
    timezone: Mapped[str] = mapped_column(sa.String(64), default="UTC")
    body: Mapped[dict[str, Any]] = mapped_column(JsonType)
    paused: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    created_at: Mapped[float] = mapped_column(sa.Double)
    updated_at: Mapped[float] = mapped_column(sa.Double)


class ScheduleRunRow(Base):
    """One firing of a schedule (or of the tuner) in one slot: the unique key makes a second firing of the
    same slot, by a second scheduler or a redelivered message, a no-op."""

    __tablename__ = "schedule_runs"
    __table_args__ = (sa.UniqueConstraint("schedule", "slot"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    schedule: Mapped[str] = mapped_column(sa.String(64), index=True)
    slot: Mapped[int] = mapped_column(sa.BigInteger)
    ref: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)  # the task or tuning run it made
    fired_at: Mapped[float] = mapped_column(sa.Double)


class ApiKeyRow(Base):
    """An API key: `og_<id>_<secret>`; only the SHA-256 of the secret is kept (see core/apikeys.py)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(sa.String(64))
    tenant: Mapped[str] = mapped_column(sa.String(64), index=True)
    scopes: Mapped[list[str]] = mapped_column(JsonType)
    name: Mapped[str] = mapped_column(sa.String(200), default="")
    created_by: Mapped[str] = mapped_column(sa.String(64), default="")  # a key id, or cli / first-run
    created_at: Mapped[float] = mapped_column(sa.Double)
    expires_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)


class AuditRow(Base):
    """One change made by someone: who (key id and name), for which tenant, when, from where, what, to what."""

    __tablename__ = "audit_log"
    __table_args__ = (sa.Index("ix_audit_log_ts", "ts"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    ts: Mapped[float] = mapped_column(sa.Double)
    actor_id: Mapped[str] = mapped_column(sa.String(200))
    actor_name: Mapped[str] = mapped_column(sa.String(200), default="")
    via: Mapped[str] = mapped_column(sa.String(16), default="")  # key | oidc | cli
    tenant: Mapped[str] = mapped_column(sa.String(64), index=True)
    client: Mapped[str] = mapped_column(sa.String(64), default="")  # the peer address, or "local" for the CLI
    action: Mapped[str] = mapped_column(sa.String(64), index=True)  # policy.put, key.revoke, cache.clear ...
    target: Mapped[str] = mapped_column(sa.String(200), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)


class TuningRunRow(Base):
    __tablename__ = "tuning_runs"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    trigger: Mapped[str] = mapped_column(sa.String(16))  # schedule | api
    status: Mapped[str] = mapped_column(sa.String(16), index=True)  # queued | running | done | failed
    created_at: Mapped[float] = mapped_column(sa.Double)
    started_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    decision: Mapped[str | None] = mapped_column(sa.String(24), nullable=True)  # applied | kept | rolled_back
    policy_version: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    report: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


class ApprovalRow(Base):
    """A person's decision on one write node: pending until approved, rejected or expired (core/approvals.py)."""

    __tablename__ = "approvals"
    __table_args__ = (sa.Index("ix_approvals_tenant_status", "tenant", "status"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(sa.String(64))
    task_id: Mapped[str] = mapped_column(sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(sa.String(64))
    tool: Mapped[str] = mapped_column(sa.String(64))
    args: Mapped[dict[str, Any]] = mapped_column(JsonType)  # redacted
    preview: Mapped[dict[str, Any]] = mapped_column(JsonType)  # the tool's preview: summary and data
    reason: Mapped[str] = mapped_column(sa.Text)  # why: the diagnosis that led to it
    requested_by: Mapped[str] = mapped_column(sa.String(128))
    status: Mapped[str] = mapped_column(sa.String(16))  # pending | approved | rejected | expired
    decided_by: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
    decided_at: Mapped[float | None] = mapped_column(sa.Double, nullable=True)
    decision_reason: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    from_addr: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)  # the decider's client address
    expires_at: Mapped[float] = mapped_column(sa.Double, index=True)
    created_at: Mapped[float] = mapped_column(sa.Double)


def make_engine(settings: Settings) -> sa.Engine:
    url = settings.sqlalchemy_url
    if url.startswith("sqlite"):
        settings.ensure_dirs()
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @sa_event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # WAL lets the API read while workers write; busy_timeout queues writers instead of failing
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    # the application_name marks opsgraph's own sessions, which its write tools never terminate
    return sa.create_engine(
        url, pool_pre_ping=True, pool_size=10, max_overflow=10, connect_args={"application_name": "opsgraph"}
    )


MIGRATIONS = Path(__file__).resolve().parent / "migrations"
INITIAL_REVISION = "0001_initial"


def upgrade_database(engine: sa.Engine) -> None:
    """Bring the database to the newest revision (`alembic upgrade head`), one process at a time.

    A database made before migrations (tables, no alembic_version) is adopted first: brought to revision
    0001's schema and stamped with it, then upgraded like any other."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with _migration_lock(engine), engine.begin() as conn:
        config.attributes["connection"] = conn
        tables = set(sa.inspect(conn).get_table_names())
        if "alembic_version" not in tables and "tasks" in tables:
            adopt_legacy_database(conn)
            command.stamp(config, INITIAL_REVISION)
        command.upgrade(config, "head")


def adopt_legacy_database(conn: sa.Connection) -> None:
    """What the hand-written ALTERs did before migrations, frozen at revision 0001: create its missing tables,
    add its missing columns (nullable, with the model's scalar default, as the ALTERs added them) and indexes."""
    initial = _initial_revision().schema()
    initial.create_all(conn)  # tables only where missing
    inspector = sa.inspect(conn)
    for table in initial.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        model = Base.metadata.tables.get(table.name)
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=conn.dialect)
            modelled = model.columns.get(column.name) if model is not None else None
            default = getattr(modelled.default, "arg", None) if modelled is not None and modelled.default else None
            clause = ""
            if isinstance(default, bool):
                clause = f" DEFAULT {int(default)}" if conn.dialect.name == "sqlite" else f" DEFAULT {default}"
            elif isinstance(default, int | float):
                clause = f" DEFAULT {default!r}"
            elif isinstance(default, str):
                clause = " DEFAULT '" + default.replace("'", "''") + "'"
            conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{clause}'))
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _initial_revision() -> Any:
    spec = importlib.util.spec_from_file_location("_opsgraph_0001", MIGRATIONS / "versions" / "0001_initial.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _migration_lock(engine: sa.Engine) -> Iterator[None]:
    """Processes starting together (the API and the scheduler) must not both run a revision: PostgreSQL takes
    an advisory lock, SQLite a lock file beside the database."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
                conn.commit()
        return
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:" or fcntl is None:
        yield
        return
    with open(f"{database}.migrate-lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_PG_MIGRATION_LOCK = 0x6F7073677261  # "opsgra": any constant no other advisory lock of ours uses


def _changed(result: Any) -> bool:
    """Whether a conditional UPDATE matched a row (the guard behind every race-free transition)."""
    return bool(cast(CursorResult[Any], result).rowcount)


def node_telemetry(row: NodeRunRow) -> TelemetryRow:
    """An ended attempt as telemetry: queue wait, run time, pool, worker, attempt, outcome (a timeout is its own
    outcome: the tuner treats it apart from an error)."""
    outcome = row.status
    if row.status == NodeStatus.FAILED.value and row.error and "timed out" in row.error:
        outcome = "timeout"
    return TelemetryRow(
        ts=row.finished_at or time.time(),
        kind="node",
        name=row.tool,
        pool=row.pool if row.queue != "cache" else "cache",
        worker=row.worker or "",
        outcome=outcome,
        task_id=row.task_id,
        node_id=row.node_id,
        tenant=row.tenant,
        attempt=row.attempt,
        wait_s=row.queue_wait_s,
        run_s=row.run_s,
        data={"hedge": True} if row.hedge_of else {},
    )


def new_id() -> str:
    return str(uuid.uuid4())


def deciding_attempts(rows: list[NodeRunRow]) -> dict[str, NodeRunRow]:
    by_node: dict[str, list[NodeRunRow]] = {}
    for row in rows:
        by_node.setdefault(row.node_id, []).append(row)
    out: dict[str, NodeRunRow] = {}
    for node_id, attempts in by_node.items():
        attempts.sort(key=lambda r: r.attempt)
        won = [r for r in attempts if r.status == NodeStatus.SUCCEEDED.value]
        live = [r for r in attempts if not NodeStatus(r.status).final]
        out[node_id] = won[0] if won else (live[-1] if live else attempts[-1])
    return out


class Store:
    """Narrow repository over the tables above; every method is one short transaction."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings, *, create: bool = True) -> Store:
        engine = make_engine(settings)
        if create:
            upgrade_database(engine)
        return cls(engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    # tasks
    def create_task(
        self,
        goal: str,
        *,
        tenant: str = "default",
        inputs: dict[str, Any] | None = None,
        priority: int = 5,
        source: str = "api",
        requested_by: str | None = None,
    ) -> TaskRow:
        check_json_value(inputs or {}, "inputs")  # every path in (API, scheduler, CLI) meets the same bounds
        now = time.time()
        row = TaskRow(
            id=new_id(),
            tenant=tenant,
            goal=redact(goal),  # secrets never reach storage: a URL's password in a goal or input is masked here
            inputs=redact_value(inputs or {}),
            priority=priority,
            status=TaskStatus.QUEUED.value,
            source=source,
            requested_by=requested_by,
            created_at=now,
            updated_at=now,
        )
        with self.session() as s:
            s.add(row)
        self.append_event(row.id, EventType.TASK_CREATED, {"goal": row.goal, "tenant": tenant, "source": source})
        return row

    def get_task(self, task_id: str, *, tenant: str | None = None) -> TaskRow:
        """The task; with `tenant`, only if it is that tenant's (another tenant's task answers as a missing one:
        its existence is not disclosed)."""
        with self.session() as s:
            row = s.get(TaskRow, task_id)
            if row is None or (tenant is not None and row.tenant != tenant):
                raise NotFound(f"no task with id {task_id!r}")
            return row

    def list_tasks(self, *, tenant: str | None = None, limit: int = 50) -> list[TaskRow]:
        stmt = sa.select(TaskRow).order_by(TaskRow.created_at.desc()).limit(limit)
        if tenant:
            stmt = stmt.where(TaskRow.tenant == tenant)
        with self.session() as s:
            return list(s.scalars(stmt))

    def unfinished_tasks(self) -> list[TaskRow]:
        stmt = sa.select(TaskRow).where(TaskRow.status.in_(_LIVE_TASK_STATES)).order_by(TaskRow.created_at)
        with self.session() as s:
            return list(s.scalars(stmt))

    def set_answer(self, task_id: str, answer: dict[str, Any]) -> None:
        with self.session() as s:
            s.execute(
                sa.update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(answer=redact_value(answer), updated_at=time.time())
            )

    def set_task_status(self, task_id: str, status: TaskStatus, *, error: str | None = None) -> bool:
        """Move a task to `status` unless it already ended; returns whether it moved."""
        now = time.time()
        values: dict[str, Any] = {"status": status.value, "updated_at": now}
        if error is not None:
            values["error"] = redact(error)
        if status.terminal:
            values["finished_at"] = now
        stmt = sa.update(TaskRow).where(TaskRow.id == task_id, TaskRow.status.in_(_LIVE_TASK_STATES)).values(**values)
        measured: TelemetryRow | None = None
        with self.session() as s:
            moved = _changed(s.execute(stmt))
            if moved and status.terminal:
                measured = self._task_telemetry(s, task_id, status, now)
                s.add(measured)
        if measured is not None:
            metrics().observe_all([measured])
        if moved:
            data: dict[str, Any] = {"status": status.value}
            if error:
                data["error"] = error
            self.append_event(task_id, EventType.TASK_STATUS, data)
        return moved

    # plans
    def save_plan(self, task_id: str, plan: Plan) -> int:
        with self.session() as s:
            current = s.scalar(sa.select(sa.func.max(PlanRow.version)).where(PlanRow.task_id == task_id))
            version = (current or 0) + 1
            s.add(
                PlanRow(
                    task_id=task_id,
                    version=version,
                    source=plan.source,
                    body=redact_value(plan.model_dump(mode="json")),
                    created_at=time.time(),
                )
            )
        return version

    def latest_plan(self, task_id: str) -> Plan | None:
        stmt = sa.select(PlanRow).where(PlanRow.task_id == task_id).order_by(PlanRow.version.desc()).limit(1)
        with self.session() as s:
            row = s.scalar(stmt)
            return Plan.model_validate(row.body) if row else None

    # node runs
    def create_node_run(self, task_id: str, node_id: str, **fields: Any) -> NodeRunRow:
        """One attempt (see create_node_runs): tool, args, pool, queue, and optionally status, tenant,
        priority, est_s, not_before, hedge_of."""
        return self.create_node_runs(task_id, [{"node_id": node_id, **fields}])[0]

    def create_node_runs(self, task_id: str, runs: list[dict[str, Any]]) -> list[NodeRunRow]:
        """Attempts of a task's nodes in one transaction, each numbered after its node's last attempt."""
        now = time.time()
        with self.session() as s:
            rows = []
            for k, run in enumerate(runs):
                node_id = run["node_id"]
                last = s.scalar(
                    sa.select(sa.func.max(NodeRunRow.attempt)).where(
                        NodeRunRow.task_id == task_id, NodeRunRow.node_id == node_id
                    )
                )
                status = run.get("status", NodeStatus.PENDING)
                rows.append(
                    NodeRunRow(
                        id=new_id(),
                        task_id=task_id,
                        node_id=node_id,
                        attempt=(last or 0) + 1,
                        tool=run["tool"],
                        args=redact_value(run["args"]),
                        pool=run["pool"],
                        queue=run["queue"],
                        status=NodeStatus(status).value,
                        deliveries=0,
                        created_at=now + k * 1e-6,  # in the order given: fifo keeps the plan's order
                        tenant=run.get("tenant", ""),
                        priority=run.get("priority", 5),
                        est_s=run.get("est_s"),
                        not_before=run.get("not_before"),
                        hedge_of=run.get("hedge_of"),
                    )
                )
            s.add_all(rows)
        return rows

    def get_node_run(self, run_id: str) -> NodeRunRow | None:
        with self.session() as s:
            return s.get(NodeRunRow, run_id)

    def mark_nodes_queued(self, run_ids: list[str], queued_at: float, *, resent: bool = False) -> None:
        """Record the send. A fast worker may already have started the attempt: keep its status, but still
        stamp when the message was sent, so the queue wait is known either way."""
        with self.session() as s:
            first = NodeRunRow.queued_at.is_(None)
            s.execute(
                sa.update(NodeRunRow)
                .where(NodeRunRow.id.in_(run_ids), sa.true() if resent else first)
                .values(queued_at=queued_at)
            )
            s.execute(
                sa.update(NodeRunRow)
                .where(NodeRunRow.id.in_(run_ids), NodeRunRow.status == NodeStatus.PENDING.value)
                .values(status=NodeStatus.QUEUED.value)
            )

    def start_node_run(self, run_id: str, worker: str) -> tuple[NodeRunRow | None, int]:
        """A worker took the attempt: count the delivery. Returns the row (None if it already ended)
        and how many times this node (all attempts) has been started without a result."""
        stmt = (
            sa.update(NodeRunRow)
            .where(NodeRunRow.id == run_id, NodeRunRow.status.in_(_STARTABLE))
            .values(
                status=NodeStatus.RUNNING.value,
                worker=worker,
                started_at=time.time(),
                deliveries=NodeRunRow.deliveries + 1,
            )
        )
        with self.session() as s:
            if not _changed(s.execute(stmt)):
                return None, 0
            row = s.get(NodeRunRow, run_id)
            assert row is not None
            starts = s.scalar(
                sa.select(sa.func.sum(NodeRunRow.deliveries)).where(
                    NodeRunRow.task_id == row.task_id,
                    NodeRunRow.node_id == row.node_id,
                    NodeRunRow.status.in_([NodeStatus.RUNNING.value, NodeStatus.LOST.value]),
                )
            )
            return row, int(starts or 0)

    def finish_node_run(
        self,
        run_id: str,
        status: NodeStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> bool:
        """Record the attempt's outcome once; a duplicate or late completion returns False and changes nothing."""
        stmt = (
            sa.update(NodeRunRow)
            .where(NodeRunRow.id == run_id, NodeRunRow.status.not_in(_FINAL_NODE_STATES))
            .values(
                status=status.value,
                result=redact_value(result),
                error=redact(error) if error else error,
                finished_at=time.time(),
            )
        )
        with self.session() as s:
            if not _changed(s.execute(stmt)):
                return False
            row = s.get(NodeRunRow, run_id)
            measured = node_telemetry(row) if row is not None else None
            if measured is not None:  # the attempt's telemetry, in the same transaction: none is lost or doubled
                s.add(measured)
        if measured is not None:
            metrics().observe_all([measured])  # after the commit: counted once, as the row is
        return True

    @staticmethod
    def _task_telemetry(s: Session, task_id: str, status: TaskStatus, now: float) -> TelemetryRow:
        task = s.get(TaskRow, task_id)
        assert task is not None
        compute: dict[str, float] = {}
        attempts = 0
        stmt = sa.select(NodeRunRow.pool, NodeRunRow.queue, NodeRunRow.started_at, NodeRunRow.finished_at).where(
            NodeRunRow.task_id == task_id
        )
        for pool, queue, started, finished in s.execute(stmt):
            attempts += 1
            if started is not None and finished is not None and queue != "cache":
                compute[pool] = compute.get(pool, 0.0) + max(0.0, finished - started)
        llm_cost = s.scalar(
            sa.select(sa.func.sum(TelemetryRow.cost)).where(TelemetryRow.task_id == task_id, TelemetryRow.kind == "llm")
        )
        return TelemetryRow(
            ts=now,
            kind="task",
            name=task.source,
            outcome=status.value,
            task_id=task_id,
            tenant=task.tenant,
            run_s=max(0.0, now - task.created_at),
            cost=float(llm_cost or 0.0),
            data={"compute_s": {k: round(v, 6) for k, v in compute.items()}, "attempts": attempts},
        )

    def node_runs(self, task_id: str) -> list[NodeRunRow]:
        stmt = (
            sa.select(NodeRunRow)
            .where(NodeRunRow.task_id == task_id)
            .order_by(NodeRunRow.created_at, NodeRunRow.attempt)
        )
        with self.session() as s:
            return list(s.scalars(stmt))

    def latest_attempts(self, task_id: str) -> dict[str, NodeRunRow]:
        """Per node, the attempt that decides it: the first that succeeded (a hedge or its original), else
        the newest still open (waiting, queued or running), else the newest."""
        rows = self.node_runs(task_id)
        return deciding_attempts(rows)

    def open_attempts(self, task_id: str) -> list[NodeRunRow]:
        return [r for r in self.node_runs(task_id) if not NodeStatus(r.status).final]

    def runs_with_status(self, *statuses: NodeStatus) -> list[NodeRunRow]:
        """Attempts of every task in these states (the release loop's view of the ready set and in flight)."""
        stmt = sa.select(NodeRunRow).where(NodeRunRow.status.in_([s.value for s in statuses]))
        with self.session() as s:
            return list(s.scalars(stmt))

    def finished_since(self, since: float, limit: int = 5000) -> list[NodeRunRow]:
        """Attempts that ended after `since` with a run time (what the cost model learns from)."""
        stmt = (
            sa.select(NodeRunRow)
            .where(NodeRunRow.finished_at > since, NodeRunRow.started_at.is_not(None))
            .order_by(NodeRunRow.finished_at)
            .limit(limit)
        )
        with self.session() as s:
            return list(s.scalars(stmt))

    def has_hedge(self, run_id: str) -> bool:
        stmt = sa.select(NodeRunRow.id).where(NodeRunRow.hedge_of == run_id).limit(1)
        with self.session() as s:
            return s.scalar(stmt) is not None

    def claim_ready(self, run_ids: list[str], *, pool: str, queue: str, batch_id: str | None = None) -> set[str]:
        """READY -> PENDING for one release loop only; returns the ids it claimed. The send follows (reconcile
        resends a PENDING)."""
        stmt = (
            sa.update(NodeRunRow)
            .where(NodeRunRow.id.in_(run_ids), NodeRunRow.status == NodeStatus.READY.value)
            .values(status=NodeStatus.PENDING.value, pool=pool, queue=queue, batch_id=batch_id)
            .returning(NodeRunRow.id)
        )
        with self.session() as s:
            return set(s.scalars(stmt))

    def node_starts(self, task_id: str, node_id: str) -> int:
        stmt = sa.select(sa.func.sum(NodeRunRow.deliveries)).where(
            NodeRunRow.task_id == task_id, NodeRunRow.node_id == node_id
        )
        with self.session() as s:
            return int(s.scalar(stmt) or 0)

    # events
    def append_event(self, task_id: str, type: str | EventType, data: dict[str, Any] | None = None) -> Event:
        return self.append_events([(task_id, type, data)])[0]

    def append_events(self, events: list[tuple[str, str | EventType, dict[str, Any] | None]]) -> list[Event]:
        """Append in one transaction, each with its task's next sequence number (in the order given);
        concurrent writers retry on the unique (task_id, seq)."""
        for _ in range(20):
            try:
                with self.session() as s:
                    last: dict[str, int] = {}
                    rows = []
                    for task_id, type, data in events:
                        if task_id not in last:
                            stmt = sa.select(sa.func.max(EventRow.seq)).where(EventRow.task_id == task_id)
                            last[task_id] = s.scalar(stmt) or 0
                        last[task_id] += 1
                        rows.append(
                            EventRow(
                                task_id=task_id,
                                seq=last[task_id],
                                ts=time.time(),
                                type=str(type),
                                data=redact_value(data or {}),
                            )
                        )
                    s.add_all(rows)
                return [r.to_event() for r in rows]
            except IntegrityError:
                time.sleep(0.005)
        raise RuntimeError(f"could not append {len(events)} event(s) after 20 tries")

    def events_after(self, task_id: str, seq: int = 0, limit: int = 500) -> list[Event]:
        stmt = (
            sa.select(EventRow)
            .where(EventRow.task_id == task_id, EventRow.seq > seq)
            .order_by(EventRow.seq)
            .limit(limit)
        )
        with self.session() as s:
            return [r.to_event() for r in s.scalars(stmt)]
