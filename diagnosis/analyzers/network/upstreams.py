"""Failing upstreams: calls that time out, are refused or reset, or answer 5xx, named after the upstream; the
caller's own egress when many unrelated upstreams fail at once; a provider's own status page."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import (
    fmt_ts,
    is_error,
    service_of,
    span_text,
)
from diagnosis.analyzers.network._shared import (
    MIN_FAILURES,
    Failures,
    _base,
    _host,
    _refs,
    _stopped,
    burst_over,
    ended,
)
from diagnosis.analyzers.network.dns import _CLUSTER_SUFFIXES
from diagnosis.analyzers.network.extraction import _target_tags
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of

# ---------------------------------------------------------------- a provider's own status page

_HOSTISH = re.compile(r"[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)*")


def _names_provider(text: str, name: str, domain: str | None) -> bool:
    """Whether text names the provider: a host under its domain, or a word / host label that is its name
    ("api.payvia.example" and "payvia-eu" name PayVia; "pay" does not)."""
    for token in _HOSTISH.findall(text.lower()):
        if domain and (token == domain or token.endswith("." + domain)):
            return True
        for label in token.split("."):
            if label.replace("-", "") == name or name in label.split("-"):
                return True
    return False


# a cloud's own services that our machines, disks, networks and load balancers are: its issue is our infrastructure's
_CLOUD_COMPUTE = re.compile(
    r"^(?:EC2|EBS|ELASTICLOADBALANCING|ELB|VPC|AUTOSCALING|EKS|ECS|FARGATE|LAMBDA|DIRECTCONNECT|NATGATEWAY|"
    r"Compute Engine|Cloud Run|Cloud Functions|Cloud Load Balancing|Persistent Disk|Virtual Private Cloud|"
    r"Google Kubernetes Engine|"
    r"Virtual Machines|Azure Kubernetes Service|Load Balancer|Virtual Network|Managed Disks)\b",
    re.I,
)


def _cloud_compute_issue(page: dict) -> list[str]:
    """The cloud's compute and network services with an open issue (not a scheduled change) on a health page."""
    return sorted(
        {
            str(i.get("service"))
            for i in page.get("incidents") or ()
            if isinstance(i, dict)
            and i.get("status") == "open"
            and i.get("category") == "issue"
            and _CLOUD_COMPUTE.match(str(i.get("service") or ""))
        }
    )


