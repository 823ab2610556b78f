"""Network policies dropping traffic: flows a policy denied (Cilium/Hubble `Policy denied DROPPED`,
`policy-verdict:... DENIED`; Calico and GKE network-policy logs with a deny action), grouped by the workload that
sent them, the destination and its port. A policy that drops a workload's own traffic is a configuration error
named after the policy (the newest one in that namespace when the bundle holds them): DNS on port 53 dropped
means every lookup of that workload fails, whatever name it asks for, so its DNS errors, timeouts and crashes are
symptoms of the policy, not of DNS, the upstreams or the code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnosis.analyzers._common import (
    DNS_TEMPORARY,
    Rec,
    fmt_ts,
    records_with,
    ref_of,
    with_aliases,
    workload_of_pod,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network._shared import MIN_FAILURES
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import parse_ts

# Hubble: "<ns>/<pod>:<port> (ID:n) <> <ns>/<pod>:<port> (ID:n) Policy denied DROPPED (UDP)" and the
# policy-verdict line of the same flow; an endpoint outside the cluster is an address with its identity ("world").
_HUBBLE = re.compile(
    r"(?P<src>[\w.\-]+/[\w.\-]+|[\d.]+|[0-9a-f:]+)(?::(?P<sport>\d+))? \([^)]*\) (?:<>|->|<-) "
    r"(?P<dst>[\w.\-]+/[\w.\-]+|[\d.]+|[0-9a-f:]+):(?P<port>\d+) \([^)]*\) "
    r"(?P<verdict>Policy denied DROPPED|policy-verdict:\S+ (?P<dir>EGRESS|INGRESS) DENIED)"
)
# Calico flow/deny logs and GKE network policy logging, as text: src=... dst=... dport=... action=deny
_KV_DENY = re.compile(r"\b(?:action|disposition|verdict)[=:]\s*\"?(?:deny|denied|drop)\b", re.I)
_KV = re.compile(r"\b(?P<k>src|source|dst|dest|destination|dport|dst_port|dest_port)[=:]\s*\"?(?P<v>[\w./:\-]+)")
# what a drop line holds whatever its tool: Hubble's DENIED/DROPPED, a deny action's "deny"/"Deny"/"DENY"/"drop"
_HINTS = ("DENIED", "DROPPED", "deny", "Deny", "DENY", "drop", "Drop")
_POLICY_KINDS = (
    "k8s/NetworkPolicy",
    "k8s/CiliumNetworkPolicy",
    "k8s/CiliumClusterwideNetworkPolicy",
    "k8s/GlobalNetworkPolicy",
    "k8s/AdminNetworkPolicy",
)
_PORT_NAMES = {"53": "DNS", "443": "HTTPS", "80": "HTTP", "5432": "PostgreSQL", "3306": "MySQL", "6379": "Redis"}


@dataclass
class _Drops:
    src: str  # namespace/workload (or an address)
    dst: str
    port: str
    direction: str  # egress | ingress
    recs: list[Rec] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)


def _workload(endpoint: str) -> tuple[str, str | None]:
    """'payments/payments-api-5f9c7d8b4-q8zxn' -> ('payments/payments-api', 'payments-api-5f9c7d8b4-q8zxn')."""
    if "/" not in endpoint:
        return endpoint, None
    ns, pod = endpoint.split("/", 1)
    return f"{ns}/{workload_of_pod(pod)}", pod


def _drops(records: Iterable[Rec]) -> dict[tuple[str, str, str, str], _Drops]:
    groups: dict[tuple[str, str, str, str], _Drops] = {}
    for rec in records:
        msg = rec.msg
        if "DENIED" in msg or "DROPPED" in msg:
            m = _HUBBLE.search(msg)
            if not m:
                continue
            src, dst, port = m["src"], m["dst"], m["port"]
            direction = (m["dir"] or "").lower() or ("ingress" if "/" not in src else "egress")
        elif _KV_DENY.search(msg):
            kv = {k.lower(): v for k, v in (x.group("k", "v") for x in _KV.finditer(msg))}
            src = kv.get("src") or kv.get("source") or ""
            dst = kv.get("dst") or kv.get("dest") or kv.get("destination") or ""
            port = kv.get("dport") or kv.get("dst_port") or kv.get("dest_port") or ""
            if not (src and dst and port):
                continue
            direction = "egress" if "/" in src else "ingress"
        else:
            continue
        # the workload the policy applies to: the sender for egress, the receiver for ingress
        own, peer = (src, dst) if direction == "egress" else (dst, src)
        workload, pod = _workload(own)
        peer_workload, _ = _workload(peer)
        key = (workload, peer_workload, port, direction)
        g = groups.setdefault(key, _Drops(workload, key[1], port, direction))
        g.recs.append(rec)
        if pod:
            g.pods.add(pod)
    # Hubble prints a flow twice (its verdict and its drop): count the drop lines, or the verdicts alone
    for g in groups.values():
        if any("Policy denied" in r.msg for r in g.recs):
            g.recs = [r for r in g.recs if "policy-verdict" not in r.msg]
    return groups


def _policy_time(p: EvidenceItem) -> float | None:
    meta = p.data.get("metadata") or {}
    times = [parse_ts(meta.get("creationTimestamp"))]
    for mf in meta.get("managedFields") or ():
        if isinstance(mf, dict):
            times.append(parse_ts(mf.get("time")))
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _policy_for(evidence: EvidenceSet, namespace: str, before: float | None) -> tuple[EvidenceItem, float] | None:
    """The newest network policy of the namespace (or cluster-wide) changed before the drops: what changed."""
    best: tuple[EvidenceItem, float] | None = None
    for kind in _POLICY_KINDS:
        for p in evidence.kind(kind):
            meta = p.data.get("metadata") or {}
            ns = meta.get("namespace")
            if ns and ns != namespace:
                continue
            t = _policy_time(p)
            if t is None or (before is not None and t > before + 60):
                continue
            if best is None or t > best[1]:
                best = (p, t)
    return best


# the instance metadata service of the clouds (IMDS on AWS, Azure, GCP, OpenStack; AWS's IPv6 one): clusters deny pods
# egress to it on purpose, so the node's credentials do not leak to every pod
_METADATA_ADDRESSES = frozenset({"169.254.169.254", "fd00:ec2::254", "metadata.google.internal"})


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", *_POLICY_KINDS})
def policy_drops(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for g in _drops(records_with(evidence, _HINTS)).values():
        if len(g.recs) < MIN_FAILURES:
            continue
        if g.direction == "egress" and g.dst.split(":")[0] in _METADATA_ADDRESSES:
            continue  # pods kept off the cloud's instance metadata service: a hardening policy doing its job
        first = min((r.ts for r in g.recs if r.ts is not None), default=None)
        last = max((r.ts for r in g.recs if r.ts is not None), default=None)
        namespace = g.src.split("/", 1)[0] if "/" in g.src else ""
        ns_arg = namespace or "<namespace>"
        policy = _policy_for(evidence, namespace, first) if namespace else None
        what = _PORT_NAMES.get(g.port, f"port {g.port}")
        verb = "egress to" if g.direction == "egress" else "ingress from"
        effect = (
            f"so every DNS lookup of {g.src} fails (whatever name it resolves): its name-resolution errors, "
            "connection failures and crashes follow from the policy"
            if g.port == "53" and g.direction == "egress"
            else f"so {g.src} cannot reach {g.dst} on {what}"
            if g.direction == "egress"
            else f"so {g.dst} cannot reach {g.src} on {what}"
        )
        refs: list[EvidenceRef] = [ref_of(g.recs[0])] + ([ref_of(g.recs[-1])] if len(g.recs) > 1 else [])
        tags = [f"service:{g.src.rsplit('/', 1)[-1]}", f"workload:{g.src}", *(f"pod:{p}" for p in sorted(g.pods))]
        if policy:
            p, t = policy
            meta = p.data.get("metadata") or {}
            name = str(meta.get("name") or p.object)
            obj = f"{p.kind.split('/', 1)[-1]} {namespace}/{name}"
            refs.append(EvidenceRef(item=p.id, field="metadata.creationTimestamp", value=meta.get("creationTimestamp")))
            changed = f" ({obj}, the newest policy in {namespace}, changed at {fmt_ts(t)})"
            tags.append(f"policy:{name}")
            ts: float | None = t
        else:
            name, obj, changed = "", f"network policy on {g.src}", ""
            ts = first
        out.append(
            Finding(
                analyzer="policy_drops",
                domain=Domain.NETWORK,
                role="cause",
                code="network_policy_drops",
                category=Category.CONFIGURATION_ERROR,
                title=f"network policy {name + ' ' if name else ''}drops {g.src} {verb} {g.dst} ({what})",
                mechanism=(
                    f"a network policy{changed} denies {g.src} {verb} {g.dst} on port {g.port} ({what}): "
                    f"{len(g.recs)} flows dropped by policy between {fmt_ts(first)} and {fmt_ts(last)}, {effect}."
                ),
                object=obj,
                score=0.85 if policy else 0.75,
                ts=ts,
                tags=tags,
                explains=[
                    "dns_*",
                    "crash_*",
                    "upstream_*",
                    "egress_failing",
                    "errors",
                    "http_5xx",
                    "exception",
                    "latency",
                    "db_connection_errors",
                    "not_ready",
                    "probe_*",
                    "readiness*",
                    "rollout_*",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description=f"Show the policies that select {g.src} and what they allow",
                        command=f"kubectl get networkpolicy,ciliumnetworkpolicy -n {ns_arg} -o yaml",
                    ),
                    Action(
                        description=f"Watch the drops while testing the fix ({what})",
                        command=f"hubble observe --namespace {ns_arg} --verdict DROPPED --port {g.port}",
                    ),
                    *(
                        [
                            Action(
                                description=f"Allow {g.src} {verb} {g.dst} on port {g.port} in {name} "
                                "(or revert the change that added it)",
                                command=f"kubectl edit {obj.split(' ', 1)[0].lower()} {name} -n {namespace}",
                                kind="write",
                            )
                        ]
                        if name
                        else []
                    ),
                ],
            )
        )
    return with_aliases(out)


# --- what the policies themselves allow -----------------------------------------------------------------------

# a client that cannot reach its server at all: a drop by policy looks like this from the client's side
_UNREACHABLE = re.compile(
    r"no reachable servers|server selection (?:timeout|error)|i/o timeout|timed? ?out|deadline exceeded|"
    r"unreachable|could not connect|failed to connect|connection timed out|ETIMEDOUT|ECONNREFUSED|connection refused",
    re.I,
)


def _selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) selects labels; an empty selector selects all."""
    if not isinstance(selector, dict):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or ():
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values):
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def _admits(
    policy: dict, labels: dict[str, str], client_ns: str | None = None, server_ns: str | None = None
) -> bool | None:
    """Whether a policy's ingress rules admit a pod with these labels, of the server's own namespace or of
    `client_ns` (None: a rule the labels cannot decide: an address block, a namespace selected by labels other than
    its name)."""
    same = client_ns is None or client_ns == server_ns
    for rule in policy.get("ingress") or ():
        peers = rule.get("from")
        if not peers:
            return True  # a rule with no `from` admits everyone
        for peer in peers:
            if "ipBlock" in peer:
                return None
            if "namespaceSelector" in peer:
                ns_sel = peer.get("namespaceSelector") or {}
                keys = set(ns_sel.get("matchLabels") or {}) | {
                    e.get("key") for e in ns_sel.get("matchExpressions") or ()
                }
                if client_ns is None or (keys and keys != {"kubernetes.io/metadata.name"}):
                    continue  # a namespace chosen by labels we do not have: undecided for this client
                # every namespace carries its name as kubernetes.io/metadata.name (Kubernetes 1.21+)
                if _selects(ns_sel, {"kubernetes.io/metadata.name": client_ns}) and (
                    "podSelector" not in peer or _selects(peer.get("podSelector"), labels)
                ):
                    return True
                continue
            if same and _selects(peer.get("podSelector"), labels):
                return True
    return False


