"""Replication lag, burst balance and CPU credits at zero, and I/O storms (checkpoints, vacuum, bulk writes)."""

from __future__ import annotations

import itertools
import re

from diagnosis.analyzers._common import (
    PG_CHECKPOINT,
    PG_VACUUM,
    Rec,
    fmt_ts,
    ref_of,
    span_text,
)
from diagnosis.analyzers.database._shared import (
    _ELAPSED,
    _VACUUM_TABLE,
    BURST_EMPTY,
    REPLICA_LAG_S,
    VACUUM_HEAVY_S,
    Context,
    _instance,
    _mref,
    _pts,
    metric_name,
)
from diagnosis.analyzers.database.capacity import _rds_modify, _top_statement
from diagnosis.analyzers.logs._shared import ENDED_LONG_AGO_S
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    Point,
    StepChange,
    step_change,
)

# ---------------------------------------------------------------- replication, burst balance, I/O storms


def _replica_lag(ctx: Context) -> list[Finding]:
    out = []
    for m in ctx.metric("ReplicaLag", "AuroraReplicaLag", "pg_replication_lag", "pg_replication_lag_seconds"):
        pts = _pts(m)
        if len(pts) < 3:
            continue
        ident = _instance(m) or ctx.db_name()
        last = pts[-1][1] / (1000.0 if metric_name(m) == "AuroraReplicaLag" else 1.0)
        peak = max(v for _, v in pts)
        if last < REPLICA_LAG_S:
            if peak >= REPLICA_LAG_S * (1000.0 if metric_name(m) == "AuroraReplicaLag" else 1.0):
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
        catching_up = _catching_up(ctx, m, pts, ident)
        if catching_up is not None:
            out.append(catching_up)
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


CATCHING_UP_SHARE = 0.7  # lag down to this share of its peak ...
CATCHING_UP_POINTS = 6  # ... falling over at least this many of its last samples


def _catching_up(ctx: Context, m: EvidenceItem, pts: list[Point], ident: str) -> Finding | None:
    """A replica whose lag is still high but falls steadily from its peak while no client reads from it: it is
    catching up after a burst of writes (a nightly purge, a bulk load), and nobody is served stale data."""
    peak_i = max(range(len(pts)), key=lambda i: pts[i][1])
    tail = pts[peak_i:]
    if len(tail) < CATCHING_UP_POINTS or tail[-1][1] > CATCHING_UP_SHARE * pts[peak_i][1]:
        return None
    if sum(1 for a, b in itertools.pairwise(tail) if b[1] <= a[1]) < 0.9 * (len(tail) - 1):
        return None
    conns = [c for c in ctx.metric("DatabaseConnections") if _instance(c) == ident]
    if not conns or any(v > 0 for _, v in _pts(conns[0])[-CATCHING_UP_POINTS:]):
        return None
    alerts = sorted(
        {
            f"alert:{a.data.get('labels', {}).get('alertname')}"
            for a in ctx.evidence.kind("alert")
            if "lag" in str((a.data.get("labels") or {}).get("alertname") or "").lower()
            and ident in str(a.data.get("labels") or {})
        }
    )
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="benign",
        code="replica_catching_up",
        category=Category.HEALTHY,
        title=f"replica {ident} is catching up ({pts[peak_i][1]:.0f}s -> {tail[-1][1]:.0f}s) and serves no client",
        mechanism=(
            f"replica {ident}'s lag peaked at {pts[peak_i][1]:.0f}s at {fmt_ts(pts[peak_i][0])} and has fallen "
            f"steadily to {tail[-1][1]:.0f}s since, while it has no connections: it is replaying a burst of writes "
            "and will be current in time; nobody reads stale data from it."
        ),
        object=f"replica {ident}",
        score=0.3,
        tags=[f"db:{ident}"],
        explains=alerts,
        evidence=[_mref(m, -1, pts), _mref(conns[0], -1, _pts(conns[0]))],
    )


def _write_surge(ctx: Context, before: float) -> tuple[str, EvidenceRef] | None:
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


def _cpu_credits(ctx: Context) -> list[Finding]:
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


def _burst_balance(ctx: Context) -> list[Finding]:
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


def _vacuum_over(ctx: Context, heavy: list[Rec], sessions: list[EvidenceItem]) -> bool:
    """A heavy vacuum is over when its completion report (PostgreSQL logs `automatic vacuum of table ...` when the
    run ends) came an hour or more before the evidence ends and no vacuum was seen running after it."""
    last = heavy[-1].ts
    if last is None or ctx.now is None or ctx.now - last < ENDED_LONG_AGO_S:
        return False
    return not any(isinstance(c, int | float) and c > last for c in (s.data.get("captured_at") for s in sessions))


CHECKPOINTS_OVER_S = 900.0  # checkpoint warnings that stopped this long before the evidence ends are over


def _io_storms(ctx: Context) -> list[Finding]:
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
    over = (
        bool(checkpoints)
        and not surge
        and checkpoints[-1].ts is not None
        and ctx.now is not None
        and ctx.now - checkpoints[-1].ts >= CHECKPOINTS_OVER_S
    )
    if (len(checkpoints) == 1 or over) and not surge:
        # one forced checkpoint (a bulk load, an index build) is PostgreSQL's advice, not a storm; nor a few
        # minutes of them that ended long before the evidence does (a batch load that finished)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="checkpoint_once",
                category=Category.HEALTHY,
                title=f"{ident}: "
                + ("one forced checkpoint" if len(checkpoints) == 1 else "a burst of checkpoints, over"),
                mechanism=f"{ident} warned {len(checkpoints)}x that checkpoints came close together "
                f"('{checkpoints[0].msg.strip()[:140]}'): a burst of writes, not a storm of checkpoints.",
                object=f"checkpoints of {ident}",
                score=0.2,
                ts=checkpoints[0].ts,
                tags=[f"db:{ident}"],
                evidence=[ref_of(checkpoints[0])],
            )
        )
        checkpoints = []
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
    if heavy_vac and not surge and not vac_pi_heavy and _vacuum_over(ctx, heavy_vac, vac_sessions):
        last = heavy_vac[-1]
        mt = _VACUUM_TABLE.search(last.msg)
        table = mt.group(1) if mt else None
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="vacuum_completed",
                category=Category.HEALTHY,
                title=f"{ident}: autovacuum of {table or 'a large table'} completed at {fmt_ts(last.ts)}",
                mechanism=(
                    f"autovacuum{' (to prevent wraparound)' if 'wraparound' in last.msg.lower() else ''} of "
                    f"{table or 'a large table'} on {ident} finished at {fmt_ts(last.ts)} "
                    f"('{last.msg.strip().splitlines()[0][:140]}'): PostgreSQL's own upkeep ran its course (an "
                    "anti-wraparound vacuum freezes old rows so transaction ids can be reused), and nothing shows "
                    "it still loading the server."
                ),
                object=f"autovacuum of {table or 'a table'}",
                score=0.3,
                ts=last.ts,
                tags=[f"db:{ident}", *([f"relation:{table}"] if table else [])],
                evidence=[ref_of(last)],
            )
        )
        heavy_vac, vacuums = [], []
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
