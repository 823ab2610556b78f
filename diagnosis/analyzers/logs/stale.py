"""State a process loaded at start-up and never refreshed: the replicas started before something changed fail,
the replica started after it works.

Signing keys fetched once (a JWKS), an address resolved once, a credential or a config file read once: when the
thing they mirror changes (a key rotation, a failover, a rotated secret), the processes that started before keep
the old copy and fail on every request that needs the new one, while a replica of the same workload started
since (a restart, a reschedule) has the new copy and serves the same traffic cleanly. The change itself is
usually correct and announced; the defect is that the code never reloads (code_defect), and restarting the old
replicas is the stopgap.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from diagnosis.analyzers._common import Rec, level_of, now_of, pod_tag, span_text, template_of
from diagnosis.analyzers._kube import kube_index
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import STOPPED_AFTER_S
from diagnosis.evidence import EvidenceSet
from diagnosis.links import workload_of_pod
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts, parse_ts

MIN_PER_REPLICA = 3  # each old replica fails with the template this often (not a stray error)
MIN_SERVED = 5  # the new replica logged this many lines after its start (it took traffic, it was not idle)
_FAILING = ("error", "fatal", "warn")


def _pod_of(item: EvidenceItem) -> tuple[str, str] | None:
    tag = pod_tag(item)  # "pod:<ns>/<name>"
    if tag is None:
        return None
    ns, _, pod = tag.removeprefix("pod:").partition("/")
    return ns, pod


def _started(evidence: EvidenceSet, ns: str, pod: str, item: EvidenceItem) -> float | None:
    """When the replica started: its Pod's status.startTime, else its log's first line."""
    obj = kube_index(evidence).pods.get((ns, pod))
    if obj is not None:
        ts = parse_ts((obj.data.get("status") or {}).get("startTime"))
        if ts is not None:
            return ts
    stamps = [r["ts"] for r in item.data.get("records") or () if isinstance(r.get("ts"), int | float)]
    return min(stamps) if stamps else None


def _node(evidence: EvidenceSet, ns: str, pod: str) -> str | None:
    obj = kube_index(evidence).pods.get((ns, pod))
    return str((obj.data.get("spec") or {}).get("nodeName") or "") or None if obj is not None else None


def _replica_set(pod: str) -> str:
    """orders-api-6d5f8b9c7-4xkzq -> orders-api-6d5f8b9c7: replicas of one template (one version)."""
    return pod.rsplit("-", 1)[0]


def _image(evidence: EvidenceSet, ns: str, pod: str) -> str | None:
    obj = kube_index(evidence).pods.get((ns, pod))
    containers = ((obj.data.get("spec") or {}).get("containers") or []) if obj is not None else []
    image = next((c.get("image") for c in containers if isinstance(c, dict) and c.get("image")), None)
    return str(image) if image else None


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log", "k8s/Pod"})
def stale_startup_state(evidence: EvidenceSet) -> list[Finding]:
    """Replicas of one workload that all fail with one message since some moment, while a replica started after
    that moment serves the same requests without it."""
    now = now_of(evidence)
    by_workload: dict[tuple[str, str], list[tuple[str, EvidenceItem]]] = defaultdict(list)
    for item in evidence.kind("log"):
        ns_pod = _pod_of(item)
        if ns_pod is not None:
            by_workload[(ns_pod[0], workload_of_pod(ns_pod[1]))].append((ns_pod[1], item))
    out: list[Finding] = []
    for (ns, workload), replicas in by_workload.items():
        if len(replicas) < 2:
            continue
        # per replica: its failing templates (error or warning level) with their records
        failing: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for pod, item in replicas:
            per: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in item.data.get("records") or ():
                if level_of(r) in _FAILING and isinstance(r.get("ts"), int | float):
                    per[template_of(str(r.get("msg") or ""))].append(r)
            failing[pod] = per
        templates = {t for per in failing.values() for t, recs in per.items() if len(recs) >= MIN_PER_REPLICA}
        for tpl in templates:
            old = {pod: failing[pod][tpl] for pod, _ in replicas if len(failing[pod].get(tpl, ())) >= MIN_PER_REPLICA}
            first = min(r["ts"] for recs in old.values() for r in recs)
            last = max(r["ts"] for recs in old.values() for r in recs)
            if now is not None and now - last >= STOPPED_AFTER_S:
                continue  # over
            items = dict(replicas)
            starts = {pod: _started(evidence, ns, pod, items[pod]) for pod, _ in replicas}
            if any(s is None or s >= first for pod, s in starts.items() if pod in old):
                continue  # a failing replica started after the failures began: not state from before
            fresh = [
                pod
                for pod, item in replicas
                if pod not in old
                and _replica_set(pod) in {_replica_set(p) for p in old}  # the same version, started later
                and not failing[pod].get(tpl)
                and (s := starts[pod]) is not None
                and s > first
                and sum(1 for r in item.data.get("records") or () if (r.get("ts") or 0) >= s) >= MIN_SERVED
            ]
            if not fresh:
                continue
            old_nodes = {_node(evidence, ns, p) for p in old}
            if (
                len(old_nodes) == 1
                and None not in old_nodes
                and old_nodes.isdisjoint(_node(evidence, ns, p) for p in fresh)
            ):
                continue  # the failing replicas share a node the working one is not on: the node is as likely
            sample = old[next(iter(old))][0]
            msg = " ".join(str(sample.get("msg") or "").split())[:200]
            started_fresh = starts[fresh[0]]
            image = _image(evidence, ns, fresh[0])
            version = f" ({image})" if image else ""
            old_pods = sorted(old)
            recs = [Rec(items[p], r.get("ts"), str(r.get("msg") or ""), r.get("line"), None) for p in old_pods[:2]
                    for r in old[p][:1]]  # fmt: skip
            out.append(
                Finding(
                    analyzer="stale_startup_state",
                    domain=Domain.LOGS,
                    role="cause",
                    code="stale_startup_state",
                    category=Category.CODE_DEFECT,
                    title=f"{workload}: replicas started before {fmt_ts(first)} fail, one started after works",
                    mechanism=(
                        f"{workload}'s replicas started before the failures began ({', '.join(old_pods[:4])}) fail "
                        f"with '{msg}' ({sum(len(v) for v in old.values())}x {span_text(first, last)}), while "
                        f"{fresh[0]}, started at {fmt_ts(started_fresh)}, serves the same requests without it: the "
                        f"code{version} holds state it loaded at start-up (keys, an address, a credential) and never "
                        "reloads it after it changed"
                    ),
                    object=f"Deployment {ns}/{workload}",
                    score=0.75,
                    ts=first,
                    tags=[f"workload:{ns}/{workload}", f"service:{workload}", *(f"pod:{ns}/{p}" for p in old_pods)],
                    explains=["errors", "http_4xx", "http_5xx", "error_rate", "metric_shift", "alert:*", "exception"],
                    evidence=[EvidenceRef(item=r.item.id, line=r.line, value=r.msg[:300]) for r in recs],
                    actions=[
                        Action(
                            description="Restart the replicas that started before the change (stopgap)",
                            command=f"kubectl -n {ns} rollout restart deployment/{workload}",
                            kind="write",
                        ),
                        Action(
                            description="Find where the code loads it once at start-up and make it refresh",
                            command=f"kubectl -n {ns} logs {fresh[0]} | head -20",
                        ),
                    ],
                )
            )
    return out