def _pods_by_workload(evidence: EvidenceSet) -> dict[tuple[str, str], list[EvidenceItem]]:
    out: dict[tuple[str, str], list[EvidenceItem]] = {}
    for pod in evidence.kind("k8s/Pod"):
        meta = pod.data.get("metadata") or {}
        out.setdefault(
            (str(meta.get("namespace") or "default"), workload_of_pod(str(meta.get("name") or ""))), []
        ).append(pod)
    return out


def _logs_of(evidence: EvidenceSet, pods: list[EvidenceItem], workload: str) -> list[EvidenceItem]:
    names = [str((p.data.get("metadata") or {}).get("name") or "") for p in pods]
    out = []
    for item in evidence.kind("log"):
        said = f"{item.object} {(item.data.get('source') or {}).get('command') or ''}"
        stem = item.object.rsplit("/", 1)[-1]
        if any(n and n in said for n in names) or stem == workload or stem.startswith(workload + "-previous"):
            out.append(item)
    return out


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "k8s/Pod", "k8s/NetworkPolicy"})
def policy_excludes_client(evidence: EvidenceSet) -> list[Finding]:
    """A workload whose logs show it cannot reach a server in its namespace that every NetworkPolicy selecting the
    server admits no traffic from: the allowlist leaves the client out (a drop looks like a timeout to it)."""
    policies = evidence.kind("k8s/NetworkPolicy")
    if not policies:
        return []
    workloads = _pods_by_workload(evidence)
    out: list[Finding] = []
    for (ns, client), client_pods in workloads.items():
        labels = (client_pods[0].data.get("metadata") or {}).get("labels") or {}
        logs = _logs_of(evidence, client_pods, client)
        # the client failing to reach something at all, read once whichever server it is about
        failure = next(
            (
                (item, r)
                for item in logs
                for r in item.data.get("records") or ()
                if str(r.get("level") or "") in ("error", "fatal", "panic", "critical")
                and _UNREACHABLE.search(str(r.get("msg") or ""))
            ),
            None,
        )
        if failure is None or not labels:
            continue
        for (sns, server), server_pods in workloads.items():
            if (sns, server) == (ns, client):
                continue
            slabels = (server_pods[0].data.get("metadata") or {}).get("labels") or {}
            selecting = [
                p
                for p in policies
                if (p.data.get("metadata") or {}).get("namespace", sns) == sns
                and "Ingress" in ((p.data.get("spec") or {}).get("policyTypes") or ["Ingress"])
                and _selects((p.data.get("spec") or {}).get("podSelector"), slabels)
            ]
            verdicts = [_admits(p.data.get("spec") or {}, labels, ns, sns) for p in selecting]
            if not selecting or any(v is not False for v in verdicts):
                continue
            mention = next(
                ((item, r) for item in logs for r in item.data.get("records") or () if server in str(r.get("msg"))),
                None,
            )
            if mention is None:
                continue
            # the allowlist: the selecting policy whose rules name pods (not only the monitoring namespace)
            policy = max(
                selecting,
                key=lambda p: sum(
                    "podSelector" in peer
                    for r in (p.data.get("spec") or {}).get("ingress") or ()
                    for peer in r.get("from") or ()
                ),
            )
            pname = str((policy.data.get("metadata") or {}).get("name") or policy.object)
            said = str(failure[1].get("msg") or "").splitlines()[0][:100]
            shown = ", ".join(f"{k}={v}" for k, v in labels.items() if "hash" not in k)
            out.append(
                Finding(
                    analyzer="policy_excludes_client",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="network_policy_excludes",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"NetworkPolicy {sns}/{pname} admits no traffic from {client} to {server}",
                    mechanism=(
                        f"NetworkPolicy {sns}/{pname} selects {server}'s pods and its ingress rules admit none of "
                        f"{client}'s pods (labels {shown})"
                        f", and no other policy selecting {server} does: {client}'s connections to {server} are "
                        f"dropped, which it reports as '{said}'"
                    ),
                    object=f"NetworkPolicy {sns}/{pname}",
                    score=0.85,
                    tags=[
                        f"policy:{pname}",
                        f"service:{client}",
                        f"workload:{ns}/{client}",
                        f"upstream:{server}",
                        *(f"pod:{ns}/{(p.data.get('metadata') or {}).get('name')}" for p in client_pods),
                    ],
                    explains=[
                        "crash_*",
                        "pod_restarts",
                        "upstream_*",
                        "errors",
                        "exception",
                        "http_5xx",
                        "connection_refused",
                        "latency",
                        "replicas_unavailable",
                        "rollout_*",
                        "alert:*",
                    ],
                    evidence=[
                        EvidenceRef(
                            item=policy.id, field="spec.ingress", value=(policy.data.get("spec") or {}).get("ingress")
                        ),
                        EvidenceRef(
                            item=mention[0].id, line=mention[1].get("line"), value=str(mention[1].get("msg"))[:200]
                        ),
                        EvidenceRef(
                            item=failure[0].id, line=failure[1].get("line"), value=str(failure[1].get("msg"))[:200]
                        ),
                    ],
                    actions=[
                        Action(
                            description=f"Show what the policies selecting {server} admit",
                            command=f"kubectl get networkpolicy -n {ns} -o yaml",
                        ),
                        Action(
                            description=f"Admit {client} in {pname}'s ingress rule (or revert what left it out)",
                            command=f"kubectl edit networkpolicy {pname} -n {ns}",
                            kind="write",
                        ),
                    ],
                )
            )
    return out


