"""Values that changed unit: a series that was steady and then jumped by a unit's factor (x1000 for k- to base units,
x100 for a percentage or cents, x60 and x3600 for minutes and hours, x1024, x8 for bytes and bits) and stayed there,
while the series beside it that count the same things (rows, meters, requests) did not move. The quantity did not
change by that factor; its unit did, or the input is read in the wrong one: bad data, whatever the dashboards say."""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.series import median, points_of
from diagnosis.timeline import fmt_ts

UNIT_FACTORS = {1000.0: "x1000 (kilo to base units, or the reverse)", 1024.0: "x1024 (KiB to bytes)",
                100.0: "x100 (a fraction and a percentage, or cents and units)", 60.0: "x60 (minutes and seconds)",
                3600.0: "x3600 (hours and seconds)", 8.0: "x8 (bytes and bits)",
                1_000_000.0: "x1000000 (mega to base units)"}  # fmt: skip
MATCH = 0.12  # the ratio within this share of the factor
STEADY = 0.35  # the points before vary less than this around their median
MIN_BEFORE = 5
# what fails or saturates does jump by orders of magnitude when it breaks (5 ms to 5 s, 0.5% errors to 50%): only
# quantities the data carries (energy, money, sizes, counts of business things) are read for a unit change
_SYMPTOM_SERIES = re.compile(
    r"error|fail|5xx|4xx|latency|duration|p\d\d|percentile|cpu|mem|load|queue|lag|restart|throttl|timeout|"
    r"saturation|util|wait|drop|loss|retrans|backlog|conn|thread|heap|gc|disk|iops|inode",
    re.I,
)
_COUNT_WORDS = ("count", "reporting", "rows", "records", "meters", "requests", "total", "number", "devices")


def _factor(ratio: float) -> tuple[float, str] | None:
    for f, what in UNIT_FACTORS.items():
        for r in (ratio, 1 / ratio if ratio else 0.0):
            if abs(r / f - 1) <= MATCH:
                return (f if r == ratio else 1 / f), what
    return None


def _step(points: list[tuple[float, float]]) -> tuple[int, float] | None:
    """(index, ratio) of the one place where a steady series jumped by a unit factor and stayed."""
    for i in range(MIN_BEFORE, len(points)):
        before = [v for _, v in points[:i]]
        after = [v for _, v in points[i:]]
        base = median(before)
        if base <= 0 or any(abs(v - base) > STEADY * base for v in before):
            continue
        level = median(after)
        if level <= 0 or any(abs(v - level) > STEADY * level for v in after):
            continue
        ratio = level / base
        return (i, ratio) if _factor(ratio) else None
    return None


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def unit_change(evidence: EvidenceSet) -> list[Finding]:
    series = [(m, points_of(m.data.get("points"))) for m in evidence.kind("metric")]
    series = [(m, pts) for m, pts in series if not _SYMPTOM_SERIES.search(str(m.data.get("name") or m.object))]
    steps = {m.id: s for m, pts in series if len(pts) > MIN_BEFORE and (s := _step(pts))}
    if not steps:
        return []
    out: list[Finding] = []
    for m, pts in series:
        if m.id not in steps:
            continue
        i, ratio = steps[m.id]
        at = pts[i][0]
        # the same jump in every series at once is a change of what is measured (more traffic), not of a unit
        if sum(1 for other in steps.values() if abs(other[1] / ratio - 1) <= MATCH) > 1 and len(steps) == len(series):
            continue
        name = str(m.data.get("name") or m.object)
        counts = [
            (c, cp) for c, cp in series
            if c.id != m.id and any(w in str(c.data.get("name") or "").lower() for w in _COUNT_WORDS)
            and c.id not in steps
        ]  # fmt: skip
        factor = _factor(ratio)
        assert factor is not None
        refs = [EvidenceRef(item=m.id, field=f"points.{i - 1}", value=pts[i - 1][1]),
                EvidenceRef(item=m.id, field=f"points.{i}", value=pts[i][1])]  # fmt: skip
        steady = ""
        if counts:
            c, cp = counts[0]
            steady = f", while {c.data.get('name')} stayed level"
            refs.append(EvidenceRef(item=c.id, field=f"points.{len(cp) - 1}", value=cp[-1][1]))
        out.append(
            Finding(
                analyzer="unit_change",
                domain=Domain.METRICS,
                role="cause",
                code="unit_change",
                category=Category.DATA_QUALITY,
                title=f"{name} jumped {ratio:.4g}x at {fmt_ts(at)}: a change of unit, {factor[1]}",
                mechanism=(
                    f"{name} was steady around {median([v for _, v in pts[:i]]):.4g} and from {fmt_ts(at)} reads "
                    f"{median([v for _, v in pts[i:]]):.4g}, {ratio:.4g} times as much{steady}: a factor of "
                    f"{factor[1]}, so the input's unit changed (or is read in the wrong unit), not the quantity"
                ),
                object=f"series {name}",
                score=0.75 if counts else 0.65,
                ts=at,
                tags=[f"metric:{name}"],
                explains=["metric_shift", "metric_*", "latency", "error_rate", "backlog", "alert:*"],
                evidence=refs,
                actions=[
                    Action(
                        description="Compare the raw input (the file or feed) of the first wrong point with the "
                        "last right one: the unit of the value column, the producer's release notes",
                        command=f"<inspect the rows behind {name} at {fmt_ts(at)}>",
                    )
                ],
            )
        )
    return out
