"""API keys over REST (admins): issue one (its token is in this answer only), list, read, revoke."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from core.apikeys import KeyBook, key_view
from services.api.deps import TENANT_PATTERN, Admin, Ctx, audit

router = APIRouter(prefix="/v1/keys", tags=["keys"])
KeyId = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[0-9a-f]+$")]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=64, pattern=TENANT_PATTERN, description="The tenant it acts for.")
    scopes: list[Literal["read", "operate", "approve", "admin"]] = Field(min_length=1, max_length=4)
    name: str = Field("", max_length=200, description="What it is for: ci-deploys, grafana ...")
    expires_in_days: float | None = Field(None, gt=0, le=3650, description="Unset: no expiry.")


@router.post("", status_code=201)
def create_key(ctx: Ctx, body: KeyCreate, principal: Admin, request: Request) -> JSONResponse:
    """The answer holds the key itself (`token`), once: only its hash is kept."""
    expires = body.expires_in_days * 86_400 if body.expires_in_days is not None else None
    issued = KeyBook(ctx.store).create(
        body.tenant, list(body.scopes), name=body.name, expires_in_s=expires, created_by=principal.id
    )
    details = {"scopes": list(issued.row.scopes), "name": body.name, "expires_at": issued.row.expires_at}
    audit(request, principal, "key.create", tenant=body.tenant, target=issued.row.id, details=details)
    return JSONResponse({**key_view(issued.row), "token": issued.token}, status_code=201)


@router.get("")
def list_keys(
    ctx: Ctx,
    _: Admin,
    tenant: Annotated[str | None, Query(max_length=64, pattern=TENANT_PATTERN)] = None,
    include_revoked: bool = True,
) -> dict[str, Any]:
    return {"keys": [key_view(r) for r in KeyBook(ctx.store).list(tenant=tenant, include_revoked=include_revoked)]}


@router.get("/{key_id}")
def get_key(ctx: Ctx, _: Admin, key_id: KeyId) -> dict[str, Any]:
    return key_view(KeyBook(ctx.store).get(key_id))


@router.post("/{key_id}/revoke")
def revoke_key(ctx: Ctx, principal: Admin, request: Request, key_id: KeyId) -> dict[str, Any]:
    """Refused from its next request on (every request reads the key's row)."""
    row = KeyBook(ctx.store).revoke(key_id)
    audit(request, principal, "key.revoke", tenant=row.tenant, target=row.id, details={"name": row.name})
    return key_view(row)