# ---------------------------------------------------------------- egress policies that leave out DNS

_DNS_FAILS = re.compile(
    DNS_TEMPORARY.pattern + r"|lookup \S+ on \S+:53|no such host|name resolution|NameResolutionError|"
    r"getaddrinfo|UnknownHostException|could not translate host name|Could not resolve",
    re.I,
)


def _allows_dns(rule: dict) -> bool:
    """Whether one egress rule lets a pod reach a DNS server on port 53 (a named port counts when it names DNS)."""
    ports = rule.get("ports")
    if not ports:
        return True  # a rule without ports allows every port to its peers (and a rule without peers, to anyone)
    for p in ports:
        port = p.get("port")
        if port is None:
            return True  # every port of the protocol
        if isinstance(port, str) and not port.isdigit():
            if "dns" in port.lower():
                return True
            continue
        lo, hi = int(port), int(p.get("endPort") or port)
        if lo <= 53 <= hi:
            return True
    return False


def _dns_blocked(policies: list[EvidenceItem], namespace: str, labels: dict[str, str]) -> list[EvidenceItem] | None:
    """The egress policies that select a pod, when together they allow no port 53 anywhere (None when none selects
    it, or one of them allows DNS)."""
    selecting = []
    for p in policies:
        meta, spec = p.data.get("metadata") or {}, p.data.get("spec") or {}
        if str(meta.get("namespace") or "default") != namespace or not _selects(spec.get("podSelector"), labels):
            continue
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"])
        if "Egress" not in types:
            continue
        selecting.append(p)
        if any(_allows_dns(rule) for rule in spec.get("egress") or ()):
            return None
    return selecting or None


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "k8s/Pod", "k8s/NetworkPolicy"})
def egress_blocks_dns(evidence: EvidenceSet) -> list[Finding]:
    """Pods whose egress NetworkPolicies allow no port 53, and whose logs fail to resolve names: a default-deny
    egress policy whose allow-list forgot DNS. Every lookup times out, whatever the name, and CoreDNS never sees
    the queries: the policies' configuration error, not DNS, the upstreams or the code."""
    policies = evidence.kind("k8s/NetworkPolicy")
    if not policies:
        return []
    out: list[Finding] = []
    for (ns, workload), pods in sorted(_pods_by_workload(evidence).items()):
        labels = (pods[0].data.get("metadata") or {}).get("labels") or {}
        blocking = _dns_blocked(policies, ns, labels)
        if not blocking:
            continue
        failures = [
            (item, r)
            for item in _logs_of(evidence, pods, workload)
            for r in item.data.get("records") or ()
            if _DNS_FAILS.search(str(r.get("msg") or ""))
        ]
        if len(failures) < MIN_FAILURES:
            continue
        names = [str((p.data.get("metadata") or {}).get("name")) for p in blocking]
        newest = max(blocking, key=lambda p: _policy_time(p) or 0.0)
        item, first = failures[0]
        out.append(
            Finding(
                analyzer="egress_blocks_dns",
                domain=Domain.NETWORK,
                role="cause",
                code="egress_blocks_dns",
                category=Category.CONFIGURATION_ERROR,
                title=f"NetworkPolicy {', '.join(names)} in {ns} allows {workload} no DNS (port 53)",
                mechanism=(
                    f"the egress NetworkPolicies selecting {ns}/{workload} ({', '.join(names)}) allow no traffic to "
                    f"port 53, so every DNS lookup it makes is dropped and times out ({len(failures)} failures, e.g. "
                    f"'{str(first.get('msg') or '')[:160]}'); CoreDNS never sees the queries. The newest, "
                    f"{(newest.data.get('metadata') or {}).get('name')}, changed at {fmt_ts(_policy_time(newest))}."
                ),
                object=f"NetworkPolicy {ns}/{(newest.data.get('metadata') or {}).get('name')}",
                score=0.85,
                ts=_policy_time(newest) or first.get("ts"),
                tags=[f"namespace:{ns}", f"service:{workload}", "dns:resolver", "service:kube-dns", "service:coredns"]
                + [f"policy:{n}" for n in names]
                + [f"pod:{ns}/{(p.data.get('metadata') or {}).get('name')}" for p in pods],
                explains=[
                    "dns_resolution_failure",
                    "dns_*",
                    "crash_*",
                    "probe_*",
                    "errors",
                    "exception",
                    "http_5xx",
                    "upstream_timeout",
                    "alert:*",
                ],
                evidence=[
                    EvidenceRef(item=newest.id, field="spec.policyTypes", value="Egress"),
                    EvidenceRef(item=item.id, line=first.get("line"), value=str(first.get("msg") or "")[:300]),
                ],
                actions=[
                    Action(
                        description=f"The egress rules that apply to {workload}",
                        command=f"kubectl get networkpolicy -n {ns} -o yaml",
                    ),
                    Action(
                        description="Allow DNS to kube-dns from the namespace",
                        command=f"kubectl apply -n {ns} -f - <<'EOF'\n"
                        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: allow-dns-egress}\n"
                        "spec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n"
                        "    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n"
                        "      podSelector: {matchLabels: {k8s-app: kube-dns}}\n"
                        "    ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]\nEOF",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)
