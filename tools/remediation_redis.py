"""Write tools for Redis: set an allowlisted configuration parameter, delete the keys a pattern matches.

They act only on the servers in OPSGRAPH_REDIS_WRITE_URLS, never on opsgraph's own Redis (its broker and
live events). Keys are found with SCAN, never KEYS, which would stall the server it is meant to relieve.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import redis
from pydantic import Field

from core.logging import redact
from core.settings import Settings
from core.types import Effect, ToolResult, ToolStatus
from tools._registry import CATALOG
from tools._remediation import failed, refused
from tools.base import ToolArgs, ToolContext

_SAMPLE_KEYS = 10
_SCAN_COUNT = 1000  # keys examined per SCAN round trip
_UNLINK_CHUNK = 500


def _address(url: str) -> str:
    """host:port/db of a redis:// URL (no credentials): how targets are named in arguments and answers."""
    parts = urlsplit(url)
    db = parts.path.lstrip("/") or "0"
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}/{db}"


def _server(url: str) -> str:
    return _address(url).rsplit("/", 1)[0]


def _redis_writable(settings: Settings) -> str | None:
    if not settings.redis_write_urls:
        return "no Redis server may be changed: set OPSGRAPH_REDIS_WRITE_URLS='[\"redis://host:6379/0\"]'"
    return None


def _config_allowlisted(settings: Settings) -> str | None:
    if not settings.redis_config_allowlist:
        return "no Redis parameter may be set: OPSGRAPH_REDIS_CONFIG_ALLOWLIST is empty"
    return None


class RedisTargetArgs(ToolArgs):
    instance: str | None = Field(
        None,
        max_length=300,
        description="host:port/db of a configured OPSGRAPH_REDIS_WRITE_URLS entry; empty: the first.",
    )


def _target(settings: Settings, instance: str | None) -> tuple[str, str] | ToolResult:
    """The URL and address to act on, or why there is none."""
    urls = [u.get_secret_value() for u in settings.redis_write_urls]
    if instance:
        wanted = instance if "/" in instance else f"{instance}/0"
        urls = [u for u in urls if _address(u) == wanted]
        if not urls:
            return failed(f"{instance} is not among OPSGRAPH_REDIS_WRITE_URLS", "not_found")
    if not urls:
        return failed("no Redis server may be changed (OPSGRAPH_REDIS_WRITE_URLS is empty)", "not_found")
    url = urls[0]
    if _server(url) == _server(settings.redis_url):
        return refused(f"{_address(url)} is opsgraph's own Redis (broker, live events): not a remediation target")
    return url, _address(url)


def _unreachable(where: str, exc: redis.RedisError) -> ToolResult:
    return failed(f"Redis at {where} unreachable: {redact(str(exc))}", "unreachable")


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, decode_responses=False)


class RedisConfigSetArgs(RedisTargetArgs):
    parameter: str = Field(pattern=r"^[a-z0-9-]{1,64}$", description="An allowlisted parameter, e.g. maxmemory.")
    value: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$", description="The new value, e.g. 512mb or allkeys-lru.")


def _config_refusal(args: RedisConfigSetArgs, settings: Settings) -> str | None:
    allowed = {p.lower() for p in settings.redis_config_allowlist}
    if args.parameter.lower() not in allowed:
        return f"parameter {args.parameter!r} is not allowlisted (OPSGRAPH_REDIS_CONFIG_ALLOWLIST: {sorted(allowed)})"
    return None


def _config_get(client: redis.Redis, parameter: str) -> str | None:
    values = cast(dict[Any, Any], client.config_get(parameter))
    for k, v in values.items():
        key = k.decode() if isinstance(k, bytes) else str(k)
        if key.lower() == parameter.lower():
            return v.decode() if isinstance(v, bytes) else str(v)
    return None


def _preview_config_set(args: RedisConfigSetArgs, ctx: ToolContext) -> ToolResult:
    target = _target(ctx.settings, args.instance)
    if isinstance(target, ToolResult):
        return target
    url, where = target
    if reason := _config_refusal(args, ctx.settings):
        return refused(f"redis_config_set refused: {reason}")
    try:
        current = _config_get(_client(url), args.parameter)
    except redis.RedisError as exc:
        return _unreachable(where, exc)
    if current is None:
        return failed(f"Redis at {where} has no parameter {args.parameter!r}", "not_found")
    change = "no change: already set" if current == args.value else f"{current} -> {args.value}"
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would set {args.parameter} on {where}: {change} (runtime only; the config file is not rewritten)",
        data={"target": where, "parameter": args.parameter, "current": current, "new": args.value},
    )


