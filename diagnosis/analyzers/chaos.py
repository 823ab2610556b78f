"""A fault injected on purpose and still in force: a Chaos Mesh experiment (NetworkChaos, StressChaos, IOChaos,
TimeChaos, DNSChaos, HTTPChaos, a lasting PodChaos pod-failure) or a LitmusChaos engine, whose status says it is
injected and not recovered. While it runs, it is the cause of what its targets do: a delay or loss on a pod's
network is the network failing under that pod (infrastructure), a CPU or memory hog is the pod's resource taken
(resource_exhaustion), an I/O fault its disk (infrastructure).

An experiment that has recovered, is paused, or only kills pods once (pod-kill, container-kill: the pods come back,
and what they do then is theirs) is planned work, left to the changes analyzer. Experiments in a namespace of their
own that no other evidence names (staging's game days) are left alone."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import is_error, log_records
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.changes import CHAOS_GROUPS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import evidence_now, fmt_ts, parse_ts

# Chaos Mesh kind (and action) -> what it takes from its targets
_NETWORK_ACTIONS = {"delay", "loss", "bandwidth", "corrupt", "duplicate", "partition", "netem"}
_CATEGORY = {
    "NetworkChaos": (Category.INFRASTRUCTURE, "network"),
    "IOChaos": (Category.INFRASTRUCTURE, "disk I/O"),
    "TimeChaos": (Category.INFRASTRUCTURE, "clock"),
    "DNSChaos": (Category.INFRASTRUCTURE, "name resolution"),
    "KernelChaos": (Category.INFRASTRUCTURE, "kernel"),
    "BlockChaos": (Category.INFRASTRUCTURE, "block device"),
    "StressChaos": (Category.RESOURCE_EXHAUSTION, "CPU or memory"),
    "HTTPChaos": (Category.DEPENDENCY_FAILURE, "HTTP responses"),
    "PodChaos": (Category.INFRASTRUCTURE, "pods"),
}
# LitmusChaos experiment names -> Chaos Mesh's kinds
_LITMUS = (
    (re.compile(r"network|latency|loss|corruption|duplication|partition", re.I), "NetworkChaos"),
    (re.compile(r"cpu-hog|memory-hog|stress", re.I), "StressChaos"),
    (re.compile(r"io-stress|disk-fill|io-", re.I), "IOChaos"),
    (re.compile(r"dns", re.I), "DNSChaos"),
    (re.compile(r"http", re.I), "HTTPChaos"),
    (re.compile(r"time|clock", re.I), "TimeChaos"),
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(text: Any) -> float | None:
    found = _DURATION.findall(str(text or ""))
    return sum(float(n) * _UNIT_S[u] for n, u in found) if found else None


def _conditions(status: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or () if isinstance(c, dict)}


def _in_force(item: EvidenceItem, now: float | None) -> bool:
    """Injected, not recovered, not paused, and (where it has a duration) not past it."""
    d = item.data
    status = d.get("status") or {}
    conds = _conditions(status)
    if conds.get("AllRecovered") == "True" or conds.get("Paused") == "True":
        return False
    experiment = status.get("experiment") or {}
    injected = conds.get("AllInjected") == "True" or any(
        str(r.get("phase")) == "Injected" for r in experiment.get("containerRecords") or () if isinstance(r, dict)
    )
    if not injected or str(experiment.get("desiredPhase") or "Run") != "Run":
        return False
    begun = parse_ts((d.get("metadata") or {}).get("creationTimestamp"))
    lasts = _seconds((d.get("spec") or {}).get("duration"))
    return not (now is not None and begun is not None and lasts is not None and begun + lasts < now)


def _litmus_in_force(item: EvidenceItem) -> tuple[str, str] | None:
    """(Chaos Mesh kind, experiment name) of an active LitmusChaos engine that still runs."""
    d = item.data
    spec, status = d.get("spec") or {}, d.get("status") or {}
    if str(spec.get("engineState") or "") != "active" or str(status.get("engineStatus") or "") in (
        "completed",
        "stopped",
    ):
        return None
    for exp in spec.get("experiments") or ():
        name = str((exp or {}).get("name") or "")
        for rx, kind in _LITMUS:
            if rx.search(name):
                return kind, name
    return None


def _targets(spec: dict[str, Any], status: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(label values the selector picks, namespace/pod ids of the records)."""
    sel = spec.get("selector") or {}
    values = [str(v) for v in (sel.get("labelSelectors") or {}).values()]
    values += [str(v) for v in ((spec.get("appinfo") or {}).get("applabel") or "").split("=")[1:]]
    pods = [
        str(r.get("id"))
        for r in (status.get("experiment") or {}).get("containerRecords") or ()
        if isinstance(r, dict) and r.get("id")
    ]
    for ns, names in (sel.get("pods") or {}).items():
        pods += [f"{ns}/{n}" for n in names or ()]
    return values, pods


_STORE_SUFFIX = re.compile(r"-(redis|mongodb|mongo|memcached|mysql|postgres|postgresql|kafka|rabbitmq|elasticsearch)$")


