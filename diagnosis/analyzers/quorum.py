"""A replicated store that lost its quorum: too few of its drives or members are left to read or write, and it
says so in its own log (MinIO's InsufficientReadQuorum/InsufficientWriteQuorum, "Insufficient number of drives
online"; a store saying its quorum is lost).

Its clients see 503s, SlowDown replies or timeouts, and their own errors read like throttling or a bug. For them the
store is a dependency that failed; what took its members away (nodes down, disks lost) is on the store's own objects
and, where the evidence shows it, explains this finding."""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers._common import Rec, object_tags, ref_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

_QUORUM_LOST = re.compile(
    r"Insufficient(?:Read|Write)Quorum|Insufficient number of drives online|"
    r"Storage resources are insufficient for the (?:read|write) operation|"
    r"\blost (?:write |read )?quorum\b|\bquorum (?:lost|not (?:met|reached|available))\b",
    re.I,
)
MIN_RECORDS = 3


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"log"})
def store_quorum_lost(evidence: EvidenceSet) -> list[Finding]:
    """A store whose own log says it has too few members or drives left to serve reads or writes."""
    hits: dict[str, list[Rec]] = defaultdict(list)
    items = {}
    for item in evidence.kind("log"):
        who = service_of(item) or item.object
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            # (a cheap test first: the expression runs only on lines that can match it)
            if ("uorum" in msg or "nsufficient" in msg) and _QUORUM_LOST.search(msg):
                hits[item.id].append(Rec(item, r.get("ts"), msg, r.get("line"), None))
                items[item.id] = (item, who)
    out: list[Finding] = []
    for key, recs in hits.items():
        if len(recs) < MIN_RECORDS:
            continue
        item, who = items[key]
        m = _QUORUM_LOST.search(recs[0].msg)
        said = m.group(0) if m else "quorum lost"
        stamps = [r.ts for r in recs if r.ts is not None]
        first, last = (min(stamps), max(stamps)) if stamps else (None, None)
        out.append(
            Finding(
                analyzer="store_quorum_lost",
                domain=Domain.DATABASE,
                role="cause",
                code="store_quorum_lost",
                category=Category.DEPENDENCY_FAILURE,
                title=f"{who} lost its quorum: {said} ({len(recs)}x)",
                mechanism=(
                    f"{who} has too few of its members or drives left to serve ('{said}' x{len(recs)} "
                    f"{span_text(first, last)}): it refuses or fails reads and writes, and every client gets errors "
                    "(503, SlowDown, timeouts) until its members are back."
                ),
                object=who,
                score=0.8,
                ts=first,
                tags=[*object_tags(item, who), f"upstream:{who}"],
                explains=[
                    "errors",
                    "exception",
                    "http_5xx",
                    "upstream_5xx",
                    "upstream_timeout",
                    "latency",
                    "hpa_at_max",
                    "metric_shift",
                    "alert:*",
                ],
                evidence=[ref_of(recs[0]), ref_of(recs[-1])],
                actions=[
                    Action(
                        description=f"Which of {who}'s members and drives are offline",
                        command="mc admin info <alias>  # or the store's cluster health / member list",
                    )
                ],
            )
        )
    return out
