"""A discrete-event simulator of the worker pools that calls the production scheduling code.

Tasks arrive (from a trace, or from the service's own telemetry), their nodes become ready as their
dependencies end, and every release decision, placement, hedge and batch is made by workers/scheduling.py,
exactly as the release loop does it against Celery. What the simulator adds is only the world: workers per
pool (some may be slow), true service times, and the clock.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from core.policy import CachePolicy, SchedulingPolicy
from workers.scheduling import (
    CostModel,
    FifoClock,
    HedgeBudget,
    PoolLoad,
    ReadyItem,
    ToolProfile,
    allowed_pools,
    decide_releases,
    hedge_due,
    pool_kind,
)

TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass
class SimNode:
    id: str
    tool: str
    work_s: float  # true service time on a worker of the tool's preferred kind at speed 1
    depends_on: tuple[str, ...] = ()
    estimate_s: float | None = None  # what the scheduler is told (None: what its cost model learnt)


@dataclass
class SimTask:
    id: str
    arrival: float
    nodes: list[SimNode]
    tenant: str = "default"
    priority: int = 5
    category: str = ""
    # age of the closest cached answer when it arrived (None: nothing cached): under a cache policy that keeps
    # answers of its category at least this long, the task is served from the cache
    cache_age_s: float | None = None


@dataclass
class SimPool:
    name: str
    workers: int
    slow: dict[int, float] = field(default_factory=dict)  # worker index -> slowdown factor (>= 1)


@dataclass
class SimConfig:
    pools: list[SimPool]
    profiles: dict[str, ToolProfile] = field(default_factory=dict)
    cpu_slowdown: float = 4.0  # a gpu tool's true slowdown on a cpu worker
    call_overhead_s: float = 0.0  # paid once per message (a batch pays it once)
    seed: int = 7
    # (tool, pool) -> true slowdown against the tool's work_s; overrides cpu_slowdown where given
    pool_factor: dict[tuple[str, str], float] = field(default_factory=dict)
    cache: CachePolicy | None = None  # None: no semantic cache in this world
    cache_lookup_s: float = 0.015  # what a lookup adds to a task of a category whose cache is on (embed + search)
    record: bool = False  # keep every attempt and task (what the service's telemetry would hold)


@dataclass
class SimResult:
    flow_times: list[float]
    flow_of: dict[str, float]  # task id -> flow time
    makespan: float
    utilisation: dict[str, float]
    hedges: int
    hedge_wins: int
    batches: int
    releases: int
    busy_s: dict[str, float] = field(default_factory=dict)
    cache_hits: int = 0
    attempts: list[dict[str, Any]] = field(default_factory=list)  # with SimConfig.record
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def cost_per_task(self, prices: dict[str, float]) -> float:
        """Busy worker seconds priced by pool (or kind), per task."""
        total = sum(sec * prices.get(p, prices.get(pool_kind(p), 0.0)) for p, sec in self.busy_s.items())
        return total / len(self.flow_times) if self.flow_times else 0.0

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.flow_times)
        return {
            "tasks": len(ordered),
            "mean": round(sum(ordered) / len(ordered), 4) if ordered else 0.0,
            "p50": round(quantile(ordered, 0.50), 4),
            "p95": round(quantile(ordered, 0.95), 4),
            "p99": round(quantile(ordered, 0.99), 4),
            "makespan": round(self.makespan, 4),
            "utilisation": {k: round(v, 4) for k, v in self.utilisation.items()},
            "hedges": self.hedges,
            "hedge_wins": self.hedge_wins,
            "batches": self.batches,
            "cache_hits": self.cache_hits,
        }


def quantile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def censored_quantile(ended: Sequence[float], running: Sequence[float], q: float) -> float:
    """The q-quantile of flow times when some tasks have not ended: each counts as right-censored at its age so
    far (Kaplan-Meier), leaving the risk set there instead of counting as done. With nothing running it is
    quantile(sorted(ended), q); a task still running past the quantile of the ended ones raises it, a young one
    does not lower it; when the tail has not ended yet, the oldest age seen (a lower bound)."""
    obs = sorted([(t, 0) for t in ended] + [(t, 1) for t in running])  # at one time, endings before censorings
    at_risk, survival = len(obs), 1.0
    for t, still_running in obs:
        if not still_running:
            survival *= 1 - 1 / at_risk
            if survival <= 1 - q + 1e-9:
                return t
        at_risk -= 1
    return obs[-1][0] if obs else 0.0


@dataclass
class _Run:
    id: int
    items: list[ReadyItem]
    pool: str
    worker: int
    start: float
    end: float
    est_s: float
    hedge_of: int | None = None
    hedged: bool = False
    over: bool = False


class Simulator:
    def __init__(self, config: SimConfig, policy: SchedulingPolicy) -> None:
        self.config = config
        self.policy = policy
        self.rng = random.Random(config.seed)
        self.costs = CostModel(policy.ewma_alpha)
        self.budget = HedgeBudget(policy)
        self.declared = [p.name for p in config.pools]
        self.decisions: list[tuple[float, str, str]] = []  # (time, task id, pool) of every release

    def profile(self, tool: str) -> ToolProfile:
        return self.config.profiles.get(tool) or ToolProfile(tool)

    def service_s(self, node: SimNode, pool: str, worker: int) -> float:
        profile = self.profile(node.tool)
        t = node.work_s
        factor = self.config.pool_factor.get((node.tool, pool))
        if factor is not None:
            t *= factor
        elif pool_kind(profile.pool) == "gpu" and pool_kind(pool) != "gpu":
            t *= self.config.cpu_slowdown
        slow = next(p.slow for p in self.config.pools if p.name == pool).get(worker, 1.0)
        return t * slow

    def estimate(self, node: SimNode) -> float:
        if node.estimate_s is not None:
            return node.estimate_s
        profile = self.profile(node.tool)
        first = allowed_pools(profile, self.declared, override=self.policy.override(node.tool).pools)[0]
        return self.costs.expected(profile, first, self.policy)

    def run(self, tasks: Iterable[SimTask]) -> SimResult:
        tasks = sorted(tasks, key=lambda t: t.arrival)
        policy = self.policy
        seq = itertools.count()
        events: list[tuple[float, int, str, Any]] = [(t.arrival, next(seq), "arrive", t) for t in tasks]
        heapq.heapify(events)
        busy: dict[str, dict[int, _Run]] = {p.name: {} for p in self.config.pools}
        width = {p.name: p.workers for p in self.config.pools}
        busy_time = dict.fromkeys(width, 0.0)
        ready: dict[str, ReadyItem] = {}
        nodes: dict[str, SimNode] = {}
        remaining: dict[str, set[str]] = {}  # task -> node keys not ended
        waiting: dict[str, SimNode] = {}  # node key -> node whose deps have not ended
        done_nodes: set[str] = set()
        task_of: dict[str, SimTask] = {}
        flows: list[float] = []
        flow_of: dict[str, float] = {}
        first = tasks[0].arrival if tasks else 0.0
        last_end = first
        hedges = hedge_wins = batches = releases = cache_hits = 0
        attempts: list[dict[str, Any]] = []
        task_records: list[dict[str, Any]] = []
        record = self.config.record
        cache = self.config.cache
        run_ids = itertools.count()
        clock = FifoClock(policy.guard_share, policy.guard_halflife)
        typical = [1.0, 0]  # running mean of estimates of released items: the starvation bound's unit

        def make_ready(task: SimTask, node: SimNode, now: float) -> None:
            key = f"{task.id}/{node.id}"
            profile = self.profile(node.tool)
            allowed = allowed_pools(profile, self.declared, override=self.policy.override(node.tool).pools)
            est = self.estimate(node)
            ready[key] = ReadyItem(
                key=key,
                task_id=task.id,
                tool=node.tool,
                allowed=allowed,
                ready_at=now,
                tenant=task.tenant,
                priority=task.priority,
                est_s=est,
                fifo_turn=clock.turn(allowed[0], now, est, width[allowed[0]]),
            )

        def refresh_remaining(task_id: str) -> float:
            return math.fsum(self.estimate(nodes[k]) for k in remaining[task_id])  # exact: set order must not matter

        def start(items: list[ReadyItem], pool: str, est: float, now: float, hedge_of: int | None = None) -> None:
            nonlocal releases
            free = [w for w in range(width[pool]) if w not in busy[pool]]
            if not free:
                return
            worker = self.rng.choice(free)
            service = self.config.call_overhead_s + sum(self.service_s(nodes[i.key], pool, worker) for i in items)
            run = _Run(next(run_ids), items, pool, worker, now, now + service, est, hedge_of)
            busy[pool][worker] = run
            releases += 1
            heapq.heappush(events, (run.end, next(seq), "finish", run))
            profile = self.profile(items[0].tool)
            hedge_ok = policy.hedging and policy.override(items[0].tool).hedge is not False
            if hedge_of is None and profile.hedgeable and len(items) == 1 and hedge_ok:
                p95 = self.costs.p95(items[0].tool, pool, policy.hedge_min_samples)
                if p95 is not None:
                    at = now + max(policy.hedge_min_s, p95 * policy.hedge_factor) + 1e-9
                    heapq.heappush(events, (at, next(seq), "hedge", run))

        def finish_node(key: str, now: float) -> None:
            nonlocal last_end
            task = task_of[key.split("/", 1)[0]]
            done_nodes.add(key)
            remaining[task.id].discard(key)
            if not remaining[task.id]:
                end_task(task, now, hit=False)
                return
            for wkey, node in list(waiting.items()):
                if wkey.startswith(task.id + "/") and all(f"{task.id}/{d}" in done_nodes for d in node.depends_on):
                    del waiting[wkey]
                    make_ready(task, node, now)

        def end_task(task: SimTask, now: float, *, hit: bool) -> None:
            nonlocal last_end
            flows.append(now - task.arrival)
            flow_of[task.id] = now - task.arrival
            last_end = max(last_end, now)
            if record:
                task_records.append(
                    {"task": task, "end": now, "flow_s": now - task.arrival, "cache_hit": hit, "lookup": looked(task)}
                )

        def looked(task: SimTask) -> bool:
            return cache is not None and bool(task.category) and cache.for_category(task.category).enabled

        def handle(kind: str, payload: Any, now: float) -> None:
            nonlocal hedges, hedge_wins, cache_hits
            if kind == "arrive":
                task: SimTask = payload
                task_of[task.id] = task
                if looked(task):
                    assert cache is not None
                    lookup = self.config.cache_lookup_s
                    if (
                        task.cache_age_s is not None
                        and task.cache_age_s <= cache.for_category(task.category).answer_ttl_s
                    ):
                        cache_hits += 1
                        heapq.heappush(events, (now + lookup, next(seq), "served", task))
                        return
                    heapq.heappush(events, (now + lookup, next(seq), "looked", task))
                    return
                handle("looked", task, now)
            elif kind == "served":
                end_task(payload, now, hit=True)
            elif kind == "looked":
                task = payload
                remaining[task.id] = set()
                for node in task.nodes:
                    key = f"{task.id}/{node.id}"
                    nodes[key] = node
                    remaining[task.id].add(key)
                    if node.depends_on:
                        waiting[key] = node
                    else:
                        make_ready(task, node, now)
            elif kind == "finish":
                run: _Run = payload
                if run.over:
                    return
                run.over = True
                busy_time[run.pool] += now - run.start
                del busy[run.pool][run.worker]
                if record:
                    attempts.append(attempt_record(run, now, "succeeded"))
                if len(run.items) == 1:
                    self.costs.observe(run.items[0].tool, run.pool, now - run.start, str(run.worker))
                # the first of a hedged pair to finish wins; the other is cancelled and frees its worker
                twin = self._twin(run, busy)
                if twin is not None:
                    twin.over = True
                    busy_time[twin.pool] += now - twin.start
                    del busy[twin.pool][twin.worker]
                    if record:
                        attempts.append(attempt_record(twin, now, "cancelled"))
                    if run.hedge_of is not None:
                        hedge_wins += 1
                for item in run.items:
                    if item.key not in done_nodes:
                        finish_node(item.key, now)
            elif kind == "hedge":
                run = payload
                if run.over or run.hedged:
                    return
                p95 = self.costs.p95(run.items[0].tool, run.pool, policy.hedge_min_samples)
                free = [w for w in range(width[run.pool]) if w not in busy[run.pool]]
                if free and hedge_due(now - run.start, p95, policy) and self.budget.spend():
                    run.hedged = True
                    hedges += 1
                    start(run.items, run.pool, run.est_s, now, hedge_of=run.id)

        def attempt_record(run: _Run, now: float, outcome: str) -> dict[str, Any]:
            return {
                "items": [(i.task_id, i.key.split("/", 1)[1], i.tool, i.ready_at) for i in run.items],
                "pool": run.pool,
                "worker": run.worker,
                "start": run.start,
                "end": now,
                "outcome": outcome,
                "hedge": run.hedge_of is not None,
            }

        def decide(now: float) -> None:
            """One release pass, as the release loop makes it."""
            nonlocal batches
            for item in ready.values():
                item.task_remaining_s = refresh_remaining(item.task_id)
            loads = {}
            for p in width:
                backlog = sum(max(0.0, r.start + r.est_s - now) for r in busy[p].values())
                loads[p] = PoolLoad(p, width[p], len(busy[p]), backlog)
            decided = decide_releases(
                list(ready.values()), loads, self.config.profiles, self.costs, policy, now, typical_s=typical[0]
            )
            for rel in decided:
                for item in rel.items:
                    del ready[item.key]
                    typical[1] += 1
                    typical[0] += (item.est_s - typical[0]) / typical[1]
                if len(rel.items) > 1:
                    batches += 1
                start(rel.items, rel.pool, rel.est_s, now)
                self.decisions.extend((now, i.task_id, rel.pool) for i in rel.items)
            self.budget.earn(len(decided), policy)
            if ready and not decided:
                # a batch window or a backoff may open before anything else happens
                wake = min((i.ready_at + policy.batch_window_s for i in ready.values()), default=math.inf)
                if wake > now and math.isfinite(wake):
                    heapq.heappush(events, (wake, next(seq), "tick", None))

        while events:
            now = events[0][0]
            # everything that happens at this instant first, then one decision (as one release pass would)
            while events and events[0][0] == now:
                _, _, kind, payload = heapq.heappop(events)
                handle(kind, payload, now)
            if ready and any(len(busy[p]) < width[p] for p in width):
                decide(now)
        span = max(last_end - first, 1e-9)
        util = {p: busy_time[p] / (width[p] * span) if width[p] else 0.0 for p in width}
        return SimResult(
            flows,
            flow_of,
            last_end - first,
            util,
            hedges,
            hedge_wins,
            batches,
            releases,
            busy_s=dict(busy_time),
            cache_hits=cache_hits,
            attempts=attempts,
            tasks=task_records,
        )

    @staticmethod
    def _twin(run: _Run, busy: dict[str, dict[int, _Run]]) -> _Run | None:
        for pool_runs in busy.values():
            for other in pool_runs.values():
                if other.over:
                    continue
                if other.hedge_of == run.id or (run.hedge_of is not None and other.id == run.hedge_of):
                    return other
        return None


# traces


def _parse_ts(text: str) -> float:
    head, _, frac = text.strip().partition(".")
    stamp = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
    return stamp.timestamp() + (float("0." + frac) if frac else 0.0)


def load_trace(path: Path, *, limit: int | None = None) -> list[tuple[float, float]]:
    """(arrival seconds from the first request, work units) per row of a CSV with the shared trace's
    columns; work is ContextTokens/10 + GeneratedTokens."""
    rows: list[tuple[float, float]] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(TRACE_COLUMNS)}")
        for n, row in enumerate(reader, start=2):
            try:
                ts = _parse_ts(row["TIMESTAMP"])
                work = float(row["ContextTokens"]) / 10 + float(row["GeneratedTokens"])
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}: line {n}: {exc}") from exc
            rows.append((ts, max(work, 1e-6)))
            if limit and len(rows) >= limit:
                break
    if not rows:
        raise ValueError(f"{path}: no requests")
    rows.sort()
    t0 = rows[0][0]
    return [(ts - t0, w) for ts, w in rows]


def trace_tasks(
    rows: Sequence[tuple[float, float]], *, workers: int, utilisation: float, tool: str = "request"
) -> list[SimTask]:
    """One single-node task per request, its work scaled so the offered load is `utilisation` of the workers'
    capacity over the trace's span. The scheduler is told each request's size (its estimate is exact)."""
    span = max(rows[-1][0] - rows[0][0], 1e-9)
    total = sum(w for _, w in rows)
    scale = utilisation * workers * span / total
    return [
        SimTask(f"r{i}", ts, [SimNode("n", tool, w * scale, estimate_s=w * scale)]) for i, (ts, w) in enumerate(rows)
    ]


def simulate_trace(
    path: Path,
    policy: SchedulingPolicy,
    *,
    workers: int = 4,
    utilisation: float = 0.85,
    slow_workers: dict[int, float] | None = None,
    limit: int | None = None,
    seed: int = 7,
) -> SimResult:
    rows = load_trace(path, limit=limit)
    tasks = trace_tasks(rows, workers=workers, utilisation=utilisation)
    config = SimConfig(pools=[SimPool("cpu", workers, dict(slow_workers or {}))], seed=seed)
    return Simulator(config, policy).run(tasks)
