"""Redis: memory at maxmemory, evictions and OOM refusals, read from INFO and from clients' logs."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    REDIS_OOM,
    Rec,
    SettingDiff,
    records_with,
    ref_of,
    service_of,
    setting_diffs,
    span_text,
)
from diagnosis.analyzers.database._shared import Context
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts

# ---------------------------------------------------------------- Redis

# Redis with maxmemory set and >= 95% of it used: writes fail ("OOM command not allowed") under noeviction, and
# every write evicts under the LRU policies.
REDIS_FULL = 0.95


def _redis(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    oom_lines = [r for r in ctx.logs if REDIS_OOM.search(r.msg)]
    for it in ctx.evidence.kind("redis/info"):
        d = it.data
        server = str(d.get("server") or it.object.split("/", 1)[-1])
        if d.get("healthy") is False:
            err = str(d.get("error") or "unreachable")
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="redis_unreachable",
                    category=Category.DEPENDENCY_FAILURE,
                    title=f"Redis {server} unreachable: {err[:80]}",
                    mechanism=f"connecting to Redis {server} fails: {err[:240]}.",
                    object=f"Redis {server}",
                    score=0.8,
                    tags=[f"upstream:{server}", f"db:{server}"],
                    explains=["errors", "connection_refused", "upstream_timeout", "http_5xx", "latency"],
                    evidence=[EvidenceRef(item=it.id, field="error", value=err[:300])],
                    actions=[Action(description="Ping it", command=f"redis-cli -h {server.split(':')[0]} ping")],
                )
            )
            continue
        used, mx = d.get("used_memory_bytes"), d.get("maxmemory_bytes")
        if isinstance(used, int | float) and isinstance(mx, int | float) and mx > 0 and used >= REDIS_FULL * mx:
            refs = [
                EvidenceRef(item=it.id, field="used_memory_bytes", value=used),
                EvidenceRef(item=it.id, field="maxmemory_bytes", value=mx),
            ]
            refs += [ref_of(r) for r in oom_lines[:1]]
            what = f"uses {used / 2**20:.0f} MiB of its maxmemory {mx / 2**20:.0f} MiB"
            changed = _memory_setting_changed(ctx, it.ts)
            out.append(
                _redis_reconfigured(server, what, changed, refs, it.ts)
                if changed
                else _redis_full(server, what, refs, it.ts)
            )
            oom_lines = []
    if oom_lines:
        server = _redis_server(oom_lines)
        out.append(
            _redis_full(
                server,
                f"refused writes {len(oom_lines)}x {span_text(oom_lines[0].ts, oom_lines[-1].ts)} "
                f"('{oom_lines[0].msg.strip()[:140]}')",
                [ref_of(oom_lines[0])],
                oom_lines[0].ts,
            )
        )
    return out


_REDIS_HOST = re.compile(
    r"(?:redis|rediss)://(?:[^@/\s]+@)?([\w.\-]+(?::\d+)?)|\b([\w\-]*redis[\w\-]*(?:\.[\w\-]+)*(?::\d+)?)", re.I
)
_NOT_REDIS_HOST = re.compile(r"exception|error|client|command|connection|response|jedis|lettuce|ioredis|^redis\.", re.I)


def _redis_server(recs: list[Rec]) -> str:
    """The Redis a client's OOM lines are about: a redis:// URL or a host named like a Redis, never the client
    library's module path (redis.exceptions.ResponseError, io.lettuce...); else the service that called it."""
    for r in recs[:5]:
        for m in _REDIS_HOST.finditer(r.msg):
            name = m.group(1) or m.group(2)
            if name and not _NOT_REDIS_HOST.search(name):
                return name
    svc = service_of(recs[0].item)
    return f"used by {svc}" if svc else "redis"


_MEMORY_KEYS = ("maxmemory-policy", "maxmemory_policy", "maxmemory")
SETTING_BEFORE_S = 14 * 86400  # a change this recent may be why the server filled up