def _failing_on(evidence: EvidenceSet, names: list[str]) -> bool:
    """Whether failures elsewhere name the experiment's targets: an error a log records about them, or an alert that
    fires on them (a delay its callers absorb is no failure)."""
    words = [n for n in names if len(n) >= 3]
    if not words:
        return False
    # a store's callers name its kind more often than its Service ("failed to read from redis")
    kinds = {m[1].lower() for n in words if (m := _STORE_SUFFIX.search(n))}
    for item in evidence.kind("alert"):
        if item.data.get("status") != "resolved" and any(w in str(item.data.get("labels") or {}) for w in words):
            return True
    for r in log_records(evidence):
        if (any(w in r.msg for w in words) or any(k in r.msg.lower() for k in kinds)) and is_error(
            {"level": r.level, "msg": r.msg}
        ):
            return True
    return False


def _namespaces_elsewhere(evidence: EvidenceSet) -> set[str]:
    """The namespaces of the cluster objects and logs in the evidence, chaos objects aside."""
    out: set[str] = set()
    for item in evidence:
        if str(item.data.get("apiVersion") or "").startswith(CHAOS_GROUPS):
            continue
        if item.kind.startswith("k8s/"):
            ns = (item.data.get("metadata") or {}).get("namespace") or item.data.get("namespace")
            if ns:
                out.add(str(ns))
        elif item.kind == "log" and (m := re.match(r"(?:.*/)?logs/([\w\-]+)/", item.source)):
            out.add(m[1])
    return out


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"k8s/"})
def injected_fault(evidence: EvidenceSet) -> list[Finding]:
    """A chaos experiment in force on the objects the incident is about: the fault it injects is the cause."""
    now = evidence_now(evidence)
    out: list[Finding] = []
    seen_ns: set[str] | None = None  # worked out once, for the first experiment in force
    for item in evidence:
        if not item.kind.startswith("k8s/") or not str(item.data.get("apiVersion") or "").startswith(CHAOS_GROUPS):
            continue
        kind = item.kind.removeprefix("k8s/")
        spec, status = item.data.get("spec") or {}, item.data.get("status") or {}
        action = str(spec.get("action") or "")
        if kind == "ChaosEngine":
            found = _litmus_in_force(item)
            if found is None:
                continue
            kind, action = found
        elif kind not in _CATEGORY or not _in_force(item, now):
            continue
        if kind == "NetworkChaos" and action and action not in _NETWORK_ACTIONS:
            continue
        if kind == "PodChaos" and action != "pod-failure":
            continue  # a kill is over once the pods are back: what they do then is theirs
        values, pods = _targets(spec, status)
        namespaces = [str(n) for n in (spec.get("selector") or {}).get("namespaces") or ()]
        workloads = sorted(
            {re.sub(r"-[a-z0-9]{8,10}-[a-z0-9]{5}$", "", p.split("/", 1)[-1]) for p in pods} | set(values)
        )
        # an experiment in another environment's namespaces (staging's game day) is not this incident's
        if seen_ns is None:
            seen_ns = _namespaces_elsewhere(evidence)
        if namespaces and seen_ns and not set(namespaces) & seen_ns:
            continue
        if not _failing_on(evidence, [*workloads, *(p.split("/", 1)[-1] for p in pods)]):
            continue
        category, what = _CATEGORY[kind]
        detail = _detail(kind, action, spec)
        meta = item.data.get("metadata") or {}
        begun = parse_ts(meta.get("creationTimestamp"))
        name = (
            f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name") or item.object)
        )
        target = ", ".join(workloads[:3]) or "its targets"
        where = f" in {', '.join(namespaces)}" if namespaces else ""
        out.append(
            Finding(
                analyzer="injected_fault",
                domain=Domain.CHANGES,
                role="cause",
                code="chaos_injected",
                category=category,
                title=f"{kind} {name} injects {detail} on {target} (in force)",
                mechanism=(
                    f"the chaos experiment {kind} {name} injects {detail} on {target}{where} since "
                    f"{fmt_ts(begun)} and has not recovered: the {what} under {target} fails on purpose, and its "
                    "callers see what that fault does (slow or failed calls)."
                ),
                object=f"{kind} {name}",
                score=0.85,
                ts=begun,
                tags=[f"service:{w}" for w in workloads]
                + [f"pod:{p}" for p in pods]
                + [f"upstream:{w}" for w in workloads],
                explains=[
                    "errors",
                    "exception",
                    "latency",
                    "http_5xx",
                    "upstream_timeout",
                    "upstream_5xx",
                    "upstream_reset",
                    "connection_refused",
                    "metric_shift",
                    "recent_deploy",
                    "probe_*",
                    "cpu_*",
                    "throttl*",
                    "pod_restarts",
                    "alert:*",
                ],
                evidence=[EvidenceRef(item=item.id, field="spec", value=detail)],
                actions=[
                    Action(
                        description=f"Stop the experiment (or let its {spec.get('duration') or 'duration'} run out)",
                        command=f"kubectl -n {meta.get('namespace') or 'default'} delete {kind.lower()} "
                        f"{meta.get('name')}",
                        kind="write",
                    )
                ],
            )
        )
    return out


def _detail(kind: str, action: str, spec: dict[str, Any]) -> str:
    params = spec.get(action) if isinstance(spec.get(action), dict) else {}
    bits = [f"{k} {v}" for k, v in (params or {}).items() if k in ("latency", "loss", "jitter", "rate", "corrupt")]
    for key in ("workers", "load", "size"):
        for part in (spec.get("stressors") or {}).values():
            if isinstance(part, dict) and part.get(key):
                bits.append(f"{key} {part[key]}")
    if spec.get("timeOffset"):
        bits.append(f"offset {spec['timeOffset']}")
    name = f"a {action}" if action else f"a {kind}"
    return name + (f" ({', '.join(bits)})" if bits else "")
