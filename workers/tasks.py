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
from core.jobs import TUNING_CHANNEL, TUNING_SCHEDULE, ScheduleBook, queue_tuning_run
from core.logging import redact
from core.metrics import process_exited
from core.settings import Settings, get_settings
from core.types import EventType, NodeStatus, ToolResult, ToolStatus
from tools import CATALOG, ToolContext, load_tool_modules
from workers.celery_app import PREVIEW_TASK, RUN_BATCH, RUN_NODE, SCHEDULED_TASK, TUNING_TASK, app

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


def _cancel_checker(rt: WorkerRuntime, task_ids: list[str], run_ids: list[str], deadline: float) -> Any:
    """True once the task or this attempt is cancelled (checked at most every 0.5 s), or past the soft
    deadline: how a tool on the threads pool, where Celery's time limits do not reach, stops in time."""
    last = [0.0, False]
    flags = [*(keys.CANCEL_FLAG + t for t in task_ids), *(keys.CANCEL_RUN + r for r in run_ids)]

    def is_cancelled() -> bool:
        if time.monotonic() > deadline:
            return True
        now = time.monotonic()
        if now - last[0] > 0.5:
            last[0] = now
            with contextlib.suppress(redis.RedisError):
                last[1] = bool(rt.redis.exists(*flags))
        return bool(last[1])

    return is_cancelled


# errors that may pass on their own: a retry is worth it
_TRANSIENT = (ConnectionError, TimeoutError, redis.ConnectionError, redis.TimeoutError)


def _start(rt: WorkerRuntime, run_id: str, worker: str) -> tuple[Any, str | None]:
    """Start one attempt. Returns (row, None) to run it, or (row or None, outcome) when it must not run."""
    row, starts = rt.store.start_node_run(run_id, worker)
    if row is None:
        log.info("attempt already ended; duplicate delivery ignored", run_id=run_id)
        return None, "duplicate"
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
        log.error("poison node failed", task_id=row.task_id, node_id=row.node_id, starts=starts)
        return row, "poison"
    return row, None


def _guarded(tool: str, soft_s: float, call: Any) -> list[ToolResult]:
    """Run the tool call; turn a timeout or an exception into error results (transient where it may pass)."""
    try:
        return list(call())
    except SoftTimeLimitExceeded:
        return [ToolResult(status=ToolStatus.ERROR, summary=f"{tool} timed out after {soft_s:g}s", transient=True)]
    except Exception as exc:
        log.error("tool raised", tool=tool, error=repr(exc), tb=traceback.format_exc(limit=5))
        # an exception text can carry a connection string; it goes into events and answers masked
        message = redact(f"{tool} failed: {type(exc).__name__}: {exc}")
        return [ToolResult(status=ToolStatus.ERROR, summary=message, transient=isinstance(exc, _TRANSIENT))]


def execute_node(run_id: str, worker: str, soft_s: float | None = None) -> str:
    """Run one node attempt. Idempotent: an attempt that already ended is not run again."""
    return execute_batch([run_id], worker, soft_s)[0]


def execute_batch(run_ids: list[str], worker: str, soft_s: float | None = None) -> list[str]:
    """Run attempts of one tool together (a batch is one message); each starts and ends on its own."""
    rt = runtime()
    started: list[Any] = []
    outcomes: dict[str, str] = {}
    structlog.contextvars.bind_contextvars(run_ids=run_ids)
    for run_id in run_ids:
        row, outcome = _start(rt, run_id, worker)
        if outcome is not None:
            outcomes[run_id] = outcome
        elif row is not None:
            started.append(row)
    if started:
        tool = started[0].tool
        # a tool's log lines carry the task and node they ran for (JSON logs: fields of each line)
        structlog.contextvars.bind_contextvars(
            task_id=started[0].task_id if len(started) == 1 else sorted({r.task_id for r in started}),
            node_id=started[0].node_id if len(started) == 1 else [r.node_id for r in started],
            tool=tool,
        )
        spec = CATALOG.get(tool)
        soft = soft_s or (spec.timeout_s if spec else 60.0)
        deadline = time.monotonic() + soft
        task_ids = sorted({r.task_id for r in started})
        checker = _cancel_checker(rt, task_ids, [r.id for r in started], deadline)
        ctx = ToolContext(settings=rt.settings, is_cancelled=checker, _redis=rt.redis, worker=worker)
        if spec is None:
            results = [ToolResult(status=ToolStatus.ERROR, summary=f"tool {tool!r} is not in this worker's catalog")]
        elif len(started) == 1:
            results = _guarded(tool, soft, lambda: [spec.run(started[0].args, ctx)])
        else:
            results = _guarded(tool, soft, lambda: spec.run_batch([r.args for r in started], ctx))
        if len(results) != len(started):  # one error for the whole batch
            results = [results[0]] * len(started)
        timed_out = time.monotonic() > deadline
        for row, result in zip(started, results, strict=True):
            cancelled = spec is not None and not timed_out and checker()
            if timed_out and result.status != ToolStatus.ERROR:
                result = ToolResult(
                    status=ToolStatus.ERROR, summary=f"{tool} timed out after {soft:g}s", transient=True
                )
            error = result.summary if result.status == ToolStatus.ERROR else None
            _finish(rt, row.id, row.task_id, row.node_id, row.attempt, result, error, cancelled=cancelled)
            outcomes[row.id] = "cancelled" if cancelled else result.status.value
    return [outcomes[r] for r in run_ids]


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
def run_node(self: Any, run_id: str, soft_s: float | None = None) -> str:
    return execute_node(run_id, self.request.hostname or socket.gethostname(), soft_s)


