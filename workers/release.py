"""The release loop: the orchestrator's ready set, released to the pools by policy.

Ready attempts wait in the database (status ready), not on a broker queue, so the order in which they run
is the policy's, not the broker's. One loop per orchestrator process reads the ready set and what is in
flight, asks workers/scheduling.py which attempts go where, claims each with a conditional update (two
loops never send the same attempt) and sends it. The same pass hedges stragglers and resends messages a
lost broker dropped. It runs after every dispatch step and on a short tick.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
import structlog
from celery import Celery
from celery.utils import worker_direct

from core import keys
from core.db import NodeRunRow, Store, new_id
from core.events import EventBus
from core.heartbeats import live_workers
from core.policy import SchedulingPolicy
from core.settings import Settings
from core.types import Effect, EventType, NodeStatus
from tools import Toolset
from tools.base import ToolSpec
from workers.celery_app import RUN_BATCH, RUN_NODE
from workers.scheduling import (
    CostModel,
    FifoClock,
    HedgeBudget,
    PoolLoad,
    ReadyItem,
    Release,
    ToolProfile,
    allowed_pools,
    decide_releases,
    hedge_due,
)

log = structlog.get_logger(__name__)

_LEARN_FROM_S = 86_400.0  # at start, the cost model reads the last day's run times
_LEARN_EVERY_S = 0.5  # then what finished since, at most this often (not on every pass)


def profile_of(spec: ToolSpec | None, name: str) -> ToolProfile:
    if spec is None:
        return ToolProfile(name)
    return ToolProfile(
        name=spec.name,
        pool=spec.pool,
        cpu_fallback=spec.cpu_fallback,
        hedgeable=spec.idempotent and spec.effect == Effect.READ,
        batchable=spec.batchable,
        hint_s=spec.cost_hint_s,
    )


def timeouts(spec: ToolSpec | None, policy: SchedulingPolicy, tool: str) -> tuple[float, float]:
    """(soft, hard) seconds of one attempt: the policy's override, else the tool's own timeout (+5 s hard)."""
    o = policy.override(tool)
    soft = o.soft_timeout_s or (spec.timeout_s if spec else 60.0)
    hard = max(o.hard_timeout_s or soft + 5.0, soft)
    return soft, hard


def check_visibility(settings: Settings, toolset: Toolset) -> None:
    """The broker hands an unacknowledged message to another worker after the visibility timeout, so it must
    be longer than any attempt may run (every tool's hard timeout, with the policy's overrides)."""
    policy = settings.scheduling_policy
    longest = max((timeouts(spec, policy, spec.name)[1] for spec in toolset), default=0.0)
    if settings.visibility_timeout_s <= longest:
        raise ValueError(
            f"OPSGRAPH_VISIBILITY_TIMEOUT_S={settings.visibility_timeout_s} must exceed the longest hard timeout "
            f"({longest:g}s): a running attempt would otherwise be delivered twice"
        )


class ReleaseLoop:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        celery: Celery,
        toolset: Toolset,
        redis_client: redis.Redis,
        policy: Callable[[], SchedulingPolicy],
        *,
        tick_s: float = 0.25,
    ) -> None:
        self.settings = settings
        self.store = store
        self.bus = bus
        self.celery = celery
        self.toolset = toolset
        self.redis = redis_client
        self.policy = policy
        self.tick_s = tick_s
        first = policy()
        self.costs = CostModel(first.ewma_alpha)
        self.clock = FifoClock(first.guard_share, first.guard_halflife)
        self.budget = HedgeBudget(first)
        self._turns: dict[str, float] = {}
        self._remaining: dict[str, float] = {}  # task -> estimated seconds of its nodes not ended
        self._typical = (1.0, 0)  # running mean of released estimates: the unit of the starvation slack
        self._learned_until = time.time() - _LEARN_FROM_S
        self._learned_at = 0.0
        self._workers: tuple[float, list[dict[str, Any]]] = (0.0, [])
        self._seen: dict[str, float] = {}  # worker -> when this process last saw its heartbeat (monotonic)
        self._born = time.monotonic()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # what the decision needs

    def profile(self, tool: str) -> ToolProfile:
        return profile_of(self.toolset.get(tool), tool)

    def allowed(self, tool: str, pinned: str | None, policy: SchedulingPolicy) -> tuple[str, ...]:
        return allowed_pools(
            self.profile(tool), self.settings.pools, override=policy.override(tool).pools, node_pool=pinned or None
        )

    def estimate(self, tool: str, pinned: str | None = None, args: dict[str, Any] | None = None) -> float:
        """Expected seconds of a call: what its arguments say (ToolSpec.cost_fn), else the cost model's
        estimate for the tool on its preferred pool."""
        spec = self.toolset.get(tool)
        hint = spec.estimate(args) if spec is not None and args is not None else None
        if hint is not None:
            return hint
        policy = self.policy()
        return self.costs.expected(self.profile(tool), self.allowed(tool, pinned, policy)[0], policy)

    def set_remaining(self, task_id: str, seconds: float | None) -> None:
        with self._lock:
            if seconds is None:
                self._remaining.pop(task_id, None)
            else:
                self._remaining[task_id] = seconds

    def live_workers(self) -> list[dict[str, Any]]:
        at, workers = self._workers
        if time.monotonic() - at > 1.0:
            try:
                workers = live_workers(self.redis)
            except redis.RedisError as exc:  # keep the last view: losses wait until Redis answers again
                log.warning("release loop cannot read heartbeats", error=str(exc))
            now = time.monotonic()
            self._workers = (now, workers)
            self._seen.update({w["hostname"]: now for w in workers if w.get("hostname")})
        return workers

    def worker_lost(self, hostname: str) -> bool:
        """Not seen by this process for WORKER_LOST_AFTER_S. Judged by this process's own sightings, not by a
        missing key alone: a Redis restarted empty has no heartbeat keys until the workers' next beat, and
        that must not turn every running attempt into a lost one."""
        self.live_workers()
        last = self._seen.get(hostname, self._born)
        return time.monotonic() - last > self.settings.worker_lost_after_s

    def capacities(self, workers: list[dict[str, Any]], policy: SchedulingPolicy) -> dict[str, int]:
        caps = dict.fromkeys(self.settings.pools, 0)
        for w in workers:
            for q in w.get("queues") or []:
                if q in caps:
                    caps[q] += int(w.get("concurrency") or 1)
        for pool, cap in policy.pool_max_inflight.items():
            if pool in caps:
                caps[pool] = min(caps[pool], cap)
        return caps

    def _learn(self) -> None:
        self._learned_at = time.monotonic()
        for row in self.store.finished_since(self._learned_until):
            self._learned_until = max(self._learned_until, row.finished_at or 0.0)
            ok = row.status in (NodeStatus.SUCCEEDED.value, NodeStatus.FAILED.value)
            if ok and row.run_s is not None and not row.batch_id and row.pool in self.settings.pools:
                self.costs.observe(row.tool, row.pool, row.run_s, row.worker or "")

    # the pass

    def pump(self) -> int:
        """One pass: learn, release what policy says, hedge stragglers, resend dropped messages."""
        with self._lock:
            policy = self.policy()
            self.clock.share = policy.guard_share  # a new policy version is live on the next pass
            now = time.time()
            if time.monotonic() - self._learned_at > _LEARN_EVERY_S:
                self._learn()
            open_rows = self.store.runs_with_status(
                NodeStatus.READY, NodeStatus.PENDING, NodeStatus.QUEUED, NodeStatus.RUNNING
            )
            ready = sorted(
                (r for r in open_rows if r.status == NodeStatus.READY.value), key=lambda r: (r.created_at, r.id)
            )
            inflight = [r for r in open_rows if r.status != NodeStatus.READY.value]
            workers = self.live_workers()
            caps = self.capacities(workers, policy)
            loads = {p: PoolLoad(p, caps[p]) for p in self.settings.pools}
            tenants: Counter[str] = Counter()
            for r in inflight:
                load = loads.get(r.pool)
                if load is not None:
                    load.inflight += 1
                    elapsed = now - r.started_at if r.started_at else 0.0
                    load.backlog_s += max(0.0, (r.est_s or self.estimate(r.tool)) - elapsed)
                tenants[r.tenant] += 1
            items = [self._item(r, policy, caps) for r in ready]
            releases = decide_releases(
                items,
                loads,
                {i.tool: self.profile(i.tool) for i in items},
                self.costs,
                policy,
                now,
                typical_s=self._typical[0],
                tenant_inflight=dict(tenants),
            )
            rows = {r.id: r for r in ready}
            # forget what left the ready set some other way (cancelled) and tasks with nothing left here
            self._turns = {k: v for k, v in self._turns.items() if k in rows}
            active = {r.task_id for r in ready} | {r.task_id for r in inflight}
            self._remaining = {k: v for k, v in self._remaining.items() if k in active}
            self._send_all(self._claim(releases, rows), policy)
            self.budget.earn(len(releases), policy)
            self._hedge(inflight, workers, policy, now)
            self._resend_stale(inflight, loads, policy, now)
            return len(releases)

    def _item(self, row: NodeRunRow, policy: SchedulingPolicy, caps: dict[str, int]) -> ReadyItem:
        allowed = self.allowed(row.tool, row.pool, policy)
        est = row.est_s if row.est_s is not None else self.estimate(row.tool, row.pool)
        turn = self._turns.get(row.id)
        if turn is None:
            turn = self._turns[row.id] = self.clock.turn(
                allowed[0], row.created_at, est, max(1, caps.get(allowed[0], 1))
            )
        return ReadyItem(
            key=row.id,
            task_id=row.task_id,
            tool=row.tool,
            allowed=allowed,
            ready_at=row.created_at,
            tenant=row.tenant,
            priority=row.priority,
            task_remaining_s=self._remaining.get(row.task_id, est),
            est_s=est,
            not_before=row.not_before or 0.0,
            fifo_turn=turn,
        )

    def _claim(self, releases: list[Release], rows: dict[str, NodeRunRow]) -> list[tuple[list[NodeRunRow], str | None]]:
        """Claim the released attempts, one statement per pool (or batch); the messages to send, in the
        order the policy released them."""
        planned = [(rel, new_id() if len(rel.items) > 1 else None) for rel in releases]
        groups: dict[tuple[str, str | None], list[str]] = {}
        for rel, batch_id in planned:
            groups.setdefault((rel.pool, batch_id), []).extend(i.key for i in rel.items)
            for item in rel.items:
                self._turns.pop(item.key, None)
                mean, n = self._typical
                self._typical = (mean + (item.est_s - mean) / (n + 1), n + 1)
        claimed: set[str] = set()
        for (pool, batch_id), ids in groups.items():
            claimed |= self.store.claim_ready(ids, pool=pool, queue=pool, batch_id=batch_id)
        messages = []
        for rel, batch_id in planned:
            got = [rows[i.key] for i in rel.items if i.key in claimed]
            for row in got:
                row.pool, row.queue, row.batch_id, row.status = rel.pool, rel.pool, batch_id, NodeStatus.PENDING.value
            if got:
                messages.append((got, batch_id if len(got) > 1 else None))
        return messages

    def _send_all(
        self, messages: list[tuple[list[NodeRunRow], str | None]], policy: SchedulingPolicy, *, resend: bool = False
    ) -> None:
        """Announce, send and stamp attempts: one transaction for the events (first, so a stream never shows
        a node started before it was queued), one broker connection, one transaction for the stamps."""
        if not messages:
            return
        events: list[tuple[str, str | EventType, dict[str, Any] | None]] = []
        for rows, batch_id in messages:
            extra: dict[str, Any] = {"batch": batch_id, "batch_size": len(rows)} if batch_id else {}
            for r in rows:
                data: dict[str, Any] = {
                    "node_id": r.node_id,
                    "attempt": r.attempt,
                    "tool": r.tool,
                    "pool": r.pool,
                    "queue": r.queue,
                }
                events.append((r.task_id, EventType.NODE_QUEUED, {**data, **extra}))
        self.bus.emit_many(events)
        sent_at = time.time()
        with self.celery.producer_or_acquire() as producer:
            for rows, batch_id in messages:
                soft, hard = timeouts(self.toolset.get(rows[0].tool), policy, rows[0].tool)
                single = batch_id is None
                self.celery.send_task(
                    RUN_NODE if single else RUN_BATCH,
                    args=[rows[0].id if single else [r.id for r in rows], soft],
                    queue=rows[0].queue,
                    task_id=rows[0].id if single else batch_id,
                    soft_time_limit=soft,
                    time_limit=hard,
                    producer=producer,
                )
        self.store.mark_nodes_queued([r.id for rows, _ in messages for r in rows], sent_at, resent=resend)

    def send(self, row: NodeRunRow, policy: SchedulingPolicy | None = None, *, resend: bool = False) -> None:
        """Hand one attempt to the broker; its id is the message id and the idempotency key."""
        self._send_all([([row], None)], policy or self.policy(), resend=resend)

    def resend_if_pending(self, row: NodeRunRow) -> None:
        """Reconcile's repair of an attempt claimed but never sent (its orchestrator stopped in between).
        Under the loop's lock, so an attempt this loop is sending right now is not sent twice."""
        with self._lock:
            fresh = self.store.get_node_run(row.id)
            if fresh is not None and fresh.status == NodeStatus.PENDING.value:
                self.send(fresh)

    def _hedge(
        self, inflight: list[NodeRunRow], workers: list[dict[str, Any]], policy: SchedulingPolicy, now: float
    ) -> None:
        """An idempotent read running past its p95 x factor gets a duplicate on another worker of its pool
        that has a free slot; the first result wins (the dispatcher cancels the other)."""
        if not policy.hedging:
            return
        hedged = {(r.task_id, r.node_id) for r in inflight if r.hedge_of}
        busy = Counter(r.worker for r in inflight if r.status == NodeStatus.RUNNING.value)
        for row in inflight:
            if row.status != NodeStatus.RUNNING.value or not row.started_at or row.hedge_of or row.batch_id:
                continue
            if (row.task_id, row.node_id) in hedged or policy.override(row.tool).hedge is False:
                continue
            if not self.profile(row.tool).hedgeable:
                continue
            p95 = self.costs.p95(row.tool, row.pool, policy.hedge_min_samples)
            if not hedge_due(now - row.started_at, p95, policy):
                continue
            target = next(
                (
                    w["hostname"]
                    for w in workers
                    if row.pool in (w.get("queues") or [])
                    and w.get("hostname") != row.worker
                    and busy[w.get("hostname")] < int(w.get("concurrency") or 1)
                ),
                None,
            )
            # at most one hedge per attempt, even after its twin ended (the dispatcher settles the pair later)
            if target is None or self.store.has_hedge(row.id) or not self.budget.spend():
                continue
            busy[target] += 1
            hedged.add((row.task_id, row.node_id))
            twin = self.store.create_node_run(
                row.task_id,
                row.node_id,
                tool=row.tool,
                args=row.args,
                pool=row.pool,
                queue=worker_direct(target).name,
                tenant=row.tenant,
                priority=row.priority,
                est_s=row.est_s,
                hedge_of=row.id,
            )
            self.bus.emit(
                row.task_id,
                EventType.NODE_HEDGED,
                {
                    "node_id": row.node_id,
                    "attempt": twin.attempt,
                    "of_attempt": row.attempt,
                    "slow_worker": row.worker,
                    "worker": target,
                    "elapsed_s": round(now - row.started_at, 3),
                    "p95_s": round(p95 or 0.0, 3),
                },
            )
            self.send(twin, policy)

    def _resend_stale(
        self, inflight: list[NodeRunRow], loads: dict[str, PoolLoad], policy: SchedulingPolicy, now: float
    ) -> None:
        """A message queued long ago that no worker started while its pool had room was lost with the broker
        (a Redis restart without persistence): send the same attempt again. A duplicate is harmless, since
        a worker starts an attempt only once."""
        for row in inflight:
            if row.status != NodeStatus.QUEUED.value or not row.queued_at:
                continue
            load = loads.get(row.pool)
            if load is None or load.capacity == 0 or now - row.queued_at < policy.requeue_after_s:
                continue
            running = sum(1 for r in inflight if r.pool == row.pool and r.status == NodeStatus.RUNNING.value)
            if running >= load.capacity:
                continue  # the pool is busy: the message is just waiting its turn
            log.warning("resending an attempt no worker took", run_id=row.id, queued_s=round(now - row.queued_at))
            self.send(row, policy, resend=True)  # a batch's member goes alone: each attempt starts once

    # lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="release-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.pump()
            except Exception as exc:  # the loop must outlive a bad pass (a DB or Redis hiccup)
                log.warning("release pass failed", error=repr(exc))

    def cancel_run(self, row: NodeRunRow, reason: str) -> bool:
        """End one open attempt cooperatively: its row is cancelled; a running tool sees the flag and stops."""
        self.redis.set(keys.CANCEL_RUN + row.id, "1", ex=3600)
        return self.store.finish_node_run(row.id, NodeStatus.CANCELLED, error=reason)