def _with_provider_status(findings: list[Finding], evidence: EvidenceSet) -> list[Finding]:
    """A provider's status page (or the cloud's health events) saying it is degraded confirms a failing upstream
    that it names; a degraded provider that no failing call names is a weak cause candidate of its own."""
    pages = [i for i in evidence.kind("external/status") if i.data.get("degraded")]
    if not pages:
        return findings
    out = list(findings)
    for page in pages:
        d = page.data
        provider = str(d.get("provider") or page.object.removeprefix("status/"))
        name = re.sub(r"[^a-z0-9]", "", provider.lower())
        domain = str(d["domain"]).lower() if d.get("domain") else None
        if len(name) < 3:
            continue
        failing = [str(c) for c in d.get("failing") or []]
        said = "; ".join(filter(None, [str(d.get("description") or ""), ", ".join(failing)]))
        status_ref = EvidenceRef(item=page.id, field="failing" if failing else "description", value=said[:300])
        matched = False
        for n, f in enumerate(out):
            if f.role != "cause" or f.category != Category.DEPENDENCY_FAILURE:
                continue
            text = " ".join([f.object, *f.tags, *(str(r.value) for r in f.evidence if isinstance(r.value, str))])
            if not _names_provider(text, name, domain):
                continue
            matched = True
            out[n] = f.model_copy(
                update={
                    "score": min(0.95, f.score + 0.1),
                    "mechanism": f"{f.mechanism} {provider}'s status page confirms it: {said}.",
                    "evidence": [*f.evidence, status_ref],
                    "tags": list(dict.fromkeys([*f.tags, f"upstream:{name}", f"provider:{name}"])),
                }
            )
        compute = _cloud_compute_issue(d)
        if compute and not matched:
            # the cloud's own issue with the machines, disks or load balancers we run on: our infrastructure
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="cloud_infrastructure_issue",
                    category=Category.INFRASTRUCTURE,
                    title=f"{provider} reports an operational issue with {', '.join(compute)}",
                    mechanism=f"{provider} reports an open operational issue with the infrastructure our services run "
                    f"on ({said}): instances, functions, volumes or load balancers there lose connectivity or slow "
                    "down, so what runs on them fails health checks and answers slowly or with errors.",
                    object=f"{provider} {', '.join(compute)}",
                    score=0.6,
                    ts=page.ts,
                    tags=[f"provider:{name}"] + [f"cloud:{c}" for c in compute],
                    explains=[
                        "latency",
                        "http_5xx",
                        "errors",
                        "upstream_timeout",
                        "metric_shift",
                        "alert:*",
                        "probe_*",
                        "lb_*",
                        "node_*",
                    ],
                    evidence=[status_ref],
                    actions=[
                        Action(
                            description="Which of our resources the issue affects, and its updates",
                            command="aws health describe-affected-entities --filter eventArns=<arn>",
                        ),
                        Action(
                            description="Move traffic off the affected zone until the provider recovers",
                            command="aws elbv2 modify-load-balancer-attributes / update the ASG's subnets to the "
                            "healthy zones",
                            kind="write",
                        ),
                    ],
                )
            )
        elif not matched and (named := _errors_naming(evidence, name, domain)):
            out.append(_provider_failing(provider, name, said, status_ref, page.ts, named))
        elif not matched:
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="provider_degraded",
                    category=Category.DEPENDENCY_FAILURE,
                    title=f"{provider} reports a degradation ({said or 'status page not operational'})",
                    mechanism=f"{provider}'s own status says it is degraded ({said}); no failing call in the "
                    "evidence names it yet, so whether our calls to it fail is still to be shown",
                    object=f"provider {provider}",
                    score=0.3,
                    ts=page.ts,
                    tags=[f"upstream:{name}", f"service:{name}", f"provider:{name}"],
                    evidence=[status_ref],
                    needs=[f"logs or traces of the calls our services make to {provider}"],
                )
            )
    return out


PROVIDER_ERRORS_MIN = 3  # error lines naming a degraded provider that make it our failing dependency


def _errors_naming(evidence: EvidenceSet, name: str, domain: str | None) -> list[tuple[EvidenceItem, dict[str, Any]]]:
    """Error lines of our own logs that name the provider (its client library, its hosts, its support text)."""
    out: list[tuple[EvidenceItem, dict[str, Any]]] = []
    for item in evidence.kind("log"):
        if _names_provider(item.object, name, domain):
            continue  # the provider's own log, not a caller's
        hits = [
            r
            for r in item.data.get("records") or ()
            if is_error(r) and _names_provider(str(r.get("msg") or ""), name, domain)
        ]
        out += [(item, r) for r in hits]
    return out if len(out) >= PROVIDER_ERRORS_MIN else []


def _provider_failing(
    provider: str,
    name: str,
    said: str,
    status_ref: EvidenceRef,
    since: float | None,
    named: list[tuple[EvidenceItem, dict[str, Any]]],
) -> Finding:
    """A provider whose status page says it is degraded while our services' errors name it: calls to it fail."""
    callers = sorted({service_of(i) or i.object for i, _ in named})
    first = min((r["ts"] for _, r in named if r.get("ts") is not None), default=since)
    sample = str(named[0][1].get("msg") or "")
    refs = [status_ref] + [
        EvidenceRef(item=i.id, line=r.get("line"), value=str(r.get("msg") or "")[:300]) for i, r in named[:3]
    ]
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="cause",
        code="provider_degraded",
        category=Category.DEPENDENCY_FAILURE,
        title=f"{provider} is degraded and {', '.join(callers)} fail on it ({len(named)} error lines name it)",
        mechanism=f"{provider} is failing {', '.join(callers)}: its own status says it is degraded ({said}) and "
        f"{len(named)} error lines of {', '.join(callers)} name it (e.g. '{sample[:200]}'); our calls to it fail, so "
        "the requests that need it fail or wait.",
        object=f"provider {provider}",
        score=0.7,
        ts=first,
        tags=[f"upstream:{name}", f"service:{name}", f"provider:{name}", *(f"service:{c}" for c in callers)],
        explains=["errors", "exception", "http_5xx", "latency", "metric_shift", "alert:*", "upstream_*"],
        evidence=refs,
        actions=[
            Action(
                description=f"Follow {provider}'s incident and its updates", command=f"open {provider}'s status page"
            ),
            Action(
                description=f"Degrade gracefully while {provider} fails (cached results, a fallback, or fail fast)",
                command="shorten the client's timeout and retries; serve a cached or reduced answer",
                kind="write",
            ),
        ],
    )


