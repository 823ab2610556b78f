"""What the database rules share: thresholds, the context of one investigation (sessions, locks, settings,
RDS events, database metrics, database log lines) and small readers of ages and series."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from diagnosis.analyzers._common import (
    APP_POOL,
    PG_CHECKPOINT,
    PG_DOWN,
    PG_LOCK,
    PG_TOO_MANY,
    PG_VACUUM,
    REDIS_OOM,
    is_db_log,
    is_db_storage_line,
    service_of,
    signature_records,
)
from diagnosis.evidence import EvidenceSet
from diagnosis.model import EvidenceItem, EvidenceRef
from diagnosis.series import (
    Point,
    points_of,
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
    # (not a pending change's notice: "These changes will take effect after the DB instance is rebooted")
    r"failover|fail-?over|Multi-AZ .*(?:started|completed|in progress)|instance restarted|DB instance restarted|"
    r"(?<!after the DB instance is )rebooted|reboot(?!ed)|instance shutdown|recovery|promoted|crash",
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
_VACUUM_TABLE = re.compile(r"vacuum(?: to prevent wraparound)?(?: of table| analyze| verbose)?\s+\"?([\w.]+)\"?", re.I)
_ELAPSED = re.compile(r"elapsed:\s*([\d.]+)\s*s", re.I)


class Context:
    def __init__(self, evidence: EvidenceSet, now: float | None) -> None:
        self.evidence = evidence
        self.now = now
        self.sessions: dict[int, EvidenceItem] = _one_view(evidence.kind("pg/session"))
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
        mysql = any(s.data.get("engine") == "mysql" for s in self.sessions.values())
        return own or ("mysql" if mysql else "postgres")

    def metric(self, *names: str) -> list[EvidenceItem]:
        """The series of these metric names, also under GetMetricData's "<instance> <Metric>" labels."""
        wanted = {n.lower() for n in names}
        return [m for m in self.metrics if metric_name(m).lower() in wanted]

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


# a GetMetricData label that names the instance before the metric ("orders-replica ReplicaLag")
_LABELLED = re.compile(r"^(?P<inst>[A-Za-z][\w\-]{2,62}) (?P<metric>[A-Z][A-Za-z]+)$")


def metric_name(m: EvidenceItem) -> str:
    name = str(m.data.get("name", ""))
    lm = _LABELLED.match(name)
    return lm["metric"] if lm else name


def _instance(m: EvidenceItem) -> str | None:
    labels = m.data.get("labels") or {}
    for k in ("DBInstanceIdentifier", "DBClusterIdentifier", "dbinstance_identifier", "db_instance_identifier"):
        if labels.get(k):
            return str(labels[k])
    lm = _LABELLED.match(str(m.data.get("name", "")))
    return lm["inst"] if lm else None


def _int(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


# the live postgres_activity tool also gives each age as the server measured it (against its own now())
_AGE_FIELDS = {"state_change": "state_age_s", "xact_start": "xact_age_s", "query_start": "query_age_s"}


def _one_view(items: list[EvidenceItem]) -> dict[int, EvidenceItem]:
    """Sessions by pid. A file that holds the sessions grouped (a negative pid and a count) and also one by one
    (a paste of both queries) shows the same backends twice: keep the view that counts more of them (the list one
    by one is often cut with `| head`)."""
    by_source: dict[str, list[EvidenceItem]] = {}
    for s in items:
        if _int(s.data.get("pid")) is not None:
            by_source.setdefault(s.source, []).append(s)
    sessions: dict[int, EvidenceItem] = {}
    for group in by_source.values():
        grouped = [s for s in group if (_int(s.data.get("pid")) or 0) < 0]
        single = [s for s in group if (_int(s.data.get("pid")) or 0) >= 0]
        plain = [s for s in single if not _in_transaction_or_waiting(s)]
        if grouped and plain:  # (a session in a transaction or a lock wait says more than any group: always kept)
            keep = [s for s in single if s not in plain]
            group = grouped + keep if sum(map(_weight, grouped)) > len(plain) else single
        for s in group:
            pid = _int(s.data["pid"]) or 0
            if pid < 0:
                sessions[-len(sessions) - 1] = s  # groups of two files never share a key
            elif pid not in sessions or _richness(s) > _richness(sessions[pid]):
                sessions[pid] = s  # the same backend in two files (the processlist and the lock views): the fuller
    return sessions


def _in_transaction_or_waiting(s: EvidenceItem) -> bool:
    return bool(s.data.get("blocked_by") or s.data.get("xact_start") or s.data.get("wait_event_type")) or str(
        s.data.get("state") or ""
    ).startswith("idle in transaction")


def _richness(s: EvidenceItem) -> int:
    """How much a session item says about its transaction and waits."""
    return sum(bool(s.data.get(k)) for k in ("xact_start", "blocked_by", "wait_event_type", "query", "backend_xid"))


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
