"""What authentication costs per request: p50 of GET /v1/tasks/{id} with an API key, on a real API process.

There is no switch that turns authentication off (a product switch like that would be a hole), so the cost is
measured two honest ways and both are reported:
  1. in-process: the exact step the API runs for each request (Authenticator.authenticate: parse the bearer
     key, read its row by primary key from the same database, SHA-256 and a constant-time compare), timed
     alone; "without authentication" is then the request's p50 minus this step's p50;
  2. over HTTP: the same route with a key against the route's cheapest refusal (an unknown key id, which runs
     the header parsing and the database lookup but none of the route) and /healthz (no authentication, no
     database): the floor of an HTTP round trip on this machine.

Run: .venv/bin/python -m bench.auth [--requests N]. Prints a table and writes bench/results/auth.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from core.apikeys import KeyBook
from core.db import Store
from core.settings import Settings
from services.api.auth import Authenticator
from tests.harness import RedisServer, Service, wait_until

OUT = Path(__file__).resolve().parent / "results" / "auth.json"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def timed(fn: Callable[[], object], n: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(ms, 0.5), 4),
        "p95_ms": round(pct(ms, 0.95), 4),
        "mean_ms": round(statistics.fmean(ms), 4),
        "n": len(ms),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000, help="Timed requests per measurement.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-auth-"))
    redis_server = RedisServer(work / "redis")
    svc = Service(work, redis_server.url)
    try:
        svc.start_api()
        svc.start_worker("cpu", "cpu-a")
        key = svc.create_key("bench", ["read", "operate"], name="bench")
        headers = svc.bearer(key)
        created = httpx.post(f"{svc.base}/v1/tasks", json={"goal": "is redis ok"}, headers=headers, timeout=30)
        task_id = created.json()["id"]
        path = f"/v1/tasks/{task_id}"
        wait_until(
            lambda: httpx.get(svc.base + path, headers=headers, timeout=30).json()["status"] == "succeeded",
            120,
            "the bench task",
        )
        with httpx.Client(base_url=svc.base, timeout=30) as client:  # keep-alive: time the request, not TCP
            with_key = timed(lambda: client.get(path, headers=headers).raise_for_status(), args.requests)
            unknown = {"Authorization": "Bearer og_0123456789abcdef_" + "A" * 43}
            refused = timed(lambda: client.get(path, headers=unknown), args.requests)
            healthz = timed(lambda: client.get("/healthz").raise_for_status(), args.requests)

        # the same step the API runs per request, on the same database
        settings = Settings(var_dir=work / "var", database_url="", _env_file=None)  # type: ignore[call-arg]
        authenticator = Authenticator(settings, KeyBook(Store.from_settings(settings, create=False)))
        bearer = f"Bearer {key}"
        auth_step = timed(lambda: authenticator.authenticate(bearer), args.requests)
    finally:
        svc.stop()
        redis_server.stop()

    request_p50 = pct(with_key, 0.5)
    auth_p50 = pct(auth_step, 0.5)
    report = {
        "what": "p50 of GET /v1/tasks/{id} (a finished task with its plan and node runs) with an API key, and what "
        "authentication adds to it",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "database": "sqlite (WAL)",
        "http": {
            "get_task_with_key": summary(with_key),
            "get_task_unknown_key_401": summary(refused),
            "healthz_no_auth": summary(healthz),
        },
        "in_process": {"authenticate_api_key": summary(auth_step)},
        "auth_p50_ms": round(auth_p50, 4),
        "get_task_without_auth_p50_ms_estimate": round(request_p50 - auth_p50, 4),
        "auth_share_of_request_p50": round(auth_p50 / request_p50, 4),
        "method": "no product switch turns authentication off; the estimate without it is the request's p50 minus "
        "the p50 of the authentication step timed alone on the same database (see the module docstring)",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'measurement':<44} {'p50 ms':>8} {'p95 ms':>8}")
    for name, ms in [
        ("GET /v1/tasks/{id} with a key (HTTP)", with_key),
        ("same route, unknown key -> 401 (HTTP)", refused),
        ("/healthz, no authentication (HTTP)", healthz),
        ("authenticate an API key (in-process)", auth_step),
    ]:
        print(f"{name:<44} {pct(ms, 0.5):>8.3f} {pct(ms, 0.95):>8.3f}")
    print(
        f"authentication: {auth_p50:.3f} ms of a {request_p50:.3f} ms request p50 "
        f"({auth_p50 / request_p50:.1%}); without it about {request_p50 - auth_p50:.3f} ms. Written to {OUT}"
    )


if __name__ == "__main__":
    main()