@app.task(name=RUN_BATCH, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_batch(self: Any, run_ids: list[str], soft_s: float | None = None) -> list[str]:
    return execute_batch(run_ids, self.request.hostname or socket.gethostname(), soft_s)


@app.task(name=PREVIEW_TASK, bind=True, ignore_result=False, soft_time_limit=60, time_limit=70)
def preview_write(self: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A write tool's preview, run where the write would run: it reads the target's current state and
    changes nothing. The approval gate waits for this result and shows it to the approver."""
    rt = runtime()
    spec = CATALOG.get(tool)
    if spec is None:
        result = ToolResult(status=ToolStatus.ERROR, summary=f"tool {tool!r} is not in this worker's catalog")
    else:
        worker = self.request.hostname or socket.gethostname()
        try:
            result = spec.preview(args, ToolContext(settings=rt.settings, _redis=rt.redis, worker=worker))
        except Exception as exc:  # a preview that breaks says so; the approver sees why
            result = ToolResult(status=ToolStatus.ERROR, summary=f"preview failed: {type(exc).__name__}: {exc}")
    return result.model_dump(mode="json")


@app.task(name="opsgraph.ping", ignore_result=False)
def ping() -> str:
    """A bare Celery round trip (the dispatch benchmark's baseline, and a liveness probe)."""
    return "pong"


def _first_in_slot(rt: WorkerRuntime, schedule: str, slot: int | None) -> bool:
    """Whether this firing is the first of its slot; a second one (two schedulers, a redelivery) is counted."""
    if slot is None or ScheduleBook(rt.store).claim_slot(schedule, slot):
        return True
    with contextlib.suppress(redis.RedisError):
        rt.redis.incr(keys.DUPLICATE_SLOTS)
    log.warning("schedule slot already fired; ignored", schedule=schedule, slot=slot)
    return False


@app.task(name=SCHEDULED_TASK)
def submit_scheduled(
    name: str,
    goal: str,
    inputs: dict[str, Any] | None = None,
    tenant: str = "default",
    priority: int = 5,
    slot: int | None = None,
) -> str | None:
    """A beat entry fired: the task goes into the database as queued; the API's orchestrator picks it up."""
    rt = runtime()
    if not _first_in_slot(rt, name, slot):
        return None
    task = rt.store.create_task(goal, inputs=inputs or {}, source="schedule", tenant=tenant, priority=priority)
    if slot is not None:
        ScheduleBook(rt.store).set_ref(name, slot, task.id)
    rt.bus.wake_orchestrator(task.id)
    log.info("scheduled task queued", schedule=name, task_id=task.id, slot=slot)
    return task.id


@app.task(name=TUNING_TASK)
def submit_tuning(slot: int | None = None) -> str | None:
    """The tuner's interval came: a tuning run is queued; the API's tuning runner runs it."""
    rt = runtime()
    if not _first_in_slot(rt, TUNING_SCHEDULE, slot):
        return None
    run = queue_tuning_run(rt.store, "schedule")
    if slot is not None:
        ScheduleBook(rt.store).set_ref(TUNING_SCHEDULE, slot, run.id)
    with contextlib.suppress(redis.RedisError):
        rt.redis.publish(TUNING_CHANNEL, run.id)
    log.info("tuning run queued", run_id=run.id, slot=slot)
    return run.id


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
    if any(q.startswith("gpu") for q in queues if not q.endswith(".dq2")):  # .dq2: the worker's own queue
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


@signals.task_prerun.connect
def _on_task_prerun(**_: Any) -> None:
    """Each Celery task logs with its own ids only: what the previous task bound is cleared."""
    structlog.contextvars.clear_contextvars()


@signals.worker_process_init.connect
def _on_worker_process_init(**_: Any) -> None:
    """A prefork child connects (database, Redis, tool catalog) when it starts, not on its first node: a
    wide DAG's first nodes would otherwise each wait for a cold child (~1 s each on 2 cores, measured)."""
    runtime()


@signals.worker_process_shutdown.connect
def _on_worker_process_shutdown(pid: int | None = None, **_: Any) -> None:
    process_exited(pid or os.getpid())  # a recycled pool child: its live gauges go, its counters stay


@signals.worker_shutdown.connect
def _on_worker_shutdown(**_: Any) -> None:
    _heartbeat.halt()
    process_exited(os.getpid())
