"""Scheduling decisions as plain functions over plain data: where a ready node runs, which ready node goes
next, when a straggler is hedged, when a retry may run, which calls share a batch.

Nothing here touches Redis, Celery or the database. The production release loop (workers/release.py) and
the discrete-event simulator (workers/simulator.py) both build the same inputs and call the same
`decide_releases`, so a policy proven in the simulator is the policy that runs.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.policy import SchedulingPolicy


def pool_kind(pool: str) -> str:
    """gpu.large -> gpu, cpu.io -> cpu: the kind of hardware a pool's workers have."""
    return pool.split(".", 1)[0]


@dataclass(frozen=True)
class ToolProfile:
    """What the scheduler needs of a tool (a ToolSpec in production, a synthetic tool in the simulator)."""

    name: str
    pool: str = "cpu"  # preferred pool or kind
    cpu_fallback: bool = True  # a gpu tool that also runs (slower) on cpu
    hedgeable: bool = True  # an idempotent read: a duplicate is harmless
    batchable: bool = False
    hint_s: float = 1.0  # expected run time before any is measured


def allowed_pools(
    profile: ToolProfile,
    declared: Sequence[str],
    *,
    override: Sequence[str] | None = None,
    node_pool: str | None = None,
) -> tuple[str, ...]:
    """The declared pools a call may run on, preferred first. A cpu-only tool never gets a gpu pool; a gpu tool
    may overflow to cpu pools when it runs there too. A node pinned to a pool keeps it (cpu if undeclared)."""
    if node_pool:
        return (node_pool,) if node_pool in declared else ("cpu",)
    wanted = list(override) if override else [profile.pool]
    if not override and pool_kind(profile.pool) == "gpu" and profile.cpu_fallback:
        wanted.append("cpu")
    out: list[str] = []
    for want in wanted:
        # a pool's name picks it; a kind (cpu, gpu) picks every declared pool of that kind
        matches = [want] if want in declared else []
        matches += [p for p in declared if pool_kind(p) == want and p != want]
        for p in matches:
            if p not in out and (pool_kind(p) != "gpu" or pool_kind(profile.pool) == "gpu"):
                out.append(p)
    return tuple(out) or ("cpu",)


# run-time estimates learnt from telemetry


