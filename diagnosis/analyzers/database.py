"""Database: live PostgreSQL (sessions, locks, settings), its logs, and RDS (events, CloudWatch metrics,
Performance Insights).

Rules (by mechanism, see docs/analyzers.md):
- Sessions waiting on a lock are symptoms (`db_waits`); the root of the blocking chain is the cause. A root that
  sits "idle in transaction" is an application that opened a transaction and stopped talking without committing
  (a code_defect); an active root holding locks for long is a long transaction or DDL (code_defect as well: the
  work that holds the lock is the application's or a migration's).
- Connections near max_connections: resource_exhaustion, naming the application that holds them (a pool leak
  when most of them are idle); when most connections are lock waiters, the lock explains them instead.
- One statement dominating DB load while CPU is saturated: resource_exhaustion naming the statement.
- Storage running out (FreeStorageSpace falling, or when the metric is missing "could not extend file", "No space
  left on device", an RDS storage event): resource_exhaustion. Burst balance at zero: resource_exhaustion.
- A failover or restart in the last hour: infrastructure (connection errors around it are its symptoms); an old
  one is benign.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from diagnosis.analyzers._common import (
    APP_POOL,
    HTTP_POOL_WAIT,
    NAMES_HTTP_UPSTREAM,
    PG_CHECKPOINT,
    PG_DOWN,
    PG_LOCK,
    PG_TOO_MANY,
    PG_VACUUM,
    REDIS_OOM,
    Rec,
    first_and_last_refs,
    fmt_ts,
    is_db_log,
    is_db_storage_line,
    now_of,
    ref_of,
    service_of,
    signature_records,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    Point,
    StepChange,
    human_duration,
    points_of,
    saturation,
    step_change,
    time_to_exhaustion,
)

# Connections at or above 90% of max_connections: the last 10% is what superuser_reserved_connections and
# replication reserve, and pools fail to grow before 100%.
CONNECTIONS_HIGH = 0.9
# A pool leak: the top application holds most connections (>= 50%) and most of them (>= 60%) do nothing.
LEAK_APP_SHARE = 0.5
LEAK_IDLE_SHARE = 0.6
# An idle-in-transaction session older than this is worth naming even when it blocks nobody (it holds back
# vacuum); 5 minutes is far beyond any request's transaction.
IDLE_TX_NOTABLE_S = 300
# CPU saturated: >= 90% over the trailing points; a statement dominates when it carries >= 50% of the load.
CPU_SATURATED = 90.0
DOMINANT_SHARE = 0.5
# Storage: full at <= 2% of the most free space seen (or 256 MiB); running out when a linear trend (r2 >= 0.8)
# reaches zero within 24 hours.
STORAGE_FULL_FRACTION = 0.02
STORAGE_FULL_BYTES = 256 * 2**20
STORAGE_HORIZON_S = 24 * 3600
# Replica lag worth a finding: >= 60 s now (beyond that, reads from the replica are visibly stale).
REPLICA_LAG_S = 60.0
# Burst/IO credit balance exhausted at <= 5% after having been >= 50%.
BURST_EMPTY = 5.0
# A failover or restart this recent explains errors around it; older ones are history (benign).
FAILOVER_RECENT_S = 3600
LOG_SYMPTOM_STOPPED_S = 15 * 60  # database errors in client logs whose last is this long before now have stopped
# An autovacuum run longer than this is heavy I/O (a big table), not routine upkeep.
VACUUM_HEAVY_S = 300.0

_FAILOVER = re.compile(
    r"failover|fail-?over|Multi-AZ .*(?:started|completed|in progress)|instance restarted|DB instance restarted|"
    r"rebooted|reboot|instance shutdown|recovery|promoted|crash",
    re.I,
)
_RDS_STORAGE = re.compile(
    r"storage[- ]full|low storage|storage capacity .* low|run out of storage|storage is full", re.I
)
# a failover the provider or the owner scheduled (a service update, a patch in the maintenance window, a class
# change being applied), and the event that says it finished
_PLANNED_FAILOVER = re.compile(
    r"maintenance window|during maintenance|service update|scheduled|\bpatch|applying (?:modification|update)|"
    r"upgrade|reboot requested|requested by (?:the )?(?:user|customer)",
    re.I,
)
_FAILOVER_DONE = re.compile(r"\bcompleted?\b|\bfinished\b|\bsucceeded\b", re.I)
_RDS_ROUTINE = re.compile(r"backup|snapshot|Finished applying|maintenance|minor version|parameter group", re.I)
_DDL = re.compile(
    r"^\s*(?:alter|create\s+(?:unique\s+)?index(?!\s+concurrently)|drop|truncate|lock\s+table|reindex|vacuum\s+full|cluster)\b",
    re.I,
)
_RELATION_IN_QUERY = re.compile(
    r"\b(?:update|into|from|lock\s+table|alter\s+table|truncate(?:\s+table)?|join)\s+(?:only\s+)?([\w.\"]+)", re.I
)
_VACUUM_TABLE = re.compile(r"vacuum(?: of table| analyze| verbose)?\s+\"?([\w.]+)\"?", re.I)
_ELAPSED = re.compile(r"elapsed:\s*([\d.]+)\s*s", re.I)


# ---------------------------------------------------------------- entry point


@ANALYZERS.analyzer(
    domain=Domain.DATABASE,
    reads={"pg/session", "pg/lock", "pg/settings", "rds/event", "pi/sql", "metric", "log", "redis/info"},
)
def database(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    ctx = _Context(evidence, now)
    out: list[Finding] = []
    out += _unreachable(ctx)
    out += _locks(ctx)
    out += _connections(ctx)
    out += _cpu(ctx)
    out += _storage(ctx)
    out += _replica_lag(ctx)
    out += _burst_balance(ctx)
    out += _cpu_credits(ctx)
    out += _io_storms(ctx)
    out += _rds_events(ctx)
    out += _log_symptoms(ctx)
    out += _redis(ctx)
    out += _app_pools(ctx)
    return with_aliases(out)


class _Context:
    def __init__(self, evidence: EvidenceSet, now: float | None) -> None:
        self.evidence = evidence
        self.now = now
        self.sessions: dict[int, EvidenceItem] = {}
        for s in evidence.kind("pg/session"):
            pid = _int(s.data.get("pid"))
            if pid is not None:
                self.sessions[pid] = s
        self.locks = evidence.kind("pg/lock")
        self.settings = evidence.kind("pg/settings")
        self.pi = evidence.kind("pi/sql")
        self.events = evidence.kind("rds/event")
        self.metrics = [m for m in evidence.kind("metric") if is_db_metric(m)]
        self.logs = [r for r in signature_records(evidence) if _db_relevant(r.msg) or is_db_storage_line(r)]
        self.lock_pids: set[int] = set()  # set by _locks: waiters, so connection counting can tell

    @property
    def captured(self) -> float | None:
        caps = [
            float(c) for c in (s.data.get("captured_at") for s in self.sessions.values()) if isinstance(c, int | float)
        ]
        return max(caps) if caps else self.now

    def asked_databases(self) -> set[str]:
        """The databases the live checks connected to (the DSNs' paths): what the operator asked about. A
        lock only blocks sessions of its own database, so a blocker elsewhere on the server is another fault."""
        names = set()
        for s in self.settings:
            server = str(s.data.get("server") or "")
            if "://" in server:
                path = server.split("://", 1)[1].partition("/")[2].split("?")[0]
                if path:
                    names.add(path)
        return names

    def db_name(self) -> str:
        for m in self.metrics:
            ident = _instance(m)
            if ident:
                return ident
        for e in self.events:
            if e.data.get("source_id"):
                return str(e.data["source_id"])
        names = Counter(str(s.data.get("datname")) for s in self.sessions.values() if s.data.get("datname"))
        if names:
            return names.most_common(1)[0][0]
        # a database server's own log names it (mysqld-error.log, postgresql-15-main.log)
        own = next((service_of(r.item) for r in self.logs if is_db_log(r.item) and service_of(r.item)), None)
        return own or "postgres"

    def metric(self, *names: str) -> list[EvidenceItem]:
        wanted = {n.lower() for n in names}
        return [m for m in self.metrics if str(m.data.get("name", "")).lower() in wanted]

    def max_connections(self) -> tuple[int, EvidenceRef] | None:
        for s in self.settings:
            v = _int(s.data.get("max_connections"))
            if v:
                return v, EvidenceRef(item=s.id, field="max_connections", value=v)
        return None


_DB_LOG_SIGNATURES = (PG_TOO_MANY, PG_LOCK, PG_CHECKPOINT, PG_VACUUM, PG_DOWN, REDIS_OOM, APP_POOL)


def _db_relevant(msg: str) -> bool:
    return any(rx.search(msg) for rx in _DB_LOG_SIGNATURES)


_RDS_NAMES = {
    "cpuutilization",
    "freestoragespace",
    "replicalag",
    "burstbalance",
    "databaseconnections",
    "writeiops",
    "readiops",
    "writethroughput",
    "readthroughput",
    "diskqueuedepth",
    "writelatency",
    "readlatency",
    "freeablememory",
    "transactionlogsgeneration",
    "ebsiobalance%",
    "ebsbytebalance%",
    "auroraReplicaLag".lower(),
    "cpucreditbalance",
    "replicationslotdiskusage",
    "transactionlogsdiskusage",
    "oldestreplicationslotlag",
}


# metric names this analyzer interprets itself (the metrics analyzer leaves them alone, so one fault is one finding)
DB_INTERPRETED = {
    "cpuutilization",
    "os.cpuutilization.total.avg",
    "os.cpuutilization.total",
    "freestoragespace",
    "freelocalstorage",
    "replicalag",
    "aurorareplicalag",
    "burstbalance",
    "cpucreditbalance",
    "replicationslotdiskusage",
    "transactionlogsdiskusage",
    "oldestreplicationslotlag",
    "ebsiobalance%",
    "ebsbytebalance%",
    "databaseconnections",
    "writeiops",
    "writethroughput",
    "diskqueuedepth",
    "writelatency",
    "db.load.avg",
    "db.load",
}


def is_db_metric(m: EvidenceItem) -> bool:
    """A database's metric: an RDS dimension, Performance Insights, or an RDS metric name from CloudWatch."""
    name = str(m.data.get("name", "")).lower()
    labels = m.data.get("labels") or {}
    if m.data.get("source") == "pi" or name.startswith("db."):
        return True
    if (labels.get("InstanceId") or labels.get("VolumeId")) and not _instance(m):
        return False  # an EC2 instance's or EBS volume's metric (CPUCreditBalance, BurstBalance share RDS's names)
    return bool(_instance(m)) or (name in _RDS_NAMES and m.data.get("source") == "cloudwatch")


def _instance(m: EvidenceItem) -> str | None:
    labels = m.data.get("labels") or {}
    for k in ("DBInstanceIdentifier", "DBClusterIdentifier", "dbinstance_identifier", "db_instance_identifier"):
        if labels.get(k):
            return str(labels[k])
    return None


def _int(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


# the live postgres_activity tool also gives each age as the server measured it (against its own now())
_AGE_FIELDS = {"state_change": "state_age_s", "xact_start": "xact_age_s", "query_start": "query_age_s"}


def _weight(s: EvidenceItem) -> int:
    """How many sessions an item stands for: 1, or a grouped pg_stat_activity row's count."""
    return _int(s.data.get("count")) or 1


def _age_of(data: dict[str, Any], field: str, at: float | None) -> float | None:
    measured = data.get(_AGE_FIELDS.get(field, ""))
    if isinstance(measured, int | float):
        return float(measured)
    return _age(data.get(field), at)


def _age(ts: Any, at: float | None) -> float | None:
    if isinstance(ts, int | float) and at is not None:
        return max(0.0, at - ts)
    return None


def _pts(m: EvidenceItem) -> list[Point]:
    return points_of(m.data.get("points"))


def _mref(m: EvidenceItem, index: int = -1, pts: list[Point] | None = None) -> EvidenceRef:
    p = pts if pts is not None else _pts(m)
    i = index if index >= 0 else len(p) + index
    return EvidenceRef(item=m.id, field=f"points.{i}", value=p[i][1] if p else None)


# ---------------------------------------------------------------- application connection pools


def _app_pools(ctx: _Context) -> list[Finding]:
    """A service whose own pool has no free connection (HikariCP, SQLAlchemy QueuePool, Prisma...): its requests
    wait for a connection. Slow or blocked queries hold connections longer (a lock explains it); alone it is the
    pool that is too small or leaks."""
    by_service: dict[str, list[Rec]] = defaultdict(list)
    for r in ctx.logs:
        # a client pool to an HTTP/gRPC upstream is the network analyzer's (the upstream holds the connections)
        if APP_POOL.search(r.msg) and not (HTTP_POOL_WAIT.search(r.msg) or NAMES_HTTP_UPSTREAM.search(r.msg)):
            by_service[service_of(r.item) or r.item.object].append(r)
    out = []
    for svc, recs in by_service.items():
        if len(recs) < 3:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="app_pool_exhausted",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{svc}: database connection pool exhausted ({len(recs)}x)",
                mechanism=(
                    f"{svc}'s database connection pool has no free connection: '{recs[0].msg.strip()[:160]}' "
                    f"{len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}; requests wait for a connection and time out "
                    "(the pool is too small for the load, leaks connections, or its queries hold them too long)."
                ),
                object=f"connection pool of {svc}",
                score=0.6,
                ts=recs[0].ts,
                tags=[f"service:{svc}", f"db:{ctx.db_name()}"],
                explains=["errors", "latency", "http_5xx", "upstream_timeout"],
                evidence=[ref_of(recs[0]), ref_of(recs[-1])],
                actions=[
                    Action(
                        description="Connections the service holds, by state",
                        command='psql -c "SELECT application_name, state, count(*) FROM pg_stat_activity GROUP BY 1,2"',
                    )
                ],
            )
        )
    return out


