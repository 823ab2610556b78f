"""Release policies on the shared trace in the simulator (the production scheduling code): flow time of
fifo, priority, srpt and srpt_aging at 4 workers and 0.85 utilisation, the same on other traces of that
shape (each half of the trace, other loads), and what hedging does to p99 with one slow worker.

    python -m bench.scheduling [--trace FILE] [--quick] [--no-real]

--real (the default) also replays a scaled-down slice of the trace through the real service (API, Redis,
Celery workers with 4 slots, SQLite): each request is a task with one sleep of its work, under fifo and then
srpt_aging, and flow time is measured from the task's creation to its end.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from core.policy import SchedulingPolicy, preset
from workers.simulator import (
    SimConfig,
    SimNode,
    SimPool,
    SimTask,
    Simulator,
    load_trace,
    simulate_trace,
    trace_tasks,
)

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "azure_llm_inference_2023_code.csv"
OUT = Path(__file__).resolve().parent / "results" / "scheduling.json"


def replay(rows: list[tuple[float, float]], policy: SchedulingPolicy, workers: int, util: float) -> dict:
    tasks = trace_tasks(rows, workers=workers, utilisation=util)
    return Simulator(SimConfig(pools=[SimPool("cpu", workers)]), policy).run(tasks).summary()


def real_slice(trace: Path, *, requests: int, span_s: float, slots: int, util: float) -> dict:
    """The first `requests` of the trace, arrivals compressed into `span_s`, work scaled to `util` of the
    slots, replayed through the real service under each policy."""
    from tests.harness import RedisServer, Service

    rows = load_trace(trace, limit=requests)
    k = span_s / max(rows[-1][0], 1e-9)
    scale = util * slots * span_s / sum(w for _, w in rows)
    plan = [(t * k, w * scale) for t, w in rows]
    out: dict = {"requests": len(plan), "span_s": span_s, "slots": slots, "utilisation": util}
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-slice-"))
    server = RedisServer(work)
    try:
        for name in ("fifo", "srpt_aging"):
            policy = {"release_order": name, "hedging": False}
            svc = Service(
                work / name,
                server.url,
                OPSGRAPH_SCHEDULING_POLICY=json.dumps(policy),
                OPSGRAPH_CPU_CONCURRENCY=str(slots),
                OPSGRAPH_MAX_RUNNING_TASKS="256",
            )
            (work / name).mkdir()
            svc.redis.flushdb()
            try:
                svc.start_api()
                svc.start_worker("cpu", "slice")
                ids: list[str] = []
                t0 = time.monotonic()
                for i, (at, seconds) in enumerate(plan):  # submit at each request's (compressed) arrival
                    time.sleep(max(0.0, t0 + at - time.monotonic()))
                    node = {"id": "w", "tool": "chaos_sleep", "args": {"seconds": round(seconds, 4) + i * 1e-7}}
                    ids.append(svc.submit(f"request {i}", plan={"nodes": [node]}, tenant="bench"))
                flows = []
                for task_id in ids:
                    task = svc.wait_task(task_id, timeout=600)
                    run = task["node_runs"][0]
                    flows.append(run["finished_at"] - run["created_at"])  # ready to recorded: the scheduler's part
                flows.sort()
                out[name] = {
                    "mean": round(statistics.fmean(flows), 3),
                    "p50": round(flows[len(flows) // 2], 3),
                    "p95": round(flows[int(0.95 * (len(flows) - 1))], 3),
                    "p99": round(flows[int(0.99 * (len(flows) - 1))], 3),
                }
            finally:
                svc.stop()
        out["mean_vs_fifo"] = round(out["srpt_aging"]["mean"] / out["fifo"]["mean"], 3)
        out["p99_vs_fifo"] = round(out["srpt_aging"]["p99"] / out["fifo"]["p99"], 3)
    except (httpx.HTTPError, AssertionError) as exc:
        out["error"] = repr(exc)
    finally:
        server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--quick", action="store_true", help="Only the main replay.")
    ap.add_argument("--no-real", action="store_true", help="Skip the slice replayed on real workers.")
    ap.add_argument("--slice", type=int, default=150, help="Requests in the real-worker slice.")
    args = ap.parse_args()
    rows = load_trace(args.trace)
    report: dict = {"trace": str(args.trace), "requests": len(rows), "machine": platform.machine()}
    no_hedge = {"hedging": False}

    print(f"trace {args.trace.name}: {len(rows)} requests; 4 workers, utilisation 0.85")
    main_rows = {}
    for name in ("fifo", "priority", "srpt", "srpt_aging"):
        t0 = time.perf_counter()
        r = replay(rows, preset(name).model_copy(update=no_hedge), 4, 0.85)
        r["replay_s"] = round(time.perf_counter() - t0, 2)
        main_rows[name] = r
        print(
            f"  {name:<11} mean {r['mean']:8.2f}  p50 {r['p50']:8.2f}  p95 {r['p95']:8.2f}  p99 {r['p99']:8.2f}"
            f"  (replay {r['replay_s']} s)"
        )
    fifo = main_rows["fifo"]
    for r in main_rows.values():
        r["mean_vs_fifo"] = round(r["mean"] / fifo["mean"], 3)
        r["p99_vs_fifo"] = round(r["p99"] / fifo["p99"], 3)
    print(
        "  srpt_aging vs fifo: mean x{mean_vs_fifo}, p99 x{p99_vs_fifo} (goal: mean <= 0.75, p99 <= 1.0)".format(
            **main_rows["srpt_aging"]
        )
    )
    report["main"] = main_rows
    if not args.quick:
        shapes = {}
        half = len(rows) // 2
        t_half = rows[half][0]
        variants = {
            "first half, 0.85": (rows[:half], 4, 0.85),
            "second half, 0.85": ([(t - t_half, w) for t, w in rows[half:]], 4, 0.85),
            "whole, 0.70": (rows, 4, 0.70),
            "whole, 0.95": (rows, 4, 0.95),
            "whole, 8 workers, 0.85": (rows, 8, 0.85),
        }
        print("other traces of this shape (srpt_aging vs fifo):")
        for label, (subset, workers, util) in variants.items():
            f = replay(subset, preset("fifo").model_copy(update=no_hedge), workers, util)
            a = replay(subset, preset("srpt_aging").model_copy(update=no_hedge), workers, util)
            shapes[label] = {
                "fifo": f,
                "srpt_aging": a,
                "mean_vs_fifo": round(a["mean"] / f["mean"], 3),
                "p99_vs_fifo": round(a["p99"] / f["p99"], 3),
            }
            print(f"  {label:<24} mean x{shapes[label]['mean_vs_fifo']:<6} p99 x{shapes[label]['p99_vs_fifo']}")
        report["shapes"] = shapes
        print("hedging, one of 4 workers 10x slower (srpt_aging, first 3000 requests, 0.6 utilisation):")
        hedging = {}
        for label, on in (("no hedging", False), ("hedging", True)):
            pol = preset("srpt_aging").model_copy(update={"hedging": on, "hedge_budget": 0.3})
            r = simulate_trace(
                args.trace, pol, workers=4, utilisation=0.6, slow_workers={0: 10.0}, limit=3000
            ).summary()
            hedging[label] = r
            print(
                f"  {label:<11} mean {r['mean']:8.2f}  p99 {r['p99']:8.2f}  hedges {r['hedges']} "
                f"(won {r['hedge_wins']})"
            )
        print("hedging, uniform reads (2000 x 0.2 s every 0.25 s, 4 workers, one 20x slower):")
        reads = [SimTask(f"r{i}", i * 0.25, [SimNode("n", "read", 0.2)]) for i in range(2000)]
        for label, on in (("no hedging", False), ("hedging", True)):
            pol = preset("srpt_aging").model_copy(update={"hedging": on, "hedge_budget": 0.3})
            r = Simulator(SimConfig([SimPool("cpu", 4, slow={0: 20.0})]), pol).run(reads).summary()
            hedging["uniform " + label] = r
            print(
                f"  {label:<11} mean {r['mean']:8.3f}  p99 {r['p99']:8.3f}  hedges {r['hedges']} "
                f"(won {r['hedge_wins']})"
            )
        report["hedging"] = hedging
    if not args.no_real:
        print(
            f"real workers: the first {args.slice} requests in 45 s, 4 slots, utilisation 0.85 (fifo, then srpt_aging):"
        )
        report["real_slice"] = r = real_slice(args.trace, requests=args.slice, span_s=45.0, slots=4, util=0.85)
        for name in ("fifo", "srpt_aging"):
            if name in r:
                print(
                    f"  {name:<11} mean {r[name]['mean']:7.3f}  p50 {r[name]['p50']:7.3f}  p95 {r[name]['p95']:7.3f}"
                    f"  p99 {r[name]['p99']:7.3f}"
                )
        if "mean_vs_fifo" in r:
            print(f"  srpt_aging vs fifo: mean x{r['mean_vs_fifo']}, p99 x{r['p99_vs_fifo']}")
        if "error" in r:
            print(f"  error: {r['error']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
