"""Where the time of traced requests goes: each span's own time (its duration less its children's), summed per
service over every trace. When one service holds most of it, the slowness is inside that service, whatever its
callers' latency alerts say; time between a client span and the server span it called is the network's (or the
caller's queue) on the way to that callee: delay injected or suffered on that path, an infrastructure cause."""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers._common import span_calls
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of, thirds

HOTSPOT_SHARE = 0.5  # of all own time in the traces
HOTSPOT_LEAD = 3.0  # and this many times the next service's
MIN_TRACES = 2
MIN_OWN_MS = 200.0  # a hotspot of a few milliseconds is no slowness
_ERROR = 6  # a span's error flag in a `trace/spans` row
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
        # (an operation named only by its method, "GET", that calls several services names none of them)
        called: dict[tuple[str, str], set[str]] = defaultdict(set)
        for _, parent, x in span_calls(item):
            if str(parent[3]) != str(x[3]):
                called[(str(parent[3]), str(parent[4]))].add(str(x[3]))
        calls = {k: next(iter(v)) for k, v in called.items() if len(v) == 1}
        for trace, spans in by_trace.items():
            traces.add(trace)
            ids = {str(s[1]): s for s in spans}
            children: dict[str, list[list]] = defaultdict(list)
            for s in spans:
                if s[2] and str(s[2]) in ids:
                    children[str(s[2])].append(s)
            on_path = _request_tree(spans, ids, children)
            for i, s in enumerate(spans):
                if str(s[1]) not in on_path:
                    continue  # a span detached from the request (FOLLOWS_FROM, work queued for later): off its path
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


def _request_tree(spans: list[list], ids: dict[str, list], children: dict[str, list[list]]) -> set[str]:
    """The spans under the trace's first root (the request as it arrived): a span whose only link is a FOLLOWS_FROM
    (the reader leaves it without a parent) is a root of its own, work done after or beside the request."""
    root = next((s for s in spans if not s[2] or str(s[2]) not in ids), None)
    if root is None:
        return set(ids)
    seen: set[str] = set()
    todo = [root]
    while todo:
        s = todo.pop()
        if str(s[1]) in seen:
            continue
        seen.add(str(s[1]))
        todo += children.get(str(s[1]), [])
    return seen


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


# ---------------------------------------------------------------- a client deadline shorter than the call takes

CUT_SHORT_MARGIN = 1.05  # the callee's server span outlasts the failed client span by at least this much
DEADLINE_MATCH = 0.12  # a setting within this share of the client spans' duration is their deadline
_DEADLINE_KEY = re.compile(r"time_?out|deadline", re.I)
_DURATION_VALUE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds|m|min)?\s*$", re.I)


def duration_ms(value: object) -> float | None:
    """A duration setting in milliseconds: `150ms`, `1.5s`, `2m`; a bare number is taken as milliseconds."""
    m = _DURATION_VALUE.match(str(value))
    if not m:
        return None
    n, unit = float(m.group(1)), (m.group(2) or "").lower()
    return n * {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "seconds": 1000.0, "m": 60000.0, "min": 60000.0}.get(unit, 1.0)


def _deadline_settings(evidence: EvidenceSet) -> list[tuple[str, float, EvidenceRef]]:
    """(name, milliseconds, where) of every timeout or deadline setting in ConfigMaps and container env vars."""
    out: list[tuple[str, float, EvidenceRef]] = []
    for item in evidence.kind("k8s/ConfigMap"):
        for key, value in (item.data.get("data") or {}).items():
            if _DEADLINE_KEY.search(str(key)) and (ms := duration_ms(value)) is not None:
                out.append((str(key), ms, EvidenceRef(item=item.id, field=f"data.{key}", value=value)))
    for kind in ("k8s/Deployment", "k8s/StatefulSet", "k8s/Pod"):
        for item in evidence.kind(kind):
            spec = item.data.get("spec") or {}
            pod = (spec.get("template") or {}).get("spec") or spec
            for c in pod.get("containers") or ():
                for e in c.get("env") or ():
                    name, value = str(e.get("name") or ""), e.get("value")
                    if _DEADLINE_KEY.search(name) and value is not None and (ms := duration_ms(value)) is not None:
                        out.append((name, ms, EvidenceRef(item=item.id, field=f"env.{name}", value=value)))
    return out


NORMAL_NEAR_DEADLINE = 0.8  # the callee's usual median latency is at least this share of the deadline
SLOWED_DOWN = 1.5  # its median latency in the last third over the first third: it got slower
_LATENCY = re.compile(r"latenc|duration|response_?time|_seconds\b|seconds$|_ms$|millis", re.I)
_HIGH_QUANTILE = re.compile(r"p9\d|_9\d\b|max", re.I)


