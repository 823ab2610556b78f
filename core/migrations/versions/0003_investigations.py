"""investigations: Alertmanager alert groups and the investigation each opened

Revision ID: 0003_investigations
Revises: 0002_auth
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_investigations"
down_revision = "0002_auth"
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "alert_groups",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("receiver", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=True),
        sa.Column("labels", JsonType, nullable=False),
        sa.Column("notifications", sa.Integer(), nullable=False),
        sa.Column("investigations", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_notified_at", sa.Double(), nullable=False),
        sa.Column("resolved_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "key_hash"),
    )
    op.create_index(op.f("ix_alert_groups_tenant"), "alert_groups", ["tenant"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_groups_tenant"), table_name="alert_groups")
    op.drop_table("alert_groups")
