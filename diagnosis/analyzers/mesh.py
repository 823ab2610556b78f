"""A service mesh that refuses plaintext: an Istio PeerAuthentication in STRICT mode makes the server's sidecar
accept only mutual TLS, so a client without a sidecar (a CronJob with `sidecar.istio.io/inject: "false"`, a pod in
a namespace without injection, a VM) has its plaintext connections closed at once. The server's Envoy logs them as
`NR filter_chain_not_found` with the client's address; the client sees "connection reset by peer". Callers inside
the mesh keep working, so the server looks healthy and its latest release looks guilty.

The cause is the policy (configuration_error), named with the client it shuts out; adding the client to the mesh
or a PERMISSIVE exception for it are the fixes."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.links import workload_of_pod
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts, parse_ts

# an Envoy access log line for an inbound connection no filter chain accepts (plaintext at a STRICT listener):
# "- - -" 0 NR filter_chain_not_found ... <upstream local> <downstream remote> ...
_NO_CHAIN = re.compile(r"\bNR filter_chain_not_found\b")
_ADDR = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3}):\d{2,5}\b")
MIN_REJECTED = 3


def _strict_policies(evidence: EvidenceSet) -> list[EvidenceItem]:
    return [
        pa
        for pa in evidence.kind("k8s/PeerAuthentication")
        if str(((pa.data.get("spec") or {}).get("mtls") or {}).get("mode") or "").upper() == "STRICT"
    ]


def _pods_by_ip(evidence: EvidenceSet) -> dict[str, EvidenceItem]:
    return {
        str((p.data.get("status") or {}).get("podIP")): p
        for p in evidence.kind("k8s/Pod")
        if (p.data.get("status") or {}).get("podIP")
    }


def _sidecarless(pod: EvidenceItem) -> bool:
    meta: dict[str, Any] = pod.data.get("metadata") or {}
    if str((meta.get("annotations") or {}).get("sidecar.istio.io/inject") or "").lower() == "false":
        return True
    if str((meta.get("labels") or {}).get("sidecar.istio.io/inject") or "").lower() == "false":
        return True
    containers = [
        *((pod.data.get("spec") or {}).get("containers") or ()),
        *((pod.data.get("spec") or {}).get("initContainers") or ()),
    ]
    return not any(str(c.get("name")) == "istio-proxy" for c in containers if isinstance(c, dict))


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "k8s/PeerAuthentication"})
def strict_mtls_shuts_out(evidence: EvidenceSet) -> list[Finding]:
    """Plaintext connections a STRICT PeerAuthentication refuses, from clients without a sidecar."""
    policies = _strict_policies(evidence)
    if not policies:
        return []
    rejected: list[tuple[EvidenceItem, dict[str, Any], str | None]] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "filter_chain_not_found" in msg and _NO_CHAIN.search(msg):
                addrs = _ADDR.findall(msg)
                rejected.append((item, r, addrs[-1] if addrs else None))
    if len(rejected) < MIN_REJECTED:
        return []
    stamps = [float(r["ts"]) for _, r, _ in rejected if isinstance(r.get("ts"), int | float)]
    first = min(stamps) if stamps else None
    # the policy in force when the refusals began: the newest STRICT one created before them
    dated = [(parse_ts((p.data.get("metadata") or {}).get("creationTimestamp")), p) for p in policies]
    before = [(t, p) for t, p in dated if t is not None and (first is None or t <= first)]
    ts, policy = max(before, key=lambda tp: tp[0]) if before else (None, policies[0])
    meta = policy.data.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', policy.object)}".lstrip("/")
    pods = _pods_by_ip(evidence)
    clients = sorted(
        {
            str((pods[ip].data.get("metadata") or {}).get("name"))
            for _, _, ip in rejected
            if ip in pods and _sidecarless(pods[ip])
        }
    )
    callers = sorted({workload_of_pod(c) for c in clients})
    who = f" from {', '.join(callers[:3])} (no sidecar)" if callers else ""
    item, r, _ = rejected[0]
    # the server the policy guards: its selector's app, and the workloads whose sidecars logged the refusals
    selector = (policy.data.get("spec") or {}).get("selector") or {}
    servers = {str(v) for v in (selector.get("matchLabels") or {}).values()}
    servers |= {s for it, _, _ in rejected if (s := service_of(it))}
    return [
        Finding(
            analyzer="strict_mtls_shuts_out",
            domain=Domain.NETWORK,
            role="cause",
            code="strict_mtls_plaintext_refused",
            category=Category.CONFIGURATION_ERROR,
            title=f"PeerAuthentication {name} (STRICT) refuses plaintext connections{who} ({len(rejected)}x)",
            mechanism=(
                f"PeerAuthentication {name} sets mutual TLS to STRICT"
                + (f" (created {fmt_ts(ts)})" if ts else "")
                + f", so the server's sidecar closes every plaintext connection: its Envoy logs 'NR "
                f"filter_chain_not_found' {len(rejected)}x{who}; those clients have no sidecar to speak mTLS and see "
                "their connections reset, while callers inside the mesh are served."
            ),
            object=f"PeerAuthentication {name}",
            score=0.85,
            ts=ts or first,
            tags=[
                f"config:{name}",
                *(f"service:{c}" for c in callers),
                *(f"pod:{c}" for c in clients),
                *(f"service:{x}" for x in sorted(servers)),
            ],
            explains=["errors", "exception", "upstream_reset", "connection_refused", "job_failed", "alert:*"],
            evidence=[
                EvidenceRef(item=policy.id, field="spec.mtls.mode", value="STRICT"),
                EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:200]),
            ],
            actions=[
                Action(
                    description="Put the client into the mesh (sidecar injection) or give it a PERMISSIVE exception",
                    command=f"kubectl get peerauthentication -A; kubectl -n {meta.get('namespace', '')} get "
                    f"peerauthentication {meta.get('name', '')} -o yaml",
                ),
            ],
        )
    ]
