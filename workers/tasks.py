"""The one Celery task every tool call goes through, and the worker's own lifecycle (heartbeat, device)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import redis
import structlog
from celery import signals
from celery.exceptions import SoftTimeLimitExceeded

from core import keys
from core.db import Store
from core.events import EventBus
from core.heartbeats import clear_heartbeat, publish_heartbeat
from core.logging import redact
from core.settings import Settings, get_settings
from core.types import EventType, NodeStatus, ToolResult, ToolStatus
from tools import CATALOG, ToolContext, load_tool_modules
from workers.celery_app import RUN_NODE, SCHEDULED_TASK, app

log = structlog.get_logger(__name__)


@dataclass
class WorkerRuntime:
    settings: Settings
    store: Store
    bus: EventBus
    redis: redis.Redis
    pid: int


_runtime: WorkerRuntime | None = None


def runtime() -> WorkerRuntime:
    """This process's connections, made after any fork (a forked child must not share its parent's)."""
    global _runtime
    if _runtime is None or _runtime.pid != os.getpid():
        settings = get_settings()
        load_tool_modules(settings.tool_modules)
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=10)
        store = Store.from_settings(settings, create=False)
        _runtime = WorkerRuntime(settings, store, EventBus(store, client), client, os.getpid())
    return _runtime


def _cancel_checker(rt: WorkerRuntime, task_id: str) -> Any:
    last = [0.0, False]

    def is_cancelled() -> bool:
        now = time.monotonic()
        if now - last[0] > 0.5:
            last[0] = now
            with contextlib.suppress(redis.RedisError):
                last[1] = bool(rt.redis.exists(keys.CANCEL_FLAG + task_id))
        return bool(last[1])

    return is_cancelled


def execute_node(run_id: str, worker: str) -> str:
    """Run one node attempt. Idempotent: an attempt that already ended is not run again."""
    rt = runtime()
    row, starts = rt.store.start_node_run(run_id, worker)
    if row is None:
        log.info("attempt already ended; duplicate delivery ignored", run_id=run_id)
        return "duplicate"
    bound = log.bind(task_id=row.task_id, node_id=row.node_id, attempt=row.attempt, tool=row.tool)
    rt.bus.emit(
        row.task_id,
        EventType.NODE_STARTED,
        {
            "node_id": row.node_id,
            "attempt": row.attempt,
            "worker": worker,
            "pool": row.pool,
            "queue": row.queue,
            "queue_wait_s": row.queue_wait_s,
            "delivery": row.deliveries,
        },
    )
    if starts > rt.settings.max_node_starts:
        poison = (
            f"poison node: started {starts} times without finishing (its worker died each time); "
            f"not run again (limit OPSGRAPH_MAX_NODE_STARTS={rt.settings.max_node_starts})"
        )
        result = ToolResult(status=ToolStatus.ERROR, summary=poison)
        _finish(rt, run_id, row.task_id, row.node_id, row.attempt, result, poison)
        bound.error("poison node failed", starts=starts)
        return "poison"
    spec = CATALOG.get(row.tool)
    if spec is None:
        result = ToolResult(status=ToolStatus.ERROR, summary=f"tool {row.tool!r} is not in this worker's catalog")
    else:
        ctx = ToolContext(settings=rt.settings, is_cancelled=_cancel_checker(rt, row.task_id), _redis=rt.redis)
        try:
            result = spec.run(row.args, ctx)
        except SoftTimeLimitExceeded:
            result = ToolResult(status=ToolStatus.ERROR, summary=f"{row.tool} timed out after {spec.timeout_s:g}s")
        except Exception as exc:
            bound.error("tool raised", error=repr(exc), tb=traceback.format_exc(limit=5))
            # an exception text can carry a connection string; it goes into events and answers masked
            message = redact(f"{row.tool} failed: {type(exc).__name__}: {exc}")
            result = ToolResult(status=ToolStatus.ERROR, summary=message)
    error = result.summary if result.status == ToolStatus.ERROR else None
    cancelled = spec is not None and ctx.is_cancelled()
    _finish(rt, run_id, row.task_id, row.node_id, row.attempt, result, error, cancelled=cancelled)
    return "cancelled" if cancelled else result.status.value


def _finish(
    rt: WorkerRuntime,
    run_id: str,
    task_id: str,
    node_id: str,
    attempt: int,
    result: ToolResult,
    error: str | None,
    *,
    cancelled: bool = False,
) -> None:
    status = NodeStatus.FAILED if result.status == ToolStatus.ERROR else NodeStatus.SUCCEEDED
    if cancelled:
        status, error = NodeStatus.CANCELLED, "task cancelled"
    if not rt.store.finish_node_run(run_id, status, result=result.model_dump(mode="json"), error=error):
        log.info("late completion ignored", run_id=run_id, node_id=node_id)
        return
    rt.bus.emit(
        task_id,
        EventType.NODE_FINISHED,
        {
            "node_id": node_id,
            "attempt": attempt,
            "status": status.value,
            "tool_status": result.status.value,
            "summary": result.summary,
        },
    )


@app.task(name=RUN_NODE, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_node(self: Any, run_id: str) -> str:
    return execute_node(run_id, self.request.hostname or socket.gethostname())


@app.task(name=SCHEDULED_TASK)
def submit_scheduled(name: str, goal: str, inputs: dict[str, Any] | None = None) -> str:
    """A beat entry fired: the task goes into the database as queued; the API's orchestrator picks it up."""
    rt = runtime()
    task = rt.store.create_task(goal, inputs=inputs or {}, source="schedule", tenant="default")
    rt.bus.wake_orchestrator(task.id)
    log.info("scheduled task queued", schedule=name, task_id=task.id)
    return task.id


# worker lifecycle: a heartbeat thread in the worker's main process


class _Heartbeat:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.hostname = ""

    def start(self, hostname: str, info: dict[str, Any]) -> None:
        settings = get_settings()
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        self.hostname = hostname

        def beat() -> None:
            while not self.stop.is_set():
                try:
                    publish_heartbeat(client, hostname, info, ttl_s=settings.worker_lost_after_s)
                except redis.RedisError as exc:
                    log.warning("heartbeat failed", error=str(exc))
                self.stop.wait(settings.worker_heartbeat_s)
            with contextlib.suppress(redis.RedisError):
                clear_heartbeat(client, hostname)

        self.thread = threading.Thread(target=beat, name="opsgraph-heartbeat", daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=5)


_heartbeat = _Heartbeat()


@signals.worker_ready.connect
def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    consumer = sender
    hostname = consumer.hostname
    queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
    device = "cpu"
    if "gpu" in " ".join(queues):
        # gpu workers run the threads pool, so CUDA is initialised in a process that never forks
        from tools.anomalies import device_name

        device = device_name()
    info = {
        "queues": queues,
        "pid": os.getpid(),
        "device": device,
        "concurrency": consumer.pool.limit if consumer.pool else None,
    }
    _heartbeat.start(hostname, info)
    log.info("worker ready", hostname=hostname, queues=queues, device=device)


@signals.worker_shutdown.connect
def _on_worker_shutdown(**_: Any) -> None:
    _heartbeat.halt()
