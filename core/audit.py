"""The audit log: who changed what, for which tenant, when and from where. Routes call `record` once per change;
details never hold secrets (a key's token is never passed here, only its id)."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from core.db import AuditRow, Store

__all__ = ["Actor", "audit_view", "query", "record"]


class Actor:
    """Who acts: a key id (or a token's subject) and its name, how they authenticated, and their address."""

    __slots__ = ("client", "id", "name", "via")

    def __init__(self, id: str, name: str = "", via: str = "", client: str = "") -> None:
        self.id, self.name, self.via, self.client = id, name, via, client


def record(
    store: Store,
    actor: Actor,
    action: str,
    *,
    tenant: str,
    target: str = "",
    details: dict[str, Any] | None = None,
) -> AuditRow:
    row = AuditRow(
        ts=time.time(),
        actor_id=actor.id[:200],
        actor_name=actor.name[:200],
        via=actor.via[:16],
        tenant=tenant[:64],
        client=actor.client[:64],
        action=action[:64],
        target=str(target)[:200],
        details=details or {},
    )
    with store.session() as s:
        s.add(row)
    return row


def query(
    store: Store,
    *,
    tenant: str | None = None,
    action: str | None = None,
    actor_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
) -> list[AuditRow]:
    """Newest first; `action` matches a whole action or a prefix ending in '.' (`policy.` for every policy change)."""
    stmt = sa.select(AuditRow).order_by(AuditRow.ts.desc(), AuditRow.id.desc()).limit(limit)
    if tenant:
        stmt = stmt.where(AuditRow.tenant == tenant)
    if action:
        stmt = stmt.where(AuditRow.action.startswith(action) if action.endswith(".") else AuditRow.action == action)
    if actor_id:
        stmt = stmt.where(AuditRow.actor_id == actor_id)
    if since is not None:
        stmt = stmt.where(AuditRow.ts >= since)
    if until is not None:
        stmt = stmt.where(AuditRow.ts < until)
    with store.session() as s:
        return list(s.scalars(stmt))


def audit_view(row: AuditRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "ts": row.ts,
        "actor": {"id": row.actor_id, "name": row.actor_name, "via": row.via},
        "tenant": row.tenant,
        "client": row.client,
        "action": row.action,
        "target": row.target,
        "details": row.details,
    }