# ---------------------------------------------------------------- Redis

# Redis with maxmemory set and >= 95% of it used: writes fail ("OOM command not allowed") under noeviction, and
# every write evicts under the LRU policies.
REDIS_FULL = 0.95


def _redis(ctx: _Context) -> list[Finding]:
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
            out.append(
                _redis_full(server, f"uses {used / 2**20:.0f} MiB of its maxmemory {mx / 2**20:.0f} MiB", refs, it.ts)
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


# ---------------------------------------------------------------- reachability


def _unreachable(ctx: _Context) -> list[Finding]:
    """The live tool could not connect: the error says whether the server is down, full or refusing us."""
    out = []
    for st in ctx.settings:
        if st.data.get("reachable") is not False:
            continue
        err = str(st.data.get("error") or "unknown error")
        server = str(st.data.get("server") or ctx.db_name())
        if PG_TOO_MANY.search(err):
            continue  # the connection analysis names it, with the sessions where it has them
        auth = re.search(
            r"password authentication failed|no pg_hba.conf entry|role .* does not exist|"
            r"database .* does not exist|permission denied",
            err,
            re.I,
        )
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="db_access_denied" if auth else "db_unreachable",
                category=Category.CONFIGURATION_ERROR if auth else Category.DEPENDENCY_FAILURE,
                title=f"database {server} {'refuses our credentials' if auth else 'unreachable'}: {err[:80]}",
                mechanism=f"connecting to database {server} fails: {err[:240]}.",
                object=f"database {server}",
                score=0.8,
                ts=st.ts,
                tags=[f"db:{server}", f"upstream:{server}"],
                explains=["db_connection_errors", "connection_refused", "upstream_timeout", "errors", "http_5xx"],
                evidence=[EvidenceRef(item=st.id, field="error", value=err[:300])],
                actions=[
                    Action(
                        description="Is the server up and accepting connections?", command=f"pg_isready -h {server}"
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- locks

_CONFLICTS: dict[str, set[str]] = {
    "AccessShareLock": {"AccessExclusiveLock"},
    "RowShareLock": {"ExclusiveLock", "AccessExclusiveLock"},
    "RowExclusiveLock": {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
    "ShareUpdateExclusiveLock": {
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareLock": {
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareRowExclusiveLock": {
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ExclusiveLock": {
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "AccessExclusiveLock": {
        "AccessShareLock",
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
}
_STRENGTH = list(_CONFLICTS)


def _blocking_graph(ctx: _Context) -> dict[int, set[int]]:
    """waiter pid -> the pids it waits for. pg_blocking_pids() (the sessions' `blocked_by`) is authoritative; only
    for a waiter without it is the edge derived from pg_locks, and then from table-level locks alone: an ungranted
    `relation` lock waits for the conflicting granted `relation` locks of other pids (tuple and transactionid locks
    queue behind each other in ways a snapshot of modes cannot order, and read as false cycles)."""
    graph: dict[int, set[int]] = defaultdict(set)
    for pid, s in ctx.sessions.items():
        for b in s.data.get("blocked_by") or ():
            bp = _int(b)
            if bp is not None and bp != pid:
                graph[pid].add(bp)
    granted: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for lk in ctx.locks:
        d = lk.data
        if d.get("granted") and d.get("relation") is not None and d.get("locktype", "relation") == "relation":
            granted[str(d["relation"])].append((_int(d.get("pid")) or -1, str(d.get("mode"))))
    for lk in ctx.locks:
        d = lk.data
        waiter = _int(d.get("pid"))
        if d.get("granted") or waiter is None or d.get("relation") is None or waiter in graph:
            continue
        if d.get("locktype", "relation") != "relation":
            continue
        for holder, mode in granted.get(str(d["relation"]), ()):
            if holder != waiter and mode in _CONFLICTS.get(str(d.get("mode")), set(_CONFLICTS)):
                graph[waiter].add(holder)
    return dict(graph)


def _roots(graph: dict[int, set[int]], pid: int) -> tuple[set[int], bool]:
    """The pids at the top of pid's blocking chain, and whether the chain has a cycle (a deadlock)."""
    roots: set[int] = set()
    seen = {pid}
    stack = list(graph.get(pid, ()))
    cycle = False
    while stack:
        p = stack.pop()
        if p == pid:
            cycle = True
        if p in seen:
            continue
        seen.add(p)
        up = graph.get(p)
        if up:
            stack.extend(up)
        else:
            roots.add(p)
    return roots, cycle


def _locks(ctx: _Context) -> list[Finding]:
    graph = _blocking_graph(ctx)
    out: list[Finding] = []
    if graph:
        waiters_of: dict[int, set[int]] = defaultdict(set)
        deadlocked: set[int] = set()
        for waiter in graph:
            roots, cycle = _roots(graph, waiter)
            if cycle:
                deadlocked.add(waiter)
            for r in roots:
                waiters_of[r].add(waiter)
        ctx.lock_pids = set(graph)
        for root, waiters in sorted(waiters_of.items(), key=lambda kv: -len(kv[1])):
            out.append(_blocker_finding(ctx, root, waiters))
            out.append(_waiters_finding(ctx, root, waiters))
        if deadlocked:
            out.append(_deadlock_finding(ctx, deadlocked))
    # long idle-in-transaction sessions that block nobody: named, but not the incident
    blocking = {b for bs in graph.values() for b in bs}
    at = ctx.captured
    idle_tx = [
        (pid, s)
        for pid, s in ctx.sessions.items()
        if str(s.data.get("state", "")).startswith("idle in transaction")
        and pid not in blocking
        and (_age_of(s.data, "state_change", at) or 0) >= IDLE_TX_NOTABLE_S
    ]
    if idle_tx and len(idle_tx) < 5:  # many of them are the connection analysis' pool leak
        pid, s = max(idle_tx, key=lambda ps: _age(ps[1].data.get("state_change"), at) or 0)
        age = _age_of(s.data, "state_change", at) or 0
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="idle_in_transaction_not_blocking",
                category=Category.HEALTHY,
                title=f"pid {pid} idle in transaction for {human_duration(age)}, blocking nobody",
                mechanism=(
                    f"pid {pid} ({s.data.get('application_name') or s.data.get('usename')}) has been idle in "
                    "transaction "
                    f"for {human_duration(age)} but no session waits for it: not the cause of waits now (it does hold "
                    "back vacuum; set idle_in_transaction_session_timeout)."
                ),
                object=f"pid {pid}",
                score=0.2,
                tags=[f"pid:{pid}"],
                evidence=[EvidenceRef(item=s.id, field="state", value=s.data.get("state"))],
            )
        )
    return out


def _relation_between(ctx: _Context, root: int, waiters: set[int]) -> tuple[str | None, str | None, list[EvidenceRef]]:
    """The relation the waiters wait on and the mode the root holds on it, with the pg_locks rows showing it."""
    refs: list[EvidenceRef] = []
    waiting_rel: Counter[str] = Counter()
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) in waiters and d.get("relation") is not None:
            waiting_rel[str(d["relation"])] += 2 if not d.get("granted") else 1
    held: dict[str, tuple[str, EvidenceItem]] = {}
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) == root and d.get("granted") and d.get("relation") is not None:
            rel, held_mode = str(d["relation"]), str(d.get("mode"))
            prev = held.get(rel)
            if prev is None or _rank(held_mode) > _rank(prev[0]):
                held[rel] = (held_mode, lk)
    relation = next((r for r, _ in waiting_rel.most_common() if r in held), None)
    if relation is None and held:
        relation = next(iter(sorted(held, key=lambda r: -_rank(held[r][0]))))
    if relation is None and waiting_rel:
        relation = waiting_rel.most_common(1)[0][0]
    mode: str | None = None
    if relation and relation in held:
        mode, lk = held[relation]
        refs.append(EvidenceRef(item=lk.id, field="mode", value=mode))
    if relation is None:
        for pid in (root, *waiters):
            s = ctx.sessions.get(pid)
            m = _RELATION_IN_QUERY.search(str(s.data.get("query") or "")) if s else None
            if m:
                relation = m.group(1).strip('"')
                break
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) in waiters and not d.get("granted"):
            refs.append(EvidenceRef(item=lk.id, field="granted", value=False))
            break
    return relation, mode, refs


def _rank(mode: str) -> int:
    return _STRENGTH.index(mode) if mode in _STRENGTH else -1


def _blocker_finding(ctx: _Context, root: int, waiters: set[int]) -> Finding:
    at = ctx.captured
    s = ctx.sessions.get(root)
    d = s.data if s else {}
    state = str(d.get("state") or "unknown")
    app = d.get("application_name") or None
    db = d.get("datname") or ctx.db_name()
    relation, mode, lock_refs = _relation_between(ctx, root, waiters)
    idle_for = _age_of(d, "state_change", at)
    xact_age = _age_of(d, "xact_start", at)
    query = " ".join(str(d.get("query") or "").split())[:200]
    on = f" on relation {relation}" if relation else ""
    holds = f"holds {mode}{on}" if mode else f"holds locks{on}"
    # waiters queued on its transaction id or a tuple wait for the rows its statement changed
    row_wait = any(
        not lk.data.get("granted") and lk.data.get("locktype") in ("transactionid", "tuple")
        for lk in ctx.locks
        if _int(lk.data.get("pid")) in waiters
    )
    if row_wait:
        verb = (query.split() or ["statement"])[0].upper()
        verb = verb if verb in ("UPDATE", "DELETE", "INSERT", "SELECT") else "statement"
        holds = f"holds the row locks of its {verb}{on}"
        holds += f" ({mode})" if mode else ""
    who = f"pid {root}" + (f" ({app}" + (f", user {d.get('usename')}" if d.get("usename") else "") + ")" if app else "")
    n = len(waiters)
    refs: list[EvidenceRef] = []
    if s:
        refs.append(EvidenceRef(item=s.id, field="state", value=state))
        if d.get("xact_start") is not None:
            refs.append(EvidenceRef(item=s.id, field="xact_start", value=d.get("xact_start")))
        if query:
            refs.append(EvidenceRef(item=s.id, field="query", value=query))
    refs += lock_refs
    if state.startswith("idle in transaction"):
        code = "idle_in_transaction_blocker"
        ran = f"'{query}'" if query else "its statements"
        mech = (
            f"{who} opened a transaction{f' {human_duration(xact_age)} ago' if xact_age is not None else ''}, ran "
            f"{ran}, and has sat idle in "
            f"transaction{f' for {human_duration(idle_for)}' if idle_for is not None else ''} "
            f"without committing; it {holds}, so {n} session(s) wait behind it."
        )
        title = f"pid {root} idle in transaction {holds}, blocking {n}"
    else:
        ddl = bool(_DDL.search(query))
        code = "ddl_lock_blocker" if ddl else "long_transaction_blocker"
        dur = _age_of(d, "query_start", at)
        mech = (
            f"{who} is {state} running {'DDL ' if ddl else ''}'{query or '?'}'"
            f"{f' for {human_duration(dur)}' if dur is not None else ''} inside a transaction"
            f"{f' open {human_duration(xact_age)}' if xact_age is not None else ''}; it {holds}, so {n} "
            "session(s) wait behind it."
        )
        title = f"pid {root} ({state}{', DDL' if ddl else ''}) {holds}, blocking {n}"
    asked = ctx.asked_databases()
    elsewhere = bool(asked) and bool(d.get("datname")) and d.get("datname") not in asked
    if elsewhere:  # on the same server, but not in the database the checks were pointed at
        mech += f" (This is in database {d.get('datname')}, not in {', '.join(sorted(asked))}.)"
    tags = [f"pid:{root}", f"db:{db}"]
    if relation:
        tags.append(f"relation:{relation}")
    if app:
        tags.append(f"service:{app}")
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code=code,
        category=Category.CODE_DEFECT,
        title=title,
        mechanism=mech,
        object=f"pid {root}" + (f" on relation {relation}" if relation else ""),
        score=min(0.95, 0.7 + 0.05 * n) - (0.1 if elsewhere else 0.0),
        ts=d.get("xact_start") if isinstance(d.get("xact_start"), int | float) else None,
        tags=tags,
        explains=[
            "db_waits",
            "latency",
            "connections_high",
            "errors",
            "http_5xx",
            "upstream_timeout",
            "cpu_high",
            "app_pool_exhausted",
        ],
        evidence=refs,
        actions=[
            Action(
                description="Show the blocker, its transaction age and what waits for it",
                command=(
                    f'psql -d {db} -c "SELECT pid, state, now()-xact_start AS xact_age, now()-state_change AS idle, '
                    f"application_name, query FROM pg_stat_activity WHERE pid = {root} OR {root} = "
                    'ANY(pg_blocking_pids(pid))"'
                ),
            ),
            Action(
                description=f"Terminate pid {root}: its transaction rolls back and the waiters proceed",
                command=f"psql -d {db} -c 'SELECT pg_terminate_backend({root})'",
                kind="write",
                tool="postgres_terminate_session",
                args={"pid": root, "database": db},
            ),
            Action(
                description="Stop it recurring: end forgotten transactions automatically",
                command=f"psql -d {db} -c \"ALTER DATABASE {db} SET idle_in_transaction_session_timeout = '60s'\"",
                kind="write",
            ),
        ],
    )