def _memory_setting_changed(ctx: Context, at: float | None) -> SettingDiff | None:
    """A diff that made the server keep every key (maxmemory-policy to noeviction) or gave it less memory (a lower
    maxmemory) before it filled up."""
    for diff in reversed(setting_diffs(ctx.evidence)):
        if diff.key.lower() not in _MEMORY_KEYS:
            continue
        if at is not None and diff.ts is not None and not 0 <= at - diff.ts <= SETTING_BEFORE_S:
            continue
        if "policy" in diff.key and diff.new.lower() == "noeviction":
            return diff
        old, new = redis_bytes(diff.old), redis_bytes(diff.new)
        if "policy" not in diff.key and old and new and new < old:
            return diff
    return None


_REDIS_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]b?)?", re.I)
_REDIS_UNITS = {"k": 1e3, "kb": 1024.0, "m": 1e6, "mb": 1024.0**2, "g": 1e9, "gb": 1024.0**3}


def redis_bytes(value: str) -> float | None:
    """A size as redis.conf writes it: bytes, or 1k/1m/1g (powers of 1000) and 1kb/1mb/1gb (powers of 1024)."""
    m = _REDIS_SIZE.fullmatch(value.strip())
    if not m:
        return None
    return float(m[1]) * (_REDIS_UNITS[m[2].lower()] if m[2] else 1.0)


def _redis_reconfigured(
    server: str, what: str, diff: SettingDiff, refs: list[EvidenceRef], ts: float | None
) -> Finding:
    host = server.split(":")[0]
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="redis_memory_setting_changed",
        category=Category.CONFIGURATION_ERROR,
        title=f"Redis {server} at maxmemory after {diff.key} changed from {diff.old} to {diff.new}",
        mechanism=(
            f"{diff.key} of Redis {server} was changed from {diff.old} to {diff.new}"
            + (f" at {fmt_ts(diff.ts)}" if diff.ts is not None else "")
            + f"; now it {what}, and "
            + (
                "with noeviction it refuses every write once full instead of evicting the least used keys, as a "
                "cache must: more memory only delays it."
                if "policy" in diff.key
                else "the data that fitted before no longer does: writes fail or evict keys."
            )
        ),
        object=f"Redis {server}",
        score=0.88,
        ts=diff.ts if diff.ts is not None else ts,
        tags=[f"upstream:{server}", f"db:{server}", f"setting:{diff.key}"],
        explains=["errors", "exception", "http_5xx", "latency", "redis_memory_full", "alert:*"],
        evidence=[diff.ref, *refs],
        actions=[
            Action(description="Policy and memory now", command=f"redis-cli -h {host} config get 'maxmemory*'"),
            Action(
                description=f"Put {diff.key} back to {diff.old} (and in the configuration management that set it)",
                command=f"redis-cli -h {host} config set {diff.key.replace('_', '-')} {diff.old}",
                kind="write",
                tool="redis_config_set",
                args={"parameter": diff.key.replace("_", "-"), "value": diff.old},
            ),
        ],
    )


def _redis_full(server: str, what: str, refs: list[EvidenceRef], ts: float | None) -> Finding:
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="redis_memory_full",
        category=Category.RESOURCE_EXHAUSTION,
        title=f"Redis {server} at maxmemory",
        mechanism=f"Redis {server} is out of memory: it {what}; writes fail or evict keys.",
        object=f"Redis {server}",
        score=0.85,
        ts=ts,
        tags=[f"upstream:{server}", f"db:{server}"],
        explains=["errors", "exception", "http_5xx", "latency"],
        evidence=refs,
        actions=[
            Action(
                description="Memory, policy and the biggest keys",
                command=f"redis-cli -h {server.split(':')[0]} info memory && redis-cli -h {server.split(':')[0]} --bigkeys",  # noqa: E501
            ),
            Action(
                description="Raise maxmemory (or set an eviction policy for a cache)",
                command=f"redis-cli -h {server.split(':')[0]} config set maxmemory <bytes>",
                kind="write",
                tool="redis_config_set",
                args={"parameter": "maxmemory", "value": "<bytes>"},
            ),
        ],
    )


