"""tasks.requested_by: the principal a task runs for (who asks for approval of its writes; four-eyes compares it)

Revision ID: 0005_task_requester
Revises: 0004_approvals
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_task_requester"
down_revision: str | None = "0004_approvals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("requested_by", sa.String(160), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("requested_by")
