"""Rate limiter figures: a burst well over the limit from one key, through the real middleware and the real
Redis storage (a private redis-server), from one process and from two processes at once (two API processes
sharing one budget). Reports what was allowed against the limit, the 429s and their Retry-After, and what the
limiter costs per request (the same app with and without it).

Run: .venv/bin/python -m bench.ratelimit. Prints and writes bench/results/ratelimit.json.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.settings import Settings
from services.api.limits import RateLimitMiddleware, RateLimits
from services.launcher import start_redis_server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LIMIT = 100  # per minute: the burst lands inside one window
BURST = 1000
COST_REQUESTS = 2000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app(settings: Settings | None) -> Any:
    async def ok(_: Any) -> JSONResponse:
        return JSONResponse({"ok": True})

    app: Any = Starlette(routes=[Route("/v1/tasks", ok, methods=["GET", "POST"])])
    if settings is not None:
        app = RateLimitMiddleware(app, RateLimits(settings))
    return app


async def _burst(app: Any, n: int, key: str, concurrency: int = 50) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1))
    headers = {"Authorization": f"Bearer {key}"}
    out: list[httpx.Response] = []
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

        async def one() -> None:
            async with sem:
                out.append(await client.post("/v1/tasks", headers=headers))

        await asyncio.gather(*(one() for _ in range(n)))
    return out


def _summary(answers: list[httpx.Response]) -> dict[str, Any]:
    refused = [r for r in answers if r.status_code == 429]
    retry = [int(r.headers["Retry-After"]) for r in refused if "Retry-After" in r.headers]
    return {
        "requests": len(answers),
        "allowed": sum(r.status_code == 200 for r in answers),
        "refused_429": len(refused),
        "refused_with_retry_after": len(retry),
        "retry_after_s": {"min": min(retry), "max": max(retry)} if retry else None,
        "codes": sorted({r.json()["error"]["code"] for r in refused}),
    }


async def _cost(app: Any) -> list[float]:
    """Seconds per sequential request (one key, a limit it never reaches)."""
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1))
    took = []
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for _ in range(COST_REQUESTS):
            started = time.perf_counter()
            await client.get("/v1/tasks", headers={"Authorization": "Bearer cost"})
            took.append(time.perf_counter() - started)
    return took


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def _process_burst(redis_url: str, key: str, n: int, queue: Any) -> None:
    settings = Settings(redis_url=redis_url, rate_limit_writes=f"{LIMIT}/minute")
    answers = asyncio.run(_burst(_app(settings), n, key))
    queue.put(sum(r.status_code == 200 for r in answers))


def main() -> dict[str, Any]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        redis_proc = start_redis_server(binary, port, Path(tmp))
        redis_url = f"redis://127.0.0.1:{port}/0"
        try:
            out: dict[str, Any] = {"limit_per_minute": LIMIT, "burst": BURST, "strategy": "sliding window counter"}
            for storage in ("redis", "memory"):
                settings = Settings(
                    redis_url=redis_url,
                    rate_limit_storage=storage,
                    rate_limit_writes=f"{LIMIT}/minute",
                    rate_limit_reads="1000000/minute",
                )
                out[f"one_process_{storage}"] = _summary(asyncio.run(_burst(_app(settings), BURST, uuid.uuid4().hex)))
            # two API processes, one key, one budget (Redis storage)
            ctx = multiprocessing.get_context("spawn")
            queue = ctx.Queue()
            key = uuid.uuid4().hex
            procs = [ctx.Process(target=_process_burst, args=(redis_url, key, BURST // 2, queue)) for _ in range(2)]
            for p in procs:
                p.start()
            allowed = [queue.get(timeout=120) for _ in procs]
            for p in procs:
                p.join(timeout=30)
            out["two_processes_redis"] = {"requests": BURST, "allowed": sum(allowed), "allowed_by_process": allowed}
            # cost per request: the same app with and without the limiter
            bare = asyncio.run(_cost(_app(None)))
            costs: dict[str, Any] = {"requests": COST_REQUESTS, "bare_p50_us": round(_pct(bare, 50) * 1e6, 1)}
            for storage in ("redis", "memory"):
                settings = Settings(redis_url=redis_url, rate_limit_storage=storage, rate_limit_reads="1000000/minute")
                limited = asyncio.run(_cost(_app(settings)))
                costs[f"{storage}_p50_us"] = round(_pct(limited, 50) * 1e6, 1)
                costs[f"{storage}_p95_us"] = round(_pct(limited, 95) * 1e6, 1)
                costs[f"{storage}_added_p50_us"] = round((_pct(limited, 50) - _pct(bare, 50)) * 1e6, 1)
            out["cost_per_request"] = costs
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ratelimit.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
