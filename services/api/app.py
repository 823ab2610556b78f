"""The FastAPI application: REST, SSE and the console; it also hosts the task orchestrator."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

from agents import OpsContext, TaskRunner, TuningRunner, build_context
from core import keys
from core.apikeys import KeyBook
from core.logging import configure_logging
from core.metrics import process_exited
from core.periodic import Periodic
from core.settings import Settings, get_settings
from memory.consolidation import Consolidator
from services.api.auth import Authenticator
from services.api.errors import BodyLimitMiddleware, document_errors, install_error_handlers
from services.api.limits import RateLimitMiddleware, RateLimits
from services.api.metrics import HttpMetricsMiddleware
from services.api.routes import (
    approvals,
    audit,
    investigations,
    memory,
    policies,
    schedules,
    system,
    tasks,
    telemetry,
    tuning,
)
from services.api.routes import keys as keys_routes
from services.api.security import BrowserDefenceMiddleware, console_csp
from workers.celery_app import make_celery

CONSOLE = Path(__file__).resolve().parent.parent / "console" / "index.html"


def _reembedded_at(ctx: OpsContext) -> float:
    try:
        raw = ctx.redis.get(keys.MEMORY_REEMBEDDED)
        return float(raw) if raw else 0.0  # type: ignore[arg-type]
    except Exception:
        return 0.0


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level, settings.log_json)
        ctx = build_context(settings, make_celery(settings))
        runner = TaskRunner(ctx)
        tuner = TuningRunner(ctx)
        rollups = Periodic(
            "telemetry-rollup",
            settings.telemetry_rollup_every_s,
            lambda: ctx.telemetry.rollup(
                raw_retention_s=settings.telemetry_raw_retention_s,
                rollup_retention_s=settings.telemetry_rollup_retention_s,
            ),
        )
        consolidator = Consolidator(
            ctx.cache, ctx.episodes, ctx.facts, settings.consolidate_every_s, reembedded_at=lambda: _reembedded_at(ctx)
        )
        app.state.ctx = ctx
        app.state.authenticator = Authenticator(settings, KeyBook(ctx.store))
        app.state.runner = runner
        app.state.consolidator = consolidator
        app.state.tuner = tuner
        # the model's cold start is paid once, in the background, not by the first request
        threading.Thread(target=ctx.embedder.load, name="embedder-warmup", daemon=True).start()
        runner.start()  # resumes every task a previous API process left unfinished
        consolidator.start()
        tuner.start()  # runs what the scheduler (or POST /v1/tuning/run) queued
        rollups.start()
        try:
            yield
        finally:
            runner.stop()
            tuner.stop()
            rollups.stop()
            consolidator.stop()
            ctx.close()
            process_exited(os.getpid())

    app = FastAPI(
        title="opsgraph",
        version="0.1.0",
        description="Ask for ops work; watch a plan of tool calls run on CPU and GPU pools; read the answer.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    # a bundle travels as a file part or base64 in JSON (4/3 of its size), plus room for the other fields
    bundle_body = settings.max_bundle_bytes * 4 // 3 + 1024 * 1024
    # outermost last: metrics see every answer, the rate limit refuses before a body is read, and a foreign
    # Host is refused before anything else runs; no CORSMiddleware, on purpose
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        overrides={"/v1/investigations": bundle_body, "/v1/alerts/alertmanager": bundle_body},
    )
    app.add_middleware(RateLimitMiddleware, limits=RateLimits(settings))
    app.add_middleware(HttpMetricsMiddleware)
    app.add_middleware(BrowserDefenceMiddleware, allowed_hosts=settings.host_allowlist)
    app.include_router(tasks.router)
    app.include_router(system.router)
    app.include_router(memory.router)
    app.include_router(telemetry.router)
    app.include_router(policies.router)
    app.include_router(tuning.router)
    app.include_router(schedules.router)
    app.include_router(investigations.router)
    app.include_router(keys_routes.router)
    app.include_router(audit.router)
    app.include_router(approvals.router)

    csp = console_csp(CONSOLE.read_text())

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        # the page holds no data: it asks the API with the bearer token it is given (docs/security.md)
        headers = {"Cache-Control": "no-store", "Content-Security-Policy": csp}
        return FileResponse(CONSOLE, media_type="text/html", headers=headers)

    document_errors(app)

    return app