# ---------------------------------------------------------------- findings

_KIND_WORDS = {
    "timeout": "timed out (ran past the caller's timeout)",
    "refused": "refused the connection",
    "unreachable": "could not be reached at all (no route to host: the machine is down or cut off from its network)",
    "reset": "reset or closed the connection",
    "http_5xx": "answered with 5xx",
    "circuit_open": "failed often enough to open the caller's circuit breaker (calls short-circuited)",
    "broker_error": "could not take or serve the requests (not ready, too few replicas or no leader)",
    "rate_limited": "were throttled (our rate limit or quota at the provider is used up)",
    "tls_handshake": "aborted the TLS handshake from its side (a TLS alert that is not about our certificate)",
    "pool_wait": (
        "held the caller's connections so long that its connection pool to it ran dry (calls waited for a connection)"
    ),
}


_LOOPBACK = re.compile(r"^(?:127\.\d+\.\d+\.\d+|localhost|\[?::1\]?)(?::\d+)?$")
_PRIVATE_IP = re.compile(r"^(?:10\.|172\.(?:1[6-9]|2\d|3[01])\.|192\.168\.)\d+\.\d+")


def _container_ports(evidence: EvidenceSet) -> dict[str, list[int]] | None:
    """The ports each container of a Docker host exposes (`docker ps`), when all of them are up; else None."""
    items = evidence.kind("container/state")
    if len(items) < 2 or not all(i.data.get("running") and i.data.get("ports") is not None for i in items):
        return None
    return {str(i.data.get("name")): list(i.data["ports"]) for i in items}


def _wrong_port(target: str, listening: dict[str, list[int]] | None) -> str | None:
    """Why refusals from `target` are the caller's configuration: it names a container (or a private address on
    the host's network) and a port that no running container listens on."""
    m = re.match(r"^(?:\w+://)?(?P<host>[\w.\-]+):(?P<port>\d+)$", target)
    if listening is None or not m:
        return None
    host, port = m["host"], int(m["port"])
    if host in listening and port not in listening[host]:
        return f"{host} is up and listens on {', '.join(map(str, listening[host]))}, not {port}"
    if _PRIVATE_IP.match(host) and all(port not in ports for ports in listening.values()):
        ports = sorted({p for ps in listening.values() for p in ps})
        return (
            f"every container on the host is up, and none listens on {port} (they listen on "
            f"{', '.join(map(str, ports))})"
        )
    return None


# a failure its caller logs as the first attempt of a retry: "Retrying ... (attempt 1)", "retry 1/3 after ..."
_FIRST_RETRY = re.compile(r"\bretr(?:y|ying)\b.{0,160}?\battempt[ #:=]*1\b(?!\d)|\bretry[ #:=]*1(?:/\d+| of \d+)", re.I)