def _usual_latency_ms(evidence: EvidenceSet, service: str) -> tuple[float, bool, EvidenceRef] | None:
    """The callee's median latency over its series (milliseconds), whether it rose over the window, and where:
    from a median or mean latency series of its own (not a p99: a deadline under the p99 fails only the tail)."""
    for item in evidence.kind("metric"):
        labels = {str(k): str(v) for k, v in (item.data.get("labels") or {}).items()}
        name = str(item.data.get("name") or item.object)
        own = {labels.get(k) for k in ("job", "service", "app", "container", "service_name", "destination_service")}
        if service not in own or not _LATENCY.search(name) or _HIGH_QUANTILE.search(name):
            continue
        q = labels.get("quantile")
        if q is not None and q not in ("0.5", "0.50"):
            continue
        values = [v for _, v in points_of(item.data.get("points"))]
        if len(values) < 3:
            continue
        mid = sorted(values)[len(values) // 2]
        scale = 1.0 if re.search(r"_ms\b|millis", name, re.I) or mid > 50 else 1000.0
        early, late = thirds(values)
        rose = early > 0 and late / early >= SLOWED_DOWN
        return mid * scale, rose, EvidenceRef(item=item.id, field="points", value=f"median {mid * scale:.0f} ms")
    return None


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if len(w) >= 3}


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"trace/spans"})
def cut_short_calls(evidence: EvidenceSet) -> list[Finding]:
    """Calls the caller gave up on while the callee was still working: the client span fails at its deadline and
    the callee's server span under it runs on past it. Every call that takes longer than the deadline fails, so the
    deadline (a setting, when one with that value is in the bundle) is shorter than the callee needs: a
    configuration error, not a failing dependency (its own latency is what it always was)."""
    cut: dict[tuple[str, str], list[tuple[float, float, EvidenceRef]]] = defaultdict(list)
    for item in evidence.kind("trace/spans"):
        for i, parent, child in span_calls(item):
            caller, callee = str(parent[_SPAN_SERVICE]), str(child[_SPAN_SERVICE])
            if caller == callee or len(parent) <= _ERROR or not parent[_ERROR]:
                continue
            client_ms, server_ms = float(parent[_DURATION]), float(child[_DURATION])
            if client_ms > 0 and server_ms >= client_ms * CUT_SHORT_MARGIN:
                ref = EvidenceRef(item=item.id, field=f"spans.{i}.{_DURATION}", value=round(client_ms, 1))
                cut[(caller, callee)].append((client_ms, server_ms, ref))
    out: list[Finding] = []
    settings = _deadline_settings(evidence) if cut else []
    for (caller, callee), calls in cut.items():
        deadline = sorted(c for c, _, _ in calls)[len(calls) // 2]
        server = sorted(s for _, s, _ in calls)[len(calls) // 2]
        near = [s for s in settings if abs(s[1] - deadline) <= DEADLINE_MATCH * deadline]
        # the setting that names the callee ("FRAUD_SCORER_DEADLINE" for fraud-scorer) before any other
        near.sort(key=lambda s: -len(_words(s[0]) & _words(callee)))
        setting = near[0] if near else None
        usual = _usual_latency_ms(evidence, callee)
        if usual is not None and (usual[0] < NORMAL_NEAR_DEADLINE * deadline or usual[1]):
            continue  # the callee is usually well within the deadline, or got slower: it is the one that changed
        if usual is None and setting is None:
            continue  # nothing says the callee is always this slow: it may be the one that slowed down
        key = setting[0] if setting else "<DEADLINE>"
        what = f"{setting[0]}={setting[2].value}" if setting else f"its deadline of about {deadline:.0f} ms"
        out.append(
            Finding(
                analyzer="cut_short_calls",
                domain=Domain.NETWORK,
                role="cause",
                code="deadline_too_short",
                category=Category.CONFIGURATION_ERROR,
                title=f"{caller} gives up on {callee} at {deadline:.0f} ms while {callee} takes {server:.0f} ms",
                mechanism=(
                    f"{caller}'s {what} is shorter than {callee} needs: {len(calls)} call(s) to {callee} failed on "
                    f"{caller}'s side after {deadline:.0f} ms while {callee}'s own span under each ran on to about "
                    f"{server:.0f} ms and was cancelled; every call slower than the deadline fails, so the "
                    f"deadline is set too short for {callee}'s normal latency (a configuration error; {callee} "
                    "itself answers as it always did)"
                ),
                object=f"{caller} {setting[0]}" if setting else f"{caller}'s deadline for {callee}",
                score=0.8 if usual is not None else 0.5,
                tags=[f"service:{caller}", f"upstream:{callee}", *([f"config:{setting[0]}"] if setting else [])],
                explains=[
                    "upstream_timeout",
                    "errors",
                    "exception",
                    "http_5xx",
                    "latency",
                    "metric_shift",
                    "alert:*",
                    "upstream_*",
                    "timeouts",
                ],
                evidence=[c[2] for c in calls[:3]]
                + ([setting[2]] if setting else [])
                + ([usual[2]] if usual is not None else []),
                actions=[
                    Action(
                        description=f"Compare {caller}'s deadline for {callee} with {callee}'s latency (p50, p99)",
                        command=f"kubectl get configmap -o yaml | grep -iE 'timeout|deadline'  # {caller}'s namespace",
                    ),
                    Action(
                        description=f"Set the deadline above {callee}'s p99 (or revert the change that cut it)",
                        command=f"kubectl set env deploy/{caller} {key}=<above p99>",
                        kind="write",
                    ),
                ],
            )
        )
    return out
