"""CPU saturated by one statement (Performance Insights), storage running out (also when the storage metric itself
is missing), and a datastore at its own storage quota (etcd NOSPACE, Elasticsearch flood stage, a full Ceph pool)."""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers._common import (
    Rec,
    fmt_ts,
    is_db_storage_line,
    records_with,
    ref_of,
    service_of,
    signature_records,
)
from diagnosis.analyzers.database._shared import (
    _RDS_STORAGE,
    CPU_SATURATED,
    DOMINANT_SHARE,
    STORAGE_FULL_BYTES,
    STORAGE_FULL_FRACTION,
    STORAGE_HORIZON_S,
    Context,
    _instance,
    _mref,
    _pts,
)
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    Point,
    human_duration,
    saturation,
    time_to_exhaustion,
)

# Oracle's "ORA-01688: unable to extend table RATING.RATED_EVENTS partition P_2026_12 by 8192 in tablespace
# RATED_DATA_2026"
_ORA_TABLESPACE = re.compile(r"in tablespace (?P<ts>[A-Z][A-Z0-9_$#]*)")
_ORA_LINE = re.compile(r"ORA-\d{5}: [^\n]{0,200}")
# a syslog line's host and program: "ldap-prov-01 slapd[1184]: ..."
_SYSLOG_PROGRAM = re.compile(r"^(?:\w{3} +\d+ [\d:]+ )?(?P<host>[\w.\-]+) (?P<prog>[\w.\-]+)\[\d+\]: ")


# ---------------------------------------------------------------- CPU and Performance Insights