def _call_findings(
    calls: dict[tuple[str, str], Failures], now: float | None, listening: dict[str, list[int]] | None = None
) -> list[Finding]:
    # one finding per target: its kinds of failure together
    by_target: dict[str, list[Failures]] = {}
    for (target, _), f in calls.items():
        by_target.setdefault(target, []).append(f)
    out = []
    for target, groups in by_target.items():
        groups.sort(key=lambda g: -len(g.recs))
        count = sum(len(g.recs) for g in groups)
        if count < MIN_FAILURES:
            continue
        recs = sorted((r for g in groups for r in g.recs), key=lambda r: r.ts or 0)
        first, last = recs[0].ts, recs[-1].ts
        callers = sorted({c for g in groups for c in g.callers})
        main = groups[0]
        how = "; ".join(
            f"{_KIND_WORDS[g.kind]} {len(g.recs)}x"
            + (f" ({', '.join(f'{k} x{v}' for k, v in g.statuses.items())})" if g.statuses else "")
            for g in groups
        )
        callers_txt = ", ".join(callers) or "its callers"
        base = _base(target)
        tags = _target_tags(target) + [f"service:{c}" for c in callers if c != base]
        if main.kind == "timeout" and _leaves_the_network(target) and any(_CONNECT_TIMEOUT.search(r.msg) for r in recs):
            tags.append("egress:nat")  # connections out that never opened: the way out (a NAT) may be what fails
        stopped = ended(recs, last, now) or burst_over(recs)
        # every failure was the first try of a call that was retried, and no second retry was ever needed: the
        # retries absorbed them (a pod that went away between a lookup and the call)
        retried = not stopped and all(_FIRST_RETRY.search(r.msg) for r in recs)
        code = {
            "timeout": "upstream_timeout",
            "refused": "connection_refused",
            "unreachable": "host_unreachable",
            "reset": "upstream_reset",
            "http_5xx": "upstream_5xx",
            "circuit_open": "upstream_circuit_open",
            "tls_handshake": "upstream_tls_failure",
            "pool_wait": "upstream_pool_wait",
            "rate_limited": "rate_limited",
            "broker_error": "broker_unavailable",
        }[main.kind]
        # a limit we hit at the provider is our quota running out, not the provider failing
        # ... and a host the network cannot reach is the machine's failure, not its service's
        category = {"rate_limited": Category.RESOURCE_EXHAUSTION, "unreachable": Category.INFRASTRUCTURE}.get(
            main.kind, Category.DEPENDENCY_FAILURE
        )
        sample = recs[0].msg.strip()[:200]
        mechanism = f"{target} is failing {callers_txt}: calls {how} {span_text(first, last)} (e.g. '{sample}')" + (
            f"; it stopped at {fmt_ts(last)}, and its callers' logs went on without a failure." if stopped else "."
        )
        wrong = _wrong_port(target, listening) if main.kind == "refused" and not stopped else None
        if wrong:
            code, category = "wrong_upstream_port", Category.CONFIGURATION_ERROR
            mechanism = (
                f"{callers_txt} connects to {target}, but {wrong}: the port in {callers_txt}'s upstream configuration "
                f"is wrong, so every call is refused ({len(main.recs)}x {span_text(first, last)}, e.g. '{sample}')."
            )
        if retried:
            mechanism += " Each was retried once and never needed a second try: the retries absorbed them."
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="benign" if stopped or retried else "cause",
                code=code if not (stopped or retried) else f"{code}_{'stopped' if stopped else 'retried'}",
                category=Category.HEALTHY if stopped or retried else category,
                title=f"upstream {base} {_KIND_WORDS[main.kind]} for {callers_txt} ({count}x)",
                mechanism=mechanism,
                object=f"upstream {target}" + (f" (called by {callers_txt})" if callers else ""),
                # a loopback address is a sidecar or local proxy in front of the real upstream: what it reports of
                # its own calls says more than its clients' failures
                score=0.2 if stopped else min(0.9, 0.55 + count / 400) * (0.6 if _LOOPBACK.match(target) else 1.0),
                ts=first,
                tags=list(dict.fromkeys(tags)),
                explains=[]
                if stopped
                else ["latency", "http_5xx", "errors", "upstream_timeout", "db_connection_errors"],
                evidence=_refs(recs),
                actions=(
                    [
                        Action(
                            description="Compare the upstream port with the ports the containers listen on",
                            command="docker ps --format 'table {{.Names}}\t{{.Ports}}'",
                        )
                    ]
                    if wrong
                    else _upstream_actions(base, target)
                ),
            )
        )
    return out


