"""Telemetry: the summary the console and the tuner read, and /metrics for Prometheus."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.errors import UserError
from services.api.deps import Ctx
from services.api.metrics import registry_for

router = APIRouter(tags=["telemetry"])


@router.get("/v1/telemetry/summary")
async def telemetry_summary(
    ctx: Ctx,
    window: Annotated[float, Query(gt=0, le=90 * 86_400, description="Seconds back from now.")] = 3600,
) -> dict[str, Any]:
    """p50/p95/p99 per tool and pool, queue wait per pool, error and timeout rates, cache hit rates per
    category, LLM tokens and cost, cost per task."""
    longest = ctx.settings.telemetry_summary_max_window_s
    if window > longest:
        raise UserError(f"window is over {longest:g} s (telemetry_summary_max_window_s)")
    prices = ctx.policies.current().serving.pool_cost_per_s
    return await run_in_threadpool(
        ctx.telemetry.summary, window, prices=prices, max_rows=ctx.settings.telemetry_summary_max_rows
    )


@router.get("/metrics", include_in_schema=False)
async def metrics(ctx: Ctx) -> Response:
    body = await run_in_threadpool(generate_latest, registry_for(ctx))
    return Response(body, media_type=CONTENT_TYPE_LATEST)
