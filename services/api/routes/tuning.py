"""The tuning agent's runs: start one now, list them, read one (findings, candidates, verdicts, decision)."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from core.errors import LimitReached
from core.jobs import (
    TUNING_CHANNEL,
    get_tuning_run,
    queue_tuning_run_capped,
    tuning_run_view,
    tuning_runs,
)
from services.api.deps import Admin, Ctx, audit

router = APIRouter(prefix="/v1/tuning", tags=["tuning"])


@router.post("/run", status_code=202)
def run_tuning_now(ctx: Ctx, principal: Admin, request: Request) -> JSONResponse:
    """Queue a tuning run; the API's tuning runner takes it within seconds. 429 `tuning_queue_full` while
    `max_queued_tuning_runs` wait already."""
    cap = ctx.settings.max_queued_tuning_runs
    row = queue_tuning_run_capped(ctx.store, "api", cap)
    if row is None:
        raise LimitReached(
            f"{cap} tuning runs are already queued; wait for them", code="tuning_queue_full", retry_after_s=30
        )
    audit(request, principal, "tuning.run", target=row.id)
    with contextlib.suppress(Exception):  # the runner also polls
        ctx.redis.publish(TUNING_CHANNEL, row.id)
    body = {"id": row.id, "status": row.status, "links": {"self": f"/v1/tuning/runs/{row.id}"}}
    return JSONResponse(body, status_code=202)


@router.get("/runs")
def list_tuning_runs(ctx: Ctx, _: Admin, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    return {"runs": [tuning_run_view(r, report=False) for r in tuning_runs(ctx.store, limit=limit)]}


@router.get("/runs/{run_id}")
def tuning_run(ctx: Ctx, _: Admin, run_id: str) -> dict[str, Any]:
    return tuning_run_view(get_tuning_run(ctx.store, run_id))