# ---------------------------------------------------------------- Redis blocked by one client's slow commands

# Redis runs commands on one thread: a command that takes a second (KEYS over millions of keys, FLUSHALL, a huge
# SMEMBERS or DEL) stalls every other client for that second. Entries this slow, again and again, are an outage of
# the server for all its clients; the tens of milliseconds of a busy EVALSHA or HGETALL are not.
BLOCKING_US = 500_000
BLOCKING_MIN = 3
RELEASE_BEFORE_S = 7 * 86400  # a release of the client this long before its first slow command can have brought it
_RELEASE_WORDS = re.compile(r"\bv?\d+\.\d+(?:\.\d+)?\b|deploy|release|rollout|upgrad", re.I)


def _client_release(ctx: Context, client: str, before: float) -> tuple[str, EvidenceRef] | None:
    """A log record or change naming the client with a version or a deploy, in the week before `before`."""
    for r in records_with(ctx.evidence, (client,)):
        if r.ts is not None and 0 <= before - r.ts <= RELEASE_BEFORE_S and _RELEASE_WORDS.search(r.msg):
            return " ".join(r.msg.split())[:160], ref_of(r)
    return None


def _redis_blocked(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for it in ctx.evidence.kind("redis/slowlog"):
        slow = [e for e in it.data.get("entries") or () if int(e.get("us") or 0) >= BLOCKING_US]
        if len(slow) < BLOCKING_MIN:
            continue
        by_client: dict[tuple[str, str], list[dict]] = {}
        for e in slow:
            who = str(e.get("client") or e.get("addr") or "an unnamed client")
            by_client.setdefault((who, str(e["args"][0]).upper()), []).append(e)
        (client, command), entries = max(by_client.items(), key=lambda kv: len(kv[1]))
        if len(entries) < BLOCKING_MIN:
            continue
        server = str(it.data.get("server") or it.object)
        first = min(e["ts"] for e in entries)
        secs = sorted(e["us"] / 1e6 for e in entries)
        args = " ".join(str(a) for a in entries[0]["args"][:3])
        release = _client_release(ctx, client, first) if client != "an unnamed client" else None
        mech = (
            f"{client} runs `{args}` on Redis {server} again and again ({len(entries)} of the slow log's entries, "
            f"{secs[0]:.1f}-{secs[-1]:.1f} s each, the earliest shown at {fmt_ts(first)}): Redis runs one command "
            "at a time, so each one stalls every other client for that long and their commands time out"
        )
        if release:
            mech += f"; {client} changed shortly before ({release[0]}): its new code scans the keyspace"
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="redis_blocked",
                category=Category.CODE_DEFECT if release else Category.DEPENDENCY_FAILURE,
                title=f"{client}'s {command} blocks Redis {server} ({len(entries)}x, up to {secs[-1]:.1f} s)",
                mechanism=mech + ".",
                object=f"{client} ({command} on Redis {server})",
                score=0.85,
                ts=first,
                tags=[f"service:{client}", f"redis:{server}", f"upstream:{server}", f"host:{server}"],
                explains=[
                    "errors",
                    "exception",
                    "latency",
                    "http_5xx",
                    "upstream_timeout",
                    "cpu_high",
                    "cpu_*",
                    "metric_shift",
                    "redis_*",
                    "alert:*",
                ],
                evidence=[
                    EvidenceRef(item=it.id, line=entries[0].get("line"), value=f"{args} {entries[0]['us']} us"),
                    *([release[1]] if release else []),
                ],
                actions=[
                    Action(
                        description="Who sends it now", command=f"redis-cli -h {server} CLIENT LIST | grep {client}"
                    ),
                    Action(
                        description=f"Stop {client}'s {command} (SCAN in batches instead), or kill its connections",
                        command=f"redis-cli -h {server} CLIENT KILL USER <user>  # or stop {client}",
                        kind="write",
                    ),
                ],
            )
        )
    return out
