"""DNS: names that do not resolve (a wrong name, or DNS itself down), a dead nameserver, an authoritative
failure, pods not yet published, and DNS events that are benign."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from diagnosis.analyzers._common import DNS_NXDOMAIN, Rec, span_text
from diagnosis.analyzers.network._shared import (
    DNS_OUTAGE_NAMES,
    MIN_FAILURES,
    Failures,
    _base,
    _refs,
    _stopped,
    _stopped_finding,
)
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding


def _as_logged(recs: list[Rec]) -> str:
    """How the clients said the name does not exist ('UnknownHostException', 'no such host'), as they logged it."""
    seen: list[str] = []
    for r in recs[:50]:
        for m in DNS_NXDOMAIN.finditer(r.msg):
            said = m.group(0)
            if (
                len(said) <= 30
                and not said.lower().startswith("failed to")
                and said.lower() not in {x.lower() for x in seen}
            ):
                seen.append(said.lower() if said.islower() else said)
    return ", ".join(["NXDOMAIN", *(x for x in seen[:2] if x != "NXDOMAIN")]) if seen else "NXDOMAIN / no such host"


def _dns_findings(nx: dict[str, Failures], tmp: dict[str, Failures], now: float | None) -> list[Finding]:
    out = []
    live_nx = {k: f for k, f in nx.items() if not _stopped(f, now)}
    outage = len(live_nx) >= DNS_OUTAGE_NAMES
    for name, f in nx.items():
        callers = ", ".join(sorted(f.callers)) or "clients"
        if _stopped(f, now):
            out.append(_stopped_finding(f, "dns_failure_stopped", f"resolving {name}"))
            continue
        if outage:
            continue
        said = _as_logged(f.recs)
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="dns_name_not_found",
                category=Category.CONFIGURATION_ERROR,
                title=f"DNS: {name} does not resolve (NXDOMAIN) for {callers}",
                mechanism=(
                    f"{callers} cannot resolve {name}: the name does not exist ({said}) "
                    f"{len(f.recs)}x {span_text(f.first, f.last)}, while DNS answers otherwise: a wrong or deleted "
                    "service name, namespace or host in configuration."
                ),
                object=f"DNS name {name}",
                # a name that failed once or twice (while its pod was rescheduled) is a blip, not a wrong name
                score=0.8 if len(f.recs) >= MIN_FAILURES else 0.4,
                ts=f.first,
                tags=[f"dns:{name}", f"upstream:{_base(name)}", *(f"service:{c}" for c in sorted(f.callers))],
                explains=["errors", "http_5xx", "pod_restarts", "crash_loop", "latency"],
                evidence=_refs(f.recs),
                actions=[
                    Action(
                        description=f"Resolve {name} from a pod",
                        command=f"kubectl run dnscheck --rm -it --restart=Never --image=busybox:1.36 -- nslookup {name}",  # noqa: E501 (an exact command or data line reads better whole)
                    ),
                    Action(
                        description="Does the Service exist (in which namespace)?",
                        command=f"kubectl get svc -A | grep {_base(name)}",
                    ),
                ],
            )
        )
    if outage:
        recs = sorted((r for f in live_nx.values() for r in f.recs), key=lambda r: r.ts or 0)
        names = sorted(live_nx)
        out.append(_dns_outage(recs, names, "NXDOMAIN for many names"))
    # every temporary failure, from clients and from CoreDNS forwarding alike, about one external name: that
    # name's authoritative servers fail (one Failures holding them all decides)
    live_tmp = [f for f in tmp.values() if not _stopped(f, now)]
    if len(live_tmp) > 1:
        merged = Failures(live_tmp[0].target, "dns_temporary")
        for f in live_tmp:
            merged.recs += f.recs
            merged.callers |= f.callers
            for k, v in f.statuses.items():
                merged.statuses[k] = merged.statuses.get(k, 0) + v
        external = _authoritative_failure(merged)
        if external:
            out.append(_dns_authoritative(merged, external, ", ".join(sorted(tmp))))
            return out
    for resolver, f in tmp.items():
        if _stopped(f, now):
            out.append(_stopped_finding(f, "dns_failure_stopped", f"DNS via {resolver}"))
            continue
        resolved = ", ".join(sorted(f.statuses)[:5]) or "names"
        external = _authoritative_failure(f)
        if external:
            out.append(_dns_authoritative(f, external, resolver))
            continue
        out.append(
            _dns_outage(f.recs, [resolver], f"temporary failures resolving {resolved} via {resolver}", f.callers)
        )
    return out


# CoreDNS errors plugin: "[ERROR] plugin/errors: 2 maps.example.com. A: read udp ...: i/o timeout"
# dig and nslookup when a nameserver does not answer; resolvers name it as "on 10.40.0.2:53" (DNS_TEMPORARY)
_NAMESERVER_TIMEOUT = re.compile(
    r"communications error to ([\d.]+|[0-9a-f:]+)#53: timed out|connection timed out; "
    r"no servers could be reached|server can't be reached|;; no servers could be reached"
)
_RESOLVER_ON = re.compile(r"\bon ([\d.]+):53\b")


def _dead_nameserver(evidence: EvidenceSet, dns_tmp: dict[str, Failures]) -> list[Finding]:
    """The first nameserver of a resolv.conf that does not answer: every lookup waits its timeout before the
    resolver asks the next one, so every new connection is that much slower (and some time out). A
    configuration error: the file lists a server that is gone."""
    confs = evidence.kind("host/resolv")
    if not confs:
        return []
    silent: dict[str, list[EvidenceRef]] = defaultdict(list)
    for resolver, f in dns_tmp.items():
        silent[resolver] += _refs(f.recs)[:2]
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            m = _NAMESERVER_TIMEOUT.search(msg)
            ip: str | None = m.group(1) if m and m.group(1) else None
            if ip is None and m:
                on = _RESOLVER_ON.search(msg)
                ip = on.group(1) if on else None
            if ip and len(silent[ip]) < 3:
                silent[ip].append(EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200]))
    out = []
    for conf in confs:
        servers = [str(s) for s in conf.data.get("nameservers") or ()]
        first = servers[0] if servers else None
        if first is None or not silent.get(first) or all(s in silent for s in servers):
            continue  # the first answers, or none does (then it is the network or the resolvers, not the order)
        timeout = int(conf.data.get("timeout_s") or 5)
        line = (conf.data.get("lines") or {}).get(first)
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="dead_nameserver",
                category=Category.CONFIGURATION_ERROR,
                title=f"nameserver {first}, first in resolv.conf, does not answer",
                mechanism=(
                    f"/etc/resolv.conf lists nameserver {first} first, and it does not answer (DNS queries to it time "
                    f"out): every lookup waits {timeout}s (options timeout:{timeout}) before the resolver asks "
                    f"{servers[1] if len(servers) > 1 else 'the next'}, so every new connection is {timeout}s slower "
                    "and calls with a short timeout fail."
                ),
                object=f"resolv.conf nameserver {first}",
                score=0.85,
                tags=[f"resolver:{first}"],
                explains=["latency", "upstream_timeout", "dns_temporary", "errors", "http_5xx", "backlog"],
                evidence=[EvidenceRef(item=conf.id, line=line, value=f"nameserver {first}"), *silent[first][:2]],
                actions=[
                    Action(
                        description=f"Take {first} out of resolv.conf, and out of what writes the file (DHCP options, "
                        "Ansible, netplan, cloud-init), or it comes back",
                        command=f"sudo sed -i '/^nameserver {re.escape(first)}$/d' /etc/resolv.conf",
                        kind="write",
                    ),
                    Action(
                        description=f"Confirm {first} is silent and the next one answers",
                        command=f"dig @{first} example.com +tries=1 +time=2; dig @{servers[-1]} example.com +short",
                    ),
                ],
            )
        )
    return out


# Airflow's UI and task log handler fetching a finished worker's logs ("*** Could not read served logs")
_LOG_FETCH = re.compile(r"Could not read (?:served |remote )?logs", re.I)
# a StatefulSet pod's own name behind its headless Service: <pod>.<service>.<namespace>.svc[.cluster.local]
_POD_DNS = re.compile(
    r"^([a-z0-9][a-z0-9-]*)\.([a-z0-9][a-z0-9-]*)\.([a-z0-9][a-z0-9-]*)\.svc(?:\.cluster\.local)?\.?$"
)


def _pods_not_published(findings: list[Finding], evidence: EvidenceSet) -> list[Finding]:
    """NXDOMAIN for a StatefulSet pod's DNS name while that pod is not Ready (terminating, or on a node that
    stopped): a headless Service publishes only ready pods, so the name is gone because the pod is, not because
    the name in the configuration is wrong. The pod's own failure is the cause; this is its symptom."""
    pods = {
        (str(meta.get("namespace")), str(meta.get("name"))): p
        for p in evidence.kind("k8s/Pod")
        if (meta := p.data.get("metadata") or {})
    }
    out = []
    for f in findings:
        name = next((t.split(":", 1)[1] for t in f.tags if t.startswith("dns:")), "")
        m = _POD_DNS.match(name) if f.code == "dns_name_not_found" else None
        pod = pods.get((m.group(3), m.group(1))) if m else None
        if m is None or pod is None or _pod_ready(pod):
            out.append(f)
            continue
        ns, pod_name = m.group(3), m.group(1)
        out.append(
            f.model_copy(
                update={
                    # a cause for what its callers saw, itself explained by whatever took the pod down (its node)
                    "role": "cause",
                    "category": Category.UNKNOWN,
                    "score": 0.55,
                    "code": "pod_dns_unpublished",
                    "mechanism": f"{f.mechanism} The name is pod {ns}/{pod_name}'s own, and that pod is not Ready: its "
                    "headless Service stopped publishing it, so the name is missing because the pod is.",
                    "tags": list(dict.fromkeys([*f.tags, f"pod:{ns}/{pod_name}"])),
                    "explains": ["upstream_5xx", "upstream_timeout", "connection_refused", "errors", "http_5xx"],
                    "needs": [f"why pod {ns}/{pod_name} is not Ready (its node, its events)"],
                }
            )
        )
    return out


