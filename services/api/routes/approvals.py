"""Approvals: the write nodes waiting for a person, and their decisions (approve or reject, with a reason).

Deciding resumes the waiting task (its graph stopped at the approval gate); only the approve scope decides, and with
four-eyes configured nobody approves a request they made. Every decision is in the audit log and on the task's
event stream (approval.decided)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from agents import OpsContext, TaskRunner
from agents.remediation import approvers
from core.approvals import Approval, ApprovalStatus
from services.api.auth import Principal
from services.api.deps import Approver, Ctx, Reader, Runner, Tenant, audit
from services.api.errors import error_responses

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
ApprovalId = Annotated[str, Path(min_length=1, max_length=36, pattern=r"^[0-9a-zA-Z_-]+$")]


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str = Field("", max_length=2000, description="Why: kept with the decision and shown on the task.")


class Rejection(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str = Field(min_length=1, max_length=2000, description="Why not: the task's answer says it.")


def approval_view(a: Approval, principal: Principal, four_eyes: bool) -> dict[str, Any]:
    """The request as a person decides on it; `may_decide` says whether this caller may, and `why_not` says why
    not in words (the console shows it beside the disabled buttons); `approvers` who may."""
    why_not = None
    if a.status != ApprovalStatus.PENDING:
        why_not = f"already {a.status.value}" + (f" by {a.decided_by}" if a.decided_by else "")
    elif not principal.allows("approve"):
        why_not = "this key has no approve scope: someone with it must decide"
    elif four_eyes and principal.who == a.requested_by:
        why_not = "four-eyes: you asked for this write yourself, so someone else must approve it"
    return {
        **a.model_dump(mode="json"),
        "four_eyes": four_eyes,
        "approvers": approvers(a, four_eyes),
        "may_decide": why_not is None,
        "why_not": why_not,
    }


@router.get("")
def list_approvals(
    ctx: Ctx,
    principal: Reader,
    tenant: Tenant,
    status: ApprovalStatus | None = None,
    task_id: Annotated[str | None, Query(max_length=36)] = None,
    limit: int = Query(100, ge=1, le=500),
) -> dict[str, Any]:
    """Newest first; `status=pending` lists what waits for a decision (expired ones read as expired)."""
    found = ctx.approvals.list(tenant=tenant, status=status, task_id=task_id, limit=limit)
    four_eyes = ctx.approvals.four_eyes
    return {"approvals": [approval_view(a, principal, four_eyes) for a in found]}


@router.get("/{approval_id}")
def get_approval(approval_id: ApprovalId, ctx: Ctx, principal: Reader, tenant: Tenant) -> dict[str, Any]:
    return approval_view(ctx.approvals.get(approval_id, tenant=tenant), principal, ctx.approvals.four_eyes)


async def _decide(
    request: Request,
    ctx: OpsContext,
    runner: TaskRunner,
    principal: Principal,
    tenant: str,
    approval_id: str,
    approve: bool,
    reason: str,
) -> dict[str, Any]:
    client = request.client.host if request.client else None
    decided = await run_in_threadpool(
        ctx.approvals.decide,
        approval_id,
        approve=approve,
        decided_by=principal.who,
        reason=reason,
        tenant=tenant,
        from_addr=client,
    )
    action = "approval.approve" if approve else "approval.reject"
    details = {"task_id": decided.task_id, "node_id": decided.node_id, "tool": decided.tool, "reason": reason}
    await run_in_threadpool(
        audit, request, principal, action, tenant=decided.tenant, target=decided.id, details=details
    )
    runner.submit(decided.task_id)  # the task's graph resumes past its gate
    return approval_view(decided, principal, ctx.approvals.four_eyes)


@router.post("/{approval_id}/approve", responses=error_responses(403, 409))
async def approve(
    approval_id: ApprovalId,
    body: Decision,
    request: Request,
    ctx: Ctx,
    runner: Runner,
    principal: Approver,
    tenant: Tenant,
) -> dict[str, Any]:
    """Approve the write: the task runs it with the approved arguments, then verifies. 409 approval_closed when it
    was already decided or has expired; 403 four_eyes when the caller asked for it themselves."""
    return await _decide(request, ctx, runner, principal, tenant, approval_id, True, body.reason)


@router.post("/{approval_id}/reject", responses=error_responses(409))
async def reject(
    approval_id: ApprovalId,
    body: Rejection,
    request: Request,
    ctx: Ctx,
    runner: Runner,
    principal: Approver,
    tenant: Tenant,
) -> dict[str, Any]:
    """Reject the write: it is skipped, and the task's answer says so with the reason."""
    return await _decide(request, ctx, runner, principal, tenant, approval_id, False, body.reason)