# connect failures to this many unrelated organisations' hosts at once: the common factor is the callers' own way
# out (NAT, routes, firewall or security group, proxy), not each of those services failing together
CALLER_SIDE_DOMAINS = 4
_CONNECT_KINDS = {"timeout", "reset", "tls_handshake"}


# a connection that never opened (the SYN went unanswered), as opposed to a reply that came too late
_CONNECT_TIMEOUT = re.compile(
    r"connect ETIMEDOUT|connect(?:ion)? timed out|ConnectTimeout|connect: connection timed out", re.I
)


def _leaves_the_network(target: str) -> bool:
    """Whether calls to the target leave our network: a public address, or a name outside the cluster's and the
    VPC's own domains."""
    host = _host(target).lower()
    if re.match(r"^\d+\.\d+\.\d+\.\d+$", host):
        return not (_PRIVATE_IP.match(host) or host.startswith("127."))
    return "." in host and not re.search(r"\.(?:svc|local|internal|cluster\.local|lan|corp)$", host)


def _org_domain(target: str) -> str | None:
    """'hooks.acme-retail.example:443' -> 'acme-retail.example'; None for an IP or a cluster-internal name."""
    host = _host(target).lower()
    if re.fullmatch(r"[\d.]+", host) or "." not in host or host.endswith(_CLUSTER_SUFFIXES):
        return None
    return ".".join(host.split(".")[-2:])


def _caller_side(calls: dict[tuple[str, str], Failures], now: float | None) -> list[Finding]:
    """One finding when the same callers fail to connect to many unrelated external hosts over the same time: the
    evidence points at their egress path, which the bundle may not show (then it is what is missing)."""
    live = [
        f
        for (_, kind), f in calls.items()
        if kind in _CONNECT_KINDS and f.recs and not _stopped(f, now) and _org_domain(f.target)
    ]
    domains = {_org_domain(f.target) for f in live}
    if len(domains) < CALLER_SIDE_DOMAINS:
        return []
    callers = sorted({c for f in live for c in f.callers})
    recs = sorted((r for f in live for r in f.recs), key=lambda r: r.ts or 0)
    first, last = recs[0].ts, recs[-1].ts
    who = service_of(recs[0].item) if len(callers) > 3 else ", ".join(callers)
    who = who or "the callers"
    shown = ", ".join(sorted(d for d in domains if d)[:6]) + (", ..." if len(domains) > 6 else "")
    return [
        Finding(
            analyzer="network_failures",
            domain=Domain.NETWORK,
            role="symptom",
            code="egress_failing",
            category=Category.UNKNOWN,
            title=f"{who} cannot reach {len(domains)} unrelated external hosts ({len(recs)} connect failures)",
            mechanism=(
                f"{who} fails to connect (timeout) to {len(domains)} unrelated external services at once ({shown}) "
                f"{span_text(first, last)}: they do not all fail together by chance, so the common factor is "
                f"{who}'s own way out (NAT gateway, routes, security group or firewall, proxy, DNS), not each of them."
            ),
            object=f"egress of {who}",
            score=0.6,
            ts=first,
            tags=[f"service:{c}" for c in callers[:10]],
            explains=["latency", "http_5xx", "errors", "upstream_timeout", "backlog"],
            evidence=_refs(recs),
            needs=[
                f"the network path out of {who}: NAT gateway metrics (ErrorPortAllocation, PacketsDropCount), "
                "route tables, security group and network ACL egress rules, VPC flow logs, proxy logs"
            ],
            actions=[
                Action(
                    description=f"From where {who} runs, time a connection to one of the failing hosts",
                    command=f"curl -sv -o /dev/null -m 10 https://{_host(live[0].target)}/",
                ),
                Action(
                    description="Check the NAT gateway's dropped packets and port allocation errors",
                    command="aws cloudwatch get-metric-statistics --namespace AWS/NATGateway --metric-name "
                    "ErrorPortAllocation --dimensions Name=NatGatewayId,Value=<nat-id> --statistics Sum "
                    "--period 300 --start-time <start> --end-time <end>",
                ),
            ],
        )
    ]