def _pod_ready(pod: EvidenceItem) -> bool:
    meta, status = pod.data.get("metadata") or {}, pod.data.get("status") or {}
    if meta.get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


_COREDNS_QUERY = re.compile(r"plugin/errors: \d+ (\S+?)\.? (?:A|AAAA|SRV|CNAME|PTR|MX|TXT|NS|SOA|HTTPS)\b")
_CLUSTER_SUFFIXES = (".svc", ".cluster.local", ".local", ".internal", ".lan", ".localdomain")
_SERVFAIL = re.compile(r"SERVFAIL|server misbehaving|No Reachable Authority|REFUSED", re.I)


def _authoritative_failure(f: Failures) -> str | None:
    """The one external name every failure is about, when each says SERVFAIL ("server misbehaving" in Go): the
    resolver answers, but the name's own authoritative servers do not. A resolver that is down fails every name,
    and times out rather than answering SERVFAIL."""
    names = [n for n in f.statuses if n and "." in n]
    if len(names) != 1 or len(f.statuses) != 1:
        return None
    name = names[0].split(":")[0].rstrip(".")
    if name.endswith(_CLUSTER_SUFFIXES) or name.count(".") < 1:
        return None
    # SERVFAIL from the resolver, or CoreDNS's forwarder failing for that name (while it answers others)
    servfail = [r for r in f.recs if _SERVFAIL.search(r.msg)]
    forwarded = [r for r in f.recs if _COREDNS_QUERY.search(r.msg)]
    return name if servfail and len(servfail) + len(forwarded) >= len(f.recs) else None


