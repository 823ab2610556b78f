"""Tasks: create, read, follow (SSE), cancel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import redis.asyncio as aredis
from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.ops_graph import cancel_open_attempts, request_plan
from agents.remediation import remediation_request
from core import keys
from core.db import NodeRunRow, TaskRow
from core.errors import Conflict, UserError
from core.jsonvalues import json_value_problem
from core.types import TaskStatus
from services.api.deps import TENANT_PATTERN, Ctx, Operator, Reader, Runner, Tenant, tenant_for
from services.api.errors import error_responses
from services.api.limits import STREAM_SLOT_REFRESH_S, StreamSlots, stream_owner

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    goal: str = Field(min_length=1, max_length=4000, description="What to do, in plain words.")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Structured inputs: urls, service, log_path ...")
    priority: int = Field(5, ge=0, le=9, description="0 is most urgent.")
    tenant: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=TENANT_PATTERN,
        description="Only for admins acting for a tenant; anyone else may leave it out or name their own tenant "
        "(another answers 403). The tenant is the credential's by default.",
    )
    plan: dict[str, Any] | None = Field(
        None,
        description="A plan to run as given ({nodes: [...]}); validated like any planner's, planner skipped.",
    )
    cache: Literal["use", "skip"] = Field(
        "use", description="skip: run again with fresh figures instead of answering from the semantic cache."
    )

    @field_validator("inputs", "plan")
    @classmethod
    def _storable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = json_value_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class TaskCreated(BaseModel):
    id: str
    status: str
    links: dict[str, str]


def node_run_view(r: NodeRunRow) -> dict[str, Any]:
    return {
        "id": r.id,
        "node_id": r.node_id,
        "attempt": r.attempt,
        "tool": r.tool,
        "args": r.args,
        "pool": r.pool,
        "queue": r.queue,
        "status": r.status,
        "worker": r.worker,
        "deliveries": r.deliveries,
        "hedge_of": r.hedge_of,
        "batch_id": r.batch_id,
        "est_s": r.est_s,
        "not_before": r.not_before,
        "queue_wait_s": r.queue_wait_s,
        "run_s": r.run_s,
        "created_at": r.created_at,
        "queued_at": r.queued_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "result": r.result,
        "error": r.error,
    }


def task_view(t: TaskRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "tenant": t.tenant,
        "goal": t.goal,
        "inputs": t.inputs,
        "priority": t.priority,
        "status": t.status,
        "source": t.source,
        "requested_by": t.requested_by,
        "error": t.error,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "finished_at": t.finished_at,
    }


@router.post("", status_code=202, response_model=TaskCreated)
def create_task(body: TaskCreate, ctx: Ctx, runner: Runner, principal: Operator, acting: Tenant) -> TaskCreated:
    if len(json.dumps(body.inputs)) > ctx.settings.max_arg_bytes:
        raise UserError(f"inputs are larger than {ctx.settings.max_arg_bytes} bytes")
    inputs = dict(body.inputs)
    if "investigation" in inputs:  # its evidence folder is the API's to write (POST /v1/investigations)
        raise UserError("inputs.investigation is reserved: post evidence to /v1/investigations")
    if body.cache == "skip":
        inputs["cache"] = "skip"
    if body.plan is not None:
        request_plan(ctx, body.goal, body.plan)  # 422 plan_invalid now, not a failed task later
        inputs["plan"] = body.plan
    tenant = tenant_for(principal, body.tenant) if body.tenant else acting
    task = ctx.store.create_task(
        body.goal, tenant=tenant, inputs=inputs, priority=body.priority, source="api", requested_by=principal.who
    )
    runner.submit(task.id)
    return _created(task)


def _created(task: TaskRow) -> TaskCreated:
    return TaskCreated(
        id=task.id,
        status=task.status,
        links={"self": f"/v1/tasks/{task.id}", "events": f"/v1/tasks/{task.id}/events"},
    )


class RemediateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    actions: list[int] | None = Field(
        None,
        max_length=20,
        description="Indexes into the Diagnosis's actions (answer.diagnosis.actions) to do, in this order; unset: "
        "the first write action an opsgraph tool can do (the root cause's remedy).",
    )
    priority: int = Field(3, ge=0, le=9, description="0 is most urgent.")


@router.post("/{task_id}/remediate", status_code=202, response_model=TaskCreated, responses=error_responses(409))
def remediate_task(
    task_id: str, ctx: Ctx, runner: Runner, principal: Operator, tenant: Tenant, body: RemediateRequest | None = None
) -> TaskCreated:
    """Do what the task's Diagnosis proposes: its write actions become a new task whose every write waits for a
    person's approval (GET /v1/approvals), then the checks run again to verify the fix. 409 no_remedy when the
    task has no Diagnosis or it proposes no write an opsgraph tool can do."""
    body = body or RemediateRequest()
    source = ctx.store.get_task(task_id, tenant=tenant)
    goal, inputs = remediation_request(ctx, source, body.actions)
    request_plan(ctx, goal, inputs["plan"])  # 422 plan_invalid now (a tool unavailable here), not a failed task
    task = ctx.store.create_task(
        goal, tenant=source.tenant, inputs=inputs, priority=body.priority, source="api", requested_by=principal.who
    )
    runner.submit(task.id)
    return _created(task)


@router.get("")
def list_tasks(ctx: Ctx, _: Reader, tenant: Tenant, limit: int = Query(20, ge=1, le=200)) -> dict[str, Any]:
    return {"tasks": [task_view(t) for t in ctx.store.list_tasks(tenant=tenant, limit=limit)]}


@router.get("/{task_id}")
def get_task(task_id: str, ctx: Ctx, _: Reader, tenant: Tenant) -> dict[str, Any]:
    task = ctx.store.get_task(task_id, tenant=tenant)
    plan = ctx.store.latest_plan(task_id)
    return {
        **task_view(task),
        "plan": plan.model_dump(mode="json") if plan else None,
        "node_runs": [node_run_view(r) for r in ctx.store.node_runs(task_id)],
        "answer": task.answer,
    }


@router.post("/{task_id}/cancel", status_code=202, responses=error_responses(409))
def cancel_task(task_id: str, ctx: Ctx, _: Operator, tenant: Tenant) -> dict[str, Any]:
    task = ctx.store.get_task(task_id, tenant=tenant)
    if TaskStatus(task.status).terminal:
        raise Conflict(f"task {task_id} already ended ({task.status})")
    ctx.store.set_task_status(task_id, TaskStatus.CANCELLED, error="cancelled by request")
    cancel_open_attempts(ctx, task_id)
    ctx.bus.announce(task_id)
    return {"id": task_id, "status": TaskStatus.CANCELLED.value}


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    helpful: bool
    note: str | None = Field(None, max_length=2000)


@router.post("/{task_id}/feedback", responses=error_responses(409))
def task_feedback(task_id: str, body: Feedback, ctx: Ctx, _: Operator, tenant: Tenant) -> dict[str, Any]:
    """Was the answer helpful? Stored on the task's episode; recall weighs helpful episodes up."""
    task = ctx.store.get_task(task_id, tenant=tenant)
    if not ctx.episodes.feedback(task_id, body.helpful, body.note):
        raise Conflict(f"task {task_id} has no episode to rate ({task.status}; answers served from cache have none)")
    return {"id": task_id, "feedback": body.model_dump()}


