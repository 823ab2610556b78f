"""Network: a failing upstream (timeouts, refused or reset connections, 5xx it returns), DNS failures, TLS
certificates that expired or do not verify. The cause is named after the thing that fails (the upstream, the
DNS name, the certificate's host), and the service that saw it is its symptom.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from diagnosis.analyzers._common import (
    AUTH_DENIED,
    CLOUD_5XX,
    DNS_NXDOMAIN,
    DNS_TEMPORARY,
    HOST_EPHEMERAL,
    HTTP_POOL_WAIT,
    KAFKA_BROKER_ERR,
    NET_CIRCUIT_OPEN,
    NET_REFUSED,
    NET_RESET,
    NET_TIMEOUT,
    RATE_LIMITED,
    TLS_EXPIRED,
    TLS_INVALID,
    TLS_REMOTE,
    UPSTREAM_5XX,
    Rec,
    fmt_ts,
    now_of,
    ref_of,
    service_of,
    signature_records,
    span_text,
    with_aliases,
    workload_of_pod,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

# Signals whose last occurrence is this long before "now" have stopped (see logs.STOPPED_AFTER_S).
STOPPED_AFTER_S = 15 * 60
# One or two failed calls are the noise of any distributed system (a retried blip); three is a pattern.
MIN_FAILURES = 3
# Distinct names failing NXDOMAIN at once above which DNS itself is broken rather than one name being wrong.
DNS_OUTAGE_NAMES = 3
# A certificate with this few days left is worth renewing now, but it is not failing yet (benign).
TLS_WARN_DAYS = 14
# Access-log 5xx: at least this many, and this share of the requests in the source.
HTTP_5XX_MIN = 5
HTTP_5XX_SHARE = 0.05

# Words that follow "upstream" in messages without naming it (nginx: "upstream timed out", envoy: "upstream
# connect error").
_NOT_A_NAME = {
    "terminated",
    "timed",
    "connect",
    "prematurely",
    "sent",
    "response",
    "request",
    "server",
    "error",
    "reset",
    "closed",
    "returned",
    "responded",
    "failed",
    "is",
    "was",
    "service",
    "host",
    "call",
    "timeout",
    "unavailable",
    "disconnect",
    "request_timeout",
    "unreachable",
    "not",
    "down",
    "name",
    "did",
    "does",
    "has",
    "had",
    "answered",
    "the",
    "a",
    "an",
    "for",
    "with",
    "side",
    "version",
    "localhost",
    "node",
    "broker",
}
# "SocketInputStream.java:150" in a stack frame is a source line, not a host:port
_SOURCE_FILE = re.compile(
    r"\.(?:java|kt|scala|py|go|js|mjs|ts|rb|cs|cpp|cc|c|h|rs|php|ex|exs|erl|clj|swift):\d+$", re.I
)
_DOC_LINK = re.compile(
    r"\b(?:see|more info(?:rmation)?|docs?|documentation|details|help|learn more|troubleshoot(?:ing)?)\W{0,3}"
    r"(?:at\s+)?(?:[a-z]+://)?$",
    re.I,
)
# "(Please take a look at this article for some common client-side issues that can cause timeouts: https://...)"
_DOC_ARTICLE = re.compile(
    r"\b(?:article|guide|faq|knowledge ?base|runbook|wiki)\b[^()\n]{0,90}[:\s]\s*(?:[a-z]+://)?$", re.I
)
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*(?::\d{2,5})?"
_TARGET_PATTERNS = [
    re.compile(
        r"outbound\|\d+\|[\w.\-]*\|([A-Za-z0-9][\w.\-]*)"
    ),  # Istio/Envoy cluster: outbound|8080||payments.shop.svc
    # a unix socket names its server by the socket's file: fastcgi://unix:/run/php/php8.2-fpm.sock -> php8.2-fpm
    re.compile(r"(?:[a-z]+://)?unix:(?:[^\s\":]*/)?([A-Za-z0-9][\w.\-]*?)(?:\.sock(?:et)?)?(?=[\s\":|]|$)"),
    re.compile(rf"upstream:\s*\"?(?:[a-z]+://)?({_NAME})"),  # nginx error log: upstream: "http://10.0.0.5:8080/x"
    # structured attributes that name the peer (OpenTelemetry, grpc-go, logfmt): peer.service=..., target=...,
    # grpc-java's remote_addr=inventory.stock.svc/10.0.4.3:9090
    re.compile(
        rf"\b(?:peer\.service|peer\.address|net\.peer\.name|server\.address|grpc\.target|target|remote_addr|"
        rf"upstream_service|dependency|downstream)[\"']?\s*[=:]\s*[\"']?(?:[a-z]+://)?({_NAME})"
    ),
    re.compile(rf"upstream(?:_addr|_host|_cluster)?[=\s:]+\"?(?:[a-z]+://)?({_NAME})", re.I),
    re.compile(rf"(?:lookup|resolve host:?|resolve|ENOTFOUND|UnknownHostException:?|host name)\s+\"?({_NAME})", re.I),
    re.compile(rf"(?:https?|grpcs?|tcp|postgres(?:ql)?|redis|amqps?|mysql|mongodb)://(?:[^@/\s\"]+@)?({_NAME})"),
    re.compile(rf"dial tcp ({_NAME}:\d+)"),
    # resilience4j "CircuitBreaker 'payments' is OPEN", Hystrix "PaymentsCommand short-circuited", HAProxy
    # "backend payments has no server available", urllib3 "HTTPSConnectionPool(host='api.stripe.com', port=443)"
    re.compile(r"CircuitBreaker '([^']+)'"),
    re.compile(rf"({_NAME}) (?:short-circuited|has no server available)"),
    re.compile(rf"circuit(?: breaker)? (?:for|on|to) \"?'?({_NAME})", re.I),
    re.compile(rf"host=['\"]?({_NAME})['\"]?"),
    # a business field naming the external provider called: weaker than a host, URL or DNS name in the same line
    re.compile(rf"\b(?:provider|vendor)[\"']?\s*[=:]\s*[\"']?({_NAME})"),
    re.compile(
        rf"(?:connect(?:ing)? to|connection to|calling|call to|request to|requests? to|host|server at|server)\s+"
        rf"\"?(?:[a-z]+://)?({_NAME})",
        re.I,
    ),
    # cloud SDKs name the service or the operation: "(Service: S3, Status Code: 503", "operation error
    # DynamoDB: PutItem", botocore "when calling the PutObject operation"
    re.compile(r"\(Service: ([\w\-]+)[;,]"),
    re.compile(r"operation error ([\w\-]+): \w+"),
    re.compile(r"when calling the (\w+) operation"),
    # a cloud SDK's namespace names the service: Microsoft.Azure.Cosmos.CosmosException, Azure.Storage.Blobs...,
    # software.amazon.awssdk.services.s3..., com.azure.cosmos..., google.cloud.bigquery...
    re.compile(
        r"\b(?:Microsoft\.Azure|Azure|software\.amazon\.awssdk\.services|com\.azure|google\.cloud)\.([A-Za-z]\w+)\."
    ),
    re.compile(r"\b([A-Za-z][A-Za-z0-9_.\-]*:\d{2,5}|(?:\d{1,3}\.){3}\d{1,3}:\d{2,5})\b"),
    # a gRPC full method names the service called: "/inventory.v1.Inventory/Reserve" -> inventory.v1.Inventory
    re.compile(r"(?:^|[\s\[\"'=(])/((?:[a-z_][\w]*\.)+[A-Z]\w*)/[A-Z]\w*"),
    re.compile(r"\bgrpc\.service[=:]\s*\"?((?:[a-z_][\w]*\.)*[A-Z]\w*)"),
]
# the caller, when the message names it before the upstream ("ERROR orders-api upstream payments-api ...")
_CALLER = re.compile(
    r"([a-z][a-z0-9\-]{2,})\s+(?:->\s*)?(?:upstream|calling|call to|request to)\s|"
    # a service name is lower-case (DNS-1123): "operation error DynamoDB: PutItem" names the called service
    r"^(?:\S+\s+)?(?:ERROR|WARN(?:ING)?|FATAL|CRIT(?:ICAL)?)\s+((?-i:[a-z][a-z0-9\-]{2,})):\s",
    re.I,
)
_RESOLVER = re.compile(r"\bon ((?:\d{1,3}\.){3}\d{1,3}):53\b")
_ACCESS_STATUS = re.compile(
    r"\"\s*[A-Z]+ \S+ HTTP/[\d.]+\"\s+(\d{3})\b|\bstatus[\"'=:\s]+(\d{3})\b|\bcode[=:](\d{3})\b"
)
_OUTBOUND = re.compile(r"upstream|backend|dependency|calling|call to|request to|from|://", re.I)
_DB_PORTS = {"5432": "postgres", "3306": "mysql", "6379": "redis", "27017": "mongodb", "9042": "cassandra"}
_LEVEL_WORDS = {"error", "warn", "warning", "info", "debug", "fatal", "err"}
# words that precede "calling"/"request to" in prose without naming the caller ("failed while calling x")
_NOT_A_CALLER = re.compile(
    r"while|when|after|before|during|failed|errors?|the|and|then|retry|retrying|attempt|for|with|from|upon|on|by|"
    r"timeout|timed"
)


@dataclass
class Failures:
    """Failed calls to one target, grouped."""

    target: str
    kind: str  # timeout | refused | reset | http_5xx
    recs: list[Rec] = field(default_factory=list)
    callers: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def first(self) -> float | None:
        return min((r.ts for r in self.recs if r.ts is not None), default=None)

    @property
    def last(self) -> float | None:
        return max((r.ts for r in self.recs if r.ts is not None), default=None)


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "http/probe", "k8s/Event", "external/status", "host/resolv"})
def network_failures(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    calls: dict[tuple[str, str], Failures] = {}
    dns_nx: dict[str, Failures] = {}
    dns_tmp: dict[str, Failures] = {}
    tls: dict[str, Failures] = {}
    services: dict[str, str | None] = {}

    def caller_of(rec: Rec) -> str | None:
        m = _CALLER.search(rec.msg)
        name = (m.group(1) or m.group(2)) if m else None
        if name and name.lower() not in _LEVEL_WORDS and not _NOT_A_CALLER.fullmatch(name.lower()):
            return name
        if rec.item.kind != "log":
            return rec.item.object
        if rec.item.id not in services:
            services[rec.item.id] = service_of(rec.item)
        return services[rec.item.id]

    # request id -> target, built only when a failure line names no target but a request id
    requests = functools.cache(lambda: _request_targets(evidence))
    for rec in _records_with_events(evidence):
        msg = rec.msg
        if HOST_EPHEMERAL.search(msg):
            continue  # our own side ran out of local ports: the host analyzer's, not the target's fault
        tls_remote = bool(TLS_REMOTE.search(msg)) and not TLS_EXPIRED.search(msg)
        if (TLS_EXPIRED.search(msg) or TLS_INVALID.search(msg)) and not tls_remote:
            tls_kind = "expired" if TLS_EXPIRED.search(msg) else "invalid"
            _add(tls, _target(msg) or "unknown host", tls_kind, rec, caller_of(rec))
        elif DNS_TEMPORARY.search(msg):
            m = _RESOLVER.search(msg)
            q = _COREDNS_QUERY.search(msg)  # CoreDNS's own error line names the query, not a host:port
            name = q.group(1) if q else _target(msg)
            _add(dns_tmp, m.group(1) if m else "the resolver", "dns_temporary", rec, caller_of(rec), name=name)
        elif DNS_NXDOMAIN.search(msg):
            if _LOG_FETCH.search(msg):
                continue  # a log viewer that cannot reach a worker that is gone: not the service's lookup
            name = _dns_name(msg)
            _add(dns_nx, name or "unknown name", "nxdomain", rec, caller_of(rec))
        else:
            call_kind = _call_failure(msg)
            if call_kind is None:
                continue
            caller = caller_of(rec)
            target = (
                _target(msg)
                or _target_of_request(msg, requests)
                or {"rate_limited": "a rate-limited API", "broker_error": "kafka"}.get(call_kind)
            )
            if not target or _base(target) == caller:
                continue
            if call_kind == "pool_wait" and any(t.startswith("db:") for t in _target_tags(target)):
                continue  # a database pool is the database analyzer's (app_pool_exhausted)
            f = calls.setdefault((target, call_kind), Failures(target, call_kind))
            f.recs.append(rec)
            if caller:
                f.callers.add(caller)
            if call_kind == "http_5xx":
                m5 = UPSTREAM_5XX.search(msg)
                if m5:
                    status = m5.group(1) or m5.group(2)
                    f.statuses[status] = f.statuses.get(status, 0) + 1
    for rec, kind, target, status in _envoy_failures(evidence):
        f = calls.setdefault((target, kind), Failures(target, kind))
        f.recs.append(rec)
        src = rec.item.data.get("source") or {}
        # a sidecar's log speaks for its pod's workload, not for the proxy container
        caller = workload_of_pod(str(src["pod"])) if src.get("pod") else caller_of(rec)
        if caller and _base(target) != caller:
            f.callers.add(caller)
        if status.startswith("5"):
            f.statuses[status] = f.statuses.get(status, 0) + 1
    findings: list[Finding] = []
    egress = _caller_side(calls, now)
    findings += egress
    findings += _demoted(_named_by_cluster(_call_findings(calls, now, _container_ports(evidence)), evidence), egress)
    findings += _pods_not_published(_dns_findings(dns_nx, dns_tmp, now), evidence)
    findings += _dead_nameserver(evidence, dns_tmp)
    findings += _tls_findings(tls, now, evidence)
    findings += _probe_findings(evidence)
    findings += _dns_event_benign(evidence)
    findings += _access_log_5xx(evidence, now)
    findings = _with_provider_status(findings, evidence)
    return with_aliases(findings)


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
        if not matched:
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


# ---------------------------------------------------------------- extraction


def _records_with_events(evidence: EvidenceSet) -> Iterable[Rec]:
    yield from signature_records(evidence)
    for ev in evidence.kind("k8s/Event"):
        d = ev.data
        msg = str(d.get("message") or "")
        reason = str(d.get("reason") or "")
        # image pulls failing on DNS are the kubernetes analyzer's ImagePull finding; DNSConfigForming is benign
        if reason == "DNSConfigForming" or "pull" in msg.lower() or "image" in msg.lower():
            continue
        yield Rec(ev, d.get("last_ts") or ev.ts, msg, None, "error" if d.get("type") == "Warning" else "info")


# Envoy's (and Istio's) default access log: [ts] "METHOD path PROTO" code flags rx tx duration upstream_time "xff"
# "user-agent" "request-id" "authority" "upstream-host". The response flags say why a call failed: UT upstream
# timeout, UF/URX/UH/NR? connection failure, retries exhausted, no healthy upstream; UC/UR connection reset;
# "-" with a 5xx is the upstream's own answer.
_ENVOY_ACCESS = re.compile(
    r"\"[A-Z]+ \S+ HTTP/[\d.]+\" (?P<code>\d{3}) (?P<flags>[A-Z,]+|-) "
    r".*\"(?P<authority>[^\"]*)\" \"(?P<upstream>[^\"]*)\"(?:\s+[^\s\"]+)*\s*$"
)
_ENVOY_FLAGS = {"UT": "timeout", "UF": "refused", "URX": "refused", "UH": "refused", "UO": "refused",
                "UC": "reset", "UR": "reset", "UPE": "reset"}  # fmt: skip


def _ip_owners(evidence: EvidenceSet) -> dict[str, tuple[str, str, list[str]]]:
    """Pod IP -> (namespace, pod, the Services whose endpoints hold it), from Pods and Endpoints; a Service's
    ClusterIP -> (namespace, "", [that Service])."""
    owners: dict[str, tuple[str, str, list[str]]] = {}
    for p in evidence.kind("k8s/Pod"):
        meta, status = p.data.get("metadata") or {}, p.data.get("status") or {}
        ips = [status.get("podIP")] + [x.get("ip") for x in status.get("podIPs") or () if isinstance(x, dict)]
        for ip in filter(None, ips):
            owners[str(ip)] = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""), [])
    for svc_item in evidence.kind("k8s/Service"):  # a ClusterIP names its Service (kube-proxy's virtual IP)
        meta, spec = svc_item.data.get("metadata") or {}, svc_item.data.get("spec") or {}
        for ip in [spec.get("clusterIP"), *(spec.get("clusterIPs") or ())]:
            if ip and ip != "None" and meta.get("name"):
                owners[str(ip)] = (str(meta.get("namespace") or "default"), "", [str(meta["name"])])
    for ep in evidence.kind("k8s/Endpoints"):
        meta = ep.data.get("metadata") or {}
        svc, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
        for subset in ep.data.get("subsets") or ():
            for addr in [*(subset.get("addresses") or ()), *(subset.get("notReadyAddresses") or ())]:
                ip, ref = str(addr.get("ip") or ""), addr.get("targetRef") or {}
                if not ip:
                    continue
                pod = owners.get(ip, (ns, str(ref.get("name") or ""), []))
                owners[ip] = (pod[0], pod[1], [*pod[2], svc])
    for item in evidence.kind("log"):  # ingress-nginx names each upstream address by its "namespace-service-port"
        for r in (item.data.get("records") or ())[:20000]:
            m = _NGINX_UPSTREAM.search(str(r.get("msg") or ""))
            if m:
                for addr in m["addrs"].split(","):
                    ip = addr.strip().rsplit(":", 1)[0]
                    if ip and ip not in owners:
                        owners[ip] = ("", "", [m["name"]])
    return owners


# nginx's error log names the virtual host and the backend address of a failed request
_NGINX_SERVER_UPSTREAM = re.compile(r"server: (?P<host>[\w.\-]+), request: .*?upstream: \"\w+://(?P<ip>[\d.]+):\d+")


def _proxied_hosts(evidence: EvidenceSet, owners: dict[str, tuple[str, str, list[str]]]) -> dict[str, set[str]]:
    """Host name -> the named backends nginx proxied its failed requests to (a gateway's 504 is its backend's)."""
    out: dict[str, set[str]] = defaultdict(set)
    for item in evidence.kind("log"):
        for r in (item.data.get("records") or ())[:20000]:
            m = _NGINX_SERVER_UPSTREAM.search(str(r.get("msg") or ""))
            if m and m["ip"] in owners:
                _, pod, services = owners[m["ip"]]
                out[m["host"]].update(services or ([workload_of_pod(pod)] if pod else []))
    return out


# ingress-nginx's access log: ... [<proxy_upstream_name>] [<alternative>] <upstream_addr> ...
_NGINX_UPSTREAM = re.compile(r"\[(?P<name>[a-z0-9][a-z0-9.\-]*?)-\d+\] \[[^\]]*\] (?P<addrs>\d[\d.:]*(?:, \d[\d.:]*)*)")


def _named_by_cluster(findings: list[Finding], evidence: EvidenceSet) -> list[Finding]:
    """An upstream given as a pod IP is named by its pod and the Services behind it, so a cause on that pod or
    Service (a crash, a wrong targetPort) links to the calls that failed, and the answer names the object."""
    if not findings:
        return findings
    owners = _ip_owners(evidence)
    if not owners:
        return findings
    behind = _proxied_hosts(evidence, owners)
    out = []
    for f in findings:
        ips = [t.split(":", 1)[1] for t in f.tags if t.startswith("upstream:")]
        owner = next((owners[ip] for ip in ips if ip in owners), None)
        host = _host(f.object.removeprefix("upstream ").split(" ", 1)[0])
        if owner is None and behind.get(host):
            backends = sorted(behind[host])
            out.append(
                f.model_copy(
                    update={
                        "tags": list(
                            dict.fromkeys(
                                [*f.tags, *(f"service:{b}" for b in backends), *(f"upstream:{b}" for b in backends)]
                            )
                        ),
                        "mechanism": f"{f.mechanism} Behind {host}: ingress upstream {', '.join(backends)}.",
                    }
                )
            )
            continue
        if owner is None:
            out.append(f)
            continue
        ns, pod, services = owner
        extra = (
            [f"pod:{ns}/{pod}", f"service:{workload_of_pod(pod)}", f"upstream:{workload_of_pod(pod)}"] if pod else []
        ) + [tag for svc in services for tag in (f"service:{svc}", f"upstream:{svc}")]
        names = ", ".join(dict.fromkeys(services))
        who = (
            (f"pod {ns}/{pod}" + (f" (Service {names})" if services else ""))
            if pod
            else (f"Service {ns}/{names}" if ns else f"ingress upstream {names}")
        )
        out.append(
            f.model_copy(
                update={
                    "tags": list(dict.fromkeys([*f.tags, *extra])),
                    "object": f"{f.object} = {who}",
                    "mechanism": f"{f.mechanism} The address is {who}.",
                }
            )
        )
    return out


def _envoy_failures(evidence: EvidenceSet) -> Iterable[tuple[Rec, str, str, str]]:
    """(record, kind, target, status) for each failed call in an Envoy access log (a sidecar's outbound calls)."""
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "HTTP/" not in msg or '" ' not in msg:
                continue
            m = _ENVOY_ACCESS.search(msg)
            if not m:
                continue
            flags = m["flags"].split(",")
            kind = next((_ENVOY_FLAGS[f] for f in flags if f in _ENVOY_FLAGS), None)
            if kind is None and m["code"].startswith("5") and m["flags"] == "-":
                kind = "http_5xx"
            target = m["authority"] if m["authority"] not in ("", "-") else m["upstream"]
            if kind is None or target in ("", "-"):
                continue
            yield Rec(item, r.get("ts"), msg, r.get("line"), "error"), kind, target, m["code"]


# a request id that ties a gateway's lines together: "(bdfa2931-440a-44b2-a41c-ac2b267ab749) Execution failed ..."
_REQUEST_ID = re.compile(r"\b([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b", re.I)
_SENDING = re.compile(
    r"\b(?:sending request to|request to|calling|forwarding to|proxying to|endpoint request uri)\b", re.I
)


def _request_targets(evidence: EvidenceSet) -> dict[str, str]:
    """Request id -> the target a line of that request names ("Sending request to https://api.x/v2/jobs"), for
    failure lines that name only the request (API Gateway's execution log, request-scoped app logs)."""
    out: dict[str, str] = {}
    for item in evidence.kind("log"):
        for r in (item.data.get("records") or ())[:50000]:
            msg = str(r.get("msg") or "")
            if msg.count("-") < 4:  # no request id (a UUID) on the line: the cheap test first
                continue
            if _SENDING.search(msg) and (m := _REQUEST_ID.search(msg)) and (target := _target(msg)):
                out[m.group(1).lower()] = target
    return out


def _target_of_request(msg: str, requests: Callable[[], dict[str, str]]) -> str | None:
    m = _REQUEST_ID.search(msg) if msg.count("-") >= 4 else None
    return requests().get(m.group(1).lower()) if m else None


def _call_failure(msg: str) -> str | None:
    if RATE_LIMITED.search(msg):
        return "rate_limited"
    if KAFKA_BROKER_ERR.search(msg):
        return "broker_error"
    if NET_CIRCUIT_OPEN.search(msg):
        return "circuit_open"
    if CLOUD_5XX.search(msg):
        return "http_5xx"
    if TLS_REMOTE.search(msg):
        return "tls_handshake"
    if HTTP_POOL_WAIT.search(msg):
        return "pool_wait"
    if NET_REFUSED.search(msg):
        return "refused"
    if NET_TIMEOUT.search(msg):
        return "timeout"
    if NET_RESET.search(msg):
        return "reset"
    # a 5xx the service received from a call it made: the message names the call (a URL, "upstream", "calling")
    if UPSTREAM_5XX.search(msg) and _OUTBOUND.search(msg):
        return "http_5xx"
    return None


def _target(msg: str) -> str | None:
    for rx in _TARGET_PATTERNS:
        for m in rx.finditer(msg):
            name = m.group(1).strip("\"'.,:;").rstrip(".")
            word = name.split(":")[0].lower()
            if word in _NOT_A_NAME or word in _LEVEL_WORDS or len(word) < 2 or word.isdigit():
                continue
            if _SOURCE_FILE.search(name):
                continue
            before = msg[max(0, m.start() - 120) : m.start(1)]
            if _DOC_LINK.search(before[-24:]) or _DOC_ARTICLE.search(before):
                continue  # "(see https://curl.haxx.se/libcurl/...)": a documentation link, not the call
            return name
    return None


def _dns_name(msg: str) -> str | None:
    m = re.search(
        rf"(?:lookup|resolve host:?|resolve|ENOTFOUND|UnknownHostException:?|host name)\s+\"?({_NAME})", msg, re.I
    )
    if m:
        return m.group(1).split(":")[0]
    return _target(msg)


def _base(target: str) -> str:
    """'payments-api.shop.svc.cluster.local:8080' -> 'payments-api'; an IP stays as it is."""
    host = target.rsplit(":", 1)[0] if re.search(r":\d+$", target) else target
    if re.fullmatch(r"(?:\d{1,3}\.){3}\d{1,3}", host):
        return host
    if re.match(r"[^.]+\.\d", host):  # a version, not a domain: php8.2-fpm
        return host
    return host.split(".")[0]


def _add(
    groups: dict[str, Failures], key: str, kind: str, rec: Rec, caller: str | None, name: str | None = None
) -> None:
    f = groups.setdefault(key, Failures(key, kind))
    f.recs.append(rec)
    if caller:
        f.callers.add(caller)
    if name:
        f.statuses[name] = f.statuses.get(name, 0) + 1


def _target_tags(target: str) -> list[str]:
    base = _base(target)
    tags = [f"upstream:{base}", f"service:{base}"]
    port = target.rsplit(":", 1)[-1] if ":" in target else ""
    rds = re.match(r"([a-z0-9\-]+)\.[a-z0-9]+\.[a-z0-9\-]+\.rds\.amazonaws\.com", target)
    # an OpenSearch/Elasticsearch domain endpoint: vpc-<domain>-<id>.<region>.es.amazonaws.com
    es = re.match(r"(?:vpc|search)-([a-z0-9\-]+?)-[a-z0-9]{10,}\.[a-z0-9\-]+\.(?:es|aos)\.amazonaws\.com", target)
    if es:
        tags += [f"upstream:{es.group(1)}", f"service:{es.group(1)}"]
    if rds:
        tags.append(f"db:{rds.group(1)}")
    elif port in _DB_PORTS or re.search(r"postgres|pg|mysql|db\b|database|rds", base, re.I):
        tags.append(f"db:{base}")
    return tags


def _refs(recs: list[Rec]) -> list[EvidenceRef]:
    picked = [recs[0]] if len(recs) == 1 else [recs[0], recs[-1]]
    return [ref_of(r) for r in picked]


# ---------------------------------------------------------------- findings

_KIND_WORDS = {
    "timeout": "timed out (ran past the caller's timeout)",
    "refused": "refused the connection",
    "reset": "reset or closed the connection",
    "http_5xx": "answered with 5xx",
    "circuit_open": "failed often enough to open the caller's circuit breaker (calls short-circuited)",
    "broker_error": "could not take or serve the requests (too few in-sync replicas, no partition leader)",
    "rate_limited": "were throttled (our rate limit or quota at the provider is used up)",
    "tls_handshake": "aborted the TLS handshake from its side (a TLS alert that is not about our certificate)",
    "pool_wait": (
        "held the caller's connections so long that its connection pool to it ran dry (calls waited for a connection)"
    ),
}


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
        stopped = now is not None and last is not None and now - last >= STOPPED_AFTER_S
        code = {
            "timeout": "upstream_timeout",
            "refused": "connection_refused",
            "reset": "upstream_reset",
            "http_5xx": "upstream_5xx",
            "circuit_open": "upstream_circuit_open",
            "tls_handshake": "upstream_tls_failure",
            "pool_wait": "upstream_pool_wait",
            "rate_limited": "rate_limited",
            "broker_error": "broker_unavailable",
        }[main.kind]
        # a limit we hit at the provider is our quota running out, not the provider failing
        category = Category.RESOURCE_EXHAUSTION if main.kind == "rate_limited" else Category.DEPENDENCY_FAILURE
        sample = recs[0].msg.strip()[:200]
        mechanism = f"{target} is failing {callers_txt}: calls {how} {span_text(first, last)} (e.g. '{sample}')" + (
            f"; it stopped at {fmt_ts(last)}, long before the newest evidence." if stopped else "."
        )
        wrong = _wrong_port(target, listening) if main.kind == "refused" and not stopped else None
        if wrong:
            code, category = "wrong_upstream_port", Category.CONFIGURATION_ERROR
            mechanism = (
                f"{callers_txt} connects to {target}, but {wrong}: the port in {callers_txt}'s upstream configuration "
                f"is wrong, so every call is refused ({len(main.recs)}x {span_text(first, last)}, e.g. '{sample}')."
            )
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="benign" if stopped else "cause",
                code=code if not stopped else f"{code}_stopped",
                category=Category.HEALTHY if stopped else category,
                title=f"upstream {base} {_KIND_WORDS[main.kind]} for {callers_txt} ({count}x)",
                mechanism=mechanism,
                object=f"upstream {target}" + (f" (called by {callers_txt})" if callers else ""),
                score=0.2 if stopped else min(0.9, 0.55 + count / 400),
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


def _host(target: str) -> str:
    return target.rsplit(":", 1)[0] if re.search(r":\d+$", target) else target


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
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="dns_name_not_found",
                category=Category.CONFIGURATION_ERROR,
                title=f"DNS: {name} does not resolve (NXDOMAIN) for {callers}",
                mechanism=(
                    f"{callers} cannot resolve {name}: the name does not exist (NXDOMAIN / no such host) "
                    f"{len(f.recs)}x {span_text(f.first, f.last)}, while DNS answers otherwise: a wrong or deleted "
                    "service name, namespace or host in configuration."
                ),
                object=f"DNS name {name}",
                score=0.8,
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


_CERT_KINDS = {"Certificate", "CertificateRequest", "Order", "Challenge", "Ingress", "Secret", "Gateway"}


def _cert_is_ours(evidence: EvidenceSet, host: str) -> bool:
    """Whether the evidence shows we issue or serve this host's certificate: a cluster-internal name or an IP, or
    a cert-manager Certificate / Ingress / Secret (object or event) named after the host."""
    name = host.split(":")[0].lower()
    if not name or re.fullmatch(r"[\d.]+", name) or "." not in name or name.endswith(_CLUSTER_SUFFIXES):
        return True
    label = name.split(".")[0]
    for ev in evidence.kind("k8s/Event"):
        inv = ev.data.get("involved") or {}
        text = f"{inv.get('name', '')} {ev.data.get('message', '')}".lower()
        if inv.get("kind") in _CERT_KINDS and (name in text or (len(label) >= 3 and label in text)):
            return True
    kinds = {f"k8s/{k}" for k in _CERT_KINDS}
    return any(item.kind in kinds and name in str(item.data).lower() for item in evidence)


def _tls_findings(tls: dict[str, Failures], now: float | None, evidence: EvidenceSet) -> list[Finding]:
    out = []
    for host, f in tls.items():
        if _stopped(f, now):
            out.append(_stopped_finding(f, "tls_error_stopped", f"TLS to {host}"))
            continue
        callers = ", ".join(sorted(f.callers)) or "clients"
        expired = f.kind == "expired"
        # a provider's own certificate expiring is the provider failing; ours (or one we could fix) is our setting
        theirs = expired and host != "unknown host" and not _cert_is_ours(evidence, host)
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="tls_certificate_expired" if expired else "tls_verification_failed",
                category=Category.DEPENDENCY_FAILURE if theirs else Category.CONFIGURATION_ERROR,
                title=f"TLS to {host}: certificate {'expired' if expired else 'does not verify'} ({len(f.recs)}x)",
                mechanism=(
                    f"{callers} cannot complete TLS with {host}: "
                    + (
                        "its certificate has expired"
                        if expired
                        else "its certificate does not verify (wrong CA, host name or self-signed)"
                    )
                    + f", {len(f.recs)}x {span_text(f.first, f.last)}"
                    + (
                        " - the provider's own certificate (an external host whose certificate nothing here issues "
                        "or serves): the dependency is failing, and the callers are right to refuse it."
                        if theirs
                        else "."
                    )
                ),
                object=f"TLS certificate of {host}",
                score=0.85,
                ts=f.first,
                tags=[f"tls:{_base(host)}", f"upstream:{_base(host)}", *(f"service:{c}" for c in sorted(f.callers))],
                explains=["errors", "http_5xx", "latency"],
                evidence=_refs(f.recs),
                actions=[
                    Action(
                        description=f"Show the certificate {host} serves and its dates",
                        command=(
                            f"openssl s_client -connect {_host(host)}:443 -servername {_host(host)} </dev/null "
                            "2>/dev/null | openssl x509 -noout -subject -issuer -dates"
                        ),
                    ),
                    Action(
                        description="cert-manager certificates that are not ready",
                        command="kubectl get certificates -A | grep -v True",
                    ),
                ],
            )
        )
    return out