def _waiters_finding(ctx: _Context, root: int, waiters: set[int]) -> Finding:
    at = ctx.captured
    items = [ctx.sessions[p] for p in sorted(waiters) if p in ctx.sessions]
    waited = [a for a in (_age_of(s.data, "query_start", at) for s in items) if a is not None]
    relation, _, _ = _relation_between(ctx, root, waiters)
    db = next((str(s.data.get("datname")) for s in items if s.data.get("datname")), ctx.db_name())
    sample = " ".join(str(items[0].data.get("query") or "").split())[:120] if items else ""
    pids = sorted(waiters)
    tags = [f"pid:{p}" for p in pids[:20]] + [f"db:{db}"]
    if relation:
        tags.append(f"relation:{relation}")
    for s in items:
        if s.data.get("application_name"):
            tags.append(f"service:{s.data['application_name']}")
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="symptom",
        code="db_waits",
        category=Category.CODE_DEFECT,
        title=f"{len(pids)} session(s) waiting for pid {root}" + (f" on {relation}" if relation else ""),
        mechanism=(
            f"pids {', '.join(map(str, pids[:10]))} wait on a lock held by pid {root}"
            + (f" (relation {relation})" if relation else "")
            + (f", the longest for {human_duration(max(waited))}" if waited else "")
            + (f", e.g. '{sample}'" if sample else "")
            + "."
        ),
        object=f"{len(pids)} waiting sessions",
        score=0.6,
        ts=min(
            (float(q) for q in (s.data.get("query_start") for s in items) if isinstance(q, int | float)), default=None
        ),
        tags=list(dict.fromkeys(tags)),
        evidence=[
            EvidenceRef(item=s.id, field="wait_event_type", value=s.data.get("wait_event_type") or "Lock")
            for s in items[:5]
        ],
    )


