"""The recent workload, rebuilt from telemetry, replayed in the simulator under any policy document.

What a window of telemetry gives: each task's arrival and its nodes (tool, the pool each ran on, run time,
dependencies from its stored plan), the workers that served each pool and how fast each was, each tool's
speed on each pool, and for each task what its answer-cache lookup found (a hit or an expired entry, and its
age). A node's work is its run time divided by its pool's factor, so the replay can move it to another pool.
Seed 0 replays the window as recorded; other seeds resample each node's work from its tool's runs (a
bootstrap), which is what the tuner's noise estimate is made of.
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from core.db import Store
from core.policy import PolicyDocument
from core.telemetry import Telemetry
from workers.scheduling import ToolProfile, pool_kind
from workers.simulator import SimConfig, SimNode, SimPool, SimTask, Simulator, quantile

_HISTORY_S = 86_400.0  # a pool a tool did not run on in the window: its speed there comes from the last day


@dataclass
class Workload:
    tasks: list[SimTask]
    pools: list[SimPool]
    profiles: dict[str, ToolProfile]
    pool_factor: dict[tuple[str, str], float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # tool -> work seconds seen
    start: float = 0.0
    end: float = 0.0

    def describe(self) -> dict[str, Any]:
        return {
            "tasks": len(self.tasks),
            "nodes": sum(len(t.nodes) for t in self.tasks),
            "pools": {p.name: {"slots": p.workers, "slow": p.slow} for p in self.pools},
            "pool_factor": {f"{t}@{p}": round(f, 3) for (t, p), f in sorted(self.pool_factor.items())},
        }


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def workload_from_telemetry(
    telemetry: Telemetry,
    store: Store | None,
    start: float,
    end: float,
    *,
    profiles: dict[str, ToolProfile],
    slots: dict[str, int],
    cpu_slowdown: float = 4.0,
    seed: int = 7,
) -> Workload:
    """`slots`: worker slots per pool kind (cpu: CPU_CONCURRENCY, gpu: GPU_CONCURRENCY)."""
    nodes = [r for r in telemetry.rows("node", start, end) if r.pool != "cache" and r.run_s is not None]
    task_rows = {r.task_id: r for r in telemetry.rows("task", start, end) if r.task_id}
    lookups = {r.task_id: r for r in telemetry.rows("cache", start - 60, end) if r.task_id and r.outcome == "answer"}
    history = [r for r in telemetry.rows("node", end - _HISTORY_S, end) if r.pool != "cache" and r.run_s]

    def prof(tool: str) -> ToolProfile:
        return profiles.get(tool) or ToolProfile(tool)

    # each tool's speed per pool: the window's median where it ran there, else the last day's
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in nodes:
        if r.outcome == "succeeded":
            runs[(r.name, r.pool)].append(float(r.run_s or 0.0))
    older: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in history:
        if r.outcome == "succeeded":
            older[(r.name, r.pool)].append(float(r.run_s or 0.0))
    pools_of: dict[str, set[str]] = defaultdict(set)
    for tool, pool in [*runs, *older]:
        pools_of[tool].add(pool)
    speed: dict[tuple[str, str], float] = {}
    for tool, used in pools_of.items():
        for pool in used:
            seen = runs.get((tool, pool)) or older.get((tool, pool)) or []
            if seen:
                speed[(tool, pool)] = _median(seen)
    factor: dict[tuple[str, str], float] = {}
    base: dict[str, float] = {}
    for tool, used in pools_of.items():
        own = [p for p in used if pool_kind(p) == pool_kind(prof(tool).pool) and (tool, p) in speed]
        if own:
            base[tool] = min(speed[(tool, p)] for p in own)
        else:
            p = next(iter(used))
            slowdown = cpu_slowdown if pool_kind(prof(tool).pool) == "gpu" and pool_kind(p) != "gpu" else 1.0
            base[tool] = speed.get((tool, p), 1.0) / slowdown
        for p in used:
            if (tool, p) in speed and base[tool] > 0:
                factor[(tool, p)] = speed[(tool, p)] / base[tool]

    # workers and how slow each is against its pool's typical run of the same tool
    per_worker: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in nodes:
        if r.outcome == "succeeded" and r.worker and speed.get((r.name, r.pool)):
            per_worker[(r.pool, r.worker)].append(float(r.run_s or 0.0) / speed[(r.name, r.pool)])
    pools: list[SimPool] = []
    for pool in sorted({r.pool for r in nodes} | {p for (_, p) in speed}):
        members = sorted(w for (p, w) in per_worker if p == pool)
        width = slots.get(pool, slots.get(pool_kind(pool), 1))
        slow: dict[int, float] = {}
        for k, w in enumerate(members):
            ratio = _median(per_worker[(pool, w)])
            if len(per_worker[(pool, w)]) >= 3 and ratio > 1.5:
                for j in range(width):
                    slow[k * width + j] = ratio
        pools.append(SimPool(pool, max(1, len(members)) * width, slow))
    if not any(p.name == "cpu" for p in pools):
        pools.append(SimPool("cpu", slots.get("cpu", 1)))

    # tasks: arrival, nodes (the attempt that decided each node), dependencies from the stored plan
    by_task: dict[str, dict[str, Any]] = defaultdict(dict)
    for r in nodes:
        if r.data.get("hedge"):
            continue  # a hedge is the scheduler's choice, not the workload's
        prev = by_task[r.task_id or ""].get(r.node_id or "")
        if prev is None or prev.outcome != "succeeded" or r.outcome == "succeeded":
            by_task[r.task_id or ""][r.node_id or ""] = r
    samples: dict[str, list[float]] = defaultdict(list)
    tasks: list[SimTask] = []
    templates: dict[str, list[list[SimNode]]] = defaultdict(list)
    for task_id, attempts in by_task.items():
        deps = _dependencies(store, task_id, attempts)
        sim_nodes = []
        for node_id, r in attempts.items():
            work = float(r.run_s or 0.0) / factor.get((r.name, r.pool), 1.0)
            samples[r.name].append(work)
            sim_nodes.append(
                SimNode(node_id, r.name, max(work, 1e-4), tuple(d for d in deps.get(node_id, ()) if d in attempts))
            )
        trow = task_rows.get(task_id)
        first = min(float(r.ts) - float(r.run_s or 0.0) - float(r.wait_s or 0.0) for r in attempts.values())
        arrival = float(trow.ts) - float(trow.run_s or 0.0) if trow and trow.run_s is not None else first
        look = lookups.get(task_id)
        category = look.name if look else ""
        tasks.append(SimTask(task_id, arrival, sim_nodes, tenant=trow.tenant if trow else "default", category=category))
        if category:
            templates[category].append(sim_nodes)
    # tasks served from the cache ran no nodes: under a policy that would not serve them they run nodes like
    # the category's other tasks
    rng = random.Random(seed)
    by_id = {t.id: t for t in tasks}
    for task_id, look in lookups.items():
        reason = (look.data or {}).get("reason")
        age = (look.data or {}).get("age_s")
        known = by_id.get(task_id)
        if known is not None:
            if reason == "expired" and age is not None:
                known.cache_age_s = float(age)
            continue
        trow = task_rows.get(task_id)
        if trow is None or not templates.get(look.name) or not (start <= look.ts < end):
            continue
        template = rng.choice(templates[look.name])
        tasks.append(
            SimTask(
                task_id,
                float(trow.ts) - float(trow.run_s or 0.0),
                [replace(n) for n in template],
                tenant=trow.tenant,
                category=look.name,
                cache_age_s=float(age) if age is not None else 0.0,
            )
        )
    tasks.sort(key=lambda t: t.arrival)
    return Workload(tasks, pools, dict(profiles), factor, dict(samples), start, end)


def _dependencies(store: Store | None, task_id: str, attempts: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """From the telemetry when it says (a replayed trace), else from the task's stored plan."""
    given = {nid: tuple(r.data.get("depends_on") or ()) for nid, r in attempts.items() if "depends_on" in r.data}
    if given or store is None:
        return given
    try:
        plan = store.latest_plan(task_id)
    except Exception:
        return {}
    return {n.id: tuple(n.depends_on) for n in plan.nodes} if plan else {}


