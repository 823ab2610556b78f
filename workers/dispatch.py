"""Release ready plan nodes onto their pools and keep them honest until they end.

The database holds every attempt; this module only reads it and moves it forward, so a restarted
orchestrator picks up where the last one stopped: nothing in flight is released twice, and an attempt
whose worker vanished is replaced by a new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import structlog
from celery import Celery

from core.db import NodeRunRow, Store
from core.events import EventBus, TaskWatcher
from core.heartbeats import is_alive
from core.plans import UnresolvedRef, resolve_refs
from core.settings import Settings
from core.types import Effect, EventType, NodeStatus, OnFailure, Plan, PlanNode, ToolResult, ToolStatus
from tools import Toolset
from workers.celery_app import RUN_NODE

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
    states: dict[str, str] = field(default_factory=dict)  # node id -> latest attempt's status


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        celery: Celery,
        toolset: Toolset,
        redis_client: redis.Redis,
        result_cache: ResultCache | None = None,
    ) -> None:
        self.result_cache = result_cache
        # per task, the attempts whose result the cache already has (or that were served from it); a task's
        # set is dropped when its DAG ends, so a long-running orchestrator does not grow with its history
        self._cached_runs: dict[str, set[str]] = {}
        self.settings = settings
        self.store = store
        self.bus = bus
        self.celery = celery
        self.toolset = toolset
        self.redis = redis_client

    def pool_for(self, node: PlanNode) -> str:
        spec = self.toolset.get(node.tool)
        pool = node.pool or (spec.pool if spec else "cpu")
        # a declared pool with no queue here falls back to cpu rather than waiting forever
        return pool if pool in self.settings.pools else "cpu"

    def release(self, task_id: str, node: PlanNode, args: dict[str, Any], *, tenant: str = "") -> NodeRunRow:
        pool = self.pool_for(node)
        spec = self.toolset.get(node.tool)
        reusable = spec is not None and spec.idempotent and spec.effect == Effect.READ and self.result_cache is not None
        if reusable and self.result_cache is not None:
            found = self.result_cache.get(tenant, TOOL_RESULTS_CATEGORY, node.tool, args)
            if found is not None:
                return self._from_cache(task_id, node, args, pool, *found)
        row = self.store.create_node_run(task_id, node.id, tool=node.tool, args=args, pool=pool, queue=pool)
        self._send(row)
        return row

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

    def _send(self, row: NodeRunRow) -> None:
        spec = self.toolset.get(row.tool)
        timeout = spec.timeout_s if spec else 60.0
        # the event first, so a stream never shows a node started before it was queued
        self.bus.emit(
            row.task_id,
            EventType.NODE_QUEUED,
            {"node_id": row.node_id, "attempt": row.attempt, "tool": row.tool, "pool": row.pool, "queue": row.queue},
        )
        sent_at = time.time()
        self.celery.send_task(
            RUN_NODE,
            args=[row.id],
            queue=row.queue,
            task_id=row.id,
            soft_time_limit=timeout,
            time_limit=timeout + 5,
        )
        self.store.mark_node_queued(row.id, sent_at)

    def _fail_attempt(self, row: NodeRunRow, status: NodeStatus, reason: str) -> None:
        result = ToolResult(status=ToolStatus.ERROR, summary=reason).model_dump(mode="json")
        if self.store.finish_node_run(row.id, status, result=result, error=reason):
            event = EventType.NODE_LOST if status == NodeStatus.LOST else EventType.NODE_FINISHED
            self.bus.emit(
                row.task_id,
                event,
                {"node_id": row.node_id, "attempt": row.attempt, "status": status.value, "summary": reason},
            )

    def reconcile(self, task_id: str, plan: Plan) -> None:
        """Repair attempts the database shows in flight: unsent, on a dead worker, or past their deadline."""
        nodes = {n.id: n for n in plan.nodes}
        now = time.time()
        for node_id, row in self.store.latest_attempts(task_id).items():
            status = NodeStatus(row.status)
            if status == NodeStatus.PENDING:
                self._send(row)  # the orchestrator stopped between writing the row and sending it
            elif status == NodeStatus.RUNNING and row.worker and not is_alive(self.redis, row.worker):
                reason = f"worker {row.worker} vanished while running attempt {row.attempt}"
                self._fail_attempt(row, NodeStatus.LOST, reason)
                starts = self.store.node_starts(task_id, node_id)
                if starts >= self.settings.max_node_starts:
                    replacement = self.store.create_node_run(
                        task_id, node_id, tool=row.tool, args=row.args, pool=row.pool, queue=row.queue
                    )
                    self._fail_attempt(
                        replacement,
                        NodeStatus.FAILED,
                        f"poison node: {starts} starts without a result (each worker died); not run again",
                    )
                elif node_id in nodes:
                    log.warning("re-running node after worker loss", task_id=task_id, node_id=node_id)
                    new = self.store.create_node_run(
                        task_id, node_id, tool=row.tool, args=row.args, pool=row.pool, queue=row.queue
                    )
                    self._send(new)
            elif status == NodeStatus.RUNNING and row.started_at:
                spec = self.toolset.get(row.tool)
                deadline = (spec.timeout_s if spec else 60.0) + 5 + _GRACE_S
                if now - row.started_at > deadline:
                    self._fail_attempt(row, NodeStatus.FAILED, f"{row.tool} passed its hard timeout ({deadline:g}s)")

    def step(self, task_id: str, plan: Plan, *, tenant: str) -> DispatchProgress:
        """Reconcile, then release every node whose dependencies have ended; report where the DAG stands."""
        self.reconcile(task_id, plan)
        latest = self.store.latest_attempts(task_id)
        states = {nid: latest[nid].status for nid in latest}
        by_id = {n.id: n for n in plan.nodes}
        stopped = any(
            states.get(n.id) == NodeStatus.FAILED.value and n.on_failure == OnFailure.STOP for n in plan.nodes
        )
        results = {nid: (r.result or {}) for nid, r in latest.items() if r.status == NodeStatus.SUCCEEDED.value}
        self._remember_results(task_id, tenant, latest)
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
            row = self.release(task_id, node, args, tenant=tenant)
            states[node.id] = row.status
            if row.status == NodeStatus.SUCCEEDED.value and row.result:
                results[node.id] = row.result
        done = all(states.get(n.id) is not None and NodeStatus(states[n.id]).final for n in by_id.values())
        return DispatchProgress(done=done, stopped=stopped, states=states)

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

    def _step_and_forget(self, task_id: str, plan: Plan, tenant: str) -> DispatchProgress:
        progress = self.step(task_id, plan, tenant=tenant)
        if progress.done:
            self._cached_runs.pop(task_id, None)
        return progress

    def run_until_progress(
        self, task_id: str, plan: Plan, *, tenant: str, max_wait_s: float = 15.0
    ) -> DispatchProgress:
        """Step, then wait until some node ends (or max_wait_s passes), and step again."""
        progress = self._step_and_forget(task_id, plan, tenant)
        if progress.done:
            return progress
        before = {k: v for k, v in progress.states.items() if NodeStatus(v).final}
        deadline = time.monotonic() + max_wait_s
        with TaskWatcher(self.redis, task_id) as watcher:
            while time.monotonic() < deadline:
                watcher.wait(timeout=1.0)
                progress = self._step_and_forget(task_id, plan, tenant)
                now_final = {k for k, v in progress.states.items() if NodeStatus(v).final}
                if progress.done or now_final - set(before):
                    return progress
        return progress
