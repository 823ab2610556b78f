"""Redis and PostgreSQL as an operator sees them: health, clients, memory, long queries, locks."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import psycopg
import redis
from psycopg.rows import dict_row
from pydantic import Field

from core.logging import redact
from core.settings import Settings
from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding


class RedisInfoArgs(ToolArgs):
    url: str | None = Field(None, description="redis:// URL; empty means opsgraph's own Redis.")


@CATALOG.tool(args=RedisInfoArgs, timeout_s=20, cost_hint_s=0.1)
def redis_info(args: RedisInfoArgs, ctx: ToolContext) -> ToolResult:
    """Redis server health: version, uptime, clients, memory against maxmemory, ops/s, evictions, keyspace."""
    url = args.url or ctx.settings.redis_url
    host = urlsplit(url).hostname or ""
    if args.url and "*" not in ctx.settings.http_targets and host not in ctx.settings.http_targets:
        return ToolResult(status=ToolStatus.ERROR, summary=f"{host} is not an allowed target (OPSGRAPH_HTTP_TARGETS)")
    try:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        info = cast(dict[str, Any], client.info())
    except redis.RedisError as exc:
        msg = f"Redis at {redact(url)} unreachable: {exc}"
        return ToolResult(
            status=ToolStatus.SUCCESS,
            summary=msg,
            data={"healthy": False, "findings": [finding("critical", msg)]},
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


_ACTIVITY_SQL = """
SELECT pid, usename, datname, state, wait_event_type, wait_event,
       EXTRACT(EPOCH FROM (now() - query_start))::float AS running_s,
       pg_blocking_pids(pid) AS blocked_by, left(query, 200) AS query
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


@CATALOG.tool(args=PostgresActivityArgs, timeout_s=30, cost_hint_s=0.2, prerequisites=[_postgres_configured])
def postgres_activity(args: PostgresActivityArgs, ctx: ToolContext) -> ToolResult:
    """PostgreSQL activity on a configured DSN: connections by state, long-running queries, sessions on locks."""
    dsns = [d.get_secret_value() for d in ctx.settings.postgres_dsns]
    if args.database:
        dsns = [d for d in dsns if (urlsplit(d).path.lstrip("/") or "") == args.database]
        if not dsns:
            return ToolResult(status=ToolStatus.ERROR, summary=f"no configured DSN for database {args.database!r}")
    dsn = dsns[0]
    where = redact(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=5, row_factory=dict_row) as conn:
            rows = conn.execute(_ACTIVITY_SQL).fetchall()
            max_conn = int(conn.execute("SHOW max_connections").fetchone()["max_connections"])  # type: ignore[index]
    except psycopg.Error as exc:
        msg = f"PostgreSQL at {where} unreachable: {redact(str(exc)).strip()}"
        return ToolResult(
            status=ToolStatus.SUCCESS,
            summary=msg,
            data={"healthy": False, "findings": [finding("critical", msg)]},
        )
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"] or "unknown"] = states.get(r["state"] or "unknown", 0) + 1
    long = [r for r in rows if r["state"] == "active" and (r["running_s"] or 0) > args.long_query_s]
    blocked = [r for r in rows if r["blocked_by"]]
    findings = []
    if len(rows) > 0.8 * max_conn:
        findings.append(finding("warn", f"{len(rows)} of {max_conn} connections in use"))
    for r in long[:5]:
        findings.append(finding("warn", f"pid {r['pid']} running {r['running_s']:.0f}s: {r['query'][:80]}"))
    for r in blocked[:5]:
        findings.append(finding("critical", f"pid {r['pid']} blocked by {r['blocked_by']}"))
    summary = (
        f"PostgreSQL {where}: {len(rows)}/{max_conn} connections "
        f"({', '.join(f'{k} {v}' for k, v in sorted(states.items()))}), {len(long)} long, {len(blocked)} blocked"
    )
    if not findings:
        findings.append(finding("ok", summary))
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "healthy": not blocked,
            "connections": len(rows),
            "max_connections": max_conn,
            "by_state": states,
            "long_queries": [{k: r[k] for k in ("pid", "usename", "datname", "running_s", "query")} for r in long[:20]],
            "blocked": [{"pid": r["pid"], "blocked_by": r["blocked_by"], "query": r["query"]} for r in blocked[:20]],
            "findings": findings,
        },
        evidence=[f"pg_stat_activity on {where}: {summary}"],
    )
