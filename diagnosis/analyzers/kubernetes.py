"""Kubernetes: what is wrong with pods, nodes, rollouts, services and capacity, from objects, events and pod logs.

Each finding is a cause candidate (OOMKilled container, crash with the reason its last log lines give, image that
cannot be pulled, misconfigured probe, unschedulable pod, exhausted quota, node NotReady or under pressure,
Service selecting no pods ...), a symptom another cause explains (rollout stuck, replicas unavailable, pod not
ready), or benign (an old restart of a container running fine since, a recovered node, a pending volume waiting
for its first consumer). Recency is measured against the evidence's own "now", never the wall clock.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import (
    KUBE_QUOTA,
    is_error,
    level_of,
    object_tags,
    quota_detail,
    service_of,
    workload_of_pod,
)
from diagnosis.analyzers._kube import (
    RECENT_S,
    KubeIndex,
    app_name,
    event_ts,
    kube_index,
    meta,
    ns_name,
    owner_workload,
    pod_tags,
    ref,
    workload_tags,
)
from diagnosis.analyzers._kube_pods import (
    BENIGN,
    CAUSE,
    K8S,
    POD_EFFECTS,
    SYMPTOM,
    PodReader,
    claims_of,
    image_reason,
    k8s_finding,
    kubectl_kind,
    quantity,
    scheduling_reason,
    warning_events,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network.extraction import _call_failure
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts, parse_ts

__all__ = ["image_reason", "quantity", "scheduling_reason"]


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Pod", "k8s/Event"})
def kubernetes_pods(evidence: EvidenceSet) -> list[Finding]:
    """Containers that crash, are OOMKilled, cannot pull their image or start; pods that cannot be scheduled;
    probes that fail; old restarts and evictions as benign history."""
    idx = kube_index(evidence)
    keys = set(idx.pods) | {(ns, name) for (kind, ns, name) in idx.events if kind == "Pod"}
    out: list[Finding] = []
    for ns, pod in sorted(keys):
        found = PodReader(idx, ns, pod).read()
        replaced = _replaced_by(idx, ns, pod) if (ns, pod) not in idx.pods and found else None
        out.extend(_gone(f, replaced) if replaced else f for f in found)
    return out


REPLACED_AFTER_S = 900  # a pod seen only in events, silent this long, whose workload's exported pods all run


def _replaced_by(idx: KubeIndex, ns: str, pod: str) -> tuple[str, EvidenceItem] | None:
    """A pod known only from its events (the pod export does not hold it), whose events stopped a while ago, while
    every exported pod of its workload runs Ready: it is gone, replaced (a rollback, a new ReplicaSet)."""
    workload = workload_of_pod(pod)
    siblings = [(n, p) for n, p in idx.pods_by_ns.get(ns, []) if workload_of_pod(n) == workload and n != pod]
    last = max((event_ts(e) or 0.0 for e in idx.events_for("Pod", ns, pod)), default=0.0)
    if not siblings or idx.now is None or not last or idx.now - last < REPLACED_AFTER_S:
        return None
    for _, p in siblings:
        status = p.data.get("status") or {}
        ready = [c for c in status.get("containerStatuses") or () if isinstance(c, dict)]
        if status.get("phase") != "Running" or not ready or not all(c.get("ready") for c in ready):
            return None
    return siblings[0]


def _gone(f: Finding, replaced: tuple[str, EvidenceItem]) -> Finding:
    if f.role == BENIGN:
        return f
    name, item = replaced
    return f.model_copy(
        update={
            "role": BENIGN,
            "category": Category.HEALTHY,
            "score": 0.2,
            "mechanism": f"{f.mechanism}; that pod is gone and its workload's pods run Ready now ({name}): the "
            "failure ended with it",
            "evidence": [*f.evidence, ref(item, "status.phase", "Running")],
        }
    )


# ------------------------------------------------------------------------------------------ nodes

_PRESSURE = {
    "MemoryPressure": ("memory", ["evicted", "oom_killed_nolimit", "memory_high", "oom_kill"]),
    "DiskPressure": ("disk", ["evicted", "disk_full", "image_pull_disk_full"]),
    "PIDPressure": ("process ids", ["evicted", "fork_failed"]),
}


def _pods_on(idx: KubeIndex, node: str) -> list[tuple[str, str, EvidenceItem]]:
    return idx.pods_by_node.get(node, [])


_USING = re.compile(
    r"Container (\S+) was using (\d+(?:\.\d+)?[A-Za-z]*)(?:, (?:request is|which exceeds its request of) (\S+?))?[,.]",
    re.I,
)


def _top_consumer(idx: KubeIndex, node: str) -> tuple[str, EvidenceRef] | None:
    """The container the kubelet's eviction messages say used the most on a node: who filled it up."""
    best: tuple[float, str, EvidenceRef] | None = None
    for ns, name, pod in _pods_on(idx, node):
        texts: list[tuple[str, EvidenceRef]] = []
        status = pod.data.get("status") or {}
        if status.get("message"):
            texts.append((str(status["message"]), ref(pod, "status.message", status["message"])))
        for e in idx.events_for("Pod", ns, name):
            if e.data.get("reason") == "Evicted":
                texts.append((str(e.data.get("message") or ""), ref(e, "message", e.data.get("message"))))
        for text, r in texts:
            for m in _USING.finditer(text):
                used = quantity(m.group(2)) or 0.0
                request = m.group(3)
                what = re.search(r"low on resource: ([\w-]+)", text)
                desc = (
                    f"container {m.group(1)} of Pod {ns}/{name} (using {m.group(2)}"
                    f"{', request ' + request if request else ''} of {what.group(1) if what else 'the resource'})"
                )
                if best is None or used > best[0]:
                    best = (used, desc, r)
    return (best[1], best[2]) if best else None


