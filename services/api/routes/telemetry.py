"""Telemetry: the summary the console and the tuner read, and /metrics for Prometheus."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.errors import UserError
from services.api.auth import Forbidden
from services.api.deps import Ctx, Reader, Tenant, authenticate
from services.api.metrics import registry_for

router = APIRouter(tags=["telemetry"])


@router.get("/v1/telemetry/summary")
async def telemetry_summary(
    ctx: Ctx,
    principal: Reader,
    tenant: Tenant,
    window: Annotated[float, Query(gt=0, le=90 * 86_400, description="Seconds back from now.")] = 3600,
    all_tenants: Annotated[bool, Query(description="Admins: every tenant's telemetry (what the tuner sees).")] = False,
) -> dict[str, Any]:
    """p50/p95/p99 per tool and pool, queue wait per pool, error and timeout rates, cache hit rates per
    category, LLM tokens and cost, cost per task: the tenant's own (raw telemetry, the last
    TELEMETRY_RAW_RETENTION_S), or every tenant's for an admin asking `all_tenants`."""
    if all_tenants and not principal.is_admin:
        raise Forbidden("all_tenants needs the 'admin' scope")
    longest = ctx.settings.telemetry_summary_max_window_s
    if window > longest:
        raise UserError(f"window is over {longest:g} s (telemetry_summary_max_window_s)")
    prices = ctx.policies.current().serving.pool_cost_per_s
    only = None if all_tenants else tenant
    return await run_in_threadpool(
        lambda: ctx.telemetry.summary(
            window, prices=prices, tenant=only, max_rows=ctx.settings.telemetry_summary_max_rows
        )
    )


def metrics_access(request: Request) -> None:
    """/metrics is cross-tenant: admins only, unless OPSGRAPH_METRICS_OPEN serves it to a private scraper."""
    if request.app.state.ctx.settings.metrics_open:
        return
    if not authenticate(request).is_admin:
        raise Forbidden("/metrics needs the 'admin' scope (or OPSGRAPH_METRICS_OPEN=true)")


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(metrics_access)])
async def metrics(ctx: Ctx) -> Response:
    body = await run_in_threadpool(generate_latest, registry_for(ctx))
    return Response(body, media_type=CONTENT_TYPE_LATEST)
