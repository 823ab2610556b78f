"""The versioned policy document: read it, its history, change it (a person), roll it back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.jsonvalues import json_value_problem
from core.policies import version_view
from services.api.deps import Admin, Ctx, audit

router = APIRouter(tags=["policies"])
MAX_VERSION = 2**31 - 1  # versions are 32-bit integers in the database


class PolicyChange(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    policy: dict[str, Any] = Field(description="The whole document: {scheduling, serving}; unset keys take defaults.")
    reason: str = Field(min_length=1, max_length=2000, description="Why: kept with the version.")
    actor: str = Field("", max_length=64, description="Who made the change; default: the credential's name.")

    @field_validator("policy")
    @classmethod
    def _storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = json_value_problem(value, "policy")
        if problem:
            raise ValueError(problem)
        return value


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    reason: str = Field("rolled back by a person", min_length=1, max_length=2000)
    actor: str = Field("", max_length=64)


@router.get("/v1/policies/current")
def current_policy(ctx: Ctx, _: Admin) -> dict[str, Any]:
    version, _document = ctx.policies.current_version()
    return version_view(ctx.policies.get(version))


@router.get("/v1/policies/history")
def policy_history(ctx: Ctx, _: Admin, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    return {"versions": [version_view(r, body=False) for r in ctx.policies.history(limit)]}


@router.get("/v1/policies/{version}")
def policy_version(ctx: Ctx, _: Admin, version: Annotated[int, Path(ge=1, le=MAX_VERSION)]) -> dict[str, Any]:
    return version_view(ctx.policies.get(version))


@router.put("/v1/policies")
async def put_policy(ctx: Ctx, change: PolicyChange, principal: Admin, request: Request) -> dict[str, Any]:
    """A person's change: validated (types, ranges, no unknown keys); 422 `policy_invalid` lists every problem."""
    who = change.actor or principal.name or principal.id
    row = await run_in_threadpool(ctx.policies.put, change.policy, author="person", reason=change.reason, actor=who)
    details = {"version": row.version, "reason": change.reason}
    await run_in_threadpool(audit, request, principal, "policy.put", target=str(row.version), details=details)
    return version_view(row)


@router.post("/v1/policies/rollback/{version}")
async def rollback_policy(
    ctx: Ctx,
    principal: Admin,
    request: Request,
    version: Annotated[int, Path(ge=1, le=MAX_VERSION)],
    body: Rollback | None = None,
) -> dict[str, Any]:
    body = body or Rollback()
    who = body.actor or principal.name or principal.id
    row = await run_in_threadpool(ctx.policies.rollback, version, author="person", reason=body.reason, actor=who)
    details = {"version": row.version, "restores": version, "reason": body.reason}
    await run_in_threadpool(audit, request, principal, "policy.rollback", target=str(row.version), details=details)
    return version_view(row)
