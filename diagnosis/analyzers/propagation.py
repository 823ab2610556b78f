"""Where a slowdown that spread through a microservice application began: every service's latency series, the call
graph its traces show, and the services that slowed down. The origin is a slowed service whose callees did not slow
down (or, without traces, the one whose latency grew by the largest factor: its callers add their own time to it).
Its own CPU, memory and disk series say whether it is starved of a resource; a service that slowed with none of them
strained is slowed on its network (injected delay, packet loss), an infrastructure cause. The callers' latency,
errors and timeouts are its symptoms."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise

from diagnosis.analyzers._common import claimed_elsewhere, records_with, span_calls
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.metrics import _kind
from diagnosis.analyzers.regressions import same_workload
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import Point, median, points_of
from diagnosis.timeline import fmt_ts

SLOWED = 3.0  # latency this many times its baseline
STRAINED = 2.0  # a resource series this many times its baseline
MIN_POINTS = 8
DARK_STEPS = 3  # a latency series that ends this many samples before the others' has gone dark
NETWORK_SHARE = 0.3  # of a client span's time spent outside the server span it called


@dataclass
class _Rise:
    item: EvidenceItem
    ratio: float
    before: float
    after: float
    onset: float
    index: int


def _rise(item: EvidenceItem, pts: list[Point]) -> _Rise | None:
    """How far the end of a series stands above its start (the first 40% against the last 30%)."""
    if len(pts) < MIN_POINTS:
        return None
    head = [v for _, v in pts[: max(2, len(pts) * 2 // 5)]]
    tail = [v for _, v in pts[-max(2, len(pts) * 3 // 10) :]]
    before, after = median(head), median(tail)
    if before <= 0:
        return None
    onset = next((i for i, (_, v) in enumerate(pts) if v >= before + (after - before) / 2), len(pts) - 1)
    return _Rise(item, after / before, before, after, pts[onset][0], onset)


def _service(item: EvidenceItem) -> str | None:
    labels = item.data.get("labels") or {}
    for key in ("service", "app", "job", "deployment", "container"):
        if labels.get(key):
            return str(labels[key])
    return None


def _call_graph(evidence: EvidenceSet) -> dict[str, set[str]]:
    callees: dict[str, set[str]] = defaultdict(set)
    for item in evidence.kind("trace/spans"):
        for _, parent, s in span_calls(item):
            if str(parent[3]) != str(s[3]):
                callees[str(parent[3])].add(str(s[3]))
    return callees


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric", "trace/spans"})
def latency_origin(evidence: EvidenceSet) -> list[Finding]:
    slowed: dict[str, _Rise] = {}
    calm: set[str] = set()
    strained: dict[str, list[tuple[str, _Rise]]] = defaultdict(list)
    steady: set[str] = set()  # services whose resource series are there and did not rise
    ends: dict[str, tuple[float, float]] = {}  # service -> (its latency series' last point, their sampling step)
    for m in evidence.kind("metric"):
        service = _service(m)
        if not service:
            continue
        name = str(m.data.get("name") or m.object)
        kind = _kind(name, {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()})
        if kind not in ("latency", "cpu", "memory", "disk"):
            continue
        pts = points_of(m.data.get("points"))
        if kind == "latency" and len(pts) >= 2:
            ends[service] = (pts[-1][0], median([b[0] - a[0] for a, b in pairwise(pts)]))
        rise = _rise(m, pts)
        if rise is None:
            continue
        if kind == "latency":
            if rise.ratio >= SLOWED:
                if service not in slowed or rise.ratio > slowed[service].ratio:
                    slowed[service] = rise
            else:
                calm.add(service)
        elif rise.ratio >= STRAINED:
            strained[service].append((kind, rise))
        else:
            steady.add(service)
    if len(slowed) < 2:
        return []  # one slow service is its own finding's business; a slowdown that spread needs two
    if ends and any(end < max(e for e, _ in ends.values()) - DARK_STEPS * step for end, step in ends.values()):
        return []  # a service whose series went dark may be where it began, and nothing says what it did
    graph = _call_graph(evidence)
    if graph:
        origins = [s for s in slowed if not any(same_workload(c, o) for c in graph.get(s, ()) for o in slowed)]
        origins = [s for s in origins if s in graph or any(s in cs for cs in graph.values())] or origins
    else:
        origins = list(slowed)
    origin = max(origins, key=lambda s: slowed[s].ratio)
    rise = slowed[origin]
    callers = sorted(s for s in slowed if s != origin)
    refs = [EvidenceRef(item=rise.item.id, field=f"points.{rise.index}", value=round(rise.after, 4))]
    own = strained.get(origin) or [(k, r) for s, rs in strained.items() if same_workload(s, origin) for k, r in rs]
    how = "its callees did not slow down" if graph else "its latency grew by the largest factor"
    if own:
        kind, res = max(own, key=lambda kr: kr[1].ratio)
        refs.append(EvidenceRef(item=res.item.id, field=f"points.{res.index}", value=round(res.after, 4)))
        category = Category.RESOURCE_EXHAUSTION
        why = (
            f"its {kind} rose {res.ratio:.1f}x ({res.before:.3g} -> {res.after:.3g}) from {fmt_ts(res.onset)}: "
            f"{origin} is starved of {kind}"
        )
    elif (gap := _network_share(evidence, origin)) is not None and gap[0] >= NETWORK_SHARE:
        category = Category.INFRASTRUCTURE
        refs.append(gap[1])
        why = (
            f"{gap[0]:.0%} of its callers' client-span time to it lies outside its own server spans: the time is "
            f"lost on the way to {origin} (delay or packet loss on its pod or path)"
        )
    elif any(same_workload(s, origin) for s in steady) and not _waits_elsewhere(evidence, origin):
        category = Category.INFRASTRUCTURE
        why = (
            f"with none of its CPU, memory or disk strained, the time is lost on its network (delay or packet loss "
            f"on {origin}'s pod or path)"
        )
    else:
        return [_unexplained(origin, rise, callers, how, refs)]
    return [
        Finding(
            analyzer="latency_origin",
            domain=Domain.METRICS,
            role="cause",
            code="latency_origin",
            category=category,
            title=f"the slowdown began at {origin} ({rise.ratio:.0f}x its latency)",
            mechanism=(
                f"{origin}'s latency rose {rise.ratio:.1f}x ({rise.before:.3g} -> {rise.after:.3g}) from "
                f"{fmt_ts(rise.onset)} and {how}; {len(callers)} other service(s) slowed with it "
                f"({', '.join(callers[:5])}): {why}"
            ),
            object=f"service {origin}",
            score=0.55,
            ts=rise.onset,
            tags=[f"service:{origin}", f"upstream:{origin}"] + [f"service:{c}" for c in callers],
            explains=["latency", "errors", "upstream_timeout", "http_5xx", "error_rate", "metric_shift", "alert:*"],
            evidence=refs,
            actions=[
                Action(
                    description=f"Compare {origin}'s own CPU, memory, disk and network (retransmits, drops) with "
                    "its callers'",
                    command=f"kubectl top pod -l app={origin}; kubectl exec deploy/{origin} -- sh -c 'ss -ti; "
                    "cat /proc/net/snmp'",
                ),
            ],
        )
    ]


WAITS_MIN = 3  # error lines of the origin that show it waiting on something else


def _waits_elsewhere(evidence: EvidenceSet, service: str) -> bool:
    """Whether the origin's own error lines (or spans) say what it waits on: a pool, a call out, a datastore. Its
    slowness is then theirs to explain, not its network's by elimination."""
    n = 0
    for rec in records_with(evidence, (service,)):
        if rec.level in ("error", "fatal") and claimed_elsewhere(rec.msg):
            n += 1
            if n >= WAITS_MIN:
                return True
    return False


