"""Work that stopped at a release: a consumer's processing rate (acknowledged, consumed, processed, delivered) that
fell to almost nothing within minutes of a release and stayed there, while what arrives (the topic's or queue's
input rate) went on as before. The backlog grows, nothing errors, and the infrastructure under it looks busy or
full: the new version stopped doing (or acknowledging) its work. A code_defect naming the version; a lost
consumer or a dead broker would not line up with the release (and would show in their own evidence).
"""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.regressions import _S, Release, _series, releases
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.series import median
from diagnosis.timeline import fmt_ts

_DONE = re.compile(r"ack|consum|process|handled|deliver|complet|drain|dispatch|msg_?out|rate_?out|sent", re.I)
_NOT_DONE = re.compile(r"error|fail|retr|reject|dead|dlq|nack|redeliver|latency|duration|lag|backlog|size", re.I)
_IN = re.compile(r"rate_?in|msg_?in|messages?_?in|produced|publish|incoming|received|enqueued|sent_to", re.I)
STOPPED = 0.05  # of the rate before: stopped
FLAT_IN = (0.7, 1.4)
LEAD_S = 900.0  # the rate fell within this long after the release
MIN_POINTS = 4


def _drop(s: _S) -> tuple[float, float, float] | None:
    """(when it fell, the rate before, the rate after) for a series that fell to almost nothing and stayed there."""
    pts = s.points
    if len(pts) < 2 * MIN_POINTS:
        return None
    for i in range(MIN_POINTS, len(pts) - MIN_POINTS + 1):
        before = [v for _, v in pts[:i]]
        after = [v for _, v in pts[i:]]
        was = median(before)
        if was > 0 and max(after) <= STOPPED * was and min(before[-MIN_POINTS:]) > STOPPED * was:
            return pts[i][0], was, median(after)
    return None


def _sole_release(rels: list[Release], at: float) -> Release | None:
    near = [r for r in rels if at - LEAD_S <= r.ts <= at + 120.0]
    workloads = {r.workload for r in near}
    return near[-1] if len(workloads) == 1 else None


def _input_ratio(series: list[_S], s: _S, at: float) -> tuple[float, EvidenceRef] | None:
    """The input rate of the same topic or queue (same labels but its name), after over before."""
    keys = {k: v for k, v in s.labels.items() if k in ("topic", "queue", "queue_name", "stream", "QueueName")}
    for other in series:
        if other is s or not _IN.search(other.name) or _NOT_DONE.search(other.name):
            continue
        if any(other.labels.get(k) != v for k, v in keys.items()):
            continue
        before = [v for t, v in other.points if t < at]
        after = [v for t, v in other.points if t >= at]
        if len(before) < MIN_POINTS or len(after) < MIN_POINTS or median(before) <= 0:
            continue
        ratio = median(after) / median(before)
        return ratio, EvidenceRef(item=other.item.id, field="points", value=f"{other.name} {ratio:.2f}x")
    return None


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def work_stopped_at_release(evidence: EvidenceSet) -> list[Finding]:
    series = _series(evidence)
    rels = releases(evidence)
    if not rels:
        return []
    out: list[Finding] = []
    for s in series:
        if not _DONE.search(s.name) or _NOT_DONE.search(s.name) or _IN.search(s.name):
            continue
        drop = _drop(s)
        if drop is None:
            continue
        at, was, now = drop
        rel = _sole_release(rels, at)
        if rel is None:
            continue
        inflow = _input_ratio(series, s, at)
        if inflow is not None and not FLAT_IN[0] <= inflow[0] <= FLAT_IN[1]:
            continue  # less arrived: less to do
        refs = [rel.ref, EvidenceRef(item=s.item.id, field="points", value=f"{was:.3g} -> {now:.3g}")]
        if inflow:
            refs.append(inflow[1])
        what = ", ".join(f"{k}={v}" for k, v in s.labels.items() if k in ("topic", "queue", "subscription", "stream"))
        out.append(
            Finding(
                analyzer="work_stopped_at_release",
                domain=Domain.METRICS,
                role="cause",
                code="work_stopped_at_release",
                category=Category.CODE_DEFECT,
                title=f"{s.name} fell from {was:.3g} to {now:.3g} at {rel.workload} {rel.version}'s release",
                mechanism=(
                    f"{s.name}{f' ({what})' if what else ''} fell from {was:.3g} to {now:.3g} at {fmt_ts(at)}, "
                    f"{max(0.0, at - rel.ts) / 60:.0f} min after {rel.workload} {rel.version} was released "
                    f"({fmt_ts(rel.ts)}), and stayed there"
                    + (f" while the input went on at {inflow[0]:.2f}x" if inflow else "")
                    + f": {rel.version} stopped doing or acknowledging its work, so the backlog grows behind it"
                ),
                object=f"{rel.workload} {rel.version}",
                score=0.8 if inflow else 0.6,
                ts=rel.ts,
                tags=[f"service:{rel.workload}", f"version:{rel.version}", f"metric:{s.name}"],
                explains=["backlog", "queue_backlog", "consumer_lag", "metric_shift", "growth", "alert:*", "latency"],
                evidence=refs,
                actions=[
                    Action(
                        description=f"Roll back {rel.workload} to the version before {rel.version}",
                        command=f"helm rollback {rel.workload}  # or kubectl rollout undo deployment/{rel.workload}",
                        kind="write",
                    ),
                    Action(
                        description="See what the new version changed in how it consumes and acknowledges",
                        command=f"git diff <previous tag> {rel.version}",
                    ),
                ],
            )
        )
    return out