def _deadlock_finding(ctx: _Context, pids: set[int]) -> Finding:
    items = [ctx.sessions[p] for p in sorted(pids) if p in ctx.sessions]
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="deadlock",
        category=Category.CODE_DEFECT,
        title=f"deadlock between pids {', '.join(map(str, sorted(pids)))}",
        mechanism=(
            f"pids {', '.join(map(str, sorted(pids)))} wait for each other in a cycle: transactions "
            "take the same locks in different orders."
        ),
        object="pids " + ", ".join(map(str, sorted(pids))),
        score=0.8,
        tags=[f"pid:{p}" for p in sorted(pids)],
        explains=["db_waits", "errors"],
        evidence=[EvidenceRef(item=s.id, field="query", value=str(s.data.get("query"))[:200]) for s in items[:4]],
    )


# ---------------------------------------------------------------- connections


def _connections(ctx: _Context) -> list[Finding]:
    out: list[Finding] = []
    clients = [
        (pid, s)
        for pid, s in ctx.sessions.items()
        if str(s.data.get("backend_type") or "client backend") == "client backend"
    ]
    mx = ctx.max_connections()
    n_clients = sum(_weight(s) for _, s in clients)  # a grouped pg_stat_activity row stands for `count` sessions
    log_hits = [r for r in ctx.logs if PG_TOO_MANY.search(r.msg)]
    conn_metric = ctx.metric("DatabaseConnections", "pg_stat_activity_count", "pg_stat_database_numbackends")
    db = ctx.db_name()
    near = bool(mx and clients and n_clients >= CONNECTIONS_HIGH * mx[0])
    if not near and not log_hits:
        return out
    refs: list[EvidenceRef] = []
    if mx:
        refs.append(mx[1])
    if log_hits:
        refs += first_and_last_refs(log_hits)
    for m in conn_metric[:1]:
        pts = _pts(m)
        if pts:
            i = max(range(len(pts)), key=lambda k: pts[k][1])
            refs.append(_mref(m, i, pts))
    count_txt = (
        f"{n_clients} of max_connections {mx[0]}" if mx and clients else (f"{n_clients} sessions" if clients else "")
    )
    # most connections are lock waiters: the lock is the cause, the connection pile-up its symptom
    waiting = [p for p, _ in clients if p in ctx.lock_pids]
    if clients and len(waiting) >= 0.3 * n_clients:
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="symptom",
                code="connections_high",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"connections high on {db} ({count_txt}), {len(waiting)} of them lock waiters",
                mechanism=(
                    f"{db} is near its connection limit ({count_txt}) because {len(waiting)} sessions are stuck "
                    "waiting on locks and pools open more."
                ),
                object=f"database {db}",
                score=0.5,
                tags=[f"db:{db}"],
                evidence=refs,
            )
        )
        return out
    by_app: Counter[str] = Counter()
    for _, s in clients:
        by_app[str(s.data.get("application_name") or s.data.get("usename") or "?")] += _weight(s)
    mech_extra = ""
    title_app = ""
    app_tags: list[str] = []
    if clients:
        app, n_app = by_app.most_common(1)[0]
        app_sessions = [
            s for _, s in clients if str(s.data.get("application_name") or s.data.get("usename") or "?") == app
        ]
        idle = [s for s in app_sessions if str(s.data.get("state", "")).startswith("idle")]
        idle_tx = [s for s in app_sessions if str(s.data.get("state", "")).startswith("idle in transaction")]
        at = ctx.captured
        oldest = max((_age_of(s.data, "state_change", at) or 0 for s in idle), default=0)
        n_idle, n_idle_tx = sum(map(_weight, idle)), sum(map(_weight, idle_tx))
        leak = n_app >= LEAK_APP_SHARE * n_clients and n_idle >= LEAK_IDLE_SHARE * n_app
        title_app = f", {n_app} held by {app}"
        mech_extra = (
            f"; {app} holds {n_app} of them, {n_idle} idle ({n_idle_tx} idle in transaction, the oldest idle for "
            f"{human_duration(oldest)})" + (": its pool leaks connections (taken and never returned)" if leak else "")
        )
        app_tags = [f"service:{app}"]
        refs += [
            EvidenceRef(item=s.id, field="state", value=s.data.get("state"))
            for s in (idle_tx or idle or app_sessions)[:3]
        ]
        code = "connection_pool_leak" if leak else "connection_exhaustion"
    else:
        code = "connection_exhaustion"
    if log_hits and not clients:
        mech_extra += (
            f"; clients were refused {len(log_hits)}x {span_text(log_hits[0].ts, log_hits[-1].ts)} "
            f"('{log_hits[0].msg.strip()[:120]}')"
        )
    elif log_hits:
        mech_extra += f"; {len(log_hits)} refusals logged"
    first = log_hits[0].ts if log_hits else None
    if not clients:
        # refusals alone say the slots are gone, not who holds them: a leak, a lock pile-up, a stalled disk and a
        # traffic surge all look like this, so it is a symptom whose cause needs the sessions
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="symptom",
                code="db_connection_errors",
                category=Category.UNKNOWN,
                title=f"{db} refuses connections: out of connection slots",
                mechanism=f"{db} has run out of connection slots{mech_extra}; nothing shows who holds them.",
                object=f"database {db} connections",
                score=0.6,
                ts=first,
                tags=[f"db:{db}"],
                evidence=refs,
                needs=[
                    f"pg_stat_activity of {db} grouped by application_name and state (who holds the connections)",
                    f"pg_locks of {db} (whether the sessions wait on a lock)",
                ],
                actions=[
                    Action(
                        description="Who holds the connections, by application and state",
                        command=f'psql -d {db} -c "SELECT application_name, state, count(*), max(now()-state_change) FROM pg_stat_activity GROUP BY 1,2 ORDER BY 3 DESC"',  # noqa: E501 (an exact command or data line reads better whole)
                    )
                ],
            )
        )
        return out
    out.append(
        Finding(
            analyzer="database",
            domain=Domain.DATABASE,
            role="cause",
            code=code,
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{db} out of connections" + (f" ({count_txt}{title_app})" if count_txt else ""),
            mechanism=f"{db} has run out of connection slots"
            + (f" ({count_txt})" if count_txt else "")
            + mech_extra
            + ".",
            object=f"database {db} connections",
            score=0.85 if (near and log_hits) or code == "connection_pool_leak" else 0.75,
            ts=first,
            tags=[f"db:{db}", *app_tags],
            explains=[
                "connections_high",
                "app_pool_exhausted",
                "db_connection_errors",
                "errors",
                "http_5xx",
                "latency",
                "upstream_timeout",
                "pod_restarts",
            ],
            evidence=refs,
            actions=[
                Action(
                    description="Who holds the connections, by application and state",
                    command=f'psql -d {db} -c "SELECT application_name, state, count(*), max(now()-state_change) FROM pg_stat_activity GROUP BY 1,2 ORDER BY 3 DESC"',  # noqa: E501 (an exact command or data line reads better whole)
                ),
                Action(
                    description="Close connections idle for over 10 minutes",
                    command=(
                        f'psql -d {db} -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state LIKE '
                        "'idle%' AND now()-state_change > interval '10 minutes'\""
                    ),
                    kind="write",
                ),
                Action(
                    description="Cap the pool or put PgBouncer in front; check the application returns connections (leak)",  # noqa: E501 (an exact command or data line reads better whole)
                    command="kubectl get deploy -A -o yaml | grep -iE 'pool|max_conn|DB_POOL'",
                ),
            ],
        )
    )
    return out


# ---------------------------------------------------------------- CPU and Performance Insights


