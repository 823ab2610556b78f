"""Tasks: create, read, follow (SSE), cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

import redis.asyncio as aredis
from fastapi import APIRouter, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from agents.ops_graph import cancel_open_attempts, request_plan
from core import keys
from core.db import NodeRunRow, TaskRow
from core.errors import Conflict, UserError
from core.types import TaskStatus
from services.api.deps import TENANT_PATTERN, Ctx, Operator, Reader, Runner, Tenant, tenant_for

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
    task = ctx.store.create_task(body.goal, tenant=tenant, inputs=inputs, priority=body.priority, source="api")
    runner.submit(task.id)
    return TaskCreated(
        id=task.id,
        status=task.status,
        links={"self": f"/v1/tasks/{task.id}", "events": f"/v1/tasks/{task.id}/events"},
    )


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


@router.post("/{task_id}/cancel", status_code=202)
def cancel_task(task_id: str, ctx: Ctx, _: Operator, tenant: Tenant) -> dict[str, Any]:
    task = ctx.store.get_task(task_id, tenant=tenant)
    if TaskStatus(task.status).terminal:
        raise Conflict(f"task {task_id} already ended ({task.status})")
    ctx.store.set_task_status(task_id, TaskStatus.CANCELLED, error="cancelled by request")
    cancel_open_attempts(ctx, task_id)
    ctx.bus.announce(task_id)
    return {"id": task_id, "status": TaskStatus.CANCELLED.value}


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    helpful: bool
    note: str | None = Field(None, max_length=2000)


@router.post("/{task_id}/feedback")
def task_feedback(task_id: str, body: Feedback, ctx: Ctx, _: Operator, tenant: Tenant) -> dict[str, Any]:
    """Was the answer helpful? Stored on the task's episode; recall weighs helpful episodes up."""
    task = ctx.store.get_task(task_id, tenant=tenant)
    if not ctx.episodes.feedback(task_id, body.helpful, body.note):
        raise Conflict(f"task {task_id} has no episode to rate ({task.status}; answers served from cache have none)")
    return {"id": task_id, "feedback": body.model_dump()}


@router.get("/{task_id}/events")
async def task_events(
    task_id: str,
    ctx: Ctx,
    _: Reader,
    tenant: Tenant,
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    after: int = Query(0, ge=0, description="Resume after this sequence number (as Last-Event-ID)."),
) -> StreamingResponse:
    await run_in_threadpool(lambda: ctx.store.get_task(task_id, tenant=tenant))  # 404 before the stream opens
    start = after
    if last_event_id:
        if not last_event_id.isdigit():
            raise UserError("Last-Event-ID must be an event sequence number")
        start = max(start, int(last_event_id))
    return StreamingResponse(
        _stream(ctx, task_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(ctx: Ctx, task_id: str, seq: int) -> AsyncIterator[str]:
    client = aredis.Redis.from_url(ctx.settings.redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.task_channel(task_id))  # before reading, so nothing falls in between
    idle = 0.0
    try:
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
    finally:
        await pubsub.aclose()
        await client.aclose()
