"""A database that cannot be reached, RDS events (failovers, restarts, storage), and the database errors
clients log when nothing closer to the database shows the cause."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from diagnosis.analyzers._common import (
    AUTH_DENIED,
    PG_DOWN,
    PG_TOO_MANY,
    Rec,
    first_and_last_refs,
    fmt_ts,
    records_with,
    ref_of,
    service_of,
    span_text,
)
from diagnosis.analyzers.database._shared import (
    _FAILOVER,
    _FAILOVER_DONE,
    _PLANNED_FAILOVER,
    _RDS_ROUTINE,
    FAILOVER_RECENT_S,
    LOG_SYMPTOM_STOPPED_S,
    Context,
)
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    human_duration,
)

# ---------------------------------------------------------------- reachability


def _unreachable(ctx: Context) -> list[Finding]:
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


# ---------------------------------------------------------------- RDS events


MAINTENANCE_AROUND_S = 1800.0  # a maintenance event of the same instance this close to a failover explains it


def _maintenance_around(ctx: Context, src: str, failover: list[EvidenceItem]) -> bool:
    """Whether the instance's own events around the failover say it was maintenance: RDS wraps a patch's failover in
    "Applying off-line patches" and "Finished applying off-line patches" (category maintenance)."""
    stamps = [t for e in failover if (t := _ev_ts(e)) is not None]
    if not stamps:
        return False
    lo, hi = min(stamps) - MAINTENANCE_AROUND_S, max(stamps) + MAINTENANCE_AROUND_S
    for e in ctx.events:
        t = _ev_ts(e)
        if e in failover or t is None or not lo <= t <= hi or str(e.data.get("source_id") or e.object) != src:
            continue
        cats = str(e.data.get("categories") or "").lower()
        if "maintenance" in cats or _PLANNED_FAILOVER.search(str(e.data.get("message") or "")):
            return True
    return False


_SLOT_GONE = re.compile(r"replication slot \"?[\w.\-]+\"? does not exist", re.I)


def _slot_lost_after(ctx: Context, failovers: list[EvidenceItem]) -> Rec | None:
    """A record, after one of the failovers, of a replication slot that no longer exists."""
    first = min((t for e in failovers if (t := _ev_ts(e)) is not None), default=None)
    if first is None:
        return None
    return next(
        (
            r
            for r in records_with(ctx.evidence, ("does not exist",))
            if _SLOT_GONE.search(r.msg) and (r.ts is None or r.ts >= first)
        ),
        None,
    )


def _rds_events(ctx: Context) -> list[Finding]:
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
    # a failover long ago whose loss is still felt: logical replication slots live on the old primary's disk, so a
    # CDC reader (Debezium, a logical subscriber) finds its slot gone and stays failed until it is re-snapshotted
    slot_lost = _slot_lost_after(
        ctx, [e for e in old if not _maintenance_around(ctx, str(e.data.get("source_id")), [e])]
    )
    if slot_lost is not None:
        recent += [e for e in old if (_ev_ts(e) or 0) <= (slot_lost.ts or float("inf"))]
        old = [e for e in old if e not in recent]
    if recent:
        by_src: dict[str, list[EvidenceItem]] = defaultdict(list)
        for e in recent:
            by_src[str(e.data.get("source_id") or e.object)].append(e)
        for src, evs in by_src.items():
            evs.sort(key=lambda e: _ev_ts(e) or 0)
            msgs = "; ".join(f"{fmt_ts(_ev_ts(e))} '{e.data.get('message')}'" for e in evs[:4])
            if (
                any(_PLANNED_FAILOVER.search(str(e.data.get("message") or "")) for e in evs)
                or _maintenance_around(ctx, src, evs)
            ) and any(_FAILOVER_DONE.search(str(e.data.get("message") or "")) for e in evs):
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
                        "refused until the new primary took the endpoint, so clients errored meanwhile"
                        + (
                            f"; the new primary has no logical replication slots, so the change-data reader fails "
                            f"until it is re-created and re-snapshotted ('{slot_lost.msg.strip()[:160]}')."
                            if slot_lost is not None
                            else "."
                        )
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


def _log_symptoms(ctx: Context) -> list[Finding]:
    """Clients failing to reach the database, statements cancelled on locks, deadlocks, from any log."""
    out: list[Finding] = []
    groups: dict[str, list[Rec]] = defaultdict(list)
    for r in ctx.logs:
        if PG_DOWN.search(r.msg) and not AUTH_DENIED.search(r.msg):  # a refused password is the credential's
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
