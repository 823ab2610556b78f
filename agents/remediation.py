"""Remediation: no write runs without a person's approval, a Diagnosis's writes become a plan, and a fix is checked.

- The gate (`approval_gate`, the ops graph's `gate` node): a write node whose dependencies have ended waits
  outside the ready set (workers/dispatch.py). Its preview runs on the tool's pool and reads the current state
  (workers.tasks.preview_write); the request is stored with what, why, the preview, who may approve and when
  it expires; the task goes to waiting_approval and the graph stops at LangGraph's interrupt(). The runner
  resumes it with Command(resume=...) once the request is decided or has expired, also after a restart: the
  checkpoint and the approvals table are both in the database.
- `remediation_request` (POST /v1/tasks/{id}/remediate): the write actions of a task's Diagnosis become write
  nodes, one after another, and the read checks that task ran become verify nodes after them.
- `verify_remediation`: after the writes, the same investigation runs on the verify nodes' fresh evidence; the
  fix worked when the finding the write addressed is gone.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import structlog
from langgraph.types import interrupt

from agents.context import OpsContext
from agents.investigation import diagnose_answer, headline, investigate_live
from core.approvals import Approval, ApprovalClosed, ApprovalStatus
from core.db import TaskRow
from core.errors import Conflict, UserError
from core.types import Effect, EventType, NodeStatus, TaskStatus, ToolResult, ToolStatus
from diagnosis.model import Action, Diagnosis, Finding
from workers.celery_app import PREVIEW_TASK

log = structlog.get_logger(__name__)

PREVIEW_WAIT_S = 30.0
MAX_VERIFY_NODES = 8
REMEDIATE_CATEGORY = "remediate"  # plans that write: never read from or stored in the semantic cache


class NoRemedy(Conflict):
    """The task has no Diagnosis, or its Diagnosis proposes no write an opsgraph tool can do."""

    code = "no_remedy"


# ---------------------------------------------------------------------------------------------------- the gate


def preview_write(ctx: OpsContext, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The write's preview, read on the tool's pool (where the write itself would run); an error result says
    why when no worker answers, so the approver knows the preview is missing rather than empty."""
    spec = ctx.toolset.get(tool)
    if spec is None:
        return ToolResult(status=ToolStatus.ERROR, summary=f"unknown tool {tool!r}").model_dump(mode="json")
    try:
        async_result = ctx.celery.send_task(PREVIEW_TASK, args=[tool, args], queue=spec.pool)
        result = async_result.get(timeout=PREVIEW_WAIT_S, disable_sync_subtasks=False)
        return result if isinstance(result, dict) else {"status": "error", "summary": "preview returned nothing"}
    except Exception as exc:
        summary = f"preview unavailable: no {spec.pool} worker answered ({type(exc).__name__})"
        return ToolResult(status=ToolStatus.ERROR, summary=summary).model_dump(mode="json")


def pinned_args(ctx: OpsContext, tool: str, args: dict[str, Any], preview: dict[str, Any]) -> dict[str, Any]:
    """The arguments to approve: the node's, plus what the preview pins of the target it showed (a session's
    backend_start), so the write refuses a target that changed after the person looked at it."""
    spec = ctx.toolset.get(tool)
    pins = (preview.get("data") or {}).get("pin") or {}
    if spec is None or not isinstance(pins, dict):
        return dict(args)
    fields = spec.args_model.model_fields
    return {**args, **{k: v for k, v in pins.items() if k in fields and args.get(k) is None}}


def approval_reason(task: TaskRow) -> str:
    """Why the write is asked for: the Diagnosis that led to it, or the plan a person submitted."""
    remedy = (task.inputs or {}).get("remediation")
    if isinstance(remedy, dict) and remedy.get("root_cause"):
        return f"Diagnosis of task {remedy.get('source_task')} ({remedy.get('category')}): {remedy['root_cause']}"
    who = task.requested_by or task.source
    return f"a write in the plan of task {task.id} ({task.goal[:200]!r}), submitted by {who}"