def _cpu(ctx: _Context) -> list[Finding]:
    out: list[Finding] = []
    for m in ctx.metric("CPUUtilization", "os.cpuUtilization.total.avg", "os.cpuUtilization.total"):
        pts = _pts(m)
        sat = saturation(pts, 100.0, CPU_SATURATED / 100.0, min_points=3)
        if not sat:
            continue
        ident = _instance(m) or ctx.db_name()
        top = _top_statement(ctx)
        cpu_ref = _mref(m, -1, pts)
        since = f"since {fmt_ts(sat.since)}"
        if top and str(top[0].data.get("statement", "")).lower().startswith("autovacuum:"):
            continue  # the I/O-storm analysis names the vacuum
        if top and top[1] >= DOMINANT_SHARE:
            item, share, total = top
            stmt = " ".join(str(item.data.get("statement") or "").split())
            load = item.data.get("load")
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="cpu_saturated_by_query",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{ident} CPU {sat.value:.0f}% driven by one statement ({share:.0%} of DB load)",
                    mechanism=(
                        f"{ident} CPU has been at {sat.value:.0f}% {since}; one statement carries {share:.0%} of the "
                        f"database load ({load} AAS of {total:.2f}): '{stmt[:240]}'"
                        f" (id {item.data.get('id')})."
                    ),
                    object=f"statement {item.data.get('id')} on {ident}",
                    score=0.9,
                    ts=sat.since,
                    tags=[f"db:{ident}", f"query:{item.data.get('id')}"],
                    explains=[
                        "cpu_high",
                        "latency",
                        "db_waits",
                        "errors",
                        "upstream_timeout",
                        "http_5xx",
                        "replica_lag",
                    ],
                    evidence=[
                        cpu_ref,
                        EvidenceRef(item=item.id, field="statement", value=stmt[:300]),
                        EvidenceRef(item=item.id, field="load", value=load),
                    ],
                    actions=[
                        Action(
                            description="The statement's plan and cost now (look for a sequential scan or a missing index)",  # noqa: E501 (an exact command or data line reads better whole)
                            command=f'psql -c "EXPLAIN (ANALYZE, BUFFERS) {stmt[:200]}"',
                        ),
                        Action(
                            description="Top statements by total time",
                            command='psql -c "SELECT queryid, calls, total_exec_time, mean_exec_time, left(query, 120) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 10"',  # noqa: E501 (an exact command or data line reads better whole)
                        ),
                        Action(
                            description="Cancel the running copies of the statement",
                            command=(
                                'psql -c "SELECT pid, pg_cancel_backend(pid) FROM pg_stat_activity WHERE state = '
                                "'active' "
                                "AND query LIKE '<statement prefix>%'\""
                            ),
                            kind="write",
                            tool="postgres_cancel_query",
                            args={"pid": "<pid running it>", "database": ident},
                        ),
                    ],
                )
            )
        else:
            listing = ""
            if top:
                listing = (
                    f"; the top statement has only {top[1]:.0%} of the load: "
                    f"'{' '.join(str(top[0].data.get('statement') or '').split())[:120]}'"
                )
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="symptom",
                    code="cpu_high",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{ident} CPU at {sat.value:.0f}% {since}",
                    mechanism=(
                        f"{ident} CPU has been at or above {CPU_SATURATED:.0f}% {since} (now "
                        f"{sat.value:.0f}%){listing}."
                    ),
                    object=f"database {ident} CPU",
                    score=0.55,
                    ts=sat.since,
                    tags=[f"db:{ident}"],
                    evidence=[cpu_ref],
                    needs=[]
                    if top
                    else [f"Performance Insights top SQL (DescribeDimensionKeys db.sql_tokenized) for {ident}"],
                )
            )
    return out


def _top_statement(ctx: _Context) -> tuple[EvidenceItem, float, float] | None:
    """The statement with the most load, its share of the load (of db.load when known, else of all statements)."""
    if not ctx.pi:
        return None
    groups: dict[str, list[EvidenceItem]] = defaultdict(list)
    for it in ctx.pi:
        groups[str(it.data.get("group") or "db.sql")].append(it)
    items = groups.get("db.sql_tokenized") or groups.get("db.sql") or next(iter(groups.values()))
    loads = [(it, float(it.data.get("load") or 0.0)) for it in items]
    total = sum(v for _, v in loads)
    db_load = ctx.metric("db.load.avg", "db.load")
    if db_load:
        pts = _pts(db_load[0])
        if pts:
            recent = [v for _, v in pts[-max(3, len(pts) // 4) :]]
            total = max(total, sum(recent) / len(recent))
    if total <= 0:
        return None
    it, v = max(loads, key=lambda iv: iv[1])
    return it, v / total, total


# ---------------------------------------------------------------- storage


def _storage(ctx: _Context) -> list[Finding]:
    out: list[Finding] = []
    metric_found = False
    for m in ctx.metric("FreeStorageSpace", "FreeLocalStorage"):
        pts = _pts(m)
        if len(pts) < 2:
            continue
        metric_found = True
        ident = _instance(m) or ctx.db_name()
        last = pts[-1][1]
        most = max(v for _, v in pts)
        ttf = time_to_exhaustion(pts)
        full = last <= max(STORAGE_FULL_FRACTION * most, STORAGE_FULL_BYTES) or ttf == 0.0
        soon = ttf is not None and ttf <= STORAGE_HORIZON_S
        if not (full or soon):
            continue
        start = _decline_start(pts)
        when = "is full" if full else f"will be full in about {human_duration(ttf or 0)} at the current rate"
        wal = _wal_retained(ctx)
        out.append(
            _storage_finding(
                ctx,
                ident,
                f"{ident} storage {when}: FreeStorageSpace fell from {_gib(most)} to {_gib(last)}"
                + (f" since {fmt_ts(start)}" if start else "")
                + (f"; {wal[0]}" if wal else "")
                + ".",
                [_mref(m, -1, pts), *([wal[1]] if wal else [])],
                start,
                ttf,
                0.9 if full else 0.75,
            )
        )
    if out:
        return out
    # no storage metric (or it does not show it): the database's own words and RDS events still do
    lines = [r for r in signature_records(ctx.evidence) if is_db_storage_line(r)]
    events = [
        e
        for e in ctx.events
        if _RDS_STORAGE.search(str(e.data.get("message", "")))
        or ("storage" in str(e.data.get("categories", "")).lower() and "full" in str(e.data.get("message", "")).lower())
    ]
    if not lines and not events:
        return out
    ident = ctx.db_name()
    refs: list[EvidenceRef] = [ref_of(r) for r in lines[:2]]
    refs += [EvidenceRef(item=e.id, field="message", value=e.data.get("message")) for e in events[:2]]
    stamps = [float(r.ts) for r in lines if r.ts is not None]
    stamps += [float(t) for t in (e.data.get("ts") for e in events) if isinstance(t, int | float)]
    first = min(stamps, default=None)
    what = f"'{lines[0].msg.strip()[:160]}' x{len(lines)}" if lines else f"RDS event '{events[0].data.get('message')}'"
    missing = (
        "" if metric_found else " (no FreeStorageSpace metric in the evidence: inferred from the database's own errors)"
    )
    out.append(
        _storage_finding(
            ctx, ident, f"{ident} has run out of storage: {what}{missing}.", refs, first, None, 0.85 if lines else 0.75
        )
    )
    return out


def _rds_modify(ident: str, options: str, description: str) -> Action:
    """A write action that changes an RDS instance's class or storage at once (not at the next maintenance window)."""
    return Action(
        description=description,
        command=f"aws rds modify-db-instance --db-instance-identifier {ident} {options} --apply-immediately",
        kind="write",
    )


def _storage_finding(
    ctx: _Context,
    ident: str,
    mechanism: str,
    refs: list[EvidenceRef],
    ts: float | None,
    ttf: float | None,
    score: float,
) -> Finding:
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="storage_full" if ttf is None or ttf == 0 else "storage_trend_to_full",
        category=Category.RESOURCE_EXHAUSTION,
        title=f"{ident} storage " + ("full" if ttf is None or ttf == 0 else f"full in {human_duration(ttf)}"),
        mechanism=mechanism,
        object=f"storage of {ident}",
        score=score,
        ts=ts,
        tags=[f"db:{ident}", f"fs:{ident}"],
        explains=["errors", "db_connection_errors", "http_5xx", "latency", "disk_full", "db_waits", "upstream_timeout"],
        evidence=refs,
        actions=[
            Action(
                description="Free storage over the last day",
                command=(
                    "aws cloudwatch get-metric-statistics --namespace AWS/RDS --metric-name FreeStorageSpace "
                    f"--dimensions Name=DBInstanceIdentifier,Value={ident} --statistics Minimum --period 300 "
                    "--start-time $(date -u -d '-1 day' +%FT%TZ) --end-time $(date -u +%FT%TZ)"
                ),
            ),
            Action(
                description="What uses the space (largest relations, WAL kept by replication slots)",
                command='psql -c "SELECT relname, pg_size_pretty(pg_total_relation_size(relid)) FROM pg_statio_user_tables ORDER BY pg_total_relation_size(relid) DESC LIMIT 10" -c "SELECT slot_name, active, pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) FROM pg_replication_slots"',  # noqa: E501 (an exact command or data line reads better whole)
            ),
            _rds_modify(
                ident,
                "--allocated-storage <GiB> --max-allocated-storage <GiB>",
                "Grow the storage (or enable storage autoscaling)",
            ),
        ],
    )


def _wal_retained(ctx: _Context) -> tuple[str, EvidenceRef] | None:
    """WAL kept on disk for a replication slot (a consumer that stopped reading): what eats the storage."""
    for m in ctx.metric("ReplicationSlotDiskUsage", "TransactionLogsDiskUsage", "OldestReplicationSlotLag"):
        pts = _pts(m)
        if len(pts) >= 3 and pts[-1][1] > 2 * max(pts[0][1], 1.0):
            return (
                f"{m.data.get('name')} grew from {_gib(pts[0][1])} to {_gib(pts[-1][1])}: WAL retained for a "
                "replication "
                "slot whose consumer stopped reading",
                _mref(m, -1, pts),
            )
    return None


def _decline_start(pts: list[Point]) -> float | None:
    """Where a falling series left its plateau: the last point at (or within 2% of) its maximum."""
    most = max(v for _, v in pts)
    idx = max(i for i, (_, v) in enumerate(pts) if v >= 0.98 * most)
    return pts[idx][0] if idx < len(pts) - 1 else None


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


# ---------------------------------------------------------------- replication, burst balance, I/O storms


def _replica_lag(ctx: _Context) -> list[Finding]:
    out = []
    for m in ctx.metric("ReplicaLag", "AuroraReplicaLag", "pg_replication_lag", "pg_replication_lag_seconds"):
        pts = _pts(m)
        if len(pts) < 3:
            continue
        ident = _instance(m) or ctx.db_name()
        last = pts[-1][1] / (1000.0 if str(m.data.get("name")) == "AuroraReplicaLag" else 1.0)
        peak = max(v for _, v in pts)
        if last < REPLICA_LAG_S:
            if peak >= REPLICA_LAG_S * (1000.0 if str(m.data.get("name")) == "AuroraReplicaLag" else 1.0):
                out.append(
                    Finding(
                        analyzer="database",
                        domain=Domain.DATABASE,
                        role="benign",
                        code="replica_lag_recovered",
                        category=Category.HEALTHY,
                        title=f"{ident} replica lag peaked and recovered",
                        mechanism=f"{ident}'s replica lag peaked at {peak:.0f} and is back to {last:.0f}s.",
                        object=f"replica {ident}",
                        score=0.2,
                        tags=[f"db:{ident}"],
                        evidence=[_mref(m, -1, pts)],
                    )
                )
            continue
        rising_since = next((t for t, v in pts if v >= REPLICA_LAG_S), pts[0][0])
        driver = _write_surge(ctx, rising_since)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="replication_lag",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"replica {ident} {last:.0f}s behind",
                mechanism=(
                    f"replica {ident} is {last:.0f}s behind its primary (over {REPLICA_LAG_S:.0f}s since "
                    f"{fmt_ts(rising_since)}): it replays WAL slower than the primary writes it"
                    + (f"; {driver[0]}" if driver else "")
                    + "."
                ),
                object=f"replica {ident}",
                score=0.8,
                ts=rising_since,
                tags=[f"db:{ident}"],
                explains=["replica_lag", "stale_reads", "errors", "latency"],
                evidence=[_mref(m, -1, pts), *([driver[1]] if driver else [])],
                actions=[
                    Action(
                        description="Replay position and lag on the replica",
                        command='psql -c "SELECT now() - pg_last_xact_replay_timestamp() AS lag, pg_is_wal_replay_paused()"',  # noqa: E501 (an exact command or data line reads better whole)
                    ),
                    Action(
                        description="Long queries on the replica that hold replay back",
                        command=(
                            'psql -c "SELECT pid, now()-query_start, state, left(query,100) FROM pg_stat_activity '
                            "WHERE state <> 'idle' ORDER BY 2 DESC LIMIT 10\""
                        ),
                    ),
                ],
            )
        )
    return out