def _probe_findings(evidence: EvidenceSet) -> list[Finding]:
    out = []
    for probe in evidence.kind("http/probe"):
        d = probe.data
        url = str(d.get("url") or probe.object)
        host = re.sub(r"^[a-z]+://", "", url).split("/")[0]
        days = d.get("tls_days_left")
        err = str(d.get("error") or "")
        status = d.get("status")
        tags = [f"upstream:{_base(host)}", f"service:{_base(host)}"]
        if (isinstance(days, int | float) and days <= 0) or TLS_EXPIRED.search(err):
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="tls_certificate_expired",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"TLS certificate of {host} expired",
                    mechanism=(
                        f"the certificate served by {host} has expired (tls_days_left {days}); clients that verify "
                        "it fail."
                    ),
                    object=f"TLS certificate of {host}",
                    score=0.9,
                    ts=probe.ts,
                    tags=[f"tls:{_base(host)}", *tags],
                    explains=["errors", "http_5xx", "probe_failed"],
                    evidence=[
                        EvidenceRef(
                            item=probe.id,
                            field="tls_days_left" if days is not None else "error",
                            value=days if days is not None else err,
                        )
                    ],
                    actions=[
                        Action(
                            description="Confirm the dates",
                            command=(
                                f"openssl s_client -connect {host if ':' in host else host + ':443'} -servername "
                                f"{host.split(':')[0]} </dev/null 2>/dev/null | openssl x509 -noout -dates"
                            ),
                        )
                    ],
                )
            )
        elif isinstance(days, int | float) and days <= TLS_WARN_DAYS:
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="benign",
                    code="tls_expiring_soon",
                    category=Category.HEALTHY,
                    title=f"TLS certificate of {host} expires in {days:g} days",
                    mechanism=f"{host}'s certificate is still valid ({days:g} days left): not failing now, renew it soon.",  # noqa: E501 (an exact command or data line reads better whole)
                    object=f"TLS certificate of {host}",
                    score=0.3,
                    ts=probe.ts,
                    tags=[f"tls:{_base(host)}", *tags],
                    evidence=[EvidenceRef(item=probe.id, field="tls_days_left", value=days)],
                )
            )
        if err and not TLS_EXPIRED.search(err):
            kind = _call_failure(err) or ("dns" if DNS_NXDOMAIN.search(err) or DNS_TEMPORARY.search(err) else "error")
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code={
                        "refused": "connection_refused",
                        "timeout": "upstream_timeout",
                        "dns": "dns_name_not_found",
                    }.get(kind, "probe_failed"),
                    category=Category.CONFIGURATION_ERROR if kind == "dns" else Category.DEPENDENCY_FAILURE,
                    title=f"probe of {url} failed: {err[:80]}",
                    mechanism=f"a probe of {url} failed: {err[:200]}.",
                    object=f"endpoint {url}",
                    score=0.7,
                    ts=probe.ts,
                    tags=tags,
                    explains=["errors", "http_5xx", "latency"],
                    evidence=[EvidenceRef(item=probe.id, field="error", value=err[:300])],
                    actions=[
                        Action(description="Probe it again, verbosely", command=f"curl -sv -m 10 -o /dev/null {url}")
                    ],
                )
            )
        elif isinstance(status, int) and status >= 500:
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="symptom",
                    code="http_5xx",
                    category=Category.DEPENDENCY_FAILURE,
                    title=f"{url} answers {status}",
                    mechanism=f"{url} answered HTTP {status} to a probe.",
                    object=f"endpoint {url}",
                    score=0.5,
                    ts=probe.ts,
                    tags=tags,
                    evidence=[EvidenceRef(item=probe.id, field="status", value=status)],
                )
            )
    return out


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