def request_approval(ctx: OpsContext, task: TaskRow, gated: dict[str, Any], preview: dict[str, Any]) -> Approval:
    """A new approval request of a gated write node, showing its preview."""
    return ctx.approvals.create(
        tenant=task.tenant,
        task_id=task.id,
        node_id=gated["node_id"],
        tool=gated["tool"],
        args=pinned_args(ctx, gated["tool"], gated["args"], preview),
        preview=preview,
        reason=approval_reason(task),
        requested_by=task.requested_by or f"{task.source}:{task.id}",
    )


def refused_by_preview(preview: dict[str, Any]) -> bool:
    """The preview already shows the write cannot be done (a rule refuses it, or its target is not there):
    nobody is asked to approve a write that would fail."""
    code = (preview.get("data") or {}).get("error_code")
    return preview.get("status") == "error" and code in ("refused", "not_found")


def approvers(approval: Approval, four_eyes: bool) -> str:
    """Who may decide a request (shown with it)."""
    rule = f"a key or token of tenant {approval.tenant} with the approve scope"
    if four_eyes:
        rule += f", other than {approval.requested_by} (four-eyes)"
    return rule


def approval_gate(ctx: OpsContext, task_id: str, gated: dict[str, Any]) -> dict[str, Any]:
    """Ask a person about one write node and wait (interrupt) until they decide or the request expires; returns
    the decision the dispatcher applies: {status, args, by, reason, approval_id}."""
    task = ctx.store.get_task(task_id)
    approval = ctx.approvals.latest_for(task_id, gated["node_id"])  # a resumed or restarted gate asked already
    if approval is None:
        preview = preview_write(ctx, gated["tool"], gated["args"])
        if refused_by_preview(preview):
            summary = str(preview.get("summary") or "refused")
            ctx.bus.emit(task_id, EventType.LOG, {"level": "warning", "message": f"write not proposed: {summary}"})
            return {"approval_id": None, "status": "refused", "args": gated["args"], "by": None, "reason": summary}
        approval = request_approval(ctx, task, gated, preview)
    while approval.status == ApprovalStatus.PENDING:
        status = TaskStatus(ctx.store.get_task(task_id).status)
        if status == TaskStatus.CANCELLED:  # nobody needs to decide now
            with contextlib.suppress(ApprovalClosed):
                ctx.approvals.decide(approval.id, approve=False, decided_by="system", reason="task cancelled")
            approval = ctx.approvals.refresh(approval.id)
            break
        if status != TaskStatus.WAITING_APPROVAL:
            ctx.store.set_task_status(task_id, TaskStatus.WAITING_APPROVAL)
        # resumed by the runner once the request is decided or expired; the table, not the resume value, decides
        interrupt(
            {
                "approval_id": approval.id,
                "node_id": approval.node_id,
                "tool": approval.tool,
                "summary": str(approval.preview.get("summary", "")),
                "approvers": approvers(approval, ctx.approvals.four_eyes),
                "expires_at": approval.expires_at,
            }
        )
        approval = ctx.approvals.refresh(approval.id)
    if TaskStatus(ctx.store.get_task(task_id).status) == TaskStatus.WAITING_APPROVAL:
        ctx.store.set_task_status(task_id, TaskStatus.RUNNING)
    return {
        "approval_id": approval.id,
        "status": approval.status.value,
        # what the person approved: the node's arguments and the preview's pins (the stored copy is redacted)
        "args": pinned_args(ctx, gated["tool"], gated["args"], approval.preview),
        "by": approval.decided_by,
        "reason": approval.decision_reason,
    }


def waiting_approval(interrupts: list[Any]) -> str | None:
    """The approval id a stopped graph waits on, from its interrupts' values."""
    for item in interrupts:
        value = getattr(item, "value", None)
        if isinstance(value, dict) and value.get("approval_id"):
            return str(value["approval_id"])
    return None


# ----------------------------------------------------------------------------------- from diagnosis to remedy


def _cause_of(d: Diagnosis, action: Action) -> Finding | None:
    """The finding a write action addresses: the one that proposed it, else the lead cause."""
    for f in d.findings:
        if any(a.tool == action.tool and a.args == action.args for a in f.actions):
            return f
    return next((f for f in d.findings if f.role == "cause" and f.category == d.category), None)


