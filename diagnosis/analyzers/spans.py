"""Where the time of traced requests goes: each span's own time (its duration less its children's), summed per
service over every trace. When one service holds most of it, the slowness is inside that service, whatever its
callers' latency alerts say; time between a client span and the server span it called is the network's (or the
caller's queue) on the way to that callee: delay injected or suffered on that path, an infrastructure cause."""

from __future__ import annotations

from collections import defaultdict

from diagnosis.analyzers._common import span_calls
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Category, Domain, EvidenceItem, EvidenceRef, Finding

HOTSPOT_SHARE = 0.5  # of all own time in the traces
HOTSPOT_LEAD = 3.0  # and this many times the next service's
MIN_TRACES = 2
MIN_OWN_MS = 200.0  # a hotspot of a few milliseconds is no slowness
_DURATION = 5  # a span's place in a `trace/spans` row: trace, span, parent, service, operation, duration_ms, error


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"trace/spans"})
def trace_hotspots(evidence: EvidenceSet) -> list[Finding]:
    own: dict[str, float] = defaultdict(float)
    traces: set[str] = set()
    refs: dict[str, EvidenceRef] = {}
    for item in evidence.kind("trace/spans"):
        by_trace: dict[str, list[list]] = defaultdict(list)
        for span in item.data.get("spans") or ():
            by_trace[str(span[0])].append(span)
        # which service an operation calls, learnt where its server span was recorded: a call that timed out
        # before the callee answered (or ever saw it) has no child, and its time is still spent on the way there
        calls: dict[tuple[str, str], str] = {}
        for _, parent, x in span_calls(item):
            if str(parent[3]) != str(x[3]):
                calls.setdefault((str(parent[3]), str(parent[4])), str(x[3]))
        for trace, spans in by_trace.items():
            traces.add(trace)
            ids = {str(s[1]): s for s in spans}
            children: dict[str, list[list]] = defaultdict(list)
            for s in spans:
                if s[2] and str(s[2]) in ids:
                    children[str(s[2])].append(s)
            for i, s in enumerate(spans):
                kids = children.get(str(s[1]), [])
                mine = max(0.0, float(s[5]) - sum(float(k[5]) for k in kids))
                # a client span whose child is the callee's server span: what is left is the way there and back
                callees = {str(k[3]) for k in kids if str(k[3]) != str(s[3])}
                if not kids and (str(s[3]), str(s[4])) in calls:
                    callees = {calls[(str(s[3]), str(s[4]))]}
                key = f"network from {s[3]} to {sorted(callees)[0]}" if callees else str(s[3])
                own[key] += mine
                refs.setdefault(key, EvidenceRef(item=item.id, field=f"spans.{i}.{_DURATION}", value=s[5]))
    total = sum(own.values())
    if (len(traces) < MIN_TRACES and total < 5 * MIN_OWN_MS) or not own or total <= 0:
        return []
    ranked = sorted(own.items(), key=lambda kv: kv[1], reverse=True)
    (top, top_ms), rest = ranked[0], ranked[1:]
    second = rest[0][1] if rest else 0.0
    if top_ms < HOTSPOT_SHARE * total or top_ms < HOTSPOT_LEAD * second or top_ms < MIN_OWN_MS:
        return []
    share = top_ms / total
    if top.startswith("network from "):
        caller, callee = top.removeprefix("network from ").split(" to ", 1)
        injected = _injected_delay(evidence, callee)
        if injected is not None:
            # a chaos experiment delays the calls to it on purpose: what it adds is the experiment, not a fault
            return [
                Finding(
                    analyzer="trace_hotspots",
                    domain=Domain.NETWORK,
                    role="benign",
                    code="injected_delay",
                    category=Category.HEALTHY,
                    title=f"the delay between {caller} and {callee} is injected by {injected.object}",
                    mechanism=(
                        f"{share:.0%} of the traced requests' own time lies between {caller} and {callee}, where "
                        f"{injected.object} injects a network delay on purpose (a chaos experiment)"
                    ),
                    object=f"calls from {caller} to {callee}",
                    score=0.2,
                    tags=[f"service:{caller}", f"upstream:{callee}"],
                    evidence=[refs[top], EvidenceRef(item=injected.id, field="spec.action", value="delay")],
                )
            ]
        return [
            Finding(
                analyzer="trace_hotspots",
                domain=Domain.NETWORK,
                role="cause",
                code="network_delay",
                category=Category.INFRASTRUCTURE,
                title=f"traced requests spend {share:.0%} of their time between {caller} and {callee}",
                mechanism=(
                    f"across {len(traces)} trace(s), {share:.0%} of the requests' own time ({top_ms:,.0f} ms) lies "
                    f"between {caller}'s client spans and {callee}'s server spans: the network on the way to {callee} "
                    f"(loss, retransmits, delay) or {caller}'s own queue, not {callee}'s handling"
                ),
                object=f"calls from {caller} to {callee}",
                score=0.6,
                tags=[f"service:{caller}", f"upstream:{callee}"],
                explains=["latency", "upstream_timeout", "http_5xx", "errors", "error_rate", "alert:*"],
                evidence=[refs[top]],
                needs=[
                    f"the network path from {caller} to {callee}: packet loss, retransmits (ss -ti), interface drops"
                ],
            )
        ]
    return [
        Finding(
            analyzer="trace_hotspots",
            domain=Domain.NETWORK,
            role="symptom",
            code="latency",
            category=Category.UNKNOWN,
            title=f"{top} holds {share:.0%} of the traced requests' time",
            mechanism=(
                f"across {len(traces)} trace(s), {top}'s own spans (less the calls they make) take {share:.0%} of the "
                f"requests' time ({top_ms:,.0f} ms, the next service {second:,.0f} ms): the slowness is inside {top}, "
                "and its callers' latency follows from it"
            ),
            object=f"service {top}",
            score=0.6,
            tags=[f"service:{top}"],
            evidence=[refs[top]],
            needs=[f"{top}'s own CPU against its limit, memory and GC, its logs, and the spans of what it calls"],
        )
    ]


