"""Runs ops graphs for tasks in background threads, and resumes every unfinished task after a restart."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import redis
import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agents.context import OpsContext
from agents.ops_graph import build_ops_graph, cancel_open_attempts
from agents.remediation import waiting_approval
from agents.synthesis import failure_answer
from core import keys
from core.approvals import ApprovalStatus
from core.types import TaskStatus

log = structlog.get_logger(__name__)
_RECURSION_LIMIT = 10_000  # dispatch loops once per progress step; a long DAG takes many
_REDIS_PATIENCE_S = 300.0  # how long a task waits for Redis to come back before it fails


class TaskRunner:
    def __init__(self, ctx: OpsContext, *, scan_interval_s: float = 5.0) -> None:
        self.ctx = ctx
        self.graph = build_ops_graph(ctx)
        self._pool = ThreadPoolExecutor(max_workers=ctx.settings.max_running_tasks, thread_name_prefix="task")
        self._active: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._scan_interval_s = scan_interval_s
        self._listener: threading.Thread | None = None

    def start(self) -> None:
        """Resume what a previous process left unfinished, then keep watching for new tasks."""
        self.ctx.dispatcher.loop.start()  # releases the ready set of every task by policy
        self.scan()
        self._listener = threading.Thread(target=self._listen, name="task-listener", daemon=True)
        self._listener.start()

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.ctx.dispatcher.loop.stop()

    def submit(self, task_id: str) -> bool:
        with self._lock:
            if task_id in self._active or self._stop.is_set():
                return False
            self._active.add(task_id)
        self._pool.submit(self._run, task_id)
        return True

    def scan(self) -> None:
        for task in self.ctx.store.unfinished_tasks():
            self.submit(task.id)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                pubsub = self.ctx.redis.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(keys.TASKS_CHANNEL)
                last_scan = 0.0
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=1.0)
                    if msg and isinstance(msg.get("data"), bytes | str):
                        data = msg["data"]
                        self.submit(data.decode() if isinstance(data, bytes) else data)
                    if time.monotonic() - last_scan > self._scan_interval_s:
                        last_scan = time.monotonic()
                        self.scan()  # the database is the truth; pub/sub is only a shortcut
            except redis.RedisError as exc:
                log.warning("task listener lost Redis; retrying", error=str(exc))
                self._stop.wait(2.0)
            except Exception as exc:  # the listener must outlive any one bad scan
                log.error("task listener error", error=repr(exc))
                self._stop.wait(2.0)

    def _run(self, task_id: str) -> None:
        """Drive the task's graph to its end. Redis going away (a restart) is waited out: the graph resumes
        from its checkpoint when Redis answers again, instead of failing a task the database still holds."""
        bound = log.bind(task_id=task_id)
        # every log line of this thread (planner, dispatcher, release) carries the task id
        structlog.contextvars.bind_contextvars(task_id=task_id)
        waited = 0.0
        try:
            while True:
                try:
                    self._invoke(task_id)
                    return
                except redis.RedisError as exc:
                    if waited >= _REDIS_PATIENCE_S or self._stop.is_set():
                        raise
                    bound.warning("Redis unavailable; resuming the task from its checkpoint", error=str(exc))
                    self._stop.wait(2.0)
                    waited += 2.0
        except Exception as exc:
            bound.exception("task failed in the orchestrator")
            try:
                cancel_open_attempts(self.ctx, task_id)
                message = f"orchestrator error: {type(exc).__name__}: {exc}"
                self.ctx.store.set_answer(task_id, failure_answer(message))
                self.ctx.store.set_task_status(task_id, TaskStatus.FAILED, error=message)
            except Exception:
                bound.exception("could not record the failure")
        finally:
            with self._lock:
                self._active.discard(task_id)

    def _invoke(self, task_id: str) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": task_id}, "recursion_limit": _RECURSION_LIMIT}
        bound = log.bind(task_id=task_id)
        snapshot = self.graph.get_state(config)
        waiting_on = waiting_approval([i for t in snapshot.tasks for i in t.interrupts])
        if waiting_on is not None:
            # stopped at the approval gate: go on only once the request is decided, has expired or the task was
            # cancelled (the gate reads the outcome from the approvals table; the resume value only wakes it)
            approval = self.ctx.approvals.refresh(waiting_on)
            cancelled = self.ctx.store.get_task(task_id).status == TaskStatus.CANCELLED.value
            if approval.status == ApprovalStatus.PENDING and not cancelled:
                return
            bound.info("resuming task after its approval request", approval=waiting_on, status=approval.status.value)
            self.graph.invoke(Command(resume={"approval_id": waiting_on}), config, durability="sync")
        elif snapshot.next:
            bound.info("resuming task from checkpoint", next=list(snapshot.next))
            self.graph.invoke(None, config, durability="sync")
        elif not snapshot.values:
            self.graph.invoke({"task_id": task_id}, config, durability="sync")
        else:
            task = self.ctx.store.get_task(task_id)
            if not TaskStatus(task.status).terminal:
                # the graph ended but the task row did not (a crash between the two): end it now
                message = "graph ended without an outcome"
                self.ctx.store.set_answer(task_id, failure_answer(message))
                self.ctx.store.set_task_status(task_id, TaskStatus.FAILED, error=message)