def remediation_request(
    ctx: OpsContext, source: TaskRow, choose: list[int] | None = None
) -> tuple[str, dict[str, Any]]:
    """(goal, inputs) of the remediation task for `source`'s Diagnosis: the first write action an opsgraph tool
    does (the root cause's remedy), or those chosen (`choose`: indexes into the Diagnosis's actions), each a write
    node after the previous one, then the read checks `source` ran, again, as verify nodes. Raises NoRemedy or
    UserError."""
    diagnosis = (source.answer or {}).get("diagnosis")
    if not isinstance(diagnosis, dict):
        raise NoRemedy(f"task {source.id} has no diagnosis to remediate ({source.status})")
    d = Diagnosis.model_validate(diagnosis)
    writable = [
        (i, a)
        for i, a in enumerate(d.actions)
        if a.kind == "write"
        and a.tool
        and (spec := ctx.toolset.get(a.tool)) is not None
        and spec.effect == Effect.WRITE
    ]
    if choose is not None:
        by_index = dict(writable)
        wrong = [i for i in choose if i not in by_index]
        if wrong:
            offered = ", ".join(str(i) for i, _ in writable) or "none"
            raise UserError(f"actions {wrong} are not write actions an opsgraph tool can do (those are: {offered})")
        writable = [(i, by_index[i]) for i in dict.fromkeys(choose)]
    elif writable:
        # the root cause's own remedy only: the other write actions are about other objects showing the same
        # fault (another blocker elsewhere) or are the lasting fix; a person picks those by index
        writable = writable[:1]
    if not writable:
        listed = "; ".join(f"[{a.kind}] {a.description}" for a in d.actions) or "none"
        raise NoRemedy(
            f"the diagnosis of task {source.id} proposes no write an opsgraph tool can do (actions: {listed})"
        )
    nodes: list[dict[str, Any]] = []
    for k, (_, action) in enumerate(writable, start=1):
        nodes.append(
            {
                "id": f"fix-{k}",
                "tool": action.tool,
                "args": action.args,
                "depends_on": [nodes[-1]["id"]] if nodes else [],
                "on_failure": "stop",
            }
        )
    writes = [n["id"] for n in nodes]
    seen: set[str] = set()
    for node_id, row in sorted(ctx.store.latest_attempts(source.id).items()):
        spec = ctx.toolset.get(row.tool)
        key = f"{row.tool}:{sorted(row.args.items())}"
        if row.status != NodeStatus.SUCCEEDED.value or spec is None or spec.effect != Effect.READ or key in seen:
            continue
        seen.add(key)
        nodes.append({"id": f"verify-{node_id}"[:64], "tool": row.tool, "args": row.args, "depends_on": writes})
        if len(seen) >= MAX_VERIFY_NODES:
            break
    first = writable[0][1]
    cause = _cause_of(d, first)
    inputs = {
        "plan": {"category": REMEDIATE_CATEGORY, "nodes": nodes},
        "cache": "skip",
        "remediation": {
            "source_task": source.id,
            "question": source.goal,
            "category": d.category,
            "root_cause": d.root_cause,
            "cause": None if cause is None else {"code": cause.code, "object": cause.object, "title": cause.title},
            "actions": [a.description for _, a in writable],
        },
    }
    goal = f"remediate: {'; '.join(a.description for _, a in writable)}"[:4000]
    return goal, inputs


# ---------------------------------------------------------------------------------------------------- verify