def _unexplained(origin: str, rise: _Rise, callers: list[str], how: str, refs: list[EvidenceRef]) -> Finding:
    """The origin of a slowdown whose own resources the evidence does not show: where to look, not why."""
    return Finding(
        analyzer="latency_origin",
        domain=Domain.METRICS,
        role="symptom",
        code="latency",
        category=Category.UNKNOWN,
        title=f"the slowdown began at {origin} ({rise.ratio:.0f}x its latency)",
        mechanism=(
            f"{origin}'s latency rose {rise.ratio:.1f}x ({rise.before:.3g} -> {rise.after:.3g}) from "
            f"{fmt_ts(rise.onset)} and {how}; {', '.join(callers[:5])} slowed with it"
        ),
        object=f"service {origin}",
        score=0.5,
        ts=rise.onset,
        tags=[f"service:{origin}", f"upstream:{origin}"],
        evidence=refs,
        needs=[f"{origin}'s own CPU, memory, disk and network series, its logs and traces"],
    )


def _network_share(evidence: EvidenceSet, service: str) -> tuple[float, EvidenceRef] | None:
    """How much longer callers' client spans to `service` last than the server spans they contain (relative to the
    client spans), over every traced call to it."""
    client_ms = server_ms = 0.0
    ref: EvidenceRef | None = None
    for item in evidence.kind("trace/spans"):
        for i, parent, s in span_calls(item):
            if not same_workload(str(s[3]), service) or same_workload(str(parent[3]), service):
                continue
            client_ms += float(parent[5])
            server_ms += float(s[5])
            ref = ref or EvidenceRef(item=item.id, field=f"spans.{i}.5", value=parent[5])
    if ref is None or client_ms <= 0:
        return None
    return max(0.0, client_ms - server_ms) / client_ms, ref