def _dns_authoritative(f: Failures, name: str, resolver: str) -> Finding:
    recs = sorted(f.recs, key=lambda r: r.ts or 0)
    clients = sorted(c for c in f.callers if c not in ("coredns", "kube-dns", "dnsmasq", "node-local-dns"))
    callers = ", ".join(clients) or "clients"
    domain = ".".join(name.split(".")[-2:])
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="cause",
        code="dns_authoritative_failure",
        category=Category.DEPENDENCY_FAILURE,
        title=f"DNS for {name}: SERVFAIL from its authoritative servers ({len(recs)}x)",
        mechanism=(
            f"{callers} cannot resolve {name}: the resolver {resolver} answers SERVFAIL for it alone "
            f"{span_text(recs[0].ts, recs[-1].ts)}, so the authoritative name servers of {domain} (the provider's "
            "DNS) fail, not our resolver, which resolves other names."
        ),
        object=f"DNS of {name}",
        score=0.75,
        ts=recs[0].ts,
        tags=[f"dns:{name}", f"upstream:{name}", *(f"service:{c}" for c in clients)],
        explains=["errors", "http_5xx", "latency", "upstream_timeout", "exception", "job_failed"],
        evidence=_refs(recs),
        actions=[
            Action(description="Ask the authoritative servers directly", command=f"dig +trace {name}"),
            Action(description="Compare with a public resolver", command=f"dig @1.1.1.1 {name}"),
        ],
    )