def _write_surge(ctx: _Context, before: float) -> tuple[str, EvidenceRef] | None:
    for m in ctx.metric("WriteIOPS", "WriteThroughput", "TransactionLogsGeneration"):
        pts = _pts(m)
        step = step_change(pts)
        if step and step.after > step.before and step.ts <= before + 600:
            return (
                (
                    f"{m.data.get('name')} on {_instance(m) or 'the primary'} stepped from {step.before:.0f} to "
                    f"{step.after:.0f} at {fmt_ts(step.ts)}"
                ),
                _mref(m, step.index if step.index < len(pts) else -1, pts),
            )
    return None


# what a database whose storage I/O is saturated explains: slow statements, queues, spent credits, lagging replicas
_IO_EFFECTS = [
    "io_high",
    "latency",
    "db_waits",
    "replica_lag",
    "replication_lag",
    "upstream_timeout",
    "burst_balance_exhausted",
    "cpu_high",
    "errors",
]
# CPU credits (burstable t2/t3/t4g classes) exhausted at <= 5% of the most seen (or 1 credit)
CREDITS_EMPTY = 0.05


def _credits_exhausted(
    m: EvidenceItem,
    pts: list[Point],
    ident: str,
    empty_at: float,
    *,
    code: str,
    title: str,
    mechanism: str,
    object: str,
    explains: list[str],
    fix: Action,
) -> Finding:
    """A burstable AWS resource (CPU or storage) that spent its credit balance and is throttled to its baseline:
    the balance metric's last point is the evidence, moving off the credit model the fix."""
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code=code,
        category=Category.RESOURCE_EXHAUSTION,
        title=title,
        mechanism=mechanism,
        object=object,
        score=0.85,
        ts=empty_at,
        tags=[f"db:{ident}"],
        explains=explains,
        evidence=[_mref(m, -1, pts)],
        actions=[fix],
    )


def _cpu_credits(ctx: _Context) -> list[Finding]:
    out = []
    for m in ctx.metric("CPUCreditBalance"):
        pts = _pts(m)
        if len(pts) < 2:
            continue
        last, peak = pts[-1][1], max(v for _, v in pts)
        if peak < 10 or last > max(CREDITS_EMPTY * peak, 1.0):
            continue
        ident = _instance(m) or ctx.db_name()
        empty_at = next((t for t, v in pts if v <= max(CREDITS_EMPTY * peak, 1.0)), pts[-1][0])
        out.append(
            _credits_exhausted(
                m,
                pts,
                ident,
                empty_at,
                code="cpu_credits_exhausted",
                title=f"{ident} out of CPU credits (CPUCreditBalance {last:.0f})",
                mechanism=(
                    f"{ident} is a burstable instance whose CPUCreditBalance fell from {peak:.0f} to {last:.0f} (empty "
                    f"since {fmt_ts(empty_at)}): its CPU is throttled to the baseline share, so everything it runs "
                    "(queries, WAL replay) slows down."
                ),
                object=f"CPU credits of {ident}",
                explains=[
                    "replication_lag",
                    "replica_lag",
                    "latency",
                    "cpu_high",
                    "db_waits",
                    "upstream_timeout",
                    "errors",
                ],
                fix=_rds_modify(
                    ident,
                    "--db-instance-class db.r6g.large",
                    "Move off the burstable class (or enable unlimited credits)",
                ),
            )
        )
    return out


def _burst_balance(ctx: _Context) -> list[Finding]:
    out = []
    for m in ctx.metric("BurstBalance", "EBSIOBalance%", "EBSByteBalance%"):
        pts = _pts(m)
        if len(pts) < 2:
            continue
        last = pts[-1][1]
        peak = max(v for _, v in pts)
        if last > BURST_EMPTY or peak < 50:
            continue
        ident = _instance(m) or ctx.db_name()
        empty_at = next((t for t, v in pts if v <= BURST_EMPTY), pts[-1][0])
        name = str(m.data.get("name"))
        out.append(
            _credits_exhausted(
                m,
                pts,
                ident,
                empty_at,
                code="burst_balance_exhausted",
                title=f"{ident} {name} exhausted ({last:.0f}%)",
                mechanism=(
                    f"{ident}'s {name} fell from {peak:.0f}% to {last:.0f}% (empty since {fmt_ts(empty_at)}): the "
                    "volume "
                    "spent its I/O credits and is throttled to its baseline IOPS, so every read and write queues."
                ),
                object=f"storage volume of {ident}",
                explains=["latency", "io_high", "db_waits", "errors", "upstream_timeout", "replica_lag", "cpu_high"],
                fix=_rds_modify(
                    ident, "--storage-type gp3", "Move to gp3 (baseline 3000 IOPS, no credits) or provisioned IOPS"
                ),
            )
        )
    return out


