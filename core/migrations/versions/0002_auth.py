"""Authentication and tenancy: API keys (hashed), the audit log, and the tenant a schedule runs for.

Revision ID: 0002_auth
Revises: 0001_initial
Create Date: 2026-11-23

Matches core.db's ApiKeyRow, AuditRow and ScheduleRow.tenant exactly. Schedules made before this revision ran
for the body's tenant or "default"; they keep running for "default" (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0002_auth"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("scopes", JSON_TYPE, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.Column("last_used_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("actor_id", sa.String(length=200), nullable=False),
        sa.Column("actor_name", sa.String(length=200), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("details", JSON_TYPE, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_log_ts", "audit_log", ["ts"])
    op.create_index("ix_audit_log_tenant", "audit_log", ["tenant"])
    op.create_index("ix_audit_log_action", "audit_log", ["action"])
    # NOT NULL with a server default: existing rows get "default" (SQLite and PostgreSQL both add it in place)
    op.add_column("schedules", sa.Column("tenant", sa.String(length=64), server_default="default", nullable=False))
    op.create_index("ix_schedules_tenant", "schedules", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_schedules_tenant", table_name="schedules")
    with op.batch_alter_table("schedules") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("tenant")
    op.drop_index("ix_audit_log_action", table_name="audit_log")
    op.drop_index("ix_audit_log_tenant", table_name="audit_log")
    op.drop_index("ix_audit_log_ts", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_table("api_keys")
