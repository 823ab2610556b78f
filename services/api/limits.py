"""Per-key limits: a rate limit on every request (cheap reads and writes apart) and a cap on open event streams.

The rate limiter is the `limits` library's sliding-window counter. Its counters live in Redis by default, so
every API process counts against the same budget; `rate_limit_storage=memory` keeps them in the process (one
API process, or a benchmark without Redis). It runs as ASGI middleware, before authentication and before any
body is read, so a flood costs one Redis round trip per request and also bounds guesses at credentials."""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis
import structlog
from limits import RateLimitItem, parse_many
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.storage import storage_from_string
from starlette.types import ASGIApp, Receive, Scope, Send

from core import keys
from core.errors import LimitReached, RunError
from core.settings import Settings
from services.api.errors import error_body

log = structlog.get_logger(__name__)

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# probes and the scrape are never limited: a load balancer or Prometheus must see a busy API as it is
UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def caller_key(scope: Scope) -> str:
    """Whom a request counts against: the authenticated principal when an outer layer has set one, else a digest
    of the credential (the same key always lands in the same bucket; the secret is never stored), else the
    client address."""
    principal = (scope.get("state") or {}).get("principal")
    if principal is not None:
        return f"principal:{principal.id}"
    for name, value in scope.get("headers") or []:
        if name == b"authorization" and value:
            return "credential:" + hashlib.sha256(value).hexdigest()[:32]
    client = scope.get("client")
    return f"address:{client[0] if client else 'unknown'}"


@dataclass(frozen=True)
class Refusal:
    kind: str  # read | write
    limit: str
    retry_after_s: int


class RateLimits:
    """The configured per-key limits and where they are counted."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.rate_limit_enabled
        self.items: dict[str, list[RateLimitItem]] = {
            "read": parse_many(settings.rate_limit_reads),
            "write": parse_many(settings.rate_limit_writes),
        }
        if settings.rate_limit_storage == "memory":
            storage = storage_from_string("async+memory://")
        else:
            storage = storage_from_string(
                "async+" + settings.redis_url,
                implementation="redispy",
                key_prefix=keys.RATE_LIMIT_PREFIX,
                socket_timeout=1.0,
                socket_connect_timeout=1.0,
            )
        self.limiter = SlidingWindowCounterRateLimiter(storage)
        self._storage_errors = 0

    @staticmethod
    def kind_of(method: str) -> str:
        return "read" if method in READ_METHODS else "write"

    async def hit(self, kind: str, key: str) -> Refusal | None:
        """Count one request; a Refusal if it is over any of its class's limits. Fails open when the storage is
        away: Redis down already makes the API answer 503 where it matters, and a limiter must not add an outage."""
        try:
            for item in self.items[kind]:
                if not await self.limiter.hit(item, kind, key):
                    stats = await self.limiter.get_window_stats(item, kind, key)
                    retry = max(1, math.ceil(stats.reset_time - time.time()))
                    return Refusal(kind, str(item), retry)
        except Exception as exc:
            self._storage_errors += 1
            if self._storage_errors == 1 or self._storage_errors % 1000 == 0:
                log.warning("rate limiter storage unavailable; allowing", error=type(exc).__name__)
        return None


class RateLimitMiddleware:
    """429 `rate_limited` with Retry-After for a request over its key's limit; the route never runs."""

    def __init__(self, app: ASGIApp, limits: RateLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.limits.enabled or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        refusal = await self.limits.hit(self.limits.kind_of(scope["method"]), caller_key(scope))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            error_body(
                "rate_limited",
                f"over this key's {refusal.kind} limit ({refusal.limit}); retry in {refusal.retry_after_s} s",
                {"class": refusal.kind, "limit": refusal.limit},
            )
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(refusal.retry_after_s).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# a stream whose holder has not refreshed its slot for this long is gone (a killed API process)
STREAM_SLOT_TTL_S = 60
STREAM_SLOT_REFRESH_S = 20

_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class StreamSlots:
    """A cap on the event streams one key holds open, counted in Redis (a sorted set of slot ids scored by the
    last refresh), so it holds across API processes and a crashed process's slots lapse."""

    def __init__(self, client: redis.Redis, cap: int) -> None:
        self.client = client
        self.cap = cap

    def acquire(self, owner: str) -> str:
        slot = uuid.uuid4().hex
        now = time.time()
        try:
            ok = self.client.eval(
                _ACQUIRE,
                1,
                keys.EVENT_STREAMS + owner,
                str(now - STREAM_SLOT_TTL_S),
                str(self.cap),
                str(now),
                slot,
                str(2 * STREAM_SLOT_TTL_S),
            )
        except redis.RedisError as exc:
            raise RunError(f"cannot open an event stream: Redis unavailable ({type(exc).__name__})") from None
        if not ok:
            raise LimitReached(
                f"this key already holds {self.cap} open event streams; close one first",
                code="too_many_streams",
                retry_after_s=5,
            )
        return slot

    @staticmethod
    async def refresh(client: Any, owner: str, slot: str) -> None:
        await client.zadd(keys.EVENT_STREAMS + owner, {slot: time.time()})

    @staticmethod
    async def release(client: Any, owner: str, slot: str) -> None:
        await client.zrem(keys.EVENT_STREAMS + owner, slot)


def stream_owner(principal: Any, scope: Scope) -> str:
    """The key a stream counts against: the principal's id (the auth layer sets it), else as the rate limiter."""
    return f"principal:{principal.id}" if principal is not None else caller_key(scope)