# a NAT gateway out of source ports for one destination (AWS ErrorPortAllocation, GCP Cloud NAT OUT_OF_RESOURCES,
# Azure SNAT port exhaustion): new connections through it are dropped and time out
_NAT_PORTS = re.compile(
    r"ErrorPortAllocation|nat[\w/.]*(?:allocation|port)[\w/.]*(?:fail|error|drop)|"
    r"OUT_OF_RESOURCES|SnatConnectionCount.*Failed|snat[_ ]?port[_ ]?exhaust",
    re.I,
)


def _nat_ports(evidence: EvidenceSet) -> list[Finding]:
    """A NAT gateway failing to allocate source ports: the callers' connections out time out whatever they call."""
    out: list[Finding] = []
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        labels = " ".join(f"{k}={v}" for k, v in (m.data.get("labels") or {}).items())
        if not _NAT_PORTS.search(f"{name} {labels}"):
            continue
        pts = points_of(m.data.get("points"))
        if len(pts) < 3 or max(v for _, v in pts) <= 0:
            continue
        first = next(t for t, v in pts if v > 0)
        peak = max(v for _, v in pts)
        lb = m.data.get("labels") or {}
        where = str(lb.get("NatGatewayId") or lb.get("gateway") or "the NAT gateway")
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="nat_ports_exhausted",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{where} cannot allocate source ports ({name} up to {peak:g})",
                mechanism=(
                    f"{where} fails to allocate source ports for new connections ({name} from 0 to {peak:g} since "
                    f"{fmt_ts(first)}): too many concurrent connections to the same destination through one NAT "
                    "address (about 55,000 per destination), so new connections out are dropped and time out, "
                    "whatever the destination's own health."
                ),
                object=f"NAT {where}",
                score=0.8,
                ts=first,
                tags=["egress:nat", f"nat:{where}"],
                explains=[
                    *("upstream_timeout", "upstream_reset", "egress_failing", "errors", "latency", "alert:*"),
                    *("backlog", "queue_backlog", "metric_shift"),
                ],
                evidence=[EvidenceRef(item=m.id, field=f"points.{len(pts) - 1}", value=pts[-1][1])],
                actions=[
                    Action(
                        description="Connections per destination through the NAT gateway",
                        command="aws cloudwatch get-metric-statistics --namespace AWS/NATGateway --metric-name "
                        "ActiveConnectionCount --dimensions Name=NatGatewayId,Value=<nat-id> --statistics Maximum "
                        "--period 60 --start-time <start> --end-time <end>",
                    ),
                    Action(
                        description="Add addresses to the NAT gateway (each adds ~55,000 ports per destination), or "
                        "reuse connections and cap the workers' concurrency",
                        command="aws ec2 associate-nat-gateway-address --nat-gateway-id <nat-id> "
                        "--allocation-ids <eipalloc-id>",
                        kind="write",
                    ),
                ],
            )
        )
    return out


def _demoted(findings: list[Finding], egress: list[Finding]) -> list[Finding]:
    """With a caller-side finding, each external host's connect failures are its symptoms, not causes."""
    if not egress:
        return findings
    out = []
    for f in findings:
        host = f.object.removeprefix("upstream ").split(" ", 1)[0]
        if (
            f.role == "cause"
            and f.code in ("upstream_timeout", "upstream_reset", "upstream_tls_failure")
            and _org_domain(host)
        ):
            f = f.model_copy(update={"role": "symptom", "category": Category.UNKNOWN, "explains": []})
        out.append(f)
    return out


def _upstream_actions(base: str, target: str) -> list[Action]:
    port = target.rsplit(":", 1)[-1] if re.search(r":\d+$", target) else "80"
    return [
        Action(
            description=f"Is {base} up? Its pods, restarts and endpoints",
            command=f"kubectl get pods,endpoints -A | grep {base}",
        ),
        Action(
            description=f"{base}'s own recent errors",
            command=f"kubectl logs deploy/{base} --since=30m | grep -iE 'error|timeout' | tail -50",
        ),
        Action(
            description=f"Time a call to {base} from the caller's network",
            command=f"curl -sv -o /dev/null -m 10 -w '%{{http_code}} %{{time_total}}s' http://{_host(target)}:{port}/",
        ),
    ]