def _dns_outage(recs: list[Rec], names: list[str], what: str, callers: Iterable[str] = ()) -> Finding:
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="cause",
        code="dns_resolution_failure",
        category=Category.INFRASTRUCTURE,
        title=f"DNS resolution failing: {what}",
        mechanism=(
            f"name resolution is failing ({what}, {len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}): the resolver "
            "(CoreDNS / kube-dns or the VPC resolver) is down, overloaded or unreachable."
        ),
        object="DNS resolver " + ", ".join(names[:5]),
        score=0.8,
        ts=recs[0].ts,
        # in Kubernetes the resolver is CoreDNS (kube-dns): name it, so its pods' failures link to this
        # the clients that could not resolve are tagged too: what broke their path explains this
        tags=[
            "dns:resolver",
            "service:coredns",
            "service:kube-dns",
            *(f"dns:{n}" for n in names[:5]),
            *(f"client:{c}" for c in sorted(callers)),
        ],
        explains=["errors", "http_5xx", "latency", "pod_restarts", "upstream_timeout"],
        evidence=_refs(recs),
        actions=[
            Action(
                description="CoreDNS pods and their restarts",
                command="kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide",
            ),
            Action(
                description="CoreDNS errors",
                command="kubectl -n kube-system logs -l k8s-app=kube-dns --since=30m | tail -100",
            ),
        ],
    )


def _dns_event_benign(evidence: EvidenceSet) -> list[Finding]:
    out = []
    for ev in evidence.kind("k8s/Event"):
        if ev.data.get("reason") != "DNSConfigForming":
            continue
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="benign",
                code="dns_config_forming",
                category=Category.HEALTHY,
                title=f"DNSConfigForming on {ev.object}",
                mechanism=(
                    f"{ev.object}: the node's resolv.conf has more nameservers or search domains than the pod DNS "
                    "config takes, so some were omitted; resolution itself works. A common, harmless warning."
                ),
                object=ev.object,
                score=0.1,
                ts=ev.data.get("first_ts") or ev.ts,
                tags=[],
                evidence=[EvidenceRef(item=ev.id, field="message", value=str(ev.data.get("message", ""))[:300])],
            )
        )
        break  # one is enough to rule it out
    return out
