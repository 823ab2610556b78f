"""What the network rules share: thresholds, the failures of one target gathered from many lines, and when
a failure has stopped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diagnosis.analyzers._common import (
    Rec,
    burst_ended,
    log_end,
    ref_of,
    span_text,
)
from diagnosis.analyzers.logs._shared import (
    ENDED_LONG_AGO_S,  # failures that end their log: over only this long after
    run_failed_after,
)
from diagnosis.model import Category, Domain, EvidenceRef, Finding

# Signals whose last occurrence is this long before "now" have stopped (see logs.STOPPED_AFTER_S).
STOPPED_AFTER_S = 15 * 60
# One or two failed calls are the noise of any distributed system (a retried blip); three is a pattern.
MIN_FAILURES = 3
# Distinct names failing NXDOMAIN at once above which DNS itself is broken rather than one name being wrong.
DNS_OUTAGE_NAMES = 3
# A certificate with this few days left is worth renewing now, but it is not failing yet (benign).
TLS_WARN_DAYS = 14
# Access-log 5xx: at least this many, and this share of the requests in the source.
HTTP_5XX_MIN = 5
HTTP_5XX_SHARE = 0.05


@dataclass
class Failures:
    """Failed calls to one target, grouped."""

    target: str
    kind: str  # timeout | refused | reset | http_5xx
    recs: list[Rec] = field(default_factory=list)
    callers: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def first(self) -> float | None:
        return min((r.ts for r in self.recs if r.ts is not None), default=None)

    @property
    def last(self) -> float | None:
        return max((r.ts for r in self.recs if r.ts is not None), default=None)


def _base(target: str) -> str:
    """'payments-api.shop.svc.cluster.local:8080' -> 'payments-api'; an IP stays as it is."""
    host = target.rsplit(":", 1)[0] if re.search(r":\d+$", target) else target
    if re.fullmatch(r"(?:\d{1,3}\.){3}\d{1,3}", host):
        return host
    if re.match(r"[^.]+\.\d", host):  # a version, not a domain: php8.2-fpm
        return host
    return host.split(".")[0]


def _refs(recs: list[Rec]) -> list[EvidenceRef]:
    picked = [recs[0]] if len(recs) == 1 else [recs[0], recs[-1]]
    return [ref_of(r) for r in picked]


def _host(target: str) -> str:
    return target.rsplit(":", 1)[0] if re.search(r":\d+$", target) else target


def burst_over(recs: list[Rec]) -> bool:
    """Whether the failures in `recs` were a burst that ended while the logs they came from went on (burst_ended)."""
    times = sorted(r.ts for r in recs if r.ts is not None)
    if not times:
        return False
    items = {id(r.item): r.item for r in recs}.values()
    # a log's end is its last dated record: read from the end, not through every line (once per failing target)
    ends = [next((rec["ts"] for rec in reversed(item.data.get("records") or ()) if rec.get("ts") is not None), None)
            for item in items]  # fmt: skip
    end = max((e for e in ends if e is not None), default=times[-1])
    return burst_ended(len(times), times[0], times[-1], max(end, times[-1]))


# a failure that has gone on at a low, even rate for this long is the background the incident happens against
BACKGROUND_SPAN_S = 6 * 3600
BACKGROUND_MAX_PER_H = 12.0


def steady_background(f: Failures) -> bool:
    """Failures spread evenly over 6 hours or more at a dozen an hour or fewer, none of the hours busier than three
    times the usual one: a long-standing trickle (a partner's expired certificate for days), not what broke now."""
    times = sorted(r.ts for r in f.recs if r.ts is not None)
    if len(times) < 6:
        return False
    span = times[-1] - times[0]
    if span < BACKGROUND_SPAN_S or len(times) / (span / 3600) > BACKGROUND_MAX_PER_H:
        return False
    hours: dict[int, int] = {}
    for t in times:
        hours[int((t - times[0]) // 3600)] = hours.get(int((t - times[0]) // 3600), 0) + 1
    counts = sorted(hours.values())
    return len(hours) >= 0.6 * (span / 3600) and counts[-1] <= 3 * max(counts[len(counts) // 2], 1)


def _stopped(f: Failures, now: float | None) -> bool:
    return ended(f.recs, f.last, now)


def ended(recs: list[Rec], last: float | None, now: float | None) -> bool:
    """Failures are over when their own logs went on without them for a while, or when they ended long ago: a log
    that ends with them (an export of the failures only) says nothing of after."""
    if now is None or last is None or now - last < STOPPED_AFTER_S:
        return False
    if now - last >= ENDED_LONG_AGO_S:
        return True
    logs = {r.item.id: r.item for r in recs if r.item.kind == "log"}.values()
    if not logs:
        return True
    end = log_end(recs, last)
    return end is not None and end - last >= STOPPED_AFTER_S and not any(run_failed_after(item, last) for item in logs)


def _stopped_finding(f: Failures, code: str, what: str) -> Finding:
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="benign",
        code=code,
        category=Category.HEALTHY,
        title=f"{what}: failures stopped",
        mechanism=(
            f"{what} failed {len(f.recs)}x {span_text(f.first, f.last)} and then stopped, long before "
            "the newest evidence."
        ),
        object=what,
        score=0.2,
        ts=f.first,
        tags=[f"upstream:{_base(f.target)}"],
        evidence=_refs(f.recs),
    )
