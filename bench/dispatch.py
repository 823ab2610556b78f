"""Dispatch on real parts (API, Redis, Celery workers, SQLite): overhead per node against a bare Celery round
trip, makespan of wide and deep DAGs against their critical path, and a SIGKILL soak.

    python -m bench.dispatch [--nodes 30] [--soak-s 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from celery import Celery

from tests.harness import RedisServer, Service

OUT = Path(__file__).resolve().parent / "results" / "dispatch.json"


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 4) if xs else 0.0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 4) if s else 0.0


def overhead(svc: Service, n: int) -> dict:
    celery = Celery(broker=svc.env["OPSGRAPH_REDIS_URL"], backend=svc.env["OPSGRAPH_REDIS_URL"])
    bare = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert celery.send_task("opsgraph.ping", queue="cpu").get(timeout=30) == "pong"
        bare.append(time.perf_counter() - t0)
    # distinct arguments: identical idempotent reads would be served from the tool-result cache
    nodes = [{"id": "n0", "tool": "chaos_sleep", "args": {"seconds": 0}}]
    nodes += [
        {"id": f"n{i}", "tool": "chaos_sleep", "args": {"seconds": i * 1e-6}, "depends_on": [f"n{i - 1}"]}
        for i in range(1, n)
    ]
    task = svc.wait_task(svc.submit("no-op chain", plan={"nodes": nodes}), timeout=300)
    assert task["status"] == "succeeded", task
    runs = [r for r in task["node_runs"] if r["status"] == "succeeded"]
    total = [r["finished_at"] - r["created_at"] for r in runs]
    release = [r["queued_at"] - r["created_at"] for r in runs if r["queued_at"]]
    broker = [r["queue_wait_s"] for r in runs if r["queue_wait_s"] is not None]
    run = [r["run_s"] for r in runs if r["run_s"] is not None]
    return {
        "bare_celery_round_trip_p50_s": med(bare),
        "node_ready_to_recorded_p50_s": med(total),
        "ratio": round(med(total) / med(bare), 3),
        "goal_ratio": 1.15,
        "breakdown_p50_s": {
            "ready_to_sent (release loop)": med(release),
            "sent_to_started (broker, worker)": med(broker),
            "started_to_recorded (tool, DB writes)": med(run),
        },
        "nodes": len(runs),
    }


def makespan(svc: Service) -> dict:
    out = {}
    shapes = {
        "wide 12 x 1.0 s": (
            [{"id": f"w{i}", "tool": "chaos_sleep", "args": {"seconds": 1.0 + i * 1e-6}} for i in range(12)],
            1.0,
        ),
        "deep 6 x 0.5 s": (
            [
                {
                    "id": f"d{i}",
                    "tool": "chaos_sleep",
                    "args": {"seconds": 0.5 + i * 1e-6},
                    "depends_on": [f"d{i - 1}"] if i else [],
                }
                for i in range(6)
            ],
            3.0,
        ),
    }
    for label, (nodes, bound) in shapes.items():
        # once untimed with other arguments, so the tool-result cache cannot serve the timed run
        warm = [{**n, "args": {"seconds": n["args"]["seconds"] / 10}} for n in nodes]
        assert svc.wait_task(svc.submit("warm " + label, plan={"nodes": warm}), timeout=120)["status"] == "succeeded"
        task = svc.wait_task(svc.submit(label, plan={"nodes": nodes}), timeout=120)
        assert task["status"] == "succeeded", task
        runs = task["node_runs"]
        span = max(r["finished_at"] for r in runs) - min(r["created_at"] for r in runs)
        out[label] = {
            "makespan_s": round(span, 3),
            "critical_path_s": bound,
            "ratio": round(span / bound, 3),
            "goal_ratio": 1.10,
        }
    return out


def soak(svc: Service, seconds: float) -> dict:
    """Kill a cpu worker with SIGKILL every 4 s under load (and start a new one): nothing may be lost."""
    tasks: list[str] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            nodes = [{"id": f"s{j}", "tool": "chaos_sleep", "args": {"seconds": 1.0}} for j in range(3)]
            nodes.append({"id": "end", "tool": "chaos_sleep", "args": {"seconds": 0.2}, "depends_on": ["s0", "s1"]})
            tasks.append(svc.submit(f"soak {i}", plan={"nodes": nodes}))
            i += 1
            stop.wait(1.0)

    feeder = threading.Thread(target=load)
    feeder.start()
    kills = 0
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        time.sleep(4)
        victims = [h for h in svc.workers if h.startswith("soak-")]
        if victims:
            svc.kill_worker(victims[0])
            kills += 1
        n += 1
        svc.start_worker("cpu", f"soak-{n}")
    stop.set()
    feeder.join()
    done = [svc.wait_task(t, timeout=300) for t in tasks]
    nodes_total = lost = duplicates = 0
    unfinished: list[list[tuple]] = []  # type: ignore[type-arg]
    for task in done:
        by_node: dict[str, list[dict]] = {}
        for r in task["node_runs"]:
            by_node.setdefault(r["node_id"], []).append(r)
        for attempts in by_node.values():
            nodes_total += 1
            if not any(r["status"] in ("succeeded", "failed", "cancelled", "skipped") for r in attempts):
                lost += 1  # no outcome at all: work that vanished
            elif not any(r["status"] == "succeeded" for r in attempts):
                # an outcome with a reason (the poison guard: its worker was killed MAX_NODE_STARTS times)
                unfinished.append(
                    [(r["node_id"], r["attempt"], r["status"], r["worker"], r["error"]) for r in attempts]
                )
            duplicates += sum(max(0, r["deliveries"] - 1) for r in attempts) + sum(
                1 for r in attempts if r["status"] == "lost"
            )
    return {
        "seconds": seconds,
        "kills": kills,
        "tasks": len(done),
        "tasks_succeeded": sum(1 for t in done if t["status"] == "succeeded"),
        "nodes": nodes_total,
        "nodes_lost": lost,
        "duplicate_executions": duplicates,
        "nodes_failed_with_reason": len(unfinished),
        "failed": unfinished,  # every attempt of such a node, for the reader
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=24)
    ap.add_argument("--only-soak", action="store_true")  # the largest plan accepted by default
    ap.add_argument("--soak-s", type=float, default=40.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-dispatch-"))
    redis_server = RedisServer(work)
    svc = Service(work, redis_server.url, OPSGRAPH_CPU_CONCURRENCY="12")
    report: dict = {}
    try:
        if not args.only_soak:
            svc.start_api()
            svc.start_worker("cpu", "bench-cpu")
            print("dispatch overhead per node (no-op tool), against a bare Celery round trip on the same worker:")
            report["overhead"] = o = overhead(svc, args.nodes)
            print(
                f"  bare {o['bare_celery_round_trip_p50_s'] * 1000:.1f} ms, "
                f"opsgraph {o['node_ready_to_recorded_p50_s'] * 1000:.1f} ms"
                f" (x{o['ratio']}; goal x{o['goal_ratio']}); breakdown {o['breakdown_p50_s']}"
            )
            print("makespan against the critical path (one worker, 12 processes):")
            report["makespan"] = m = makespan(svc)
            for label, r in m.items():
                print(f"  {label:<16} {r['makespan_s']:.2f} s vs {r['critical_path_s']:.2f} s (x{r['ratio']})")
            svc.stop()
        if args.soak_s > 0:
            (work / "soak").mkdir()
            svc = Service(work / "soak", redis_server.url, OPSGRAPH_CPU_CONCURRENCY="2")
            svc.redis.flushdb()
            svc.start_api()
            svc.start_worker("cpu", "steady")
            svc.start_worker("cpu", "soak-0")
            print(f"SIGKILL soak: a cpu worker killed every 4 s for {args.soak_s:g} s under load:")
            report["soak"] = s = soak(svc, args.soak_s)
            print(f"  {s}")
    finally:
        svc.stop()
        redis_server.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