def _resampled(workload: Workload, seed: int) -> list[SimTask]:
    if seed == 0:
        return workload.tasks
    rng = random.Random(seed)
    out = []
    for t in workload.tasks:
        nodes = [
            replace(n, work_s=rng.choice(workload.samples[n.tool]) if workload.samples.get(n.tool) else n.work_s)
            for n in t.nodes
        ]
        out.append(replace(t, nodes=nodes))
    return out


def replay(workload: Workload, doc: PolicyDocument, seed: int = 0) -> dict[str, Any]:
    """One simulation of the workload under a policy: flow-time quantiles, cost per task, cache hits."""
    config = SimConfig(
        pools=workload.pools,
        profiles=workload.profiles,
        pool_factor=workload.pool_factor,
        cache=doc.serving.cache,
        seed=seed + 7,
    )
    result = Simulator(config, doc.scheduling).run(_resampled(workload, seed))
    ordered = sorted(result.flow_times)
    return {
        "tasks": len(ordered),
        "p50": quantile(ordered, 0.5),
        "p95": quantile(ordered, 0.95),
        "p99": quantile(ordered, 0.99),
        "mean": sum(ordered) / len(ordered) if ordered else 0.0,
        "cost_per_task": result.cost_per_task(doc.serving.pool_cost_per_s),
        "cache_hits": result.cache_hits,
        "hedges": result.hedges,
    }
