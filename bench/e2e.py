"""End-to-end figures of the foundation: time from `opsgraph run` to a ready console (API plus a live worker
in every pool), and the end-to-end time of the example request, with where the time goes.

Run: make bench  (or .venv/bin/python -m bench.e2e [--runs N]). Prints a table and writes bench/results/e2e.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "OPSGRAPH_VAR_DIR": str(work / "var"),
        "OPSGRAPH_API_PORT": str(port),
        "OPSGRAPH_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "PYTHONUNBUFFERED": "1",
    }
    log = (work / "run.log").open("wb")
    t0 = time.perf_counter()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "run"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    healthz_s = ready_s = None
    try:
        while time.perf_counter() - t0 < 180:
            try:
                if healthz_s is None and httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    healthz_s = time.perf_counter() - t0
                if healthz_s is not None and httpx.get(f"{base}/readyz", timeout=2).json()["ready"]:
                    ready_s = time.perf_counter() - t0
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        assert ready_s is not None, "service not ready within 180 s"
        goal = f"check the health of this machine and of {base}/healthz"
        admin_key = (work / "var" / "admin.key").read_text().strip()  # the first-run key `opsgraph run` made

        def run_once(tenant: str) -> tuple[float, dict]:
            start = time.perf_counter()
            body = {"goal": goal, "tenant": tenant}  # the admin acts for the tenant explicitly
            headers = {"Authorization": f"Bearer {admin_key}", "X-Opsgraph-Tenant": tenant}
            task_id = httpx.post(f"{base}/v1/tasks", json=body, headers=headers, timeout=10).json()["id"]
            while True:
                task = httpx.get(f"{base}/v1/tasks/{task_id}", headers=headers, timeout=10).json()
                if task["status"] in ("succeeded", "failed", "cancelled"):
                    return time.perf_counter() - start, task
                time.sleep(0.02)

        e2e, overhead, waits, cached = [], [], [], []
        for i in range(args.runs):
            seconds, task = run_once(f"bench-{i}")  # a tenant of its own: nothing cached, the whole path runs
            e2e.append(seconds)
            repeat_s, repeat = run_once(f"bench-{i}")  # the same request again: answered from the cache
            assert repeat["answer"].get("from_cache"), repeat
            cached.append(repeat_s)
            assert task["status"] == "succeeded", task
            runs = {r["node_id"]: r for r in task["node_runs"]}
            # critical path of pure tool run time: metrics -> cpu_spikes, in parallel with probe-1
            critical = max(runs["metrics"]["run_s"] + runs["cpu_spikes"]["run_s"], runs["probe-1"]["run_s"])
            overhead.append(e2e[-1] - critical)
            waits += [r["queue_wait_s"] for r in task["node_runs"]]
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=60)
    result = {
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
        "startup": {
            "healthz_s": round(healthz_s or 0, 2),
            "ready_s": round(ready_s, 2),
            "note": "opsgraph run -> /readyz ready (API, a worker in cpu and gpu, own redis-server); venv installed",
        },
        "example_request": {
            "goal": "check the health of this machine and of <api>/healthz",
            "runs": args.runs,
            "e2e_p50_s": round(statistics.median(e2e), 3),
            "e2e_max_s": round(max(e2e), 3),
            "overhead_p50_s": round(statistics.median(overhead), 3),
            "overhead_note": "e2e minus the tool critical path: planning, releases, queue waits, DB, polling",
            "first_request_after_ready_s": round(e2e[0], 3),
            "first_request_note": "the first request once /readyz said ready: /readyz waits for the embedding model",
            "cached_repeat_p50_s": round(statistics.median(cached), 3),
            "queue_wait_p50_s": round(pct(waits, 0.5), 4),
            "queue_wait_p95_s": round(pct(waits, 0.95), 4),
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "e2e.json").write_text(json.dumps(result, indent=2))
    print(f"startup: healthz {result['startup']['healthz_s']} s, ready (all pools) {result['startup']['ready_s']} s")
    r = result["example_request"]
    print(
        f"example request x{r['runs']}: e2e p50 {r['e2e_p50_s']} s (max {r['e2e_max_s']} s), "
        f"overhead over tool critical path p50 {r['overhead_p50_s']} s, "
        f"queue wait p50 {r['queue_wait_p50_s']} s p95 {r['queue_wait_p95_s']} s"
    )
    print(f"the first request after /readyz said ready: {r['first_request_after_ready_s']} s")
    print(f"the same request again, answered from the semantic cache: p50 {r['cached_repeat_p50_s']} s")
    print(f"written to {RESULTS / 'e2e.json'}")


if __name__ == "__main__":
    main()