def verify_remediation(ctx: OpsContext, task: TaskRow) -> dict[str, Any]:
    """After the writes: what each write did, and whether the problem is gone, from the verify nodes' fresh
    evidence through the same analyzers. Returns {"diagnosis": ..., "items": ..., "remediation": {...}}; the
    diagnosis is None when no write ran (rejected, expired or failed: nothing to verify)."""
    remedy = dict((task.inputs or {}).get("remediation") or {})
    latest = ctx.store.latest_attempts(task.id)
    plan = ctx.store.latest_plan(task.id)
    writes = []
    for node in plan.nodes if plan else []:
        spec = ctx.toolset.get(node.tool)
        if spec is None or spec.effect != Effect.WRITE:
            continue
        row = latest.get(node.id)
        approval = ctx.approvals.latest_for(task.id, node.id)
        writes.append(
            {
                "node_id": node.id,
                "tool": node.tool,
                "status": row.status if row else "not run",
                "summary": ((row.result or {}).get("summary") if row else None) or (row.error if row else None),
                "approval": None
                if approval is None
                else {
                    "id": approval.id,
                    "status": approval.status.value,
                    "decided_by": approval.decided_by,
                    "reason": approval.decision_reason,
                },
            }
        )
    done = [w for w in writes if w["status"] == NodeStatus.SUCCEEDED.value]
    report: dict[str, Any] = {**remedy, "writes": writes, "verified": None, "checked_at": time.time()}
    if not done:
        report["outcome"] = "not_done"
        report["summary"] = "No write was done: " + "; ".join(
            f"{w['node_id']} ({w['tool']}): {w['summary'] or w['status']}" for w in writes
        )
        return {"diagnosis": None, "items": {}, "remediation": report}
    verify_nodes = {nid for nid in latest if nid.startswith("verify-")}
    try:
        outcome = investigate_live(
            ctx,
            task.id,
            str(remedy.get("question") or task.goal),
            tenant=task.tenant,
            priority=task.priority,
            nodes=verify_nodes,
            fresh=True,
        )
    except Exception as exc:  # the write happened: say so, even when the checks could not judge it
        log.warning("verification failed", task_id=task.id, error=repr(exc))
        report["outcome"] = "unverified"
        report["summary"] = f"The write was done, but checking it failed ({type(exc).__name__}: {exc}): not verified."
        return {"diagnosis": None, "items": {}, "remediation": report}
    after = Diagnosis.model_validate(outcome["diagnosis"])
    cause = remedy.get("cause") or {}
    still = [
        f
        for f in after.findings
        if f.role != "benign" and f.code == cause.get("code") and f.object == cause.get("object")
    ]
    report["verified"] = not still and bool(verify_nodes)
    report["after"] = {"category": after.category, "root_cause": after.root_cause, "headline": headline(after)}
    if not verify_nodes:
        report["outcome"] = "unverified"
        report["summary"] = "The write was done, but the source task ran no read check to repeat: not verified."
    elif still:
        report["outcome"] = "not_fixed"
        next_step = next((f"[{a.kind}] {a.description}: {a.command}" for a in after.actions), None)
        report["summary"] = f"The fix did not work: {still[0].title} is still there after the write. " + (
            f"Next step: {next_step}" if next_step else "Look again at the evidence below."
        )
        report["next_step"] = next_step
    else:
        report["outcome"] = "fixed"
        gone = cause.get("title") or remedy.get("root_cause") or "the problem"
        report["summary"] = f"Fixed and verified: {gone} is gone. Now: {headline(after)}"
    ctx.bus.emit(
        task.id,
        EventType.REMEDIATION_VERIFIED,
        {
            "verified": report["verified"],
            "outcome": report["outcome"],
            "summary": report["summary"],
            "source_task": remedy.get("source_task"),
        },
    )
    return {**outcome, "remediation": report}


def remediation_answer(outcome: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The remediation task's answer: what was written and whether it worked first, then the fresh Diagnosis."""
    report = outcome["remediation"]
    answer = diagnose_answer(outcome, base) if outcome.get("diagnosis") else dict(base)
    lines = [f"**Remediation**: {report['summary']}"]
    for w in report["writes"]:
        decision = w.get("approval") or {}
        who = f", {decision['status']} by {decision['decided_by']}" if decision.get("decided_by") else ""
        why = f" ({decision['reason']})" if decision.get("reason") else ""
        lines.append(f"- {w['node_id']} `{w['tool']}`: {w['status']}{who}{why}: {w['summary'] or ''}")
    answer["remediation"] = report
    answer["headline"] = report["summary"].split(". ")[0][:300]
    answer["severity"] = {"fixed": "ok", "not_fixed": "critical"}.get(report["outcome"], "warning")
    answer["text"] = "\n".join(lines) + ("\n\n" + answer["text"] if answer.get("text") else "")
    return answer


__all__ = [
    "NoRemedy",
    "approval_gate",
    "remediation_answer",
    "remediation_request",
    "verify_remediation",
    "waiting_approval",
]
