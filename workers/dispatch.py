"""Release ready plan nodes onto their pools and keep them honest until they end.

The database holds every attempt; this module only reads it and moves it forward, so a restarted
orchestrator picks up where the last one stopped: nothing in flight is released twice, and an attempt
whose worker vanished is replaced by a new one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from core.db import NodeRunRow, deciding_attempts
from core.events import TaskWatcher
from core.plans import UnresolvedRef, resolve_refs
from core.policy import SchedulingPolicy
from core.types import (
    Effect,
    EventType,
    NodeStatus,
    OnFailure,
    Plan,
    PlanChanges,
    PlanNode,
    ToolResult,
    ToolStatus,
)
from workers.release import ReleaseLoop, timeouts
from workers.scheduling import retry_delay

log = structlog.get_logger(__name__)

_GRACE_S = 10.0
# tool results are reused by tenant, tool and arguments, whatever the request: their own cache category
TOOL_RESULTS_CATEGORY = "tools"  # beyond a tool's hard timeout before the orchestrator gives up on an attempt


class ResultCache(Protocol):
    """Where results of idempotent read tools may be reused from (memory implements it)."""

    def get(
        self, tenant: str, category: str, tool: str, args: dict[str, Any]
    ) -> tuple[dict[str, Any], float] | None: ...

    def put(self, tenant: str, category: str, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None: ...

    def invalidate_written(self, tenant: str, tool: str, args: dict[str, Any]) -> int: ...


@dataclass
class DispatchProgress:
    done: bool
    stopped: bool = False  # a node with on_failure=stop failed
    states: dict[str, str] = field(default_factory=dict)  # node id -> deciding attempt's status
    plan: Plan | None = None  # the plan as it stands (results may have grown it)
    # write nodes whose dependencies ended and that no person has decided on yet: {node_id, tool, args}; they
    # wait outside the ready set until the graph's approval gate resumes with a decision
    gated: list[dict[str, Any]] = field(default_factory=list)


def not_approved_reason(decision: Mapping[str, Any]) -> str:
    """Why a write node was skipped: its approval was rejected (by whom, why) or expired."""
    status = str(decision.get("status") or "not approved")
    if status == "expired":
        return "not approved: the approval request expired; the write was not done"
    who = f" by {decision['by']}" if decision.get("by") else ""
    why = f": {decision['reason']}" if decision.get("reason") else ""
    return f"not approved: {status}{who}{why}; the write was not done"


class Dispatcher:
    """Moves one task's DAG forward: reconciles its attempts, retries transient failures, settles hedges,
    applies the DAG changes results ask for, and puts newly ready nodes into the ready set. When they run
    and where is the release loop's decision (workers/release.py)."""

    def __init__(
        self,
        loop: ReleaseLoop,
        result_cache: ResultCache | None = None,
        *,
        validator: Callable[[Plan], Plan] | None = None,
    ) -> None:
        """`loop` releases what this puts in the ready set; its settings, store, bus, tools and Redis are
        the dispatcher's too."""
        self.loop = loop
        self.result_cache = result_cache
        # per task, the attempts whose result the cache already has (or that were served from it); a task's
        # set is dropped when its DAG ends, so a long-running orchestrator does not grow with its history
        self._cached_runs: dict[str, set[str]] = {}
        self.settings = loop.settings
        self.store = loop.store
        self.bus = loop.bus
        self.toolset = loop.toolset
        self.redis = loop.redis
        self.validator = validator
        self.rng = random.Random()

    @property
    def policy(self) -> SchedulingPolicy:
        return self.loop.policy()

    def _serve_cached(self, task_id: str, node: PlanNode, args: dict[str, Any], tenant: str) -> NodeRunRow | None:
        """The node's dependencies ended: the same idempotent read ran moments ago for this tenant? Then its
        result is recorded for the node and nothing runs (None: the node goes to the ready set)."""
        spec = self.toolset.get(node.tool)
        if self.result_cache is None or spec is None or not spec.idempotent or spec.effect != Effect.READ:
            return None
        found = self.result_cache.get(tenant, TOOL_RESULTS_CATEGORY, node.tool, args)
        if found is None:
            return None
        return self._from_cache(task_id, node, args, node.pool or spec.pool, *found)

    def _ready(
        self,
        task_id: str,
        wanted: list[tuple[str, str, dict[str, Any], str | None]],
        *,
        tenant: str,
        priority: int,
        not_before: float | None = None,
    ) -> list[NodeRunRow]:
        """Put (node id, tool, args, pinned pool) into the ready set: one transaction for the rows, one for
        their events."""
        if not wanted:
            return []
        rows = self.store.create_node_runs(
            task_id,
            [
                {
                    "node_id": node_id,
                    "tool": tool,
                    "args": args,
                    "pool": pinned or "",  # a pinned pool stays; otherwise placement chooses at release
                    "queue": "",
                    "status": NodeStatus.READY,
                    "tenant": tenant,
                    "priority": priority,
                    "est_s": self.loop.estimate(tool, pinned, args),
                    "not_before": not_before,
                }
                for node_id, tool, args, pinned in wanted
            ],
        )
        data = [
            {"node_id": r.node_id, "attempt": r.attempt, "tool": r.tool, "est_s": round(r.est_s or 0.0, 3)}
            for r in rows
        ]
        self.bus.emit_many([(task_id, EventType.NODE_READY, d) for d in data])
        return rows

    def _from_cache(
        self, task_id: str, node: PlanNode, args: dict[str, Any], pool: str, result: dict[str, Any], age_s: float
    ) -> NodeRunRow:
        """The same idempotent read ran moments ago for this tenant: record its result, run nothing."""
        row = self.store.create_node_run(task_id, node.id, tool=node.tool, args=args, pool=pool, queue="cache")
        served = {**result, "from_cache": {"age_s": round(age_s, 2)}}
        self.store.finish_node_run(row.id, NodeStatus.SUCCEEDED, result=served)
        self._cached_runs.setdefault(task_id, set()).add(row.id)
        self.bus.emit(
            task_id,
            EventType.NODE_FINISHED,
            {
                "node_id": node.id,
                "attempt": row.attempt,
                "status": NodeStatus.SUCCEEDED.value,
                "tool_status": result.get("status"),
                "summary": f"{result.get('summary')} (cached {age_s:.0f}s ago)",
                "from_cache": True,
            },
        )
        row.status, row.result = NodeStatus.SUCCEEDED.value, served  # dependents may read it at once
        return row

    def _fail_attempt(self, row: NodeRunRow, status: NodeStatus, reason: str, *, transient: bool = False) -> bool:
        result = ToolResult(status=ToolStatus.ERROR, summary=reason, transient=transient).model_dump(mode="json")
        if self.store.finish_node_run(row.id, status, result=result, error=reason):
            event = EventType.NODE_LOST if status == NodeStatus.LOST else EventType.NODE_FINISHED
            self.bus.emit(
                row.task_id,
                event,
                {"node_id": row.node_id, "attempt": row.attempt, "status": status.value, "summary": reason},
            )
            return True
        return False

    def reconcile(self, task_id: str, plan: Plan) -> None:
        """Repair attempts the database shows in flight: unsent, on a dead worker, or past their deadline."""
        nodes = {n.id: n for n in plan.nodes}
        now = time.time()
        policy = self.policy
        open_rows = self.store.open_attempts(task_id)
        self.loop.live_workers()  # refresh what the loop has seen of the heartbeats
        for row in open_rows:
            status = NodeStatus(row.status)
            if status == NodeStatus.PENDING:
                self.loop.resend_if_pending(row)  # the orchestrator stopped between claiming and sending it
            elif status == NodeStatus.RUNNING and row.worker and self.loop.worker_lost(row.worker):
                reason = f"worker {row.worker} vanished while running attempt {row.attempt}"
                if not self._fail_attempt(row, NodeStatus.LOST, reason):
                    continue
                if any(o.node_id == row.node_id and o.id != row.id for o in open_rows):
                    continue  # its hedge twin is still running: that one may yet win
                starts = self.store.node_starts(task_id, row.node_id)
                if starts >= self.settings.max_node_starts:
                    replacement = self.store.create_node_run(
                        task_id, row.node_id, tool=row.tool, args=row.args, pool=row.pool, queue=row.queue
                    )
                    self._fail_attempt(
                        replacement,
                        NodeStatus.FAILED,
                        f"poison node: {starts} starts without a result (each worker died); not run again",
                    )
                elif row.node_id in nodes:
                    log.warning("re-running node after worker loss", task_id=task_id, node_id=row.node_id)
                    wanted = [(row.node_id, row.tool, row.args, nodes[row.node_id].pool)]
                    self._ready(task_id, wanted, tenant=row.tenant, priority=row.priority)
            elif status == NodeStatus.RUNNING and row.started_at:
                _, hard = timeouts(self.toolset.get(row.tool), policy, row.tool)
                deadline = hard + _GRACE_S
                if now - row.started_at > deadline:
                    self._fail_attempt(
                        row, NodeStatus.FAILED, f"{row.tool} passed its hard timeout ({hard:g}s)", transient=True
                    )

    def step(
        self,
        task_id: str,
        plan: Plan,
        *,
        tenant: str,
        priority: int = 5,
        decisions: Mapping[str, Mapping[str, Any]] | None = None,
        fresh: bool = False,
    ) -> DispatchProgress:
        """Reconcile, settle hedges and retries, apply DAG changes, then put every node whose dependencies
        have ended into the ready set; report where the DAG stands.

        A write node is never put there on its own: it waits in `gated` until `decisions` holds a person's
        decision for it ({"status": approved | rejected | expired, "args": the approved arguments, ...}).
        Approved, it runs with the approved arguments; otherwise it is skipped with the decision as reason.
        `fresh`: the caller asked for fresh figures, so no read is served from the tool-result cache."""
        self.reconcile(task_id, plan)
        rows = self.store.node_runs(task_id)
        latest = deciding_attempts(rows)
        self._settle_hedges(rows, latest)
        self._retry(task_id, rows, latest, tenant, priority, plan)
        plan = self._apply_changes(task_id, plan, latest)
        states = {nid: latest[nid].status for nid in latest}
        by_id = {n.id: n for n in plan.nodes}
        stopped = any(
            states.get(n.id) == NodeStatus.FAILED.value and n.on_failure == OnFailure.STOP for n in plan.nodes
        )
        results = {nid: (r.result or {}) for nid, r in latest.items() if r.status == NodeStatus.SUCCEEDED.value}
        self._remember_results(task_id, tenant, latest)
        to_ready: list[tuple[str, str, dict[str, Any], str | None]] = []
        gated: list[dict[str, Any]] = []
        after_write = self._after_writes(plan)
        for node in plan.nodes:
            if node.id in states:
                continue
            if stopped:
                self._skip(task_id, node, "an earlier node failed with on_failure=stop")
                states[node.id] = NodeStatus.SKIPPED.value
                continue
            dep_states = [states.get(d) for d in node.depends_on]
            if not all(s is not None and NodeStatus(s).final for s in dep_states):
                continue
            skipped_dep = next((d for d in node.depends_on if states.get(d) == NodeStatus.SKIPPED.value), None)
            if skipped_dep:
                self._skip(task_id, node, f"dependency {skipped_dep} was skipped")
                states[node.id] = NodeStatus.SKIPPED.value
                continue
            try:
                args = resolve_refs(node.args, results)
            except UnresolvedRef as exc:
                self._skip(task_id, node, f"input unavailable: {exc}")
                states[node.id] = NodeStatus.SKIPPED.value
                continue
            spec = self.toolset.get(node.tool)
            if spec is not None and spec.effect == Effect.WRITE:
                decision = (decisions or {}).get(node.id)
                if decision is None:
                    gated.append({"node_id": node.id, "tool": node.tool, "args": args})
                    continue
                if decision.get("status") != "approved":
                    self._skip(task_id, node, not_approved_reason(decision))
                    states[node.id] = NodeStatus.SKIPPED.value
                    continue
                to_ready.append((node.id, node.tool, dict(decision.get("args") or args), node.pool))
                states[node.id] = NodeStatus.READY.value
                continue
            # a read after a write must see the state the write left, never a result from before it
            served = None if fresh or node.id in after_write else self._serve_cached(task_id, node, args, tenant)
            if served is None:
                to_ready.append((node.id, node.tool, args, node.pool))
                states[node.id] = NodeStatus.READY.value
            else:
                states[node.id] = served.status
                if served.result:
                    results[node.id] = served.result
        self._ready(task_id, to_ready, tenant=tenant, priority=priority)
        done = all(states.get(n.id) is not None and NodeStatus(states[n.id]).final for n in by_id.values())
        self.loop.set_remaining(task_id, None if done else self._remaining_s(plan, states, latest))
        if not done:
            self.loop.pump()
        return DispatchProgress(done=done, stopped=stopped, states=states, plan=plan, gated=gated)

    def _after_writes(self, plan: Plan) -> set[str]:
        """Nodes downstream of a write node (a remediation's verify checks)."""
        deps = {n.id: n.depends_on for n in plan.nodes}
        writes = {n.id for n in plan.nodes if (spec := self.toolset.get(n.tool)) and spec.effect == Effect.WRITE}
        memo: dict[str, bool] = {}

        def downstream(nid: str, seen: frozenset[str]) -> bool:
            if nid not in memo:
                memo[nid] = any(d in writes or (d not in seen and downstream(d, seen | {d})) for d in deps.get(nid, []))
            return memo[nid]

        return {nid for nid in deps if downstream(nid, frozenset({nid}))}

    def _remaining_s(self, plan: Plan, states: dict[str, str], latest: dict[str, NodeRunRow]) -> float:
        """Estimated seconds of work left in the task (SRPT's measure): nodes not ended, less time run."""
        now = time.time()
        total = 0.0
        for node in plan.nodes:
            state = states.get(node.id)
            if state is not None and NodeStatus(state).final:
                continue
            row = latest.get(node.id)
            est = (
                row.est_s
                if row is not None and row.est_s is not None
                else self.loop.estimate(node.tool, node.pool, node.args)
            )
            ran = now - row.started_at if row is not None and row.started_at else 0.0
            total += max(0.0, est - ran)
        return total

    def _settle_hedges(self, rows: list[NodeRunRow], latest: dict[str, NodeRunRow]) -> None:
        """A node decided by a success: its other open attempts (a hedge or its original) lose and stop."""
        for row in rows:
            winner = latest.get(row.node_id)
            if winner is None or winner.id == row.id or winner.status != NodeStatus.SUCCEEDED.value:
                continue
            if NodeStatus(row.status).final:
                continue
            reason = f"attempt {winner.attempt} finished first"
            if self.loop.cancel_run(row, reason):
                row.status = NodeStatus.CANCELLED.value
                self.bus.emit(
                    row.task_id,
                    EventType.NODE_FINISHED,
                    {
                        "node_id": row.node_id,
                        "attempt": row.attempt,
                        "status": NodeStatus.CANCELLED.value,
                        "summary": f"duplicate cancelled: {reason}",
                        "hedge_winner": winner.attempt,
                    },
                )

    def _retry(
        self,
        task_id: str,
        rows: list[NodeRunRow],
        latest: dict[str, NodeRunRow],
        tenant: str,
        priority: int,
        plan: Plan,
    ) -> None:
        """A transient failure of an idempotent tool is retried after an exponential backoff with jitter,
        up to the policy's retries; any other failure is final at once."""
        policy = self.policy
        pinned = {n.id: n.pool for n in plan.nodes}
        for node_id, row in list(latest.items()):
            if row.status != NodeStatus.FAILED.value or not (row.result or {}).get("transient"):
                continue
            spec = self.toolset.get(row.tool)
            if spec is None or not spec.idempotent:
                continue
            override = policy.override(row.tool).retries
            allowed = policy.retries if override is None else override
            failures = sum(
                1
                for r in rows
                if r.node_id == node_id and r.status == NodeStatus.FAILED.value and (r.result or {}).get("transient")
            )
            if failures > allowed:
                continue
            delay = retry_delay(failures, policy, self.rng)
            (new,) = self._ready(
                task_id,
                [(node_id, row.tool, row.args, pinned.get(node_id))],
                tenant=tenant,
                priority=priority,
                not_before=time.time() + delay,
            )
            latest[node_id] = new
            self.bus.emit(
                task_id,
                EventType.NODE_RETRY,
                {
                    "node_id": node_id,
                    "attempt": new.attempt,
                    "retry": failures,
                    "of": allowed,
                    "delay_s": round(delay, 3),
                    "after": row.error,
                },
            )

    def _apply_changes(self, task_id: str, plan: Plan, latest: dict[str, NodeRunRow]) -> Plan:
        """Results that ask to grow the DAG or cancel nodes not yet run: each change is validated like a plan,
        saved as a new plan version and announced; an invalid change is refused with its reasons."""
        for node_id, row in latest.items():
            if row.status != NodeStatus.SUCCEEDED.value or row.id in plan.applied:
                continue
            changes = (row.result or {}).get("plan_changes")
            if not changes:
                continue
            plan = self._grow(task_id, plan, node_id, row, PlanChanges.model_validate(changes), latest)
        return plan

    def _grow(
        self,
        task_id: str,
        plan: Plan,
        source: str,
        row: NodeRunRow,
        changes: PlanChanges,
        latest: dict[str, NodeRunRow],
    ) -> Plan:
        added: list[PlanNode] = []
        reasons: list[str] = []
        new_ids = {str(n.get("id", "")) for n in changes.add}
        for raw in changes.add:
            try:
                body = dict(raw)
                body["id"] = f"{source}.{body.get('id', '')}"
                deps = [f"{source}.{d}" if d in new_ids else d for d in body.get("depends_on") or []]
                body["depends_on"] = deps or [source]
                added.append(PlanNode.model_validate(body))
            except (ValidationError, TypeError) as exc:
                reasons.append(f"added node {raw.get('id')!r}: {exc}")
        cancel = [c for c in changes.cancel if c in {n.id for n in plan.nodes} and c not in latest]
        candidate = plan.model_copy(update={"nodes": [*plan.nodes, *added], "applied": [*plan.applied, row.id]})
        if not reasons and self.validator is not None:
            try:
                candidate = self.validator(candidate)
            except Exception as exc:  # the validator's PlanInvalid, or a model error
                reasons.extend(getattr(exc, "reasons", [str(exc)]))
        if reasons:
            refused = plan.model_copy(update={"applied": [*plan.applied, row.id]})
            self.store.save_plan(task_id, refused)
            self.bus.emit(task_id, EventType.PLAN_REJECTED, {"source": source, "reasons": reasons, "change": True})
            return refused
        for node_id in cancel:
            node = next(n for n in candidate.nodes if n.id == node_id)
            self._skip(task_id, node, f"cancelled by {source}: {changes.reason or 'its result'}")
        version = self.store.save_plan(task_id, candidate)
        self.bus.emit(
            task_id,
            EventType.PLAN_CHANGED,
            {
                "version": version,
                "source": source,
                "added": [n.id for n in added],
                "cancelled": cancel,
                "reason": changes.reason,
                "plan": candidate.model_dump(mode="json"),
            },
        )
        return candidate

    def _remember_results(self, task_id: str, tenant: str, latest: dict[str, NodeRunRow]) -> None:
        if self.result_cache is None:
            return
        seen = self._cached_runs.setdefault(task_id, set())
        for row in latest.values():
            if row.id in seen or row.status != NodeStatus.SUCCEEDED.value or not row.result:
                continue
            spec = self.toolset.get(row.tool)
            if spec is not None and spec.effect == Effect.WRITE:
                seen.add(row.id)
                try:  # a write changed what cached answers about these entities say
                    self.result_cache.invalidate_written(tenant, row.tool, row.args)
                except Exception as exc:
                    log.warning("cache not invalidated after a write", tool=row.tool, error=repr(exc))
                continue
            if spec is None or not spec.idempotent or row.result.get("from_cache"):
                continue
            seen.add(row.id)
            try:
                self.result_cache.put(tenant, TOOL_RESULTS_CATEGORY, row.tool, row.args, row.result)
            except Exception as exc:  # a cache problem never fails a task
                log.warning("tool result not cached", tool=row.tool, error=repr(exc))

    def _skip(self, task_id: str, node: PlanNode, reason: str) -> None:
        row = self.store.create_node_run(task_id, node.id, tool=node.tool, args=node.args, pool="-", queue="-")
        result = ToolResult(status=ToolStatus.NO_DATA, summary=f"skipped: {reason}").model_dump(mode="json")
        self.store.finish_node_run(row.id, NodeStatus.SKIPPED, result=result, error=reason)
        self.bus.emit(task_id, EventType.NODE_SKIPPED, {"node_id": node.id, "summary": reason})

    def _step_and_forget(
        self,
        task_id: str,
        plan: Plan,
        tenant: str,
        priority: int,
        decisions: Mapping[str, Mapping[str, Any]] | None,
        fresh: bool,
    ) -> DispatchProgress:
        progress = self.step(task_id, plan, tenant=tenant, priority=priority, decisions=decisions, fresh=fresh)
        if progress.done:
            self._cached_runs.pop(task_id, None)
        return progress

    def run_until_progress(
        self,
        task_id: str,
        plan: Plan,
        *,
        tenant: str,
        priority: int = 5,
        max_wait_s: float = 15.0,
        decisions: Mapping[str, Mapping[str, Any]] | None = None,
        fresh: bool = False,
    ) -> DispatchProgress:
        """Step, then wait until some node ends (or max_wait_s passes), and step again. Returns at once when a
        write node waits for a decision (the caller asks a person; what is in flight keeps running)."""
        progress = self._step_and_forget(task_id, plan, tenant, priority, decisions, fresh)
        if progress.done or progress.gated:
            return progress
        before = {k: v for k, v in progress.states.items() if NodeStatus(v).final}
        deadline = time.monotonic() + max_wait_s
        with TaskWatcher(self.redis, task_id) as watcher:
            while time.monotonic() < deadline:
                watcher.wait(timeout=1.0)
                progress = self._step_and_forget(task_id, progress.plan or plan, tenant, priority, decisions, fresh)
                now_final = {k for k, v in progress.states.items() if NodeStatus(v).final}
                if progress.done or progress.gated or now_final - set(before):
                    return progress
        return progress
