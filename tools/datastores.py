"""Redis and PostgreSQL as an operator sees them: health, clients, memory, long queries, locks (tools.pg)."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import redis
from pydantic import Field

from core.logging import redact
from core.settings import Settings
from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding
from tools.net import TargetRefused, check_target
from tools.pg import postgres_activity_report


class RedisInfoArgs(ToolArgs):
    url: str | None = Field(None, description="redis:// URL; empty means opsgraph's own Redis.")


def _same_server(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    try:
        return (pa.hostname, pa.port or 6379, pa.path or "/0") == (pb.hostname, pb.port or 6379, pb.path or "/0")
    except ValueError:
        return False


@CATALOG.tool(args=RedisInfoArgs, timeout_s=20, cost_hint_s=0.1)
def redis_info(args: RedisInfoArgs, ctx: ToolContext) -> ToolResult:
    """Redis server health: version, uptime, clients, memory against maxmemory, ops/s, evictions, keyspace."""
    url = args.url or ctx.settings.redis_url
    if args.url and _same_server(args.url, ctx.settings.redis_url):
        # credentials come from configuration: a password in a request was masked before it was stored
        url = ctx.settings.redis_url
    elif args.url:  # opsgraph's own Redis is always allowed; any other is a target like an HTTP one
        parts = urlsplit(url)
        try:
            check_target(parts.hostname or "", parts.port or 6379, ctx.settings.http_targets)
        except (TargetRefused, ValueError) as exc:
            return ToolResult(
                status=ToolStatus.ERROR,
                summary=f"{redact(url)} is not an allowed target (OPSGRAPH_HTTP_TARGETS): {exc}",
                data={"error_code": "target_not_allowed"},
            )
    where = urlsplit(url)
    server = f"{where.hostname or 'localhost'}:{where.port or 6379}"
    try:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        info = cast(dict[str, Any], client.info())
    except redis.RedisError as exc:
        msg = f"Redis at {redact(url)} unreachable: {exc}"
        return ToolResult(
            status=ToolStatus.SUCCESS,
            summary=msg,
            data={"healthy": False, "server": server, "error": msg, "findings": [finding("critical", msg)]},
            evidence=[msg],
        )
    used = int(info.get("used_memory", 0))
    maxmem = int(info.get("maxmemory", 0))
    findings = []
    if maxmem and used / maxmem > 0.9:
        findings.append(finding("critical", f"Redis memory {used / maxmem:.0%} of maxmemory"))
    if int(info.get("rejected_connections", 0)) > 0:
        findings.append(finding("warn", f"{info['rejected_connections']} rejected connections since start"))
    if int(info.get("evicted_keys", 0)) > 0:
        findings.append(finding("warn", f"{info['evicted_keys']} keys evicted since start"))
    summary = (
        f"Redis {info.get('redis_version')} up {int(info.get('uptime_in_seconds', 0))}s, "
        f"{info.get('connected_clients')} clients, {used / 2**20:.1f} MiB used, "
        f"{info.get('instantaneous_ops_per_sec')} ops/s"
    )
    if not findings:
        findings.append(finding("ok", summary))
    keyspace = {k: v for k, v in info.items() if k.startswith("db")}
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "healthy": True,
            "server": server,
            "version": info.get("redis_version"),
            "uptime_s": info.get("uptime_in_seconds"),
            "connected_clients": info.get("connected_clients"),
            "blocked_clients": info.get("blocked_clients"),
            "used_memory_bytes": used,
            "maxmemory_bytes": maxmem,
            "ops_per_sec": info.get("instantaneous_ops_per_sec"),
            "evicted_keys": info.get("evicted_keys"),
            "keyspace": keyspace,
            "findings": findings,
        },
        evidence=[f"INFO on {redact(url)}: {summary}"],
    )


def _postgres_configured(settings: Settings) -> str | None:
    return None if settings.postgres_dsns else "no DSN configured: set OPSGRAPH_POSTGRES_DSNS='[\"postgresql://...\"]'"


class PostgresActivityArgs(ToolArgs):
    database: str | None = Field(
        None, max_length=128, description="Name of a configured DSN's database; empty means the first DSN."
    )
    long_query_s: float = Field(5.0, gt=0, le=86400, description="Queries running longer than this are listed.")
    idle_in_transaction_s: float = Field(
        60.0, gt=0, le=86400, description="Sessions idle in an open transaction longer than this are reported."
    )


@CATALOG.tool(args=PostgresActivityArgs, timeout_s=30, cost_hint_s=0.2, prerequisites=[_postgres_configured])
def postgres_activity(args: PostgresActivityArgs, ctx: ToolContext) -> ToolResult:
    """PostgreSQL activity on a configured DSN: sessions by state, lock waits with the blocking chain (root
    blockers, their transaction state and age, relation and lock mode), long queries, wait events.

    Query text is truncated and its literals masked; other sessions' data never leaves as written."""
    dsns = [d.get_secret_value() for d in ctx.settings.postgres_dsns]
    if args.database:
        dsns = [d for d in dsns if (urlsplit(d).path.lstrip("/") or "") == args.database]
        if not dsns:
            return ToolResult(status=ToolStatus.ERROR, summary=f"no configured DSN for database {args.database!r}")
    return postgres_activity_report(
        dsns[0], long_query_s=args.long_query_s, idle_in_transaction_s=args.idle_in_transaction_s
    )