def _injected_delay(evidence: EvidenceSet, service: str) -> EvidenceItem | None:
    """A Chaos Mesh NetworkChaos (or Litmus network chaos) delaying the traffic of `service` (by its app label or
    name), not recovered."""
    for item in evidence.kind("k8s/NetworkChaos"):
        spec = item.data.get("spec") or {}
        if str(spec.get("action") or "") not in ("delay", "loss", "bandwidth", "corrupt", "duplicate"):
            continue
        labels = (spec.get("selector") or {}).get("labelSelectors") or {}
        named = {str(v) for v in labels.values()} | {str((item.data.get("metadata") or {}).get("name") or "")}
        conds = (item.data.get("status") or {}).get("conditions") or ()
        recovered = any(c.get("type") == "AllRecovered" and c.get("status") == "True" for c in conds)
        if not recovered and any(service == n or n.startswith(f"{service}-") for n in named):
            return item
    return None


N_PLUS_ONE = 15  # calls of one operation under one parent span in one request: a loop of queries, not a query
_SPAN_SERVICE, _SPAN_OPERATION = 3, 4


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"trace/spans"})
def repeated_calls(evidence: EvidenceSet) -> list[Finding]:
    """A request that makes the same call over and over under one span (an N+1 pattern: one query per row of a
    list instead of one query for the list): the code's access pattern, whose cost grows with the data and loads
    the database it calls, not a slow database."""
    worst: dict[str, tuple[int, str, str, str, EvidenceRef, int]] = {}  # service -> (n, operation, trace, ...)
    traces_with: dict[str, set[str]] = defaultdict(set)
    for item in evidence.kind("trace/spans"):
        by_parent: dict[tuple[str, str], dict[tuple[str, str], list[int]]] = defaultdict(lambda: defaultdict(list))
        spans = item.data.get("spans") or ()
        for i, s in enumerate(spans):
            if s[2]:
                by_parent[(str(s[0]), str(s[2]))][(str(s[_SPAN_SERVICE]), str(s[_SPAN_OPERATION]))].append(i)
        for (trace, _), ops in by_parent.items():
            for (service, operation), idx in ops.items():
                if len(idx) < N_PLUS_ONE:
                    continue
                traces_with[service].add(trace)
                if service not in worst or len(idx) > worst[service][0]:
                    ref = EvidenceRef(item=item.id, field=f"spans.{idx[0]}.{_SPAN_OPERATION}", value=operation)
                    total = sum(float(spans[i][_DURATION]) for i in idx)
                    worst[service] = (len(idx), operation, trace, item.id, ref, int(total))
    out: list[Finding] = []
    for service, (n, operation, trace, _, ref, total_ms) in worst.items():
        out.append(
            Finding(
                analyzer="repeated_calls",
                domain=Domain.NETWORK,
                role="cause",
                code="n_plus_one",
                category=Category.CODE_DEFECT,
                title=f"{service} calls '{operation}' {n} times in one request (N+1)",
                mechanism=(
                    f"{service} makes the same call '{operation}' {n} times one after another within one request "
                    f"(trace {trace[:16]}, {total_ms:,} ms in those calls; {len(traces_with[service])} trace(s) show "
                    "it): one query per item instead of one for the list, an N+1 access pattern in its code whose "
                    "cost grows with the data and loads what it calls"
                ),
                object=f"service {service}",
                score=0.75,
                tags=[f"service:{service}"],
                explains=["latency", "db_cpu", "cpu_high", "connections_high", "metric_shift", "alert:*"],
                evidence=[ref],
            )
        )
    return out