def _cpu(ctx: Context) -> list[Finding]:
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
        elif not top and (busy := _top_active(ctx)) is not None:
            query, sessions, active = busy
            apps = sorted({str(s.data.get("application_name") or s.data.get("usename") or "?") for s in sessions})
            out.append(
                Finding(
                    analyzer="database",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="cpu_saturated_by_query",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{ident} CPU {sat.value:.0f}%: {len(sessions)} of {active} active sessions run one query",
                    mechanism=(
                        f"{ident} CPU has been at {sat.value:.0f}% {since}; {len(sessions)} of its {active} active "
                        f"sessions ({', '.join(apps[:3])}) run the same statement: '{query[:240]}'. Its copies take "
                        "the CPU every other query waits for."
                    ),
                    object=f"statement of {', '.join(apps[:2])} on {ident}",
                    score=0.85,
                    ts=sat.since,
                    tags=[f"db:{ident}", *(f"service:{a}" for a in apps[:3])],
                    explains=["cpu_high", "latency", "db_waits", "errors", "upstream_timeout", "http_5xx"],
                    evidence=[
                        cpu_ref,
                        *(EvidenceRef(item=s.id, field="query", value=query[:300]) for s in sessions[:3]),
                    ],
                    actions=[
                        Action(
                            description="Cancel the running copies of the statement",
                            command=(
                                'psql -c "SELECT pid, pg_cancel_backend(pid) FROM pg_stat_activity WHERE state = '
                                f"'active' AND application_name = '{apps[0]}'\""
                            ),
                            kind="write",
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


_LITERALS = re.compile(r"'[^']*'|\b\d+\b")
BUSY_SESSIONS = 5  # active sessions running one statement before it counts as the load


def _top_active(ctx: Context) -> tuple[str, list[EvidenceItem], int] | None:
    """The statement most active sessions of a pg_stat_activity snapshot run (literals aside), when it is most of
    them: without Performance Insights, the running sessions say what holds the CPU."""
    active = [
        s
        for s in ctx.sessions.values()
        if str(s.data.get("state") or "") == "active"
        and s.data.get("query")
        and "pg_stat_activity" not in str(s.data.get("query"))
        and s.data.get("wait_event_type") != "Lock"
    ]
    groups: dict[str, list[EvidenceItem]] = defaultdict(list)
    for s in active:
        groups[_LITERALS.sub("?", " ".join(str(s.data["query"]).split()))[:200]].append(s)
    if not groups:
        return None
    _, sessions = max(groups.items(), key=lambda kv: len(kv[1]))
    if len(sessions) < BUSY_SESSIONS or len(sessions) < DOMINANT_SHARE * len(active):
        return None
    return " ".join(str(sessions[0].data["query"]).split()), sessions, len(active)


def _top_statement(ctx: Context) -> tuple[EvidenceItem, float, float] | None:
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


def _storage(ctx: Context) -> list[Finding]:
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
    tablespace = next((t for r in lines if (t := _ORA_TABLESPACE.search(r.msg))), None)
    if tablespace:
        # Oracle names the segment it could not extend and the tablespace that is full
        ident = f"Oracle tablespace {tablespace['ts']}"
        shown = next(r for r in lines if _ORA_TABLESPACE.search(r.msg))
        ora = _ORA_LINE.search(shown.msg)
        what = f"'{ora[0] if ora else shown.msg.strip()[:160]}' x{len(lines)}"
        missing = " (its datafiles cannot grow: at their MAXSIZE, or autoextend off, or the disk group full)"
    if lines and "MDB_MAP_FULL" in lines[0].msg:
        # LMDB (OpenLDAP's back-mdb, and others embedding it) refuses writes once its fixed map is used up
        who = _SYSLOG_PROGRAM.match(lines[0].msg.strip())
        ident = f"the LMDB database of {who['prog']} on {who['host']}" if who else "an LMDB database"
        missing = (
            " (its map size is used up - olcDbMaxSize in OpenLDAP's cn=config, maxsize in slapd.conf - "
            "however much the file system has free; reads go on, every write fails)"
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
    ctx: Context,
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


def _wal_retained(ctx: Context) -> tuple[str, EvidenceRef] | None:
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


# ---------------------------------------------------------------- a datastore at its own storage quota

# A datastore refusing writes because it reached the space it is allowed (not a full disk of the host): etcd's
# quota-backend-bytes (NOSPACE alarm), Elasticsearch's flood-stage watermark (indices made read-only), a Ceph pool
# or OSD full, a managed database's space quota.
_QUOTA_FULL = re.compile(
    r"mvcc: database space exceeded|exceeded backend quota|alarm[\"':= ]+NOSPACE|NOSPACE alarm|"
    r"flood[- ]stage disk watermark|index read-only / allow delete|FORBIDDEN/12/index read-only|"
    r"over your (?:space|storage) quota|(?<!Connection )pool '?[\w.\-]+'? (?:is )?full|OSD_FULL|\bfull osd\b",
    re.I,
)
_QUOTA_HINTS = ("space exceeded", "quota", "NOSPACE", "watermark", "read-only", "full", "FULL")
_QUOTA_ENGINES = (
    (re.compile(r"etcd|mvcc|NOSPACE|backend quota", re.I), "etcd"),
    (re.compile(r"watermark|read-only|cluster_block", re.I), "elasticsearch"),
    (re.compile(r"pool|osd", re.I), "ceph"),
)
_QUOTA_ACTIONS = {
    "etcd": [
        Action(
            description="Size, quota and alarms of every member",
            command="etcdctl endpoint status -w table --cluster && etcdctl alarm list",
        ),
        Action(
            description="Compact the history, defragment each member, then disarm the alarm (and set "
            "auto-compaction-retention so it does not come back)",
            command="rev=$(etcdctl endpoint status -w json | jq '.[0].Status.header.revision'); "
            "etcdctl compact $rev && etcdctl defrag --cluster && etcdctl alarm disarm",
            kind="write",
        ),
    ],
    "elasticsearch": [
        Action(description="Disk use per node", command="curl -s localhost:9200/_cat/allocation?v"),
        Action(
            description="After freeing disk, lift the read-only block the flood stage set",
            command="curl -XPUT localhost:9200/_all/_settings -H 'Content-Type: application/json' "
            "-d '{\"index.blocks.read_only_allow_delete\": null}'",
            kind="write",
        ),
    ],
    "ceph": [
        Action(description="Which pools and OSDs are full", command="ceph df detail && ceph osd df tree"),
    ],
}


def _quota_full(ctx: Context) -> list[Finding]:
    lines = [r for r in records_with(ctx.evidence, _QUOTA_HINTS) if _QUOTA_FULL.search(r.msg)]
    if not lines:
        return []
    by_engine: dict[str, list[Rec]] = defaultdict(list)
    for r in lines:
        engine = next((name for rx, name in _QUOTA_ENGINES if rx.search(r.msg)), ctx.db_name())
        by_engine[engine].append(r)
    out: list[Finding] = []
    for engine, recs in by_engine.items():
        # the datastore's own log names it (unit/etcd, etcd-b); its clients are the other sources
        sources = {service_of(r.item) or "" for r in recs}
        named = sorted((s for s in sources if engine in s.lower()), key=len)
        own = named[0] if named else engine
        clients = sorted(s for s in sources if s and engine not in s.lower())
        first = min((r.ts for r in recs if r.ts is not None), default=None)
        said = sorted(
            {" ".join(re.sub(r"[\"':=]+", " ", m.group(0)).split()) for r in recs for m in _QUOTA_FULL.finditer(r.msg)},
            key=len,
        )[:3]
        who = own if own == engine else f"{own} ({engine})"
        by = f", so writes from {', '.join(clients)} fail" if clients else ", so writes fail"
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="datastore_quota_full",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{own} reached its storage quota ({'; '.join(said)})",
                mechanism=(
                    f"{who} reached the space it is allowed and refuses writes since {fmt_ts(first)}: "
                    f"{'; '.join(said)} ({len(recs)} lines, e.g. '{recs[0].msg.strip()[:160]}'){by}; reads still work."
                ),
                object=f"{engine} {own}",
                score=0.85,
                ts=first,
                tags=[f"db:{own}", f"service:{own}", f"upstream:{engine}", *(f"service:{c}" for c in clients)],
                explains=["errors", "exception", "http_5xx", "db_connection_errors", "upstream_*", "latency"],
                evidence=[ref_of(r) for r in ([recs[0], recs[-1]] if len(recs) > 1 else recs)],
                actions=list(_QUOTA_ACTIONS.get(engine, [])),
            )
        )
    return out
