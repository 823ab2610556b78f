"""Memory's tables, on the same database and declarative base as the rest (core.db)."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Base, JsonType


class CacheEntryRow(Base):
    __tablename__ = "cache_entries"
    __table_args__ = (sa.Index("ix_cache_partition", "tenant", "kind", "category"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    tenant: Mapped[str] = mapped_column(sa.String(64))
    kind: Mapped[str] = mapped_column(sa.String(16))  # plan | answer | tool_result
    category: Mapped[str] = mapped_column(sa.String(32))
    text: Mapped[str] = mapped_column(sa.Text)
    entities: Mapped[dict[str, Any]] = mapped_column(JsonType)
    payload: Mapped[dict[str, Any]] = mapped_column(JsonType)
    vector: Mapped[bytes] = mapped_column(sa.LargeBinary)  # float32; rebuilds the index when its file is lost
    source_task: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    created_at: Mapped[float] = mapped_column(sa.Double)
    expires_at: Mapped[float] = mapped_column(sa.Double, index=True)
    last_hit_at: Mapped[float] = mapped_column(sa.Double)
    hits: Mapped[int] = mapped_column(sa.Integer, default=0)


class EpisodeRow(Base):
    __tablename__ = "episodes"

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    tenant: Mapped[str] = mapped_column(sa.String(64), index=True)
    task_id: Mapped[str] = mapped_column(sa.String(36), unique=True)
    goal: Mapped[str] = mapped_column(sa.Text)
    category: Mapped[str] = mapped_column(sa.String(32))
    playbook: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    plan: Mapped[dict[str, Any]] = mapped_column(JsonType)
    outcome: Mapped[str] = mapped_column(sa.String(16))  # succeeded | failed | cancelled
    headline: Mapped[str] = mapped_column(sa.Text)
    findings: Mapped[list[Any]] = mapped_column(JsonType)  # the warn and critical findings
    entities: Mapped[dict[str, Any]] = mapped_column(JsonType)
    duration_s: Mapped[float] = mapped_column(sa.Double)
    feedback: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    repeats: Mapped[int] = mapped_column(sa.Integer, default=1)  # duplicates merged into this one
    vector: Mapped[bytes] = mapped_column(sa.LargeBinary)
    created_at: Mapped[float] = mapped_column(sa.Double)


class FactRow(Base):
    """A durable statement about the estate ("orders-api depends_on postgres-main") with where it came from
    and when it holds. A contradicting fact closes this one (valid_to, superseded_by); nothing is deleted."""

    __tablename__ = "facts"
    __table_args__ = (sa.Index("ix_facts_subject", "tenant", "subject", "predicate"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    tenant: Mapped[str] = mapped_column(sa.String(64))
    subject: Mapped[str] = mapped_column(sa.String(200))
    predicate: Mapped[str] = mapped_column(sa.String(100))
    object: Mapped[str] = mapped_column(sa.String(500))
    source: Mapped[str] = mapped_column(sa.String(200))  # provenance: person:NAME, task:ID, playbook:NAME
    valid_from: Mapped[float] = mapped_column(sa.Double)
    valid_to: Mapped[float | None] = mapped_column(sa.Double, nullable=True)  # None: holds now
    valid_until: Mapped[float | None] = mapped_column(sa.Double, nullable=True)  # stated expiry, if any
    superseded_by: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    vector: Mapped[bytes] = mapped_column(sa.LargeBinary)
    created_at: Mapped[float] = mapped_column(sa.Double)


MEMORY_TABLES = [cast(sa.Table, t.__table__) for t in (CacheEntryRow, EpisodeRow, FactRow)]


def init_memory_tables(engine: sa.Engine) -> None:
    Base.metadata.create_all(engine, tables=MEMORY_TABLES)