@CATALOG.tool(
    args=RedisConfigSetArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=20,
    cost_hint_s=0.1,
    prerequisites=[_redis_writable, _config_allowlisted],
    preview_fn=_preview_config_set,
)
def redis_config_set(args: RedisConfigSetArgs, ctx: ToolContext) -> ToolResult:
    """Set one allowlisted Redis parameter at run time (CONFIG SET), e.g. maxmemory or maxmemory-policy.

    Refuses parameters outside OPSGRAPH_REDIS_CONFIG_ALLOWLIST and servers outside OPSGRAPH_REDIS_WRITE_URLS."""
    target = _target(ctx.settings, args.instance)
    if isinstance(target, ToolResult):
        return target
    url, where = target
    if reason := _config_refusal(args, ctx.settings):
        return refused(f"redis_config_set refused: {reason}")
    try:
        client = _client(url)
        before = _config_get(client, args.parameter)
        client.config_set(args.parameter, args.value)
        after = _config_get(client, args.parameter)
    except redis.ResponseError as exc:
        return failed(f"Redis at {where} refused {args.parameter}={args.value}: {exc}", "rejected_by_target")
    except redis.RedisError as exc:
        return _unreachable(where, exc)
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"set {args.parameter} on {where}: {before} -> {after}",
        data={"target": where, "parameter": args.parameter, "before": before, "after": after},
        evidence=[f"CONFIG SET {args.parameter} {args.value} on {where}: was {before}, now {after}"],
    )


class RedisDeleteKeysArgs(RedisTargetArgs):
    pattern: str = Field(min_length=1, max_length=256, description="A SCAN MATCH glob, e.g. session:2024-*.")


def _decode(key: bytes) -> str:
    text = key.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= 120 else text[:119] + "…"


def _matching_keys(client: redis.Redis, pattern: str, cap: int) -> list[bytes]:
    """Keys matching the pattern, at most cap + 1 (one more than allowed is enough to refuse)."""
    keys: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=_SCAN_COUNT):
        keys.append(cast(bytes, key))
        if len(keys) > cap:
            break
    return keys


def _preview_delete_keys(args: RedisDeleteKeysArgs, ctx: ToolContext) -> ToolResult:
    target = _target(ctx.settings, args.instance)
    if isinstance(target, ToolResult):
        return target
    url, where = target
    cap = ctx.settings.redis_delete_max_keys
    try:
        keys = _matching_keys(_client(url), args.pattern, cap)
    except redis.RedisError as exc:
        return _unreachable(where, exc)
    sample = [_decode(k) for k in sorted(keys)[:_SAMPLE_KEYS]]
    data = {"target": where, "pattern": args.pattern, "matched": len(keys), "cap": cap, "sample": sample}
    if len(keys) > cap:
        return refused(
            f"redis_delete_keys refused: more than {cap} keys match {args.pattern!r} on {where} "
            "(OPSGRAPH_REDIS_DELETE_MAX_KEYS); narrow the pattern",
            **data,
        )
    if not keys:
        return ToolResult(
            status=ToolStatus.NO_DATA,
            summary=f"no key matches {args.pattern!r} on {where}: nothing to delete",
            data=data,
        )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would delete {len(keys)} key(s) matching {args.pattern!r} on {where}, e.g. {', '.join(sample[:3])}",
        data=data,
    )


@CATALOG.tool(
    args=RedisDeleteKeysArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=60,
    cost_hint_s=0.5,
    prerequisites=[_redis_writable],
    preview_fn=_preview_delete_keys,
)
def redis_delete_keys(args: RedisDeleteKeysArgs, ctx: ToolContext) -> ToolResult:
    """Delete the Redis keys a glob pattern matches (SCAN + UNLINK), refusing more than the configured cap."""
    target = _target(ctx.settings, args.instance)
    if isinstance(target, ToolResult):
        return target
    url, where = target
    cap = ctx.settings.redis_delete_max_keys
    try:
        client = _client(url)
        keys = _matching_keys(client, args.pattern, cap)
        if len(keys) > cap:
            return refused(
                f"redis_delete_keys refused: more than {cap} keys match {args.pattern!r} on {where}",
                target=where,
                matched=len(keys),
                cap=cap,
            )
        deleted = 0
        for i in range(0, len(keys), _UNLINK_CHUNK):
            deleted += int(cast(int, client.unlink(*keys[i : i + _UNLINK_CHUNK])))
    except redis.RedisError as exc:
        return failed(f"Redis at {where} failed during the delete: {redact(str(exc))}", "run_error")
    sample = [_decode(k) for k in sorted(keys)[:_SAMPLE_KEYS]]
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"deleted {deleted} key(s) matching {args.pattern!r} on {where}",
        data={"target": where, "pattern": args.pattern, "matched": len(keys), "deleted": deleted, "sample": sample},
        evidence=[f"UNLINK of {deleted} key(s) matching {args.pattern!r} on {where}"],
    )
