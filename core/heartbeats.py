"""Which workers are alive: each writes a short-lived Redis key; an expired key means a dead worker."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import redis

from core import keys


def publish_heartbeat(client: redis.Redis, hostname: str, info: dict[str, Any], ttl_s: float) -> None:
    payload = json.dumps({**info, "hostname": hostname, "ts": time.time()})
    client.set(keys.worker_key(hostname), payload, px=int(ttl_s * 1000))


def clear_heartbeat(client: redis.Redis, hostname: str) -> None:
    client.delete(keys.worker_key(hostname))


def live_workers(client: redis.Redis) -> list[dict[str, Any]]:
    out = []
    for key in client.scan_iter(match=keys.WORKER_HEARTBEAT + "*", count=200):
        raw = cast(bytes | None, client.get(key))
        if raw:
            out.append(json.loads(raw))
    return sorted(out, key=lambda w: w.get("hostname", ""))


def queue_depth(client: redis.Redis, queue: str) -> int:
    """Messages waiting on a Celery queue in the Redis transport (a list named after the queue)."""
    return int(cast(int, client.llen(queue)))