@dataclass
class RunStats:
    mean: float = 0.0
    var: float = 0.0
    n: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    by_worker: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=256))

    def observe(self, x: float, alpha: float, worker: str = "") -> None:
        if self.n == 0:
            self.mean, self.var = x, 0.0
        else:  # exponentially weighted mean and variance (West, 1979)
            diff = x - self.mean
            incr = alpha * diff
            self.mean += incr
            self.var = (1 - alpha) * (self.var + diff * incr)
        self.n += 1
        self.recent.append(x)
        self.by_worker.append((worker, x))

    def quantile(self, q: float) -> float:
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class CostModel:
    """Expected run time per (tool, pool): an EWMA with variance, and the recent runs for quantiles."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self._stats: dict[tuple[str, str], RunStats] = {}

    def observe(self, tool: str, pool: str, run_s: float, worker: str = "") -> None:
        self._stats.setdefault((tool, pool), RunStats()).observe(max(0.0, run_s), self.alpha, worker)

    def stats(self, tool: str, pool: str) -> RunStats | None:
        return self._stats.get((tool, pool))

    def expected(self, profile: ToolProfile, pool: str, policy: SchedulingPolicy) -> float:
        seen = self._stats.get((profile.name, pool))
        if seen and seen.n:
            return seen.mean
        kin = [s for (t, p), s in self._stats.items() if t == profile.name and pool_kind(p) == pool_kind(pool) and s.n]
        if kin:
            return sum(s.mean for s in kin) / len(kin)
        prior = profile.hint_s
        if pool_kind(profile.pool) == "gpu" and pool_kind(pool) != "gpu":
            prior *= policy.gpu_fallback_slowdown
        return prior

    def p95(self, tool: str, pool: str, min_samples: int) -> float | None:
        """The p95 of recent run times on the pool's healthy workers: a worker whose median is over twice
        the median worker's is a straggler, and its runs would hide exactly what hedging is for."""
        seen = self._stats.get((tool, pool))
        if not seen or seen.n < min_samples:
            return None
        runs: dict[str, list[float]] = {}
        for worker, x in seen.by_worker:
            runs.setdefault(worker, []).append(x)
        medians = {w: sorted(xs)[len(xs) // 2] for w, xs in runs.items()}
        typical = sorted(medians.values())[len(medians) // 2] if len(medians) > 2 else max(medians.values())
        healthy = sorted(x for w, xs in runs.items() if medians[w] <= 2 * typical for x in xs)
        if len(healthy) < min_samples:
            return seen.quantile(0.95)
        return healthy[min(len(healthy) - 1, max(0, math.ceil(0.95 * len(healthy)) - 1))]

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            f"{t}@{p}": {"mean_s": round(s.mean, 4), "std_s": round(math.sqrt(s.var), 4), "n": s.n}
            for (t, p), s in sorted(self._stats.items())
        }


# the ready set and the pools, as the decision sees them


@dataclass
class ReadyItem:
    key: str  # the attempt's id in production, a job id in the simulator
    task_id: str
    tool: str
    allowed: tuple[str, ...]
    ready_at: float
    tenant: str = "default"
    priority: int = 5  # higher goes first under the priority policy
    task_remaining_s: float = 0.0  # estimated work left in the item's task (SRPT's measure)
    est_s: float = 0.0  # this item's own estimate on its preferred pool
    not_before: float = 0.0  # a retry's backoff
    fifo_turn: float = math.inf  # when it would start under FIFO (FifoClock); srpt_aging's guard


@dataclass
class PoolLoad:
    name: str
    capacity: int  # slots of the live workers (or the policy's cap, when lower)
    inflight: int = 0  # attempts released to it and not ended
    backlog_s: float = 0.0  # expected seconds left of those attempts (and of the ones placed this round)

    def free(self, oversubscribe: int = 0) -> int:
        return self.capacity + (oversubscribe if self.capacity else 0) - self.inflight

    def expected_start(self) -> float:
        if self.capacity <= 0:
            return math.inf
        if self.inflight < self.capacity:
            return 0.0
        return self.backlog_s / self.capacity


@dataclass
class Placement:
    pool: str
    start_s: float
    run_s: float

    @property
    def completion_s(self) -> float:
        return self.start_s + self.run_s


def place(
    item: ReadyItem,
    profile: ToolProfile,
    loads: dict[str, PoolLoad],
    costs: CostModel,
    policy: SchedulingPolicy,
) -> Placement | None:
    """The allowed pool where the call is expected to finish first (queue wait + run time); ties go to the
    pool listed first (the tool's preferred one). None when no allowed pool has any worker."""
    best: Placement | None = None
    for name in item.allowed:
        load = loads.get(name)
        if load is None or load.capacity <= 0:
            continue
        option = Placement(name, load.expected_start(), costs.expected(profile, name, policy))
        if best is None or option.completion_s < best.completion_s - 1e-9:
            best = option
    return best


def sort_key(item: ReadyItem, policy: SchedulingPolicy, now: float, typical_s: float) -> tuple[float, ...]:
    """Smaller goes first. fifo: readiness; priority: the task's priority, then readiness; srpt: the task's
    estimated remaining work; srpt_aging: that work less `aging` x the wait, except that an item whose guard
    time (FifoClock, brought forward by starvation_factor x the typical run time) has come goes ahead of all
    others, earliest guard first."""
    order = policy.release_order
    if order == "fifo":
        return (0.0, item.ready_at)
    if order == "priority":
        return (0.0, -float(item.priority), item.ready_at)
    if order == "srpt":
        return (0.0, item.task_remaining_s, item.ready_at)
    waited = max(0.0, now - item.ready_at)
    if now >= item.fifo_turn - policy.starvation_factor * typical_s:
        return (-1.0, item.fifo_turn)
    return (0.0, item.task_remaining_s - policy.aging * waited, item.ready_at)


class FifoClock:
    """The srpt_aging guard's measure. A fluid FIFO queue per pool (`capacity` slots wide) says how long
    each ready item would wait if every item went in arrival order. An item may be overtaken until it has
    waited `share` of the longest recent FIFO wait (a maximum that fades by half every `halflife` items), or
    its own FIFO wait if longer: past that it goes first. So the tail of waits stays near FIFO's tail while
    short work jumps the queue everywhere below it."""

    def __init__(self, share: float = 0.8, halflife: int = 4096) -> None:
        self._clock: dict[str, float] = {}
        self._worst: dict[str, float] = {}
        self.share = share
        self._decay = 0.5 ** (1.0 / halflife)

    def turn(self, pool: str, ready_at: float, est_s: float, capacity: int) -> float:
        start = max(self._clock.get(pool, ready_at), ready_at)
        self._clock[pool] = start + est_s / max(1, capacity)
        own = start - ready_at
        worst = self._worst[pool] = max(own, self._worst.get(pool, 0.0) * self._decay)
        return ready_at + max(own, self.share * worst)


def release_order(
    items: Iterable[ReadyItem],
    policy: SchedulingPolicy,
    now: float,
    *,
    typical_s: float = 1.0,
    tenant_inflight: dict[str, int] | None = None,
) -> list[ReadyItem]:
    """The ready items in the order they should get a slot. With fair share, tenants take turns: the next
    item comes from the tenant with the smallest share in flight (in flight / weight)."""
    keyed = sorted(items, key=lambda i: sort_key(i, policy, now, typical_s))
    tenants = {i.tenant for i in keyed}
    if not policy.fair_share or len(tenants) <= 1:
        return keyed
    queues: dict[str, deque[ReadyItem]] = {t: deque() for t in tenants}
    for i in keyed:
        queues[i.tenant].append(i)
    share = {t: float((tenant_inflight or {}).get(t, 0)) for t in tenants}
    out: list[ReadyItem] = []
    while queues:
        tenant = min(
            queues,
            key=lambda t: (
                share[t] / policy.tenant_weights.get(t, 1.0),
                sort_key(queues[t][0], policy, now, typical_s),
            ),
        )
        out.append(queues[tenant].popleft())
        share[tenant] += 1
        if not queues[tenant]:
            del queues[tenant]
    return out


@dataclass
class Release:
    items: list[ReadyItem]  # one, or a batch of one batchable tool
    pool: str
    est_s: float


def decide_releases(
    ready: Sequence[ReadyItem],
    loads: dict[str, PoolLoad],
    profiles: dict[str, ToolProfile],
    costs: CostModel,
    policy: SchedulingPolicy,
    now: float,
    *,
    typical_s: float = 1.0,
    tenant_inflight: dict[str, int] | None = None,
) -> list[Release]:
    """One round: which ready items go now and where. Mutates `loads` (and `tenant_inflight`) to count what
    it released. An item whose best pool is full waits for it rather than taking a slower pool, but its work
    counts in that pool's backlog, so the items behind it see the queue and may overflow elsewhere."""
    inflight = dict(tenant_inflight or {})
    eligible = [i for i in ready if i.not_before <= now]
    order = release_order(eligible, policy, now, typical_s=typical_s, tenant_inflight=inflight)
    batches = _due_batches(order, profiles, policy, now)
    out: list[Release] = []
    seen_batch: set[str] = set()
    for item in order:
        profile = profiles.get(item.tool) or ToolProfile(item.tool)
        if not profile.batchable:
            _release([item], profile, loads, costs, policy, inflight, out)
        elif item.tool in batches and item.tool not in seen_batch:  # else: window still open, or handled
            seen_batch.add(item.tool)
            for group in batches[item.tool]:
                _release(group, profile, loads, costs, policy, inflight, out)
    if tenant_inflight is not None:
        tenant_inflight.update(inflight)
    return out


def _release(
    group: list[ReadyItem],
    profile: ToolProfile,
    loads: dict[str, PoolLoad],
    costs: CostModel,
    policy: SchedulingPolicy,
    inflight: dict[str, int],
    out: list[Release],
) -> None:
    head = group[0]
    if policy.tenant_max_inflight and inflight.get(head.tenant, 0) >= policy.tenant_max_inflight:
        return
    where = place(head, profile, loads, costs, policy)
    if where is None:
        return
    load = loads[where.pool]
    load.backlog_s += where.run_s * len(group)
    if load.free(policy.oversubscribe) <= 0:
        return  # its best pool is busy: it waits there
    load.inflight += 1
    inflight[head.tenant] = inflight.get(head.tenant, 0) + 1
    out.append(Release(group, where.pool, where.run_s))


def _due_batches(
    order: Sequence[ReadyItem], profiles: dict[str, ToolProfile], policy: SchedulingPolicy, now: float
) -> dict[str, list[list[ReadyItem]]]:
    """Batchable calls of one tool go together once the oldest has waited the window or a batch is full."""
    by_tool: dict[str, list[ReadyItem]] = {}
    for i in order:
        p = profiles.get(i.tool)
        if p is not None and p.batchable:
            by_tool.setdefault(i.tool, []).append(i)
    due: dict[str, list[list[ReadyItem]]] = {}
    for tool, items in by_tool.items():
        oldest = min(i.ready_at for i in items)
        if len(items) >= policy.max_batch or now - oldest >= policy.batch_window_s:
            due[tool] = [items[k : k + policy.max_batch] for k in range(0, len(items), policy.max_batch)]
    return due


# retries and hedges


def retry_delay(retry: int, policy: SchedulingPolicy, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: base x 2^(retry-1), capped, then moved by +- jitter of itself."""
    base = min(policy.backoff_max_s, policy.backoff_base_s * (2 ** max(0, retry - 1)))
    r = (rng or random).random()
    return max(0.0, base * (1 + policy.backoff_jitter * (2 * r - 1)))


def hedge_due(elapsed_s: float, p95_s: float | None, policy: SchedulingPolicy) -> bool:
    """A running idempotent read is late enough to duplicate: past its p95 x the factor (and a floor)."""
    if not policy.hedging or p95_s is None:
        return False
    return elapsed_s > max(policy.hedge_min_s, p95_s * policy.hedge_factor)


class HedgeBudget:
    """A token bucket: each released attempt earns `hedge_budget` of a hedge, up to `hedge_burst` saved."""

    def __init__(self, policy: SchedulingPolicy) -> None:
        self.tokens = policy.hedge_burst
        self.spent = 0

    def earn(self, released: int, policy: SchedulingPolicy) -> None:
        self.tokens = min(policy.hedge_burst, self.tokens + released * policy.hedge_budget)

    def spend(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.spent += 1
            return True
        return False
