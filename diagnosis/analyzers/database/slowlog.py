"""A database's slow query log: one statement shape, from one client, that reads far more rows than it returns on
every call (a scan where a seek was meant: a missing index, or an index the query cannot use) and carries most of
the time logged. Resource exhaustion of the database by that statement; when it began right after a release of
the client that sends it, that release's code defect."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from diagnosis.analyzers._common import fmt_ts, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.series import median

SCAN_RATIO = 1000  # rows examined per row sent: a statement reading this much more than it returns scans
SCAN_ROWS = 100_000  # and reads at least this many rows per call
MIN_CALLS = 5
TIME_SHARE = 0.5  # of the time the slow log records
RELEASE_WINDOW_S = 30 * 60  # a release this shortly before the first scan brought the statement

# what a statement that scans explains: the database busy, and its clients waiting on it
_SCAN_EFFECTS = ["cpu_high", "latency", "errors", "db_*", "io_high", "upstream_timeout", "alert:*", "metric_shift",
                 "app_pool_exhausted"]  # fmt: skip

_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\b\d+(?:\.\d+)?\b")


def fingerprint(statement: str) -> str:
    """The statement with its literals replaced (`customer_ref = 40717311` -> `customer_ref = ?`)."""
    return " ".join(_LITERAL.sub("?", statement).split()).rstrip(";").lower()


def _same_client(user: str, workload: str) -> bool:
    a, b = re.sub(r"[^a-z0-9]", "", user.lower()), re.sub(r"[^a-z0-9]", "", workload.lower())
    return bool(a) and (a == b or a in b or b in a)


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"db/slow_queries"})
def slow_queries(evidence: EvidenceSet) -> list[Finding]:
    entries: list[tuple[Any, dict[str, Any]]] = [
        (item, e) for item in evidence.kind("db/slow_queries") for e in item.data.get("entries") or ()
    ]
    if not entries:
        return []
    groups: dict[tuple[str, str], list[tuple[Any, dict[str, Any]]]] = defaultdict(list)
    for item, e in entries:
        # a lookup's rows sent say what it wanted; an UPDATE or a batch's INSERT ... SELECT sends none
        if str(e.get("statement") or "").lstrip("( ").lower().startswith(("select", "with")):
            groups[(str(e.get("user") or "?"), fingerprint(str(e["statement"])))].append((item, e))
    if not groups:
        return []
    total = sum(float(e.get("query_time") or 0.0) for _, e in entries) or 1.0
    (user, shape), rows = max(groups.items(), key=lambda kv: sum(float(e.get("query_time") or 0) for _, e in kv[1]))
    spent = sum(float(e.get("query_time") or 0.0) for _, e in rows)
    examined = median([float(e.get("rows_examined") or 0) for _, e in rows])
    sent = median([float(e.get("rows_sent") or 0) for _, e in rows])
    if (
        len(rows) < MIN_CALLS
        or spent < TIME_SHARE * total
        or examined < SCAN_ROWS
        or examined < SCAN_RATIO * max(sent, 1.0)
    ):
        return []
    stamps = sorted(float(e["ts"]) for _, e in rows if e.get("ts") is not None)
    first = stamps[0] if stamps else None
    item, sample = rows[0]
    stmt = " ".join(str(sample["statement"]).split())[:200]
    refs = [
        EvidenceRef(item=item.id, line=sample.get("line"), value=f"Rows_examined {sample.get('rows_examined')}"),
        EvidenceRef(item=item.id, line=sample.get("line"), value=stmt),
    ]
    from diagnosis.analyzers.regressions import releases  # releases read every kind of evidence

    release = None
    if first is not None:
        release = next(
            (
                r
                for r in reversed(releases(evidence))
                if _same_client(user, r.workload) and 0 <= first - r.ts <= RELEASE_WINDOW_S
            ),
            None,
        )
    reads = f"reads ~{examined:,.0f} rows to return ~{sent:,.0f} on each of {len(rows)} calls"
    base = (
        f"one statement from {user} ({stmt}) {reads}, {spent / total:.0%} of the slow log's time"
        + (f" since {fmt_ts(first)}" if first else "")
        + ": it scans the table instead of using an index (none fits, or the query cannot use it: a type or "
        "collation conversion, a function on the column)"
    )
    if release is not None:
        refs.insert(0, release.ref)
        return with_aliases(
            [
                Finding(
                    analyzer="slow_queries",
                    domain=Domain.DATABASE,
                    role="cause",
                    code="query_regression",
                    category=Category.CODE_DEFECT,
                    title=f"{release.workload} {release.version} sends a statement that scans ({reads})",
                    mechanism=f"since {release.workload} {release.version} (released {fmt_ts(release.ts)}), {base}; "
                    f"the release changed the query: roll it back or fix how it binds its parameters.",
                    object=f"{release.workload} {release.version}",
                    score=0.85,
                    ts=release.ts,
                    tags=[f"service:{release.workload}", f"version:{release.version}", f"query:{shape[:60]}"],
                    explains=_SCAN_EFFECTS,
                    evidence=refs,
                    actions=_actions(stmt, release.workload),
                )
            ]
        )
    return with_aliases(
        [
            Finding(
                analyzer="slow_queries",
                domain=Domain.DATABASE,
                role="cause",
                code="full_scan_query",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"one statement from {user} scans: {reads}",
                mechanism=f"{base}, and the database spends its CPU and I/O on it.",
                object=f"statement {stmt[:80]}",
                score=0.75,
                ts=first,
                tags=[f"service:{user}", f"query:{shape[:60]}"],
                explains=_SCAN_EFFECTS,
                evidence=refs,
                actions=_actions(stmt, user),
            )
        ]
    )


def _actions(stmt: str, who: str) -> list[Action]:
    return [
        Action(
            description="How the database runs the statement, and why it skips the index",
            command=f"EXPLAIN {stmt.rstrip(';')}; SHOW WARNINGS;",
        ),
        Action(
            description=f"Roll back {who} or fix the statement (index, parameter type)",
            command=f"<roll back {who} to its previous release>",
            kind="write",
        ),
    ]