def _io_storms(ctx: _Context) -> list[Finding]:
    out: list[Finding] = []
    surge: tuple[EvidenceItem, StepChange | None, list[Point]] | None = None
    for m in ctx.metric("WriteIOPS", "WriteThroughput", "DiskQueueDepth", "WriteLatency"):
        pts = _pts(m)
        step = step_change(pts)
        if step and step.after > step.before:
            surge = (m, step, pts)
            break
        sat_like = [v for _, v in pts]
        if len(sat_like) >= 6:
            base = sorted(sat_like)[len(sat_like) // 2]
            tail = sat_like[-3:]
            if base > 0 and min(tail) >= 3 * base:
                surge = (m, None, pts)
                break
    checkpoints = [r for r in ctx.logs if PG_CHECKPOINT.search(r.msg)]
    vacuums = [r for r in ctx.logs if PG_VACUUM.search(r.msg)]
    vac_sessions = [
        s
        for s in ctx.sessions.values()
        if "autovacuum" in str(s.data.get("backend_type", ""))
        or str(s.data.get("query", "")).lower().startswith("autovacuum:")
    ]
    # Performance Insights names a vacuum among the top statements ("autovacuum: VACUUM public.events ...")
    top = _top_statement(ctx)
    vac_pi = [it for it in ctx.pi if str(it.data.get("statement", "")).lower().startswith("autovacuum:")]
    vac_pi_heavy = bool(vac_pi) and top is not None and top[0] in vac_pi
    ident = ctx.db_name()
    surge_txt, surge_refs = "", []
    if surge:
        m, step, pts = surge
        if step:
            surge_txt = (
                f"; {m.data.get('name')} stepped from {step.before:.0f} to {step.after:.0f} at {fmt_ts(step.ts)}"
            )
        else:
            surge_txt = f"; {m.data.get('name')} is now {pts[-1][1]:.0f}, several times its usual level"
        surge_refs = [_mref(m, -1, pts)]
    if checkpoints:
        m_apart = re.search(r"\((\d+) seconds? apart\)", checkpoints[-1].msg)
        apart = f" every {m_apart.group(1)}s" if m_apart else ""
        wal = next((s.data.get("max_wal_size") for s in ctx.settings if s.data.get("max_wal_size")), None)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="checkpoint_storm",
                category=Category.CONFIGURATION_ERROR,
                title=f"{ident}: checkpoints{apart} (max_wal_size too small for the write rate)",
                mechanism=(
                    f"{ident} forces checkpoints{apart} ({len(checkpoints)} warnings "
                    f"{span_text(checkpoints[0].ts, checkpoints[-1].ts)}): "
                    f"WAL fills max_wal_size{f' ({wal})' if wal else ''} faster than checkpoint_timeout, so every "
                    f"checkpoint flushes dirty pages in a burst of writes{surge_txt}."
                ),
                object=f"checkpoints of {ident}",
                score=0.8 if surge else 0.65,
                ts=checkpoints[0].ts,
                tags=[f"db:{ident}"],
                explains=[*_IO_EFFECTS],
                evidence=[ref_of(checkpoints[-1]), *surge_refs],
                actions=[
                    Action(description="Checkpoint statistics", command='psql -c "SELECT * FROM pg_stat_bgwriter"'),
                    Action(
                        description="Raise max_wal_size so checkpoints are spread by checkpoint_timeout",
                        command='psql -c "ALTER SYSTEM SET max_wal_size = \'8GB\'" -c "SELECT pg_reload_conf()"',
                        kind="write",
                    ),
                ],
            )
        )
    heavy_vac = []
    for r in vacuums:
        el = _ELAPSED.search(r.msg)
        if "wraparound" in r.msg.lower() or (el and float(el.group(1)) >= VACUUM_HEAVY_S):
            heavy_vac.append(r)
    vac_refs: list[EvidenceRef] = []
    table = None
    if heavy_vac or vac_pi_heavy or (vac_sessions and surge) or (vacuums and surge):
        src = heavy_vac or vacuums
        if src:
            mt = _VACUUM_TABLE.search(src[-1].msg)
            table = mt.group(1) if mt else None
            vac_refs.append(ref_of(src[-1]))
        for it in vac_pi[:1]:
            mt = _VACUUM_TABLE.search(str(it.data.get("statement", "")))
            table = table or (mt.group(1) if mt else None)
            vac_refs.append(EvidenceRef(item=it.id, field="statement", value=it.data.get("statement")))
            if top and top[0] is it:
                vac_refs.append(EvidenceRef(item=it.id, field="load", value=it.data.get("load")))
        for s in vac_sessions[:1]:
            mt = _VACUUM_TABLE.search(str(s.data.get("query", "")))
            table = table or (mt.group(1) if mt else None)
            vac_refs.append(EvidenceRef(item=s.id, field="query", value=s.data.get("query")))
        wrap = any(
            "wraparound" in str(x).lower()
            for x in [
                *(r.msg for r in vacuums),
                *(s.data.get("query") for s in vac_sessions),
                *(it.data.get("statement") for it in vac_pi),
            ]
        )
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="vacuum_io_storm",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{ident}: autovacuum of {table or 'a large table'} saturating I/O",
                mechanism=(
                    f"autovacuum{' (to prevent wraparound)' if wrap else ''} of {table or 'a large table'} on {ident} "
                    "reads "
                    f"and rewrites the whole table and its indexes, saturating the volume's IOPS{surge_txt}"
                    + (f"; it is the top statement by DB load ({top[1]:.0%})" if vac_pi_heavy and top else "")
                    + "."
                ),
                object=f"autovacuum of {table or 'a table'}",
                score=0.8 if surge or vac_pi_heavy else 0.6,
                ts=(heavy_vac or vacuums)[0].ts if (heavy_vac or vacuums) else None,
                tags=[f"db:{ident}", *([f"relation:{table}"] if table else [])],
                explains=[*_IO_EFFECTS],
                evidence=vac_refs + surge_refs,
                actions=[
                    Action(
                        description="Running vacuums and their progress",
                        command='psql -c "SELECT * FROM pg_stat_progress_vacuum"',
                    ),
                    Action(
                        description="Throttle autovacuum I/O",
                        command='psql -c "ALTER SYSTEM SET autovacuum_vacuum_cost_limit = 200" -c "SELECT pg_reload_conf()"',  # noqa: E501 (an exact command or data line reads better whole)
                        kind="write",
                    ),
                ],
            )
        )
    elif vacuums and not surge:
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="autovacuum_routine",
                category=Category.HEALTHY,
                title=f"{ident}: routine autovacuum",
                mechanism=f"autovacuum ran {len(vacuums)}x on {ident}, short runs with no I/O surge: routine upkeep.",
                object=f"autovacuum on {ident}",
                score=0.1,
                tags=[f"db:{ident}"],
                evidence=[ref_of(vacuums[-1])],
            )
        )
    if surge and not out:
        m, step, pts = surge
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="symptom",
                code="io_high",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{ident}: {m.data.get('name')} surged",
                mechanism=f"{ident}{surge_txt[1:]}.",
                object=f"I/O of {ident}",
                score=0.45,
                ts=step.ts if step else None,
                tags=[f"db:{ident}"],
                evidence=surge_refs,
                needs=[
                    f"postgres log of {ident} (checkpoint and autovacuum lines)",
                    f"Performance Insights top SQL of {ident}",
                ],
            )
        )
    return out


# ---------------------------------------------------------------- RDS events


