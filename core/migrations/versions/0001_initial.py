"""The schema as opsgraph created it before migrations (create_all on main): thirteen tables.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-23

The tables are a frozen copy, not the live models: a later model change must arrive as a new revision, and
core.db.adopt_legacy_database brings a pre-migration database to exactly this schema before stamping it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")


def schema() -> sa.MetaData:
    """The thirteen tables of revision 0001, with their keys, constraints and indexes."""
    metadata = sa.MetaData()
    sa.Table(
        "cache_entries",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("entities", JSON_TYPE, nullable=False),
        sa.Column("payload", JSON_TYPE, nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("source_task", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("last_hit_at", sa.Double(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_cache_entries_expires_at", "expires_at"),
        sa.Index("ix_cache_partition", "tenant", "kind", "category"),
    )
    sa.Table(
        "episodes",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("playbook", sa.String(length=64), nullable=True),
        sa.Column("plan", JSON_TYPE, nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("headline", sa.Text(), nullable=False),
        sa.Column("findings", JSON_TYPE, nullable=False),
        sa.Column("entities", JSON_TYPE, nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("feedback", JSON_TYPE, nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id"),
        sa.Index("ix_episodes_tenant", "tenant"),
    )
    sa.Table(
        "facts",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("predicate", sa.String(length=100), nullable=False),
        sa.Column("object", sa.String(length=500), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("valid_from", sa.Double(), nullable=False),
        sa.Column("valid_to", sa.Double(), nullable=True),
        sa.Column("valid_until", sa.Double(), nullable=True),
        sa.Column("superseded_by", sa.BigInteger(), nullable=True),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_facts_subject", "tenant", "subject", "predicate"),
    )
    sa.Table(
        "policies",
        metadata,
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", JSON_TYPE, nullable=False),
        sa.Column("author", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("window", JSON_TYPE, nullable=True),
        sa.Column("rollback_of", sa.Integer(), nullable=True),
        sa.Column("prediction", JSON_TYPE, nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    sa.Table(
        "schedule_runs",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("schedule", sa.String(length=64), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("ref", sa.String(length=36), nullable=True),
        sa.Column("fired_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("schedule", "slot"),
        sa.Index("ix_schedule_runs_schedule", "schedule"),
    )
    sa.Table(
        "schedules",
        metadata,
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=128), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("body", JSON_TYPE, nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    sa.Table(
        "tasks",
        metadata,
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("inputs", JSON_TYPE, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("source", sa.String(length=24), nullable=False),
        sa.Column("answer", JSON_TYPE, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_tasks_status", "status"),
        sa.Index("ix_tasks_tenant", "tenant"),
    )
    sa.Table(
        "telemetry",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=32), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        sa.Column("outcome", sa.String(length=24), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=True),
        sa.Column("node_id", sa.String(length=64), nullable=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("wait_s", sa.Double(), nullable=True),
        sa.Column("run_s", sa.Double(), nullable=True),
        sa.Column("cost", sa.Double(), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=True),
        sa.Column("tokens_out", sa.Integer(), nullable=True),
        sa.Column("hit", sa.Boolean(), nullable=True),
        sa.Column("data", JSON_TYPE, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_telemetry_kind_ts", "kind", "ts"),
        sa.Index("ix_telemetry_task_id", "task_id"),
        sa.Index("ix_telemetry_ts", "ts"),
    )
    sa.Table(
        "telemetry_minutes",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=32), nullable=False),
        sa.Column("outcome", sa.String(length=24), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("run_sum", sa.Double(), nullable=False),
        sa.Column("wait_sum", sa.Double(), nullable=False),
        sa.Column("cost_sum", sa.Double(), nullable=False),
        sa.Column("tokens_in", sa.BigInteger(), nullable=False),
        sa.Column("tokens_out", sa.BigInteger(), nullable=False),
        sa.Column("run_hist", JSON_TYPE, nullable=False),
        sa.Column("wait_hist", JSON_TYPE, nullable=False),
        sa.Column("data", JSON_TYPE, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("minute", "kind", "name", "pool", "outcome"),
        sa.Index("ix_telemetry_minutes_minute", "minute"),
    )
    sa.Table(
        "tuning_runs",
        metadata,
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("decision", sa.String(length=24), nullable=True),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("report", JSON_TYPE, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_tuning_runs_status", "status"),
    )
    sa.Table(
        "events",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("data", JSON_TYPE, nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "seq"),
        sa.Index("ix_events_task_id", "task_id"),
    )
    sa.Table(
        "node_runs",
        metadata,
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("args", JSON_TYPE, nullable=False),
        sa.Column("pool", sa.String(length=32), nullable=False),
        sa.Column("queue", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("queued_at", sa.Double(), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("result", JSON_TYPE, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("est_s", sa.Double(), nullable=True),
        sa.Column("not_before", sa.Double(), nullable=True),
        sa.Column("hedge_of", sa.String(length=36), nullable=True),
        sa.Column("batch_id", sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "node_id", "attempt"),
        sa.Index("ix_node_runs_finished_at", "finished_at"),
        sa.Index("ix_node_runs_status", "status"),
        sa.Index("ix_node_runs_task_id", "task_id"),
    )
    sa.Table(
        "plans",
        metadata,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=24), nullable=False),
        sa.Column("body", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "version"),
        sa.Index("ix_plans_task_id", "task_id"),
    )
    return metadata


def upgrade() -> None:
    schema().create_all(op.get_bind())


def downgrade() -> None:
    schema().drop_all(op.get_bind())
