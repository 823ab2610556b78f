"""The tuning agent on a workload with drift: the shared trace's arrivals and sizes drive ops tasks (health
checks, diagnoses, reports as small DAGs over four tools on a cpu and a gpu pool); halfway through, the gpu
pool turns slow for metric_anomalies (6x) and diagnoses start to repeat (the same request again every few
minutes, longer than their answers' 120 s TTL).

Three arms, replayed window by window in the simulator (the production scheduling code) as the "live" service:
  - static default: the policy from settings, never changed;
  - best static: the best of a grid over the knobs the tuner may move (release order, hedging, placement of
    metric_anomalies, the diagnose TTL within the tuner's 900 s freshness cap), chosen on the drifted half;
  - tuner: the real tuning agent (agents/tuner.py) after every window, reading the window's telemetry from a
    real SQLite database (what the service would have recorded), proposing, verifying in its own replay, and
    applying or rolling back policy versions that the next window then runs under.

It prints and writes p95 flow time and cost per task after the drift; the tuner's p95 over the tasks after its
fifth post-drift round against the best static's on the same tasks (the goal: within 10%); after how many rounds
that holds; the stricter per-window reading (with the grid's runner-up beside it, for how noisy one window is);
and every applied change with what the next window showed against the same window under the policy it replaced.

    python -m bench.tuning [--trace FILE] [--windows 16] [--window-tasks 200] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agents.tuner import Tuner
from core.db import Store
from core.policies import PolicyStore
from core.policy import CachePolicy, PolicyDocument
from core.settings import Settings
from core.telemetry import Telemetry
from workers.scheduling import ToolProfile
from workers.simulator import SimConfig, SimNode, SimPool, SimTask, Simulator, load_trace, quantile

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "azure_llm_inference_2023_code.csv"
OUT = Path(__file__).resolve().parent / "results" / "tuning.json"

PROFILES = {
    "host_metrics": ToolProfile("host_metrics", pool="cpu", hint_s=0.3),
    "http_probe": ToolProfile("http_probe", pool="cpu", hint_s=0.15),
    "log_search": ToolProfile("log_search", pool="cpu", hint_s=0.8),
    "metric_anomalies": ToolProfile("metric_anomalies", pool="gpu", hint_s=0.25),
}
BASE_S = {"host_metrics": 0.3, "http_probe": 0.15, "log_search": 0.8, "metric_anomalies": 0.25}
SHAPES = {  # category -> nodes (id, tool, depends_on)
    "health": [("h", "host_metrics", ()), ("p1", "http_probe", ()), ("p2", "http_probe", ())],
    "diagnose": [("p", "http_probe", ()), ("l", "log_search", ("p",)), ("a", "metric_anomalies", ("p",))],
    "report": [("h", "host_metrics", ()), ("a", "metric_anomalies", ()), ("l", "log_search", ())],
}
MIX = [("health", 0.5), ("diagnose", 0.3), ("report", 0.2)]
CPU_SLOTS, GPU_SLOTS = 4, 2  # two cpu workers of 2 processes, two gpu workers of 1 thread
BEFORE = {("metric_anomalies", "cpu"): 2.0}
AFTER = {("metric_anomalies", "cpu"): 2.0, ("metric_anomalies", "gpu"): 6.0}
REPEAT_KEYS = 120  # after the drift, diagnoses come from this many distinct requests (each back every ~2 min)


@dataclass
class Window:
    index: int
    start: float
    tasks: list[SimTask]
    keys: dict[str, str]  # task id -> cache key
    drifted: bool


def build_windows(trace: Path, windows: int, per_window: int, load: float, seed: int = 5) -> list[Window]:
    rows = load_trace(trace, limit=windows * per_window)
    rng = random.Random(seed)
    median_w = statistics.median(w for _, w in rows)
    drawn = []
    for i, (t, work) in enumerate(rows):
        category = rng.choices([c for c, _ in MIX], [p for _, p in MIX])[0]
        drawn.append((i, t, category, min(4.0, max(0.25, work / median_w)), rng.randrange(REPEAT_KEYS)))
    # arrivals spread so the cpu pool would run at `load` before the drift
    cpu_work = sum(
        size * sum(BASE_S[tool] for _, tool, _ in SHAPES[c] if tool != "metric_anomalies") for _, _, c, size, _ in drawn
    )
    k = cpu_work / (CPU_SLOTS * load) / max(rows[-1][0] - rows[0][0], 1e-9)
    out: list[Window] = []
    for w in range(windows):
        drifted = w >= windows // 2
        tasks, keys = [], {}
        for i, t, category, size, key in drawn[w * per_window : (w + 1) * per_window]:
            tid = f"w{w}-{i}"
            nodes = [SimNode(nid, tool, BASE_S[tool] * size, deps) for nid, tool, deps in SHAPES[category]]
            tasks.append(SimTask(tid, t * k, nodes, category=category))
            keys[tid] = f"diagnose-{key}" if drifted and category == "diagnose" else tid
        out.append(Window(w, tasks[0].arrival, tasks, keys, drifted))
    return out


def with_cache_ages(window: Window, cache: CachePolicy, created: dict[str, float]) -> list[SimTask]:
    """Each task's closest cached answer: written by the last miss of the same request (an answer served from
    the cache writes none). `created` carries the entries from window to window."""
    out = []
    for t in window.tasks:
        key = window.keys[t.id]
        pol = cache.for_category(t.category)
        age = t.arrival - created[key] if key in created else None
        hit = pol.enabled and age is not None and age <= pol.answer_ttl_s
        if not hit:
            created[key] = t.arrival
        out.append(replace(t, cache_age_s=age))
    return out


def run_window(window: Window, doc: PolicyDocument, created: dict[str, float], seed: int = 7) -> dict[str, Any]:
    tasks = with_cache_ages(window, doc.serving.cache, created)
    config = SimConfig(
        pools=[SimPool("cpu", CPU_SLOTS), SimPool("gpu", GPU_SLOTS)],
        profiles=PROFILES,
        pool_factor=AFTER if window.drifted else BEFORE,
        cache=doc.serving.cache,
        record=True,
        seed=seed + window.index,
    )
    result = Simulator(config, doc.scheduling).run(tasks)
    return {"result": result, "tasks": tasks}


def figures(runs: list[dict[str, Any]], prices: dict[str, float]) -> dict[str, float]:
    flows = sorted(f for r in runs for f in r["result"].flow_times)
    busy: dict[str, float] = {}
    for r in runs:
        for p, sec in r["result"].busy_s.items():
            busy[p] = busy.get(p, 0.0) + sec
    cost = sum(sec * prices.get(p, 0.0) for p, sec in busy.items()) / max(1, len(flows))
    return {
        "tasks": len(flows),
        "p50_s": round(quantile(flows, 0.5), 4),
        "p95_s": round(quantile(flows, 0.95), 4),
        "mean_s": round(sum(flows) / max(1, len(flows)), 4),
        "cost_per_task": round(cost, 8),
        "cache_hits": sum(r["result"].cache_hits for r in runs),
    }


def record_telemetry(tel: Telemetry, window: Window, run: dict[str, Any], t0: float) -> None:
    """What the service would have written for this window: every attempt, every task, every answer lookup."""
    result = run["result"]
    rows: list[dict[str, Any]] = []
    compute: dict[str, dict[str, float]] = {}
    deps = {(t.id, n.id): list(n.depends_on) for t in run["tasks"] for n in t.nodes}
    for a in result.attempts:
        slots = CPU_SLOTS // 2 if a["pool"] == "cpu" else 1
        for task_id, node_id, tool, ready_at in a["items"]:
            rows.append(
                {
                    "kind": "node", "ts": t0 + a["end"], "name": tool, "pool": a["pool"],
                    "worker": f"{a['pool']}-{a['worker'] // slots}", "outcome": a["outcome"], "task_id": task_id,
                    "node_id": node_id, "wait_s": a["start"] - ready_at, "run_s": a["end"] - a["start"],
                    "data": {"depends_on": deps[(task_id, node_id)], **({"hedge": True} if a["hedge"] else {})},
                }
            )  # fmt: skip
            c = compute.setdefault(task_id, {})
            c[a["pool"]] = c.get(a["pool"], 0.0) + a["end"] - a["start"]
    for rec in result.tasks:
        task: SimTask = rec["task"]
        rows.append(
            {"kind": "task", "ts": t0 + rec["end"], "outcome": "succeeded", "task_id": task.id,
             "run_s": rec["flow_s"], "data": {"compute_s": compute.get(task.id, {})}}
        )  # fmt: skip
        if rec["lookup"]:
            age = task.cache_age_s
            reason = "hit" if rec["cache_hit"] else "expired" if age is not None else "below_threshold"
            rows.append(
                {"kind": "cache", "ts": t0 + task.arrival, "name": task.category, "outcome": "answer",
                 "hit": rec["cache_hit"], "run_s": 0.015, "task_id": task.id, "data": {"reason": reason, "age_s": age}}
            )  # fmt: skip
    tel.record_many(rows)


def grid(default: PolicyDocument) -> list[tuple[str, PolicyDocument]]:
    """The knobs this world responds to (there are no stragglers here, so hedging is left as it is)."""
    out = []
    for order, pools, ttl in itertools.product(("fifo", "srpt", "srpt_aging"), (None, ["cpu"]), (120.0, 300.0, 900.0)):
        body = default.model_dump(mode="json")
        body["scheduling"]["release_order"] = order
        if pools:
            body["scheduling"]["tools"] = {"metric_anomalies": {"pools": pools}}
        body["serving"]["cache"]["categories"]["diagnose"]["answer_ttl_s"] = ttl
        name = f"{order} anomalies={pools or 'any'} diagnose_ttl={ttl:g}"
        out.append((name, PolicyDocument.model_validate(body)))
    return out


def static_arm(windows: list[Window], doc: PolicyDocument, only: set[int] | None = None) -> list[dict[str, Any]]:
    """Every window under one policy (`only`: just those windows, the others left empty)."""
    created: dict[str, float] = {}
    return [run_window(w, doc, created) if only is None or w.index in only else {} for w in windows]


def tuner_arm(windows: list[Window], window_s: float, trials: int, seeds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-tuning-"))
    settings = Settings(
        var_dir=work, tuning_window_s=window_s, cpu_concurrency=CPU_SLOTS // 2, gpu_concurrency=1, tuner_trials=trials
    )
    store = Store.from_settings(settings)
    tel = Telemetry(store)
    policies = PolicyStore(store, settings, refresh_s=0, telemetry=tel)
    policies.ensure()
    tuner = Tuner(store, tel, policies, settings, PROFILES, seeds=seeds)
    base = 1_800_000_000.0  # where the current window starts on the service's clock
    created: dict[str, float] = {}
    runs, rounds = [], []
    for w in windows:
        version = policies.current_version()[0]
        cache_before = dict(created)
        run = run_window(w, policies.current(), created)
        run["cache_before"] = cache_before
        runs.append(run)
        t0 = base - w.start
        record_telemetry(tel, w, run, t0)
        # the round runs once the window's tasks have all ended, and observes exactly this window; the next
        # window starts then (each window is simulated on its own, so windows must not overlap in telemetry)
        end = t0 + max(rec["end"] for rec in run["result"].tasks) + 1.0
        started = time.perf_counter()
        report = tuner.run(now=end, window_s=end - base)
        base = end
        p95 = quantile(sorted(run["result"].flow_times), 0.95)
        rounds.append(
            {
                "after_window": w.index,
                "drifted": w.drifted,
                "ran_under_version": version,
                "window_p95_s": round(p95, 4),
                "decision": report["decision"],
                "group": report["group"],
                "policy_version": report["policy_version"],
                "changes": (report["applied"] or {}).get("changes"),
                "watch": {
                    k: round(v, 3) if isinstance(v, float) else v
                    for k, v in (report.get("watch") or {}).items()
                    if k in ("verdict", "version", "live_p95", "expected_p95", "unchanged_p95", "calibration")
                },
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
        print(
            f"  window {w.index:2d}{' (drifted)' if w.drifted else '          '} v{version}: p95 {p95:7.2f}s -> "
            f"{report['decision']:<11} {report['group'] or '':<13} {rounds[-1]['changes'] or ''}",
            flush=True,
        )
    docs = {r.version: r.body for r in policies.history(500)}
    store.engine.dispose()
    return {"runs": runs, "rounds": rounds, "docs": docs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--window-tasks", type=int, default=200)
    parser.add_argument("--load", type=float, default=0.5, help="cpu utilisation before the drift")
    parser.add_argument("--quick", action="store_true", help="fewer tuner trials and resamples")
    args = parser.parse_args()
    trials, seeds = (6, 3) if args.quick else (12, 5)

    windows = build_windows(args.trace, args.windows, args.window_tasks, args.load)
    window_s = statistics.median(b.start - a.start for a, b in itertools.pairwise(windows))
    default = PolicyDocument()
    prices = default.serving.pool_cost_per_s
    post = [w.index for w in windows if w.drifted]
    spans = [b.start - a.start for a, b in itertools.pairwise(windows)]
    print(
        f"tuning bench: {len(windows)} windows of {args.window_tasks} tasks ({min(spans):.0f}-{max(spans):.0f} s), "
        f"drift from window {post[0]}"
    )

    started = time.perf_counter()
    default_runs = static_arm(windows, default)
    tried, grid_runs = [], {}
    for name, doc in grid(default):
        grid_runs[name] = static_arm(windows, doc, set(post))
        tried.append({"policy": name, **figures([grid_runs[name][i] for i in post], prices)})
    tried.sort(key=lambda r: r["p95_s"])
    best_name, runner_up = tried[0]["policy"], tried[1]["policy"]
    best_runs, best_p95 = grid_runs[best_name], tried[0]["p95_s"]
    grid_s = time.perf_counter() - started
    print(f"  grid: {len(tried)} static policies in {grid_s:.0f} s; best: {best_name} (p95 {best_p95:.2f}s)")

    started = time.perf_counter()
    tuned = tuner_arm(windows, window_s, trials, seeds)
    tuner_s = time.perf_counter() - started

    def per_window(runs: list[dict[str, Any]]) -> list[float | None]:
        return [round(quantile(sorted(r["result"].flow_times), 0.95), 3) if r else None for r in runs]

    arms = {
        "static_default": figures([default_runs[i] for i in post], prices),
        "best_static": {"policy": best_name, **figures([best_runs[i] for i in post], prices)},
        "tuner": figures([tuned["runs"][i] for i in post], prices),
    }
    best_w, tuner_w = per_window(best_runs), per_window(tuned["runs"])

    def pooled(runs: list[dict[str, Any]], idx: list[int]) -> float:
        return quantile(sorted(x for i in idx for x in runs[i]["result"].flow_times), 0.95)

    def tail_ratio(runs: list[dict[str, Any]], k: int) -> float:
        """p95 of every task in the windows after k post-drift rounds, against the best static on those tasks
        (window post[0] ran before any post-drift round)."""
        return pooled(runs, post[k:]) / pooled(best_runs, post[k:])

    # the goal: from the fifth post-drift round on, the tuner's p95 within 10% of the best static's
    after_five = round(tail_ratio(tuned["runs"], 5), 3) if len(post) > 5 else None
    within = next((k for k in range(1, len(post)) if tail_ratio(tuned["runs"], k) <= 1.1), None)

    # a stricter reading: every later window on its own within 10%. One window of 200 tasks is noisy enough that
    # the grid's runner-up (a static policy within a few % of the best overall) is the reference for it
    def every_window(runs: list[dict[str, Any]]) -> int | None:
        w = per_window(runs)
        close = [(w[i] or 0) <= 1.1 * (best_w[i] or 0) for i in post[1:]]
        return next((k + 1 for k in range(len(close)) if all(close[k:])), None)

    # an applied change is judged on the next window against that same window under the policy it replaced
    # (the window-to-window swing of this bursty trace is larger than any policy's effect)
    harmful = []
    for k, r in enumerate(tuned["rounds"][:-1]):
        if r["decision"] != "applied":
            continue
        nxt = tuned["rounds"][k + 1]
        before = PolicyDocument.model_validate(tuned["docs"][r["ran_under_version"]])
        run = tuned["runs"][k + 1]
        unchanged = quantile(
            sorted(run_window(windows[k + 1], before, dict(run["cache_before"]))["result"].flow_times), 0.95
        )
        worse = nxt["window_p95_s"] > unchanged * 1.1
        harmful.append(
            {"version": r["policy_version"], "next_window_p95_s": nxt["window_p95_s"],
             "next_window_p95_unchanged_s": round(unchanged, 4), "worse": worse, "next_round": nxt["decision"],
             "rolled_back_next_round": nxt["decision"] == "rolled_back"}
        )  # fmt: skip
    out = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "windows": len(windows),
        "window_tasks": args.window_tasks,
        "window_s": round(window_s, 1),
        "drift_from_window": post[0],
        "arms_after_drift": arms,
        "p95_per_window": {"static_default": per_window(default_runs), "best_static": best_w, "tuner": tuner_w},
        "tuner_vs_best_static_p95_after_five_rounds": after_five,
        "rounds_after_drift_to_within_10pct_of_best_static": within,
        "rounds_after_drift_to_every_window_within_10pct": {
            "tuner": every_window(tuned["runs"]),
            f"runner-up static ({runner_up})": every_window(grid_runs[runner_up]),
        },
        "tuner_vs_best_static_p95_last_window": round((tuner_w[-1] or 0) / best_w[-1], 3) if best_w[-1] else None,
        "applied_changes": harmful,
        "worse_and_not_rolled_back": sum(1 for h in harmful if h["worse"] and not h["rolled_back_next_round"]),
        "rounds": tuned["rounds"],
        "grid": tried[:8],
        "seconds": {"grid": round(grid_s, 1), "tuner": round(tuner_s, 1)},
    }
    print(json.dumps({k: out[k] for k in ("arms_after_drift", "p95_per_window")}, indent=1))
    print(
        f"tuner/best static p95 from the fifth post-drift round on: {after_five} (goal <= 1.1); within 10% from "
        f"round {within}; every window within 10% from round {out['rounds_after_drift_to_every_window_within_10pct']}"
        f"; applied changes {len(harmful)}, worse and not rolled back {out['worse_and_not_rolled_back']}"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