def _troubled(item: EvidenceItem) -> bool:
    status = item.data.get("status") or {}
    if status.get("phase") in ("Succeeded",):
        return False
    if status.get("reason") in ("Evicted", "NodeLost") or status.get("phase") in ("Unknown", "Failed"):
        return True
    return any(c.get("type") == "Ready" and c.get("status") != "True" for c in status.get("conditions") or ())


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Node", "k8s/Event"})
def kubernetes_nodes(evidence: EvidenceSet) -> list[Finding]:
    """Nodes NotReady or under memory/disk/PID pressure, from their conditions or events; recovered nodes benign."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    names = {ns_name(n)[1] for n in idx.of_kind("Node")} | {name for (k, _, name) in idx.events if k == "Node"}
    for name in sorted(names):
        item = idx.objects.get(("Node", "", name))
        evs = [e for e in warning_events(idx.events_for("Node", "", name)) if idx.recent(event_ts(e))]
        affected = [(ns, p) for ns, p, pod in _pods_on(idx, name) if _troubled(pod)]
        tags = [f"node:{name}", f"host:{name}"] + [f"pod:{ns}/{p}" for ns, p in affected]
        provider = str(((item.data.get("spec") or {}).get("providerID") or "") if item else "")
        if re.search(r"/i-[0-9a-f]{8,}$", provider):  # aws:///eu-west-1a/i-0c4f...: the EC2 instance under it
            tags.append(f"instance:{provider.rsplit('/', 1)[-1]}")
        node_obj = f"Node {name}"
        conds = ((item.data.get("status") or {}).get("conditions") or ()) if item else ()
        reported = False
        for i, c in enumerate(conds):
            ctype, cstatus = c.get("type"), c.get("status")
            since = parse_ts(c.get("lastTransitionTime"))
            cref = [ref(item, f"status.conditions.{i}.status", cstatus)] if item else []
            if c.get("message") and item:
                cref.append(ref(item, f"status.conditions.{i}.message", c.get("message")))
            if ctype == "Ready" and cstatus != "True":
                reported = True
                out.append(
                    k8s_finding(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code="node_not_ready",
                        category=Category.INFRASTRUCTURE,
                        object=node_obj,
                        score=0.85,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} NotReady since {fmt_ts(since)} "
                        f"({c.get('reason') or 'Ready=' + str(cstatus)})",
                        mechanism=f"{node_obj} is NotReady ({c.get('reason') or cstatus}: "
                        f"{str(c.get('message') or 'kubelet stopped reporting')[:140]}), so its "
                        f"{len(affected)} pod(s) are not running or not ready"
                        + (f" ({', '.join(f'{ns}/{p}' for ns, p in affected[:4])})" if affected else ""),
                        explains=[*POD_EFFECTS, "evicted", "pod_unknown", "pod_dns_unpublished"],
                        evidence=cref + [ref(e, "message", e.data.get("message")) for e in evs[:2]],
                        actions=[
                            Action(
                                description="Show the node's conditions and kubelet status",
                                command=f"kubectl describe node {name}",
                            ),
                            Action(
                                description="Move the workloads off the node",
                                kind="write",
                                command=f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data",
                            ),
                        ],
                    )
                )
            elif (
                ctype == "Ready"
                and cstatus == "True"
                and since
                and idx.recent(since)
                and any(
                    str(e.data.get("reason")) in ("NodeNotReady", "NodeNotSchedulable")
                    for e in idx.events_for("Node", "", name)
                )
            ):
                out.append(
                    k8s_finding(
                        "kubernetes_nodes",
                        role=BENIGN,
                        code="node_recovered",
                        category=Category.HEALTHY,
                        object=node_obj,
                        ts=since,
                        tags=[f"node:{name}"],
                        title=f"{node_obj} was NotReady and recovered at {fmt_ts(since)}",
                        mechanism=f"a recovered fault: {node_obj} is Ready again since {fmt_ts(since)}",
                        evidence=cref,
                    )
                )
            elif ctype in _PRESSURE and cstatus == "True":
                reported = True
                what, effects = _PRESSURE[str(ctype)]
                top = _top_consumer(idx, name)
                if top:
                    cref = [*cref, top[1]]
                out.append(
                    k8s_finding(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code=f"node_{str(ctype).lower().replace('pressure', '')}_pressure",
                        category=Category.RESOURCE_EXHAUSTION,
                        object=node_obj,
                        score=0.75,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} under {ctype} since {fmt_ts(since)}",
                        mechanism=f"{node_obj} ran low on {what} ({ctype}), so the kubelet evicts pods and "
                        f"refuses new ones" + (f"; the biggest consumer is {top[0]}" if top else ""),
                        explains=[
                            *effects,
                            "pod_not_ready",
                            "pod_restarts",
                            "replicas_unavailable",
                            "insufficient_resources",
                        ],
                        evidence=cref,
                        actions=[
                            Action(
                                description="Show the node's usage and its pods",
                                command=f"kubectl describe node {name}",
                            )
                        ],
                    )
                )
            elif ctype == "NetworkUnavailable" and cstatus == "True":
                reported = True
                out.append(
                    k8s_finding(
                        "kubernetes_nodes",
                        role=CAUSE,
                        code="node_network_unavailable",
                        category=Category.INFRASTRUCTURE,
                        object=node_obj,
                        score=0.8,
                        ts=since,
                        tags=tags,
                        title=f"{node_obj} network unavailable",
                        mechanism=f"{node_obj} has no working pod network (NetworkUnavailable: "
                        f"{c.get('message') or ''})",
                        explains=POD_EFFECTS,
                        evidence=cref,
                        actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
                    )
                )
        if reported or not evs:
            continue
        # no conditions say it, but the node's recent Warning events do
        reasons = {str(e.data.get("reason")): e for e in evs}
        if "NodeNotReady" in reasons or "Rebooted" in reasons or "NodeNotSchedulable" in reasons:
            e = reasons.get("NodeNotReady") or reasons.get("Rebooted") or reasons["NodeNotSchedulable"]
            out.append(
                _node_event_cause(
                    name,
                    e,
                    tags,
                    code="node_not_ready",
                    category=Category.INFRASTRUCTURE,
                    title=f"{node_obj} {e.data.get('reason')}",
                    mechanism=f"{node_obj} went NotReady ({e.data.get('message') or e.data.get('reason')})",
                    explains=[*POD_EFFECTS, "evicted", "pod_unknown"],
                )
            )
        elif "SystemOOM" in reasons or "OOMKilling" in reasons:
            e = reasons.get("SystemOOM") or reasons["OOMKilling"]
            out.append(
                _node_event_cause(
                    name,
                    e,
                    tags,
                    code="node_memory_pressure",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{node_obj} system OOM",
                    mechanism=f"{node_obj} ran out of memory and the kernel OOM killer killed processes "
                    f"({str(e.data.get('message') or '')[:120]})",
                    explains=["evicted", "oom_killed_nolimit", "oom_kill", "memory_high", *POD_EFFECTS],
                )
            )
        elif reasons.keys() & {"FreeDiskSpaceFailed", "ImageGCFailed", "EvictionThresholdMet"}:
            e = next(
                reasons[r] for r in ("FreeDiskSpaceFailed", "ImageGCFailed", "EvictionThresholdMet") if r in reasons
            )
            out.append(
                _node_event_cause(
                    name,
                    e,
                    tags,
                    code="node_disk_pressure",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{node_obj} {e.data.get('reason')}",
                    mechanism=f"{node_obj} is running out of resources "
                    f"({e.data.get('message') or e.data.get('reason')})",
                    explains=["evicted", "disk_full", "image_pull_disk_full", *POD_EFFECTS],
                    # image garbage collection failing, with no eviction threshold met, is a warning about what
                    # may come: a cause only of what it explains
                    score=0.7 if "EvictionThresholdMet" in reasons else 0.45,
                )
            )
    return out


def _node_event_cause(
    name: str,
    event: EvidenceItem,
    tags: list[str],
    *,
    code: str,
    category: Category,
    title: str,
    mechanism: str,
    explains: list[str],
    score: float = 0.7,
) -> Finding:
    """A node fault read from one of its Warning events alone (no condition said it): a weaker cause than a
    condition, with the event's message as evidence and `kubectl describe node` as the next step."""
    return k8s_finding(
        "kubernetes_nodes",
        role=CAUSE,
        code=code,
        category=category,
        object=f"Node {name}",
        score=score,
        ts=event_ts(event),
        tags=tags,
        title=title,
        mechanism=mechanism,
        explains=explains,
        evidence=[ref(event, "message", event.data.get("message"))],
        actions=[Action(description="Show the node", command=f"kubectl describe node {name}")],
    )


