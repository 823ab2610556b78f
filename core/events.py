"""One stream of events: stored in the database (the truth), announced on Redis pub/sub (a wake-up only).

Readers never trust pub/sub for content: a message only says "look again", and they read the database
after the last sequence number they have. A lost message costs at most one poll interval.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import redis
import structlog

from core import keys
from core.db import Store
from core.types import Event, EventType

log = structlog.get_logger(__name__)


class EventBus:
    def __init__(self, store: Store, redis_client: redis.Redis) -> None:
        self.store = store
        self.redis = redis_client

    def emit(self, task_id: str, type: str | EventType, data: dict[str, Any] | None = None) -> Event:
        return self.emit_many([(task_id, type, data)])[0]

    def emit_many(self, events: list[tuple[str, str | EventType, dict[str, Any] | None]]) -> list[Event]:
        """Several events in one transaction; each task is woken once, with its newest seq."""
        stored = self.store.append_events(events)
        for task_id, seq in {e.task_id: e.seq for e in stored}.items():
            self.announce(task_id, seq)
        return stored

    def announce(self, task_id: str, seq: int = 0) -> None:
        try:
            self.redis.publish(keys.task_channel(task_id), json.dumps({"seq": seq}))
        except redis.RedisError as exc:  # the database has it; readers poll
            log.warning("event announce failed", task_id=task_id, error=str(exc))

    def wake_orchestrator(self, task_id: str) -> None:
        with contextlib.suppress(redis.RedisError):
            self.redis.publish(keys.TASKS_CHANNEL, task_id)


class TaskWatcher:
    """Blocks until something about one task may have changed, or the timeout passes."""

    def __init__(self, redis_client: redis.Redis, task_id: str) -> None:
        self._channel = keys.task_channel(task_id)
        self._pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
        self._subscribed = False

    def wait(self, timeout: float) -> bool:
        """Without Redis it waits the whole timeout and says "look anyway" (the database is the truth)."""
        try:
            if not self._subscribed:
                self._pubsub.subscribe(self._channel)
                self._subscribed = True
            msg = self._pubsub.get_message(timeout=timeout)
        except redis.RedisError:
            self._subscribed = False  # subscribe again once Redis is back
            time.sleep(timeout)
            return False
        if msg is None:
            return False
        # drain anything else already there: one look at the database covers them all
        with contextlib.suppress(redis.RedisError):
            while self._pubsub.get_message(timeout=0) is not None:
                pass
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pubsub.close()

    def __enter__(self) -> TaskWatcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