def _rds_events(ctx: _Context) -> list[Finding]:
    out: list[Finding] = []
    failovers = [
        e
        for e in ctx.events
        if _FAILOVER.search(str(e.data.get("message", ""))) or "failover" in str(e.data.get("categories", "")).lower()
    ]
    recent = [
        e
        for e in failovers
        if ctx.now is None or (_ev_ts(e) is not None and ctx.now - (_ev_ts(e) or 0) <= FAILOVER_RECENT_S)
    ]
    old = [e for e in failovers if e not in recent]
    if recent:
        by_src: dict[str, list[EvidenceItem]] = defaultdict(list)
        for e in recent:
            by_src[str(e.data.get("source_id") or e.object)].append(e)
        for src, evs in by_src.items():
            evs.sort(key=lambda e: _ev_ts(e) or 0)
            msgs = "; ".join(f"{fmt_ts(_ev_ts(e))} '{e.data.get('message')}'" for e in evs[:4])
            if any(_PLANNED_FAILOVER.search(str(e.data.get("message") or "")) for e in evs) and any(
                _FAILOVER_DONE.search(str(e.data.get("message") or "")) for e in evs
            ):
                out.append(
                    Finding(
                        analyzer="database",
                        domain=Domain.DATABASE,
                        role="benign",
                        code="db_failover_planned",
                        category=Category.HEALTHY,
                        title=f"planned failover of {src} at {fmt_ts(_ev_ts(evs[0]))}, completed",
                        mechanism=(
                            f"{src} failed over for planned maintenance and the failover completed ({msgs}): the "
                            "connections dropped while it switched are what a maintenance failover does, and end "
                            "with it"
                        ),
                        object=f"RDS instance {src}",
                        score=0.2,
                        ts=_ev_ts(evs[0]),
                        tags=[f"db:{src}"],
                        evidence=[
                            EvidenceRef(item=e.id, field="message", value=e.data.get("message")) for e in evs[:4]
                        ],
                    )
                )
                continue
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="db_failover",
                    category=Category.INFRASTRUCTURE,
                    title=f"{src} failed over / restarted at {fmt_ts(_ev_ts(evs[0]))}",
                    mechanism=(
                        f"RDS instance {src} failed over or restarted ({msgs}): connections to it were dropped and "
                        "refused until the new primary took the endpoint, so clients errored meanwhile."
                    ),
                    object=f"RDS instance {src}",
                    score=0.85,
                    ts=_ev_ts(evs[0]),
                    tags=[f"db:{src}"],
                    explains=[
                        "db_connection_errors",
                        "connection_refused",
                        "upstream_reset",
                        "errors",
                        "latency",
                        "upstream_timeout",
                        "http_5xx",
                        "pod_restarts",
                    ],
                    evidence=[EvidenceRef(item=e.id, field="message", value=e.data.get("message")) for e in evs[:4]],
                    actions=[
                        Action(
                            description="Events around the failover (the reason AWS gives)",
                            command=f"aws rds describe-events --source-identifier {src} --source-type db-instance --duration 180",  # noqa: E501 (an exact command or data line reads better whole)
                        ),
                        Action(
                            description="Check clients reconnect (DNS TTL, pool validation) after a failover",
                            command=(
                                f"aws rds describe-db-instances --db-instance-identifier {src} --query "
                                "'DBInstances[0].[DBInstanceStatus,AvailabilityZone,SecondaryAvailabilityZone]'"
                            ),
                        ),
                    ],
                )
            )
    if old:
        e = max(old, key=lambda x: _ev_ts(x) or 0)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="db_failover_old",
                category=Category.HEALTHY,
                title=f"old failover/restart of {e.data.get('source_id')} at {fmt_ts(_ev_ts(e))}",
                mechanism=(
                    f"'{e.data.get('message')}' at {fmt_ts(_ev_ts(e))} completed long before the newest evidence"
                    f"{f' ({human_duration((ctx.now or 0) - (_ev_ts(e) or 0))} earlier)' if ctx.now and _ev_ts(e) else ''}: history, not the current fault."  # noqa: E501 (an exact command or data line reads better whole)
                ),
                object=f"RDS instance {e.data.get('source_id')}",
                score=0.2,
                ts=_ev_ts(e),
                tags=[f"db:{e.data.get('source_id')}"],
                evidence=[EvidenceRef(item=e.id, field="message", value=e.data.get("message"))],
            )
        )
    routine = [e for e in ctx.events if e not in failovers and _RDS_ROUTINE.search(str(e.data.get("message", "")))]
    if routine:
        e = routine[-1]
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="rds_routine_event",
                category=Category.HEALTHY,
                title=f"routine RDS event: {str(e.data.get('message'))[:80]}",
                mechanism=(
                    f"'{e.data.get('message')}' ({len(routine)} routine event(s): backups, snapshots, "
                    "maintenance) does not interrupt service."
                ),
                object=f"RDS instance {e.data.get('source_id')}",
                score=0.1,
                ts=_ev_ts(e),
                tags=[f"db:{e.data.get('source_id')}"],
                evidence=[EvidenceRef(item=e.id, field="message", value=e.data.get("message"))],
            )
        )
    return out


def _ev_ts(e: EvidenceItem) -> float | None:
    ts = e.data.get("ts")
    return float(ts) if isinstance(ts, int | float) else e.ts


# ---------------------------------------------------------------- log symptoms


def _log_symptoms(ctx: _Context) -> list[Finding]:
    """Clients failing to reach the database, statements cancelled on locks, deadlocks, from any log."""
    out: list[Finding] = []
    groups: dict[str, list[Rec]] = defaultdict(list)
    for r in ctx.logs:
        if PG_DOWN.search(r.msg):
            groups["db_connection_errors"].append(r)
        elif re.search(r"deadlock detected", r.msg, re.I):
            groups["deadlock"].append(r)
        elif re.search(r"lock timeout|canceling statement due to lock|still waiting for", r.msg, re.I):
            groups["db_waits"].append(r)
    ident = ctx.db_name()
    for code, recs in groups.items():
        if code == "db_waits" and any(f for f in ctx.sessions.values() if f.data.get("blocked_by")):
            continue  # the live lock analysis already says it, with the blocker
        recs.sort(key=lambda r: r.ts or 0)
        services = sorted({s for s in (service_of(r.item) for r in recs) if s})
        first, last = recs[0].ts, recs[-1].ts
        if code == "deadlock":
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="deadlock",
                    category=Category.CODE_DEFECT,
                    title=f"{ident}: {len(recs)} deadlock(s)",
                    mechanism=(
                        f"{ident} detected {len(recs)} deadlock(s) {span_text(first, last)}: transactions take the "
                        f"same rows or tables in different orders ('{recs[0].msg.strip()[:160]}')."
                    ),
                    object=f"transactions on {ident}",
                    score=0.7,
                    ts=first,
                    tags=[f"db:{ident}", *(f"service:{s}" for s in services)],
                    explains=["errors", "db_waits"],
                    evidence=[ref_of(recs[0]), ref_of(recs[-1])],
                    actions=[
                        Action(
                            description="The deadlock reports with both statements",
                            command="grep -A 6 'deadlock detected' <postgres log>",
                        )
                    ],
                )
            )
            continue
        stopped = ctx.now is not None and last is not None and ctx.now - last >= LOG_SYMPTOM_STOPPED_S
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                # a burst that ended long before the newest evidence (a switchover's seconds of refusals): history
                role="benign" if stopped else "symptom",
                code=f"{code}_stopped" if stopped else code,
                category=Category.HEALTHY
                if stopped
                else Category.DEPENDENCY_FAILURE
                if code == "db_connection_errors"
                else Category.CODE_DEFECT,
                title=(
                    f"{', '.join(services) or 'clients'}: {len(recs)} "
                    f"{'database connection errors' if code == 'db_connection_errors' else 'lock waits/timeouts'}"
                ),
                mechanism=(
                    f"{', '.join(services) or 'clients'} logged {len(recs)} "
                    f"{'failed or dropped database connections' if code == 'db_connection_errors' else 'statements cancelled or waiting on locks'} {span_text(first, last)} ('{recs[0].msg.strip()[:160]}')."  # noqa: E501 (an exact command or data line reads better whole)
                ),
                object=f"database {ident}",
                score=0.5,
                ts=first,
                tags=[f"db:{ident}", *(f"service:{s}" for s in services)],
                evidence=first_and_last_refs(recs),
                needs=[f"pg_stat_activity and pg_locks of {ident}"]
                if code == "db_waits"
                else [f"RDS events and metrics of {ident}"],
            )
        )
    return out


def _first(xs: Iterable[Any]) -> Any:
    return next(iter(xs), None)


# ---------------------------------------------------------------- a search cluster's own health


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"datastore/health"})
def datastore_health(evidence: EvidenceSet) -> list[Finding]:
    """`_cluster/health` of Elasticsearch / OpenSearch: red is primary shards unassigned (searches and writes to
    them fail), a failing datastore its clients see; yellow is replicas unassigned (redundancy lost, data served);
    green is a healthy cluster, said so that a search outage is looked for elsewhere."""
    out: list[Finding] = []
    for item in evidence.kind("datastore/health"):
        d = item.data
        cluster, status = str(d.get("cluster") or item.object), str(d.get("status") or "")
        unassigned = d.get("unassigned_shards")
        shards = f"{unassigned} shards unassigned" if unassigned else "no shard unassigned"
        nodes = f"{d.get('number_of_data_nodes')} data nodes" if d.get("number_of_data_nodes") is not None else ""
        said = ", ".join(filter(None, [shards, nodes]))
        base: dict[str, Any] = {
            "analyzer": "datastore_health",
            "domain": Domain.DATABASE,
            "object": f"{d.get('engine') or 'search'} cluster {cluster}",
            "tags": [f"service:{cluster}", f"upstream:{cluster}", f"db:{cluster}"],
            "ts": item.ts,
            "evidence": [EvidenceRef(item=item.id, field="status", value=status)]
            + ([EvidenceRef(item=item.id, field="unassigned_shards", value=unassigned)] if unassigned else []),
        }
        if status == "red":
            out.append(
                Finding(
                    **base,
                    role="cause",
                    code="search_cluster_red",
                    category=Category.DEPENDENCY_FAILURE,
                    score=0.55,
                    title=f"search cluster {cluster} is red ({said})",
                    mechanism=f"cluster {cluster} reports red: primary shards are unassigned ({said}), so searches "
                    "and writes that reach them fail for every client of the cluster",
                    explains=["errors", "http_5xx", "latency", "upstream_5xx", "exception"],
                    needs=[f"GET _cluster/allocation/explain on {cluster}: why its shards are not assigned"],
                )
            )
        elif status == "yellow":
            out.append(
                Finding(
                    **base,
                    role="symptom",
                    code="search_cluster_yellow",
                    category=Category.UNKNOWN,
                    score=0.3,
                    title=f"search cluster {cluster} is yellow ({said})",
                    mechanism=f"cluster {cluster} reports yellow: replica shards are unassigned ({said}); every "
                    "primary is served, redundancy is lost",
                )
            )
        elif status == "green":
            out.append(
                Finding(
                    **base,
                    role="benign",
                    code="search_cluster_green",
                    category=Category.HEALTHY,
                    score=0.2,
                    title=f"search cluster {cluster} is green",
                    mechanism=f"cluster {cluster} reports green: every shard is assigned ({said})",
                )
            )
    return out