# ------------------------------------------------------------------------------------------ workloads


def _cond(item: EvidenceItem, ctype: str) -> tuple[int, dict[str, Any]] | None:
    for i, c in enumerate((item.data.get("status") or {}).get("conditions") or ()):
        if c.get("type") == ctype:
            return i, c
    return None


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Deployment", "k8s/StatefulSet", "k8s/DaemonSet"})
def kubernetes_rollouts(evidence: EvidenceSet) -> list[Finding]:
    """Rollouts stuck past their progress deadline and workloads short of ready replicas: symptoms of whatever
    stops their pods."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        for item in idx.of_kind(kind):
            ns, name = ns_name(item)
            spec, status = item.data.get("spec") or {}, item.data.get("status") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or meta(item).get("labels")
            tags = workload_tags(ns, name, labels)
            obj = f"{kind} {ns}/{name}"
            needs = [f"pods of {obj} (status, events, logs): kubectl get pods -n {ns} -l <its selector>"]
            prog = _cond(item, "Progressing")
            if prog and prog[1].get("reason") == "ProgressDeadlineExceeded":
                i, c = prog
                out.append(
                    k8s_finding(
                        "kubernetes_rollouts",
                        role=SYMPTOM,
                        code="rollout_stuck",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.6,
                        ts=parse_ts(c.get("lastTransitionTime")),
                        tags=tags,
                        title=f"{obj} rollout stuck (ProgressDeadlineExceeded)",
                        mechanism=f"The rollout of {obj} made no progress within its deadline: "
                        f"{c.get('message') or ''}",
                        evidence=[ref(item, f"status.conditions.{i}.reason", c.get("reason"))],
                        needs=needs,
                        actions=[
                            Action(
                                description="Show the rollout and its new pods",
                                command=f"kubectl rollout status {kubectl_kind(kind)}/{name} -n {ns} --timeout=5s",
                            )
                        ],
                    )
                )
                continue
            if kind == "DaemonSet":
                want, have, field = (
                    status.get("desiredNumberScheduled"),
                    status.get("numberReady"),
                    "status.numberReady",
                )
            else:
                want = spec.get("replicas", 1)
                have = status.get("availableReplicas" if kind == "Deployment" else "readyReplicas", 0) or 0
                field = "status.availableReplicas" if kind == "Deployment" else "status.readyReplicas"
            if isinstance(want, int) and isinstance(have, int) and want > 0 and have < want:
                avail = _cond(item, "Available")
                ts = parse_ts(avail[1].get("lastTransitionTime")) if avail else None
                if field.split(".")[-1] in status:
                    refs = [ref(item, field, have)]
                elif "unavailableReplicas" in status:
                    refs = [ref(item, "status.unavailableReplicas", status["unavailableReplicas"])]
                elif avail:
                    refs = [ref(item, f"status.conditions.{avail[0]}.message", avail[1].get("message"))]
                else:
                    refs = [ref(item, "spec.replicas", want)]
                out.append(
                    k8s_finding(
                        "kubernetes_rollouts",
                        role=SYMPTOM,
                        code="replicas_unavailable",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.5 if have else 0.65,
                        ts=ts,
                        tags=tags,
                        title=f"{obj} has {have}/{want} replicas available",
                        mechanism=f"{obj} runs {have} of {want} desired replicas available",
                        evidence=refs,
                        needs=needs,
                    )
                )
    return out


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Service", "k8s/Endpoints"})
def kubernetes_services(evidence: EvidenceSet) -> list[Finding]:
    """Services that route to nothing: a selector matching no pod (configuration) or matching pods none of which
    is ready (a symptom of the pods' own fault); a targetPort no selected pod declares."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for svc in idx.of_kind("Service"):
        ns, name = ns_name(svc)
        spec = svc.data.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector or spec.get("type") == "ExternalName":
            continue
        pods = idx.pods_by_ns.get(ns, [])
        matching = [
            (pname, p)
            for pname, p in pods
            if all((meta(p).get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        ep = idx.objects.get(("Endpoints", ns, name))
        ready_addrs = None
        if ep is not None:
            ready_addrs = sum(len(s.get("addresses") or ()) for s in ep.data.get("subsets") or ())
        obj = f"Service {ns}/{name}"
        tags = [f"service:{name}", f"namespace:{ns}"]
        out += _refused_on_an_undeclared_port(evidence, svc, obj, tags)
        sel = ",".join(f"{k}={v}" for k, v in selector.items())
        if ready_addrs == 0 or (ep is None and pods and not matching):
            if pods and not matching:
                near = sorted({app_name(meta(p).get("labels")) or "" for _, p in pods} - {""})[:3]
                out.append(
                    k8s_finding(
                        "kubernetes_services",
                        role=CAUSE,
                        code="service_selector_mismatch",
                        category=Category.CONFIGURATION_ERROR,
                        object=obj,
                        score=0.8 if ep is not None else 0.65,
                        tags=tags + [f"workload:{ns}/{n}" for n in near],
                        title=f"{obj} selects no pods (selector {sel})",
                        mechanism=f"{obj} has no endpoints because its selector {sel} matches none of the "
                        f"{len(pods)} pods in {ns}" + (f" (their app labels: {', '.join(near)})" if near else ""),
                        explains=[
                            "no_ready_endpoints",
                            "http_5xx",
                            "http_503",
                            "upstream_unavailable",
                            "connection_refused",
                            "error_rate",
                            "log_errors",
                            "latency",
                        ],
                        evidence=[ref(svc, "spec.selector", selector)]
                        + ([ref(ep, "subsets", ep.data.get("subsets"))] if ep and "subsets" in ep.data else []),
                        actions=[
                            Action(
                                description="Compare the selector with the pods' labels",
                                command=f"kubectl get pods -n {ns} --show-labels; kubectl get endpoints {name} -n {ns}",
                            )
                        ],
                    )
                )
            elif matching and (unnamed := _undeclared_named_ports(spec, matching)):
                # a named targetPort no selected pod declares: the endpoints controller finds no port to send to,
                # so the Service has no endpoints although its pods may all be Ready
                i, target, declared_names = unnamed[0]
                out.append(
                    _target_port_finding(
                        svc,
                        i,
                        score=0.8,
                        tags=tags + [f"pod:{ns}/{p}" for p, _ in matching[:10]],
                        title=f"{obj} targetPort '{target}' is a port name none of its pods declares",
                        mechanism=f"{obj} sends traffic to the named targetPort '{target}', but its "
                        f"{len(matching)} pods name their ports {', '.join(declared_names) or '(none)'}: with no "
                        "port of that name the Service gets no endpoints, so requests to it fail although the pods "
                        "themselves may be ready",
                    )
                )
            elif matching:
                out.append(
                    k8s_finding(
                        "kubernetes_services",
                        role=SYMPTOM,
                        code="no_ready_endpoints",
                        category=Category.UNKNOWN,
                        object=obj,
                        score=0.6,
                        tags=tags + [f"pod:{ns}/{p}" for p, _ in matching[:10]],
                        title=f"{obj} has no ready endpoints ({len(matching)} selected pods, none ready)",
                        mechanism=f"{obj} routes to nothing: none of its {len(matching)} pods is ready",
                        evidence=[ref(ep, None, ep.data.get("subsets")) if ep else ref(svc, "spec.selector", selector)],
                        needs=[f"status and logs of the pods behind {obj}"],
                    )
                )
            continue
        # a targetPort that none of the selected pods declares
        declared = _declared_ports(matching)
        if not declared and ready_addrs:
            out += _refused_behind_target_port(evidence, svc, obj, tags)
        for i, port in enumerate(spec.get("ports") or ()):
            target = port.get("targetPort", port.get("port"))
            if declared and target is not None and target not in declared:
                out.append(
                    _target_port_finding(
                        svc,
                        i,
                        score=0.6,
                        tags=tags,
                        title=f"{obj} targetPort {target} not declared by its pods",
                        mechanism=f"{obj} sends traffic to targetPort {target}, which none of its pods declares "
                        f"(they declare {', '.join(sorted(str(d) for d in declared))})",
                    )
                )
    return out


# ------------------------------------------------------------------------------------------ capacity

HPA_OVERLOAD = 1.5  # an HPA at its ceiling whose metric is this many times its target
HPA_SATURATED_UTIL = 95  # ... or whose pods use this share of their requests (%): saturated whatever the target


def _hpa_overload(spec: dict[str, Any], status: dict[str, Any]) -> float:
    """How far over its target an HPA's resource metric stands (current / target utilization), 0 when unknown."""
    targets = {
        str((m.get("resource") or {}).get("name")): ((m.get("resource") or {}).get("target") or {}).get(
            "averageUtilization"
        )
        for m in spec.get("metrics") or ()
        if isinstance(m, dict) and m.get("type") == "Resource"
    }
    worst = 0.0
    for m in status.get("currentMetrics") or ():
        res = (m or {}).get("resource") or {}
        cur, want = (res.get("current") or {}).get("averageUtilization"), targets.get(str(res.get("name")))
        if isinstance(cur, int | float) and isinstance(want, int | float) and want > 0:
            worst = max(worst, cur / want)
    return worst


def _hpa_saturated(status: dict[str, Any]) -> tuple[str, float] | None:
    """The resource whose pods use at least HPA_SATURATED_UTIL% of their requests (pods whose limit is their
    request are pinned there), and that share."""
    for m in status.get("currentMetrics") or ():
        res = (m or {}).get("resource") or {}
        cur = (res.get("current") or {}).get("averageUtilization")
        if isinstance(cur, int | float) and cur >= HPA_SATURATED_UTIL:
            return str(res.get("name") or "cpu"), float(cur)
    return None


@ANALYZERS.analyzer(
    domain=K8S,
    reads={"k8s/ResourceQuota", "k8s/HorizontalPodAutoscaler", "k8s/PersistentVolumeClaim", "k8s/Event"},
)
def kubernetes_capacity(evidence: EvidenceSet) -> list[Finding]:
    """Quotas that refuse pods, HPAs pinned at their maximum, PersistentVolumeClaims that cannot bind."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    # FailedCreate on controllers: quota exceeded, or admission refusing the pod spec
    for (kind, ns, name), evs in idx.events.items():
        fails = [
            e
            for e in warning_events(evs)
            if e.data.get("reason") in ("FailedCreate", "FailedCreatePod") and idx.recent(event_ts(e))
        ]
        if kind not in ("ReplicaSet", "Job", "StatefulSet", "DaemonSet", "Deployment", "CronJob"):
            # an operator's own resource (a PyTorchJob, a SparkApplication) that creates pods: its quota refusals
            fails = [e for e in fails if "exceeded quota" in str(e.data.get("message") or "")]
        if not fails:
            continue
        e = fails[-1]
        msg = str(e.data.get("message") or "")
        workload = _RS_TO_DEPLOY(name) if kind == "ReplicaSet" else name
        tags = workload_tags(ns, workload)
        quota = KUBE_QUOTA.search(msg)
        if quota:
            qitem = idx.objects.get(("ResourceQuota", ns, quota.group(1)))
            refs = [ref(e, "message", msg)] + (
                [ref(qitem, "status.used", (qitem.data.get("status") or {}).get("used"))]
                if qitem and "status" in qitem.data
                else []
            )
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="quota_exceeded",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=f"ResourceQuota {ns}/{quota.group(1)}",
                    score=0.85,
                    ts=event_ts(e),
                    tags=[*tags, f"quota:{ns}/{quota.group(1)}"],
                    title=f"ResourceQuota {ns}/{quota.group(1)} exhausted: {kind} {ns}/{name} cannot create pods",
                    mechanism=f"ResourceQuota {ns}/{quota.group(1)} is used up{quota_detail(quota)}, so {kind} "
                    f"{ns}/{name} cannot create its pods",
                    explains=[
                        "replicas_unavailable",
                        "rollout_stuck",
                        "job_failed",
                        "no_ready_endpoints",
                        "hpa_at_max",
                    ],
                    evidence=refs,
                    actions=[
                        Action(
                            description="Show the quota's usage",
                            command=f"kubectl describe resourcequota {quota.group(1)} -n {ns}",
                        )
                    ],
                )
            )
        else:
            category = Category.CONFIGURATION_ERROR
            if re.search(r"serviceaccount|forbidden|violates|must specify|invalid|admission|denied", msg, re.I):
                why = f"the API server refuses its pod spec: {msg[:200]}"
            else:
                why = msg[:200]
                category = Category.UNKNOWN
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="pod_create_refused",
                    category=category,
                    object=f"{kind} {ns}/{name}",
                    score=0.7 if category != Category.UNKNOWN else 0.45,
                    ts=event_ts(e),
                    tags=tags,
                    title=f"{kind} {ns}/{name} cannot create pods",
                    mechanism=f"{kind} {ns}/{name} cannot create pods because {why}",
                    explains=["replicas_unavailable", "rollout_stuck", "job_failed", "no_ready_endpoints"],
                    evidence=[ref(e, "message", msg)],
                    actions=[
                        Action(
                            description="Show the controller's events",
                            command=f"kubectl describe {kind.lower()} {name} -n {ns}",
                        )
                    ],
                )
            )
    # quotas at their hard limit with nothing refused are worth a note, not a cause
    for q in idx.of_kind("ResourceQuota"):
        ns, name = ns_name(q)
        status = q.data.get("status") or {}
        hard, used = status.get("hard") or {}, status.get("used") or {}
        full = [r for r, h in hard.items() if _at_limit(quantity(used.get(r)), quantity(h))]
        if full and not any(f.code == "quota_exceeded" and f.object.endswith(f"{ns}/{name}") for f in out):
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=BENIGN,
                    code="quota_full",
                    category=Category.HEALTHY,
                    object=f"ResourceQuota {ns}/{name}",
                    tags=[f"quota:{ns}/{name}", f"namespace:{ns}"],
                    title=f"ResourceQuota {ns}/{name} at its limit for {', '.join(full)}",
                    mechanism="a quota at its limit refused nothing in this evidence (no FailedCreate events)",
                    evidence=[ref(q, "status.used", used)],
                )
            )
    for hpa in idx.of_kind("HorizontalPodAutoscaler"):
        ns, name = ns_name(hpa)
        spec, status = hpa.data.get("spec") or {}, hpa.data.get("status") or {}
        target = (spec.get("scaleTargetRef") or {}).get("name") or name
        tags = [*workload_tags(ns, str(target)), f"hpa:{ns}/{name}"]
        maxr, cur, desired = spec.get("maxReplicas"), status.get("currentReplicas"), status.get("desiredReplicas")
        limited = _cond(hpa, "ScalingLimited")
        active = _cond(hpa, "ScalingActive")
        if active and active[1].get("status") == "False":
            i, c = active
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="hpa_cannot_scale",
                    category=Category.CONFIGURATION_ERROR,
                    object=f"HorizontalPodAutoscaler {ns}/{name}",
                    score=0.45,
                    ts=parse_ts(c.get("lastTransitionTime")),
                    tags=tags,
                    title=f"HPA {ns}/{name} cannot compute replicas ({c.get('reason')})",
                    mechanism=f"HPA {ns}/{name} cannot scale {target}: {str(c.get('message') or '')[:160]}",
                    explains=["latency", "cpu_high", "cpu_throttled", "http_5xx", "error_rate"],
                    evidence=[ref(hpa, f"status.conditions.{i}.message", c.get("message"))],
                    actions=[Action(description="Show the HPA", command=f"kubectl describe hpa {name} -n {ns}")],
                )
            )
        elif (
            isinstance(maxr, int)
            and isinstance(cur, int)
            and cur >= maxr
            and ((isinstance(desired, int) and desired >= maxr) or (limited and limited[1].get("status") == "True"))
        ):
            over = _hpa_overload(spec, status)
            pinned = _hpa_saturated(status)
            overloaded = over >= HPA_OVERLOAD or pinned is not None
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=CAUSE,
                    code="hpa_at_max",
                    category=Category.RESOURCE_EXHAUSTION,
                    object=f"HorizontalPodAutoscaler {ns}/{name}",
                    # far over its target at the ceiling, the workload is short of capacity, not just at a limit
                    score=0.7 if overloaded else 0.45,
                    tags=tags,
                    # (overloaded, its pods were behind the load while it scaled up to the ceiling: the saturation
                    # began before the ceiling did, at a time the HPA does not say)
                    ts=parse_ts(limited[1].get("lastTransitionTime")) if limited and not overloaded else None,
                    title=f"HPA {ns}/{name} pinned at maxReplicas {maxr}",
                    mechanism=f"{target} is saturated: its HPA {ns}/{name} is at maxReplicas {maxr} and wants more"
                    + (f" (its metric at {over:.1f}x its target)" if over >= HPA_OVERLOAD else "")
                    + (f" (its pods use {pinned[1]:.0f}% of their {pinned[0]} requests)" if pinned else "")
                    + ", so load beyond that capacity queues up",
                    explains=["latency", "cpu_high", "cpu_throttled", "http_5xx", "error_rate", "queue_backlog"],
                    evidence=[ref(hpa, "status.currentReplicas", cur), ref(hpa, "spec.maxReplicas", maxr)],
                    actions=[
                        Action(
                            description="Show the HPA's metrics and events",
                            command=f"kubectl describe hpa {name} -n {ns}",
                        ),
                        Action(
                            description="Raise the ceiling if the nodes have room",
                            kind="write",
                            command=f'kubectl patch hpa {name} -n {ns} -p \'{{"spec":{{"maxReplicas":{maxr * 2}}}}}\'',
                        ),
                    ],
                )
            )
    for pvc in idx.of_kind("PersistentVolumeClaim"):
        ns, name = ns_name(pvc)
        phase = (pvc.data.get("status") or {}).get("phase")
        if phase not in ("Pending", "Lost"):
            continue
        evs = warning_events(idx.events_for("PersistentVolumeClaim", ns, name))
        all_evs = idx.events_for("PersistentVolumeClaim", ns, name)
        tags = [f"pvc:{ns}/{name}", f"namespace:{ns}"]
        tags += [
            t
            for (pns, p), item in idx.pods.items()
            if pns == ns and (name in claims_of(item) or name.endswith(f"-{p}"))
            for t in pod_tags(ns, p, item)[:1]
        ]
        tags += [f"pod:{ns}/{p}" for (k, pns, p) in idx.events if k == "Pod" and pns == ns and name.endswith(f"-{p}")]
        if phase == "Pending" and not evs and any(e.data.get("reason") == "WaitForFirstConsumer" for e in all_evs):
            out.append(
                k8s_finding(
                    "kubernetes_capacity",
                    role=BENIGN,
                    code="pvc_waiting_for_consumer",
                    category=Category.HEALTHY,
                    object=f"PersistentVolumeClaim {ns}/{name}",
                    tags=tags,
                    title=f"PersistentVolumeClaim {ns}/{name} Pending (WaitForFirstConsumer)",
                    mechanism="normal: the storage class binds the volume only when a pod uses it",
                    evidence=[ref(pvc, "status.phase", phase)],
                )
            )
            continue
        msg = str(evs[-1].data.get("message") or "") if evs else ""
        if phase == "Lost":
            category, why = Category.INFRASTRUCTURE, "its PersistentVolume is gone (Lost)"
        elif re.search(
            r"storageclass.*not found|not found|invalid|unsupported|no persistent volumes available", msg, re.I
        ):
            category, why = Category.CONFIGURATION_ERROR, f"provisioning fails: {msg[:160]}"
        elif re.search(r"quota|limit", msg, re.I):
            category, why = Category.RESOURCE_EXHAUSTION, f"provisioning is refused: {msg[:160]}"
        elif msg:
            category, why = Category.INFRASTRUCTURE, f"provisioning fails: {msg[:160]}"
        else:
            category, why = Category.CONFIGURATION_ERROR, "no volume matches it and nothing provisions one"
        out.append(
            k8s_finding(
                "kubernetes_capacity",
                role=CAUSE,
                code="pvc_pending",
                category=category,
                object=f"PersistentVolumeClaim {ns}/{name}",
                score=0.75 if msg else 0.55,
                ts=event_ts(evs[0]) if evs else None,
                tags=tags,
                title=f"PersistentVolumeClaim {ns}/{name} {phase}",
                mechanism=f"PersistentVolumeClaim {ns}/{name} stays {phase} because {why}, so pods that "
                f"mount it cannot start",
                explains=["unbound_pvc", *POD_EFFECTS],
                evidence=[ref(pvc, "status.phase", phase)]
                + [ref(e, "message", e.data.get("message")) for e in evs[-1:]],
                actions=[
                    Action(
                        description="Show the claim and its storage class",
                        command=f"kubectl describe pvc {name} -n {ns}",
                    )
                ],
            )
        )
    return out


def _at_limit(used: float | None, hard: float | None) -> bool:
    return used is not None and bool(hard) and hard is not None and used >= hard


def _RS_TO_DEPLOY(name: str) -> str:
    m = re.match(r"^(?P<base>.+)-[a-z0-9]{6,10}$", name)
    return m.group("base") if m else name


# ------------------------------------------------------------------------------------------ jobs


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Job"})
def kubernetes_jobs(evidence: EvidenceSet) -> list[Finding]:
    """Failed Jobs (backoff limit, deadline): a symptom of their pods' crash where the pods are in the evidence,
    else a cause to look into; old failures and completed Jobs are benign."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for job in idx.of_kind("Job"):
        ns, name = ns_name(job)
        failed = _cond(job, "Failed")
        complete = _cond(job, "Complete")
        if complete and complete[1].get("status") == "True" and not (failed and failed[1].get("status") == "True"):
            i, c = complete
            out.append(
                k8s_finding(
                    "kubernetes_jobs",
                    role=BENIGN,
                    code="job_completed",
                    category=Category.HEALTHY,
                    object=f"Job {ns}/{name}",
                    ts=parse_ts(c.get("lastTransitionTime")),
                    tags=workload_tags(ns, name, meta(job).get("labels")),
                    title=f"Job {ns}/{name} Completed ({(job.data.get('status') or {}).get('succeeded', 1)} succeeded)",
                    mechanism="a Job that completed successfully; its pods in phase Succeeded are done, not failing",
                    evidence=[ref(job, f"status.conditions.{i}.type", "Complete")],
                )
            )
            owner = next((o for o in meta(job).get("ownerReferences") or () if isinstance(o, dict)), {})
            started = parse_ts((job.data.get("status") or {}).get("startTime"))
            ended = parse_ts((job.data.get("status") or {}).get("completionTime"))
            if owner.get("kind") == "CronJob" and started is not None and idx.recent(started, 6 * RECENT_S):
                # a scheduled run that completed: the load it put on what it calls is planned work
                out.append(
                    k8s_finding(
                        "kubernetes_jobs",
                        role=BENIGN,
                        code="planned_work",  # the code reasoning reads as planned work (changes.py)
                        category=Category.HEALTHY,
                        object=f"CronJob {ns}/{owner.get('name')}",
                        ts=started,
                        # a run that completed is over: what begins well after it is not its load (`until:`)
                        tags=workload_tags(ns, str(owner.get("name")), meta(job).get("labels"))
                        + ([f"until:{ended:.0f}"] if ended is not None else []),
                        title=f"scheduled run {ns}/{name} of CronJob {owner.get('name')} started at {fmt_ts(started)} "
                        "and completed",
                        mechanism=f"planned work at {fmt_ts(started)}: the scheduled Job {name} of CronJob "
                        f"{owner.get('name')} ran and completed; what it sent or loaded is its own work",
                        evidence=[ref(job, "status.startTime", (job.data.get("status") or {}).get("startTime"))],
                    )
                )
            continue
        if not failed or failed[1].get("status") != "True":
            continue
        i, c = failed
        ts = parse_ts(c.get("lastTransitionTime"))
        obj = f"Job {ns}/{name}"
        tags = workload_tags(ns, name, meta(job).get("labels")) + [
            f"pod:{pns}/{p}"
            for (pns, p), item in idx.pods.items()
            if pns == ns and owner_workload(item) == ("Job", name)
        ]
        refs = [ref(job, f"status.conditions.{i}.reason", c.get("reason"))]
        if c.get("message"):
            refs.append(ref(job, f"status.conditions.{i}.message", c.get("message")))
        if not idx.recent(ts, 6 * RECENT_S):
            out.append(
                k8s_finding(
                    "kubernetes_jobs",
                    role=BENIGN,
                    code="old_job_failure",
                    category=Category.HEALTHY,
                    object=obj,
                    ts=ts,
                    tags=tags,
                    title=f"{obj} failed at {fmt_ts(ts)} ({c.get('reason')})",
                    mechanism="an old Job failure, long before the evidence ends",
                    evidence=refs,
                )
            )
            continue
        has_pods = any(t.startswith("pod:") for t in tags)
        deadline = c.get("reason") == "DeadlineExceeded"
        # with neither its pods nor their logs in the bundle, a failed Job only says that it failed, not why
        job_logs = [item for item in evidence.kind("log") if name in item.object]
        unseen = not has_pods and not job_logs
        # its logs show its calls to another service failing (timed out, refused, reset): the Job failed because
        # of what it called, which the network analyzers name; the Job's failure is that failure's symptom
        calls_failed = not has_pods and _calls_failing(job_logs)
        out.append(
            k8s_finding(
                "kubernetes_jobs",
                role=SYMPTOM if has_pods or unseen or calls_failed else CAUSE,
                code="job_failed",
                category=Category.UNKNOWN if has_pods or deadline or unseen or calls_failed else Category.CODE_DEFECT,
                object=obj,
                score=0.6 if has_pods else 0.45,
                ts=ts,
                tags=tags,
                title=f"{obj} failed ({c.get('reason')})",
                mechanism=f"{obj} failed: {c.get('message') or c.get('reason')}"
                + ("" if has_pods else ": its pods exit with errors (their logs say why)"),
                explains=[] if has_pods else ["alert:*"],
                evidence=refs,
                needs=[f"logs of the pods of {obj}: kubectl logs job/{name} -n {ns}"],
                actions=[
                    Action(description="Read the job's pod logs", command=f"kubectl logs job/{name} -n {ns} --tail=100")
                ],
            )
        )
    return out


_NETWORK_FAILURES = frozenset({"timeout", "refused", "reset", "unreachable"})


def _calls_failing(logs: list[EvidenceItem], least: int = 3) -> bool:
    """Whether these logs' warnings and errors are mostly calls to another service that timed out, were refused
    or reset (at least `least` of them; each try is often a warning and only the give-up an error)."""
    errors = [
        str(r.get("msg") or "")
        for item in logs
        for r in item.data.get("records") or ()
        if is_error(r) or level_of(r) == "warn"
    ]
    failing = sum(1 for m in errors if _call_failure(m) in _NETWORK_FAILURES)
    return failing >= least and failing * 2 >= len(errors)


# ------------------------------------------------------------------------------------------ other events


_DNS = re.compile(r"no such host|NXDOMAIN|server misbehaving|could not resolve|lookup \S+ on [\d.:]+:53", re.I)


@ANALYZERS.analyzer(domain=K8S, reads={"k8s/Event"})
def kubernetes_events(evidence: EvidenceSet) -> list[Finding]:
    """Warning events the object analyzers do not read: DNS failures and load balancers that cannot be synced."""
    idx = kube_index(evidence)
    out: list[Finding] = []
    for (kind, ns, name), evs in idx.events.items():
        for e in warning_events(evs):
            if not idx.recent(event_ts(e)):
                continue
            reason = str(e.data.get("reason") or "")
            msg = str(e.data.get("message") or "")
            if reason == "DNSConfigForming":
                continue  # "Nameserver limits were exceeded": noise on most nodes
            tags = [f"{kind.lower()}:{ns}/{name}" if ns else f"{kind.lower()}:{name}", f"namespace:{ns}"]
            if kind == "Pod":
                tags = pod_tags(ns, name, idx.pods.get((ns, name)))
            if _DNS.search(msg) and kind != "Pod":
                timeout = re.search(r"i/o timeout|server misbehaving|timed out", msg, re.I)
                out.append(
                    k8s_finding(
                        "kubernetes_events",
                        role=CAUSE,
                        code="dns_failure",
                        category=Category.INFRASTRUCTURE if timeout else Category.CONFIGURATION_ERROR,
                        object=f"{kind} {ns}/{name}",
                        score=0.6,
                        ts=event_ts(e),
                        tags=tags,
                        title=f"DNS lookups fail for {kind} {ns}/{name}",
                        mechanism=f"name resolution fails for {kind} {ns}/{name}: "
                        + ("the cluster DNS does not answer" if timeout else "the name does not exist")
                        + f" ({msg[:140]})",
                        explains=[
                            "dns_failure",
                            "upstream_unavailable",
                            "connection_refused",
                            "log_errors",
                            "http_5xx",
                        ],
                        evidence=[ref(e, "message", msg)],
                        actions=[
                            Action(
                                description="Check the cluster DNS",
                                command="kubectl -n kube-system get pods -l k8s-app=kube-dns",
                            )
                        ],
                    )
                )
            elif _NO_EXPANSION.search(msg) or reason == "VolumeResizeFailed":
                out.append(_expansion_refused(e, msg, kind, ns, name, tags))
            elif reason in ("SyncLoadBalancerFailed", "FailedToCreateLoadBalancer", "LoadBalancerUpdateFailed"):
                out.append(
                    k8s_finding(
                        "kubernetes_events",
                        role=CAUSE,
                        code="load_balancer_failed",
                        category=Category.INFRASTRUCTURE,
                        object=f"{kind} {ns}/{name}",
                        score=0.65,
                        ts=event_ts(e),
                        tags=[*tags, f"service:{name}"],
                        title=f"{kind} {ns}/{name} load balancer cannot be synced",
                        mechanism=f"the cloud load balancer of {kind} {ns}/{name} cannot be created or "
                        f"updated: {msg[:160]}",
                        explains=["http_5xx", "upstream_unavailable", "connection_refused", "latency"],
                        evidence=[ref(e, "message", msg)],
                        actions=[
                            Action(
                                description="Show the service's events",
                                command=f"kubectl describe service {name} -n {ns}",
                            )
                        ],
                    )
                )
    return out


# a volume grown (a PVC's or a volumeClaimTemplate's request raised) on a storage class that does not allow it:
# the operator's ("storage class gp2-retain does not support volume expansion") or the API server's own words
_NO_EXPANSION = re.compile(
    r"storage ?class\W{0,3}(?P<sc>[\w.\-]+)?\)? does not support volume expansion|"
    r"only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support "
    r"resize|storageclass (?:\\?\"|')?(?P<sc2>[\w.\-]+)(?:\\?\"|')? does not (?:allow|support) (?:volume )?expansion",
    re.I,
)


def _expansion_refused(e: EvidenceItem, msg: str, kind: str, ns: str, name: str, tags: list[str]) -> Finding:
    """A volume resize refused because its StorageClass lacks allowVolumeExpansion: the spec asks for what the
    class cannot do, so the change never applies (a configuration error of the class or of the resize)."""
    m = _NO_EXPANSION.search(msg)
    sc = (m["sc"] or m["sc2"]) if m else None
    where = f"StorageClass {sc}" if sc else "the volume's StorageClass"
    return k8s_finding(
        "kubernetes_events",
        role=CAUSE,
        code="volume_expansion_refused",
        category=Category.CONFIGURATION_ERROR,
        object=f"StorageClass/{sc}" if sc else f"{kind} {ns}/{name}",
        score=0.75,
        ts=event_ts(e),
        tags=[*tags, *([f"storageclass:{sc}"] if sc else [])],
        title=f"volume expansion refused for {kind} {ns}/{name}: {where} does not allow it",
        mechanism=(
            f"the volumes of {kind} {ns}/{name} were asked to grow, but {where} does not support volume expansion "
            "(allowVolumeExpansion is not true), so the change cannot be applied and the rollout stays stuck: "
            f"{msg[:180]}"
        ),
        explains=["errors", "log_errors", "rollout_stuck", "disk_*", "storage_*", "alert:*"],
        evidence=[ref(e, "message", msg)],
        actions=[
            Action(
                description=f"Check whether {where} allows expansion",
                command=f"kubectl get storageclass {sc or '<class>'} -o jsonpath='{{.allowVolumeExpansion}}'",
            ),
            Action(
                description="Move the volumes to a class that allows expansion, or revert the size request",
                command=f"kubectl -n {ns} get pvc -o wide",
            ),
        ],
    )


def _refused_lines(evidence: EvidenceSet) -> list[tuple[EvidenceItem, dict[str, Any]]]:
    """The log records that say a connection was refused, read once for every Service the bundle holds."""
    return evidence.derived(
        "refused_lines",
        lambda ev: [
            (item, r)
            for item in ev.kind("log")
            for r in item.data.get("records") or ()
            if "refused" in str(r.get("msg") or "").lower()
        ],
    )


def _refused_on_an_undeclared_port(
    evidence: EvidenceSet, svc: EvidenceItem, obj: str, tags: list[str]
) -> list[Finding]:
    """Callers refused on a port the Service does not expose (its ClusterIP or name with another port): the caller's
    port setting is wrong (a PostgreSQL port for a MariaDB Service), not the server down."""
    spec = svc.data.get("spec") or {}
    ns, name = ns_name(svc)
    ip = str(spec.get("clusterIP") or "")
    ports = {p.get("port") for p in spec.get("ports") or () if isinstance(p, dict)}
    if not ports:
        return []
    hosts = [h for h in (ip, f"{name}.{ns}.svc", f"{name}.{ns}", name) if h and h != "None"]
    wrong = re.compile(rf"(?<![\w.\-])(?:{'|'.join(re.escape(h) for h in hosts)})(?:\.cluster\.local)?:(\d{{2,5}})\b")
    hits: list[tuple[EvidenceItem, dict[str, Any], int]] = []
    for item, r in _refused_lines(evidence):
        m = wrong.search(str(r.get("msg") or ""))
        if m and int(m.group(1)) not in ports:
            hits.append((item, r, int(m.group(1))))
    if len(hits) < 3:
        return []
    item, rec, port = hits[0]
    serves = ", ".join(str(p) for p in sorted(p for p in ports if isinstance(p, int)))
    return [
        k8s_finding(
            "kubernetes_services",
            role=CAUSE,
            code="wrong_port_for_service",
            category=Category.CONFIGURATION_ERROR,
            object=f"{obj} port {port}",
            score=0.85,
            tags=[
                *tags,
                *([f"upstream:{ip}", f"instance:{ip}"] if ip else []),
                *{t for it, _, _ in hits for t in object_tags(it, service_of(it))},
            ],
            title=f"callers connect to {obj} on port {port}, which it does not expose (it serves {serves})",
            mechanism=(
                f"{len(hits)} connections to {obj} on port {port} are refused: the Service exposes {serves}, not "
                f"{port}, so the callers' port setting is wrong (an environment variable or URL with another "
                f"database's or version's port), not the server down: '{str(rec.get('msg'))[:160]}'"
            ),
            explains=[
                "connection_refused",
                "crash_dependency",
                "crash_loop",
                "errors",
                "log_errors",
                "exception",
                "probe_*",
                "upstream_*",
                "alert:*",
            ],
            evidence=[
                ref(svc, "spec.ports", sorted(p for p in ports if isinstance(p, int))),
                EvidenceRef(item=item.id, line=rec.get("line"), value=str(rec.get("msg"))[:200]),
            ],
            actions=[
                Action(
                    description=f"Find the port the callers are configured with for {name}",
                    command=f"kubectl -n {ns} get deploy -o yaml | grep -n -i -E 'port|{name}'",
                )
            ],
        )
    ]


def _refused_behind_target_port(evidence: EvidenceSet, svc: EvidenceItem, obj: str, tags: list[str]) -> list[Finding]:
    """A Service whose port forwards to a different targetPort, with ready endpoints, while its callers' connections
    to it are refused: kube-proxy forwarded them to a port nothing in the pods listens on (its pods were not exported
    to say which they declare)."""
    spec = svc.data.get("spec") or {}
    ns, name = ns_name(svc)
    ip = str(spec.get("clusterIP") or "")
    out: list[Finding] = []
    for i, port in enumerate(spec.get("ports") or ()):
        target, front = port.get("targetPort"), port.get("port")
        if not isinstance(target, int) or target == front or front is None:
            continue
        needles = [f"{h}:{front}" for h in (ip, name, f"{name}.{ns}") if h and h != "None"]
        hit = next(
            ((item, r) for item, r in _refused_lines(evidence) if any(n in str(r.get("msg")) for n in needles)), None
        )
        if hit is None:
            continue
        item, rec = hit
        out.append(
            _target_port_finding(
                svc,
                i,
                score=0.85,
                tags=[*tags, *([f"upstream:{ip}", f"instance:{ip}"] if ip else [])],
                title=f"{obj} forwards port {front} to targetPort {target}, where connections are refused",
                mechanism=f"{obj} forwards port {front} to targetPort {target} on its ready pods, and its callers' "
                f"connections to it are refused: nothing in the pods listens on {target} (the Service's targetPort "
                f"does not match the port the application serves)",
                refused=EvidenceRef(item=item.id, line=rec.get("line"), value=str(rec.get("msg"))[:200]),
            )
        )
    return out


def _declared_ports(matching: list[tuple[str, EvidenceItem]]) -> set[Any]:
    """The container port numbers and names the selected pods declare."""
    declared: set[Any] = set()
    for _, p in matching:
        for c in (p.data.get("spec") or {}).get("containers") or ():
            for port in c.get("ports") or ():
                declared.update((port.get("containerPort"), port.get("name")))
    declared.discard(None)
    return declared


def _undeclared_named_ports(
    spec: dict[str, Any], matching: list[tuple[str, EvidenceItem]]
) -> list[tuple[int, str, list[str]]]:
    """The Service's named targetPorts (index, name) that no selected pod's containers declare, with the names they
    do declare."""
    if not any((p.data.get("spec") or {}).get("containers") for _, p in matching):
        return []  # the pods' specs are not in the bundle: nothing says what they declare
    names = sorted(str(d) for d in _declared_ports(matching) if isinstance(d, str))
    return [
        (i, target, names)
        for i, port in enumerate(spec.get("ports") or ())
        if isinstance(target := port.get("targetPort"), str) and not target.isdigit() and target not in names
    ]


def _target_port_finding(
    svc: EvidenceItem,
    i: int,
    *,
    score: float,
    tags: list[str],
    title: str,
    mechanism: str,
    refused: EvidenceRef | None = None,
) -> Finding:
    """A Service whose `spec.ports[i].targetPort` is not where its pods serve."""
    ns, name = ns_name(svc)
    spec = svc.data.get("spec") or {}
    target = (spec.get("ports") or [{}])[i].get("targetPort")
    selector = ",".join(f"{k}={v}" for k, v in (spec.get("selector") or {}).items())
    return k8s_finding(
        "kubernetes_services",
        role=CAUSE,
        code="service_target_port_mismatch",
        category=Category.CONFIGURATION_ERROR,
        object=f"Service {ns}/{name}",
        score=score,
        tags=tags,
        title=title,
        mechanism=mechanism,
        explains=[
            "http_5xx",
            "http_503",
            "upstream_unavailable",
            "connection_refused",
            "error_rate",
            "log_errors",
            "errors",
            "alert:*",
        ],
        evidence=[ref(svc, f"spec.ports.{i}.targetPort", target), *([refused] if refused else [])],
        actions=[
            Action(
                description="Compare the Service's targetPort with the port the containers listen on",
                command=f"kubectl describe service {name} -n {ns}; kubectl get pods -n {ns} -l {selector} -o "
                "jsonpath='{.items[0].spec.containers[*].ports}'",
            ),
            Action(
                description="Point the Service at the port the application serves",
                command=f'kubectl patch svc {name} -n {ns} --type=json -p \'[{{"op":"replace","path":'
                f'"/spec/ports/{i}/targetPort","value":<port>}}]\'',
                kind="write",
            ),
        ],
    )
