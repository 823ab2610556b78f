"""opsgraph's own pools: queue depth and live workers per pool."""

from __future__ import annotations

from typing import Any

import redis
from pydantic import Field

from core.heartbeats import live_workers, queue_depth
from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding


class PoolStatusArgs(ToolArgs):
    pools: list[str] | None = Field(None, description="Pools to report; empty means every declared pool.")


@CATALOG.tool(args=PoolStatusArgs, timeout_s=15, cost_hint_s=0.05)
def pool_status(args: PoolStatusArgs, ctx: ToolContext) -> ToolResult:
    """Queue depth and live workers of each of opsgraph's pools (cpu, gpu and any declared)."""
    pools = args.pools or ctx.settings.pools
    try:
        workers = live_workers(ctx.redis)
        depths = {p: queue_depth(ctx.redis, p) for p in pools}
    except redis.RedisError as exc:
        return ToolResult(status=ToolStatus.ERROR, summary=f"Redis unreachable: {exc}")
    report: dict[str, dict[str, Any]] = {}
    findings = []
    for p in pools:
        members = [w for w in workers if p in w.get("queues", [])]
        report[p] = {
            "queue_depth": depths[p],
            "workers": [{k: w.get(k) for k in ("hostname", "pid", "device", "concurrency", "active")} for w in members],
        }
        if not members:
            findings.append(finding("critical", f"pool {p} has no live worker; {depths[p]} message(s) waiting"))
        elif depths[p] > 10 * sum(int(w.get("concurrency") or 1) for w in members):
            findings.append(finding("warn", f"pool {p} backlog {depths[p]} for {len(members)} worker(s)"))
    summary = "; ".join(f"{p}: {len(r['workers'])} worker(s), {r['queue_depth']} queued" for p, r in report.items())
    if not findings:
        findings.append(finding("ok", summary))
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={"pools": report, "findings": findings},
        evidence=[
            f"heartbeat {w['hostname']} ({','.join(w.get('queues', []))}) device={w.get('device')}" for w in workers
        ],
    )