# sequence numbers are 32-bit on PostgreSQL (INTEGER): a resume point above that cannot name an event
MAX_EVENT_SEQ = 2**31 - 1
_SEQ = re.compile(r"[0-9]{1,10}")
_SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-sent events: the task's events in order, then `end`.",
        "content": {"text/event-stream": {}},
    },
    **error_responses(404, 422, 429),
}


@router.get("/{task_id}/events", response_class=StreamingResponse, responses=_SSE_RESPONSES)
async def task_events(
    task_id: str,
    request: Request,
    ctx: Ctx,
    _: Reader,
    tenant: Tenant,
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    after: int = Query(0, ge=0, le=MAX_EVENT_SEQ, description="Resume after this sequence number (as Last-Event-ID)."),
) -> StreamingResponse:
    """Everything is checked before the stream opens (404, 422, 429 `too_many_streams`): once the 200 is sent,
    the stream only ends with `end` or when the client goes."""
    await run_in_threadpool(lambda: ctx.store.get_task(task_id, tenant=tenant))
    start = after
    if last_event_id:
        if not _SEQ.fullmatch(last_event_id) or int(last_event_id) > MAX_EVENT_SEQ:
            raise UserError(f"Last-Event-ID must be an event sequence number from 0 to {MAX_EVENT_SEQ}")
        start = max(start, int(last_event_id))
    owner = stream_owner(getattr(request.state, "principal", None), request.scope)
    slots = StreamSlots(ctx.redis, ctx.settings.max_event_streams_per_key)
    slot = await run_in_threadpool(slots.acquire, owner)
    return StreamingResponse(
        _stream(ctx, task_id, start, owner, slot),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(ctx: Ctx, task_id: str, seq: int, owner: str, slot: str) -> AsyncIterator[str]:
    client = aredis.Redis.from_url(ctx.settings.redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    idle = 0.0
    refreshed = time.monotonic()
    try:
        await pubsub.subscribe(keys.task_channel(task_id))  # before reading, so nothing falls in between
        yield "retry: 2000\n\n"
        while True:
            events = await run_in_threadpool(ctx.store.events_after, task_id, seq)
            for ev in events:
                seq = ev.seq
                yield f"id: {ev.seq}\nevent: {ev.type}\ndata: {json.dumps(ev.model_dump(mode='json'))}\n\n"
            if not events:
                task = await run_in_threadpool(ctx.store.get_task, task_id)
                if TaskStatus(task.status).terminal and task.answer is not None:
                    yield f"event: end\ndata: {json.dumps({'status': task.status})}\n\n"
                    return
            try:
                msg = await pubsub.get_message(timeout=1.0)
            except Exception:
                msg = None
                await asyncio.sleep(1.0)
            idle = 0.0 if (msg or events) else idle + 1.0
            if idle >= 15:
                idle = 0.0
                yield ": keep-alive\n\n"
            if time.monotonic() - refreshed >= STREAM_SLOT_REFRESH_S:
                refreshed = time.monotonic()
                with contextlib.suppress(Exception):  # a lapsed slot only frees the cap early
                    await StreamSlots.refresh(client, owner, slot)
    finally:
        # a client that goes away cancels this generator: the cleanup must run shielded, or its awaits are
        # cancelled too and the slot stays taken until it lapses
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await StreamSlots.release(client, owner, slot)
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await client.aclose()