def _access_log_5xx(evidence: EvidenceSet, now: float | None) -> list[Finding]:
    """5xx answers in access logs (nginx/envoy/ALB lines with a status): a symptom of the service behind."""
    out = []
    for item in evidence.kind("log"):
        total = 0
        bad: list[Rec] = []
        statuses: dict[str, int] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "HTTP/" not in msg and "status" not in msg and "code" not in msg:
                continue
            m = _ACCESS_STATUS.search(msg)
            if not m:
                continue
            code = next(g for g in m.groups() if g)
            total += 1
            if code.startswith("5"):
                bad.append(Rec(item, r.get("ts"), msg, r.get("line"), None))
                statuses[code] = statuses.get(code, 0) + 1
        if len(bad) < HTTP_5XX_MIN or len(bad) < HTTP_5XX_SHARE * total:
            continue
        svc = service_of(item) or item.object
        last = max((r.ts for r in bad if r.ts is not None), default=None)
        if now is not None and last is not None and now - last >= STOPPED_AFTER_S:
            continue
        listing = ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items()))
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="symptom",
                code="http_5xx",
                category=Category.DEPENDENCY_FAILURE,
                title=f"{svc}: {len(bad)} of {total} requests answered 5xx",
                mechanism=(
                    f"{svc} answered {len(bad)} of {total} requests with 5xx ({listing}) {span_text(bad[0].ts, last)}."
                ),
                object=svc,
                score=min(0.8, 0.3 + len(bad) / total),
                ts=bad[0].ts,
                tags=[f"service:{svc}"],
                evidence=_refs(bad),
            )
        )
    return out


