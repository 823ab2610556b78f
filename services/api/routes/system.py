"""Tools, liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from core.heartbeats import live_workers, queue_depth
from services.api.deps import Ctx, Reader

router = APIRouter(tags=["system"])


@router.get("/v1/tools")
def list_tools(ctx: Ctx, _: Reader) -> dict[str, Any]:
    return {"tools": [t.describe(ctx.settings) for t in ctx.toolset]}


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Any]


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready: a check failed (the same body, ready false)."}},
)
def readyz(ctx: Ctx) -> JSONResponse:
    checks: dict[str, Any] = {}
    try:
        ctx.store.ping()
        checks["database"] = {"ok": True, "backend": "postgresql" if ctx.settings.is_postgres else "sqlite"}
    except Exception as exc:
        checks["database"] = {"ok": False, "error": type(exc).__name__}
    workers: list[dict[str, Any]] = []
    try:
        ctx.redis.ping()
        checks["redis"] = {"ok": True}
        workers = live_workers(ctx.redis)
    except Exception as exc:
        checks["redis"] = {"ok": False, "error": type(exc).__name__}
    pools = {}
    for pool in ctx.settings.pools:
        members = [w["hostname"] for w in workers if pool in w.get("queues", [])]
        depth = queue_depth(ctx.redis, pool) if checks["redis"]["ok"] else None
        pools[pool] = {"ok": bool(members), "workers": members, "queue_depth": depth}
    checks["pools"] = pools
    # the first request must not wait for the model: ready only once the API has it in memory
    checks["embedder"] = {"ok": ctx.embedder.loaded}
    ready = (
        checks["database"]["ok"]
        and checks["redis"]["ok"]
        and checks["embedder"]["ok"]
        and all(p["ok"] for p in pools.values())
    )
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
