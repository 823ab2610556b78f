"""The audit log (admins): changes of policy, schedules, keys, cache and tuning, newest first."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from core.audit import audit_view, query
from services.api.deps import TENANT_PATTERN, Admin, Ctx

router = APIRouter(tags=["audit"])


@router.get("/v1/audit")
def list_audit(
    ctx: Ctx,
    _: Admin,
    tenant: Annotated[str | None, Query(max_length=64, pattern=TENANT_PATTERN, description="Only this tenant.")] = None,
    action: Annotated[
        str | None, Query(max_length=64, description="An action (key.revoke) or a prefix ending in '.' (policy.).")
    ] = None,
    actor: Annotated[str | None, Query(max_length=200, description="A key id or oidc:SUBJECT.")] = None,
    since: Annotated[float | None, Query(ge=0, description="Unix time, inclusive.")] = None,
    until: Annotated[float | None, Query(ge=0, description="Unix time, exclusive.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    rows = query(ctx.store, tenant=tenant, action=action, actor_id=actor, since=since, until=until, limit=limit)
    return {"entries": [audit_view(r) for r in rows]}