def _stopped(f: Failures, now: float | None) -> bool:
    return now is not None and f.last is not None and now - f.last >= STOPPED_AFTER_S


def _stopped_finding(f: Failures, code: str, what: str) -> Finding:
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="benign",
        code=code,
        category=Category.HEALTHY,
        title=f"{what}: failures stopped",
        mechanism=(
            f"{what} failed {len(f.recs)}x {span_text(f.first, f.last)} and then stopped, long before "
            "the newest evidence."
        ),
        object=what,
        score=0.2,
        ts=f.first,
        tags=[f"upstream:{_base(f.target)}"],
        evidence=_refs(f.recs),
    )


# ---------------------------------------------------------------- credentials and permissions refused
_RBAC = re.compile(r'is forbidden: User "(?P<user>[^"]+)" cannot (?P<verb>\w+) resource "(?P<res>[^"]+)"')
_SECRET_NAME = re.compile(r"\b([A-Z][A-Z0-9]*_)+(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)\b")


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def access_denied(evidence: EvidenceSet) -> list[Finding]:
    """Calls the other side refused because of who made them (401/403, Kubernetes RBAC, AWS AccessDenied, gRPC
    PERMISSION_DENIED, invalid or expired keys and tokens): the credentials or permissions are set wrong, which
    no retry or scaling fixes. One finding per target (or RBAC subject) with at least MIN_FAILURES refusals."""
    now = now_of(evidence)
    groups: dict[str, list[Rec]] = {}
    for rec in signature_records(evidence):
        if not AUTH_DENIED.search(rec.msg):
            continue
        m = _RBAC.search(rec.msg)
        key = f"serviceaccount {m['user']}" if m else (_target(rec.msg) or service_of(rec.item) or rec.item.object)
        groups.setdefault(key, []).append(rec)
    out: list[Finding] = []
    for target, recs in groups.items():
        if len(recs) < MIN_FAILURES:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        first, last = recs[0].ts, recs[-1].ts
        stopped = now is not None and last is not None and now - last >= STOPPED_AFTER_S
        callers = sorted({c for r in recs if (c := service_of(r.item))})
        m = _RBAC.search(recs[-1].msg)
        sample = " ".join(recs[-1].msg.split())
        hit = AUTH_DENIED.search(sample)
        shown = sample[max(0, hit.start() - 60) :][:220] if hit else sample[:220]
        secret = next((s.group(0) for r in recs for s in [_SECRET_NAME.search(r.msg)] if s), None)
        if m:
            what = (
                f"{m['user']} is not allowed to {m['verb']} {m['res']} (Kubernetes RBAC: the API server answers "
                "forbidden); its Role/ClusterRole or binding lacks that permission"
            )
        else:
            what = (
                f"{target} refuses the calls of {', '.join(callers) or 'its caller'} as unauthorised "
                f"({'the credential ' + secret if secret else 'the API key, token or permissions'} it sends "
                "is wrong, expired or lacks access)"
            )
        out.append(
            Finding(
                analyzer="access_denied",
                domain=Domain.NETWORK,
                role="benign" if stopped else "cause",
                code="access_denied_stopped" if stopped else "access_denied",
                category=Category.HEALTHY if stopped else Category.CONFIGURATION_ERROR,
                title=f"{target}: access denied {len(recs)}x",
                mechanism=f"{what}: '{shown}' x{len(recs)} {span_text(first, last)}.",
                object=target,
                score=0.8,
                ts=first,
                tags=_target_tags(target) + [f"service:{c}" for c in callers],
                explains=[
                    "errors",
                    "exception",
                    "http_5xx",
                    "upstream_5xx",
                    "job_failed",
                    "crash_loop",
                    "pod_restarts",
                ],
                evidence=_refs(recs),
                actions=[
                    Action(
                        description="Check who the caller authenticates as and what it may do",
                        command=(
                            f"kubectl auth can-i {m['verb']} {m['res']} --as={m['user']}"
                            if m
                            else f"grep -n -m 5 -E '401|403|denied|forbidden' <{recs[0].item.object} log>"
                        ),
                    )
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- our own rate limiter refusing clients
# nginx limit_req / limit_conn ("limiting requests, excess: 21.064 by zone "api_per_ip", client: 203.0.113.14"),
# Envoy's local rate limit (response flag RL, details local_rate_limited)
_OWN_LIMIT = re.compile(
    r"limiting (?:requests|connections)(?:, excess: [\d.]+)? by zone \"(?P<zone>[^\"]+)\"|local_rate_limited|"
    r"\" 429 RL\b"
)
_CLIENT = re.compile(r"\bclient: ([\d.:a-fA-F]+)|^(\d{1,3}(?:\.\d{1,3}){3}) ")
LIMITED_CLIENTS = 5  # distinct clients refused: fewer is the limiter stopping an abuser, as it should


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def own_rate_limits(evidence: EvidenceSet) -> list[Finding]:
    """Our own proxy's rate limit refusing many different clients: the limit is set below the real traffic (a
    configuration error, often right after a change to it); a few clients refused is the limit doing its job."""
    now = now_of(evidence)
    groups: dict[str, list[Rec]] = {}
    clients: dict[str, set[str]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "limit" not in msg and " RL" not in msg:
                continue
            m = _OWN_LIMIT.search(msg)
            if not m:
                continue
            zone = m["zone"] or "local rate limit"
            groups.setdefault(zone, []).append(Rec(item, r.get("ts"), msg, r.get("line"), "error"))
            c = _CLIENT.search(msg)
            if c:
                clients.setdefault(zone, set()).add(c.group(1) or c.group(2))
    out: list[Finding] = []
    for zone, recs in groups.items():
        if len(recs) < MIN_FAILURES * 3:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        n_clients = len(clients.get(zone, ()))
        many = n_clients >= LIMITED_CLIENTS or not clients.get(zone)
        stopped = now is not None and recs[-1].ts is not None and now - recs[-1].ts >= STOPPED_AFTER_S
        svcs = sorted({s for r in recs if (s := service_of(r.item))})
        cause = many and not stopped
        out.append(
            Finding(
                analyzer="own_rate_limits",
                domain=Domain.NETWORK,
                role="cause" if cause else "benign",
                code="rate_limit_too_low" if cause else "rate_limit_working",
                category=Category.CONFIGURATION_ERROR if cause else Category.HEALTHY,
                title=f"limit_req zone {zone} refuses {len(recs)} requests from {n_clients} clients",
                mechanism=(
                    f'our own rate limit (nginx limit_req zone "{zone}") refused {len(recs)} requests from '
                    f"{n_clients or 'many'} different clients {span_text(recs[0].ts, recs[-1].ts)}"
                    + (
                        ": the limit is set below the real traffic (check the zone's rate= and burst= and their "
                        "last change)."
                        if cause
                        else ": a few clients over the limit, which is the limiter doing its job."
                    )
                ),
                object=f"rate limit zone {zone}",
                score=0.8 if cause else 0.2,
                ts=recs[0].ts,
                tags=[f"service:{s}" for s in svcs] + [f"zone:{zone}"],
                explains=["http_5xx", "errors", "http_4xx", "error_rate"] if cause else [],
                evidence=_refs(recs),
                actions=[
                    Action(
                        description="The zone's configured rate and burst",
                        command=f"nginx -T 2>/dev/null | grep -nE 'limit_req(_zone)?.*{zone}'",
                    )
                ],
            )
        )
    return out
