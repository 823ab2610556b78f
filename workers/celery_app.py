"""The Celery application. Pools are queues of the same name; the orchestrator, not broker priorities,
decides what is released to which queue and when."""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from core.settings import Settings, get_settings

RUN_NODE = "opsgraph.run_node"
RUN_BATCH = "opsgraph.run_batch"
SCHEDULED_TASK = "opsgraph.submit_scheduled"
TUNING_TASK = "opsgraph.submit_tuning"
PREVIEW_TASK = "opsgraph.preview_write"  # what a write would do, read on its pool for the person approving it


def make_celery(settings: Settings) -> Celery:
    app = Celery("opsgraph", broker=settings.redis_url, backend=settings.redis_url)
    transport = {"visibility_timeout": settings.visibility_timeout_s}
    # the broker redelivers an unacked message after the visibility timeout: it must exceed every hard
    # timeout, or a long tool would run twice while still running (checked at start, see check_visibility)
    app.conf.update(
        task_queues=[Queue(p) for p in settings.pools],
        task_default_queue="cpu",
        # at-least-once: ack after the tool ran; a worker that dies mid-tool puts its message back
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_direct=True,  # each worker also consumes its own queue: a hedge goes to a chosen worker
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        visibility_timeout=settings.visibility_timeout_s,
        result_expires=3600,
        task_ignore_result=True,  # results live in the database, not the result backend
        task_serializer="json",
        accept_content=["json"],
        worker_send_task_events=True,  # Flower and `celery events` work against our workers
        # no "task-sent" events: each would be a second publish per release (half the send cost, measured);
        # Flower still sees every task from the workers' own events (received, started, succeeded)
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        timezone="UTC",
        imports=["workers.tasks"],
    )
    app.conf.opsgraph_settings = settings
    return app


# Celery's own CLI (`celery -A workers.celery_app`) needs a module-level app; opsgraph code receives it.
app = make_celery(get_settings())
