"""Reading failure lines into (caller, target, kind): the target named in the message, in an Envoy or nginx
access line, behind an IP address a pod or node owns, or behind a request id logged when it was sent."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable

from diagnosis.analyzers._common import (
    CLOUD_5XX,
    HTTP_POOL_WAIT,
    KAFKA_BROKER_ERR,
    NET_CIRCUIT_OPEN,
    NET_REFUSED,
    NET_RESET,
    NET_TIMEOUT,
    RATE_LIMITED,
    TLS_REMOTE,
    UPSTREAM_5XX,
    Rec,
    signature_records,
    workload_of_pod,
)
from diagnosis.analyzers.network._shared import Failures, _base, _host
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Finding

# Words that follow "upstream" in messages without naming it (nginx: "upstream timed out", envoy: "upstream
# connect error").
_NOT_A_NAME = {
    # fields an error prints as "Name:value" ("Time:2024-11-27T14:28:19Z", "RequestId:3a31..."): not a host:port
    "time",
    "date",
    "requestid",
    "status",
    "errorcode",
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
    "at",  # libpq: connection to server at "db.example" (10.0.0.5), port 5432 failed
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
    r"\b(?:see|more info(?:rmation)?|docs?|documentation|details|help|learn more|troubleshoot(?:ing)?|"
    r"background on this error)\W{0,3}"
    r"(?:at\W{1,3})?(?:[a-z]+://)?$",
    re.I,
)
# "(Please take a look at this article for some common client-side issues that can cause timeouts: https://...)"
_DOC_ARTICLE = re.compile(
    r"\b(?:article|guide|faq|knowledge ?base|runbook|wiki)\b[^()\n]{0,90}[:\s]\s*(?:[a-z]+://)?$", re.I
)
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*(?::\d{2,5})?"
# Istio/Envoy cluster: outbound|8080||payments.shop.svc
_ENVOY_CLUSTER = re.compile(r"outbound\|\d+\|[\w.\-]*\|([A-Za-z0-9][\w.\-]*)")
_TARGET_PATTERNS = [
    _ENVOY_CLUSTER,
    # pgx (Go's PostgreSQL driver): "failed to connect to `user=docs database=docs`: 10.96.1.7:5432 (pgvector-rw...)"
    re.compile(r"failed to connect to `[^`]*`:\s*(?:\d{1,3}\.){3}\d{1,3}:\d+\s+\(([\w.\-]+)\)"),
    re.compile(r"failed to connect to `[^`]*`:\s*([\w.\-]+:\d{2,5})"),
    # a unix socket names its server by the socket's file: fastcgi://unix:/run/php/php8.2-fpm.sock -> php8.2-fpm
    re.compile(r"(?:[a-z]+://)?unix:(?:[^\s\":]*/)?([A-Za-z0-9][\w.\-]*?)(?:\.sock(?:et)?)?(?=[\s\":|]|$)"),
    re.compile(rf"upstream:\s*\"?(?:[a-z]+://)?({_NAME})"),  # nginx error log: upstream: "http://10.0.0.5:8080/x"
    # a log shipper's output names the store it sends to: Vector's sink{... component_type=loki}, Fluent Bit's
    # [output:es:es.0]
    re.compile(r"component_kind=\"sink\"[^}]*component_type=(\w+)"),
    re.compile(r"\[output:(\w+):"),
    re.compile(rf"\{{Addr: \"({_NAME})\""),  # grpc-go: failed to connect to {Addr: "tempo:4317", ServerName: ...}
    # a proxy's JSON access log names the server it passed the request to (its remote_addr is the client)
    re.compile(rf"\"upstream_(?:addr|host)\"\s*:\s*\"(?:[a-z]+://)?({_NAME})"),
    # structured attributes that name the peer (OpenTelemetry, grpc-go, logfmt): peer.service=..., target=...,
    # grpc-java's remote_addr=inventory.stock.svc/10.0.4.3:9090
    re.compile(
        rf"\b(?:peer\.service|peer\.address|net\.peer\.name|server\.address|grpc\.target|target|remote_addr|"
        rf"upstream_service|dependency|downstream|(?:upstream|target|remote|server)\.(?:host|url))[\"']?\s*[=:]\s*"
        rf"[\"']?(?:[a-z]+://)?({_NAME})"
    ),
    re.compile(rf"upstream(?:_addr|_host|_cluster)?[=\s:]+\"?(?:[a-z]+://)?({_NAME})", re.I),
    re.compile(rf"(?:lookup|resolve host:?|resolve|ENOTFOUND|UnknownHostException:?|host name)\s+\"?({_NAME})", re.I),
    re.compile(rf"(?:https?|grpcs?|tcp|postgres(?:ql)?|redis|amqps?|mysql|mongodb)://(?:[^@/\s\"]+@)?({_NAME})"),
    re.compile(rf"dial tcp ({_NAME}:\d+)"),
    # HAProxy's own checks and state changes name the server after its backend: "server pay_gw/pay-gw-03"
    re.compile(r"\b(?:[Hh]ealth check for (?:backup )?server|[Ss]erver) [\w.\-]+/([\w.\-]+) (?:failed|is DOWN)"),
    # resilience4j "CircuitBreaker 'payments' is OPEN", Hystrix "PaymentsCommand short-circuited", HAProxy
    # "backend payments has no server available", urllib3 "HTTPSConnectionPool(host='api.stripe.com', port=443)"
    re.compile(r"CircuitBreaker '([^']+)'"),
    # .NET: a named HttpClient's resilience pipeline (Microsoft.Extensions.Http.Resilience, Polly) and its logger
    # category name the client: Source: 'ShipRight-standard//Standard-Retry', System.Net.Http.HttpClient.X.
    re.compile(r"Source: '([A-Za-z][\w.\-]*?)(?:-(?:standard|hedging))?//?[\w\-]*(?:Retry|Hedging|Timeout|Breaker)'"),
    re.compile(r"System\.Net\.Http\.HttpClient\.([A-Za-z][\w\-]*)\.(?:ClientHandler|LogicalHandler)"),
    re.compile(rf"({_NAME}) (?:short-circuited|has no server available)"),
    re.compile(rf"circuit(?: breaker)? (?:for|on|to) \"?'?({_NAME})", re.I),
    re.compile(rf"host=['\"]?({_NAME})['\"]?"),
    # a JSON error object naming the host it called: {"code":"ECONNRESET","host":"api.sendgrid.com","path":"/v3/..."}
    re.compile(r"\"host\"\s*:\s*\"([A-Za-z0-9][\w\-]*(?:\.[\w\-]+)+(?::\d{2,5})?)\""),
    # a business field naming the external provider called: weaker than a host, URL or DNS name in the same line
    re.compile(rf"\b(?:provider|vendor)[\"']?\s*[=:]\s*[\"']?({_NAME})"),
    re.compile(
        rf"(?:connect(?:ing)? to|connection to|calling|call to|request to|requests? to|host|server at|server)\s+"
        rf"(?:(?:the )?(?:server|host) (?:at )?)?[\"'`]?(?:[a-z]+://)?({_NAME})",
        re.I,
    ),
    # Samba/winbind naming the domain controller it talks to: "Remote machine dc02.corp pipe \netlogon ... returned
    # NT_STATUS_IO_TIMEOUT", "SPNEGO login to dc02.corp failed", "connecting to DC dc02.corp"
    re.compile(rf"\b(?:Remote machine|login to|to DC) ({_NAME})"),
    # cloud SDKs name the service or the operation: "(Service: S3, Status Code: 503", "operation error
    # DynamoDB: PutItem", botocore "when calling the PutObject operation"
    re.compile(r"\(Service: ([\w\-]+)[;,]"),
    # a Google Cloud resource path names the API it lives in: projects/p/topics/t is Pub/Sub's
    re.compile(r"\bprojects/[\w\-]+/(topics|subscriptions)/[\w.\-]+"),
    re.compile(r"operation error ([\w\-]+): \w+"),
    re.compile(r"when calling the (\w+) operation"),
    # a cloud SDK's namespace names the service: Microsoft.Azure.Cosmos.CosmosException, Azure.Storage.Blobs...,
    # software.amazon.awssdk.services.s3..., com.azure.cosmos..., google.cloud.bigquery...
    re.compile(
        r"\b(?:Microsoft\.Azure|Azure|software\.amazon\.awssdk\.services|com\.azure|google\.cloud)\.([A-Za-z]\w+)\."
    ),
    # a messaging client's package names the system it talks to (org.apache.pulsar.client..., io.nats...)
    re.compile(r"\borg\.apache\.(pulsar|kafka|activemq|rocketmq)\.client\b|\bio\.(nats)\.client\b"),
    re.compile(r"\b([A-Za-z][A-Za-z0-9_.\-]*:\d{2,5}|(?:\d{1,3}\.){3}\d{1,3}:\d{2,5})\b"),
    # a gRPC full method names the service called: "/inventory.v1.Inventory/Reserve" -> inventory.v1.Inventory
    re.compile(r"(?:^|[\s\[\"'=(])/((?:[a-z_][\w]*\.)+[A-Z]\w*)/[A-Z]\w*"),
    re.compile(r"\bgrpc\.service[=:]\s*\"?((?:[a-z_][\w]*\.)*[A-Z]\w*)"),
    # "tax quote returned HTTP 503 from rest.avatax.com", "got 502 from payments.internal"
    re.compile(rf"\b(?:returned|answered|got|received) (?:HTTP |status )?5\d\d (?:\w+ )?from ({_NAME})", re.I),
    # "token exchange with auth0 failed", "sync with ledger failed"
    re.compile(rf"\b(?:exchange|call|request|session|handshake|sync|communication) with ({_NAME}) failed", re.I),
    # last: a vendor SDK's error class names the vendor (StripeAPIError, TwilioRestException, StripeConnectionError)
    re.compile(
        r"\b(?!(?:Http|Rest|Web|Api|Service|Client|Net|Socket|Connection|Grpc|Rpc|Remote|Request|Response|Base|"
        r"Internal|Unknown|Generic|Transport|Timeout|Read|Write|Io|Url|Json|Xml)(?=[A-Z]))([A-Z][a-z]{2,})"
        r"(?:API|Api|Rest|Connection|Service)\w*(?:Error|Exception)\b"
    ),
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
    r"\"\s*[A-Z]+ \S+ HTTP/[\d.]+\"\s+(\d{3})\b|\bstatus[\"'=:\s]+(\d{3})\b|\bcode[=:](\d{3})\b|"
    # HAProxy's HTTP log: the timers TR/Tw/Tc/Tr/Ta, then the status
    r"\s(?:-?\d+/){4}\+?-?\d+ (\d{3})\s"
)
_OUTBOUND = re.compile(
    r"upstream|backend|dependency|calling|call to|request to|from|://|\"host\"\s*:\s*\"|"
    # a client's logfmt line naming the server it sent to, Go clients' "server returned HTTP status 500"
    r"\bhost=[\w\[]|\bserver returned\b|\berror sending\b|\bHTTP request failed\b|"
    # a client's request that failed: "POST /v2/charges failed: 503 Service Unavailable"
    r"\b(?:GET|POST|PUT|PATCH|DELETE) /\S* failed\b|"
    # a log shipper's output sending to its store (Vector's sinks, Fluent Bit's outputs)
    r"component_kind=\"sink\"|\[output:\w+:",
    re.I,
)
_DB_PORTS = {"5432": "postgres", "3306": "mysql", "6379": "redis", "27017": "mongodb", "9042": "cassandra"}
_LEVEL_WORDS = {"error", "warn", "warning", "info", "debug", "fatal", "err"}
# words that precede "calling"/"request to" in prose without naming the caller ("failed while calling x")
_NOT_A_CALLER = re.compile(
    r"while|when|after|before|during|failed|errors?|the|and|then|retry|retrying|attempt|for|with|from|upon|on|by|"
    r"timeout|timed"
)


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
# UO is the caller's own sidecar refusing: its circuit breaker's connection or request limit to that upstream is full
_ENVOY_FLAGS = {"UT": "timeout", "UF": "refused", "URX": "refused", "UH": "refused", "UO": "pool_wait",
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
        ips += [ip.rsplit(":", 1)[0] for ip in ips if re.fullmatch(r"[\d.]+:\d+", ip)]  # an address with its port
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
            # the upstream cluster names the service called; at an ingress gateway the authority is the site's
            # public host, in a sidecar the same service
            cluster = _ENVOY_CLUSTER.search(msg)
            target = cluster[1] if cluster else m["authority"] if m["authority"] not in ("", "-") else m["upstream"]
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


# a server's own deadline on the requests it serves: Rack::Timeout, gunicorn's WORKER TIMEOUT, a handler timeout
_OWN_DEADLINE = re.compile(
    r"Rack::Timeout|RequestTimeoutException \(Request ran for|Request ran for longer than|WORKER TIMEOUT|"
    r"http: Handler timeout|TimeoutHandler",
)


# a database statement that waited on a row lock past its limit: lock contention inside the database, which the
# lock analyzers read, not a call to the host the line names
_LOCK_WAIT = re.compile(
    r"Lock wait timeout exceeded|Error 1205\b|canceling statement due to lock timeout|lock_timeout|"
    r"could not obtain lock on row|Deadlock found when trying to get lock|deadlock detected",
    re.I,
)


# a platform router's line about a request to our own app (Heroku's H12 "Request timeout": the dyno did not
# answer in 30 s): its host= is the app's own domain, not a service the app called
_OWN_ROUTER = re.compile(r"heroku\[router\]: at=(?:error|info)")


_SDK_5XX = re.compile(r"[A-Z]\w*(?:Error|Exception)\b[^\n]{0,300}: status 5\d\d\b")
# a .NET resilience pipeline's attempt that got a 5xx from the server it called (Polly: "Execution attempt. Source:
# 'northwind-rates/Standard-Retry', ... Result: '503'") or gave up on it ("Result: 'TimeoutRejectedException'")
_POLLY_RESULT = re.compile(r"Execution attempt\. Source: '[^']+', .*?Result: '(5\d\d|[A-Za-z.]*Timeout\w*)'")


# a client that could not open its connection and does not say why ("error connecting to server `smpp1.x' at port
# `2775'", "Couldn't connect to server", "failed to connect to db-1"): the server did not take it
_CONNECT_FAILED = re.compile(
    r"(?:could ?n[o']t|can ?n[o']t|unable to|failed to|error) (?:re)?connect(?:ing)? to\b", re.I
)


# the network has no path to the host: it is down, or cut off from its segment (the kernel's EHOSTUNREACH, after ARP
# went unanswered); not a service that refused or failed
HOST_UNREACHABLE = re.compile(r"no route to host|EHOSTUNREACH|host is unreachable", re.I)


# a pooler closing a connection it keeps by its own schedule (pgbouncer's server_idle_timeout, server_lifetime,
# client_idle_timeout): routine housekeeping, not a call that timed out
_POOLER_HOUSEKEEPING = re.compile(
    r"closing because: (?:server idle timeout|client_idle_timeout|client idle timeout|server lifetime|"
    r"client close request)"
)


def _call_failure(msg: str) -> str | None:
    if _LOCK_WAIT.search(msg) or _OWN_ROUTER.search(msg) or _POOLER_HOUSEKEEPING.search(msg):
        return None
    if RATE_LIMITED.search(msg):
        return "rate_limited"
    if KAFKA_BROKER_ERR.search(msg):
        return "broker_error"
    if NET_CIRCUIT_OPEN.search(msg):
        return "circuit_open"
    if CLOUD_5XX.search(msg):
        return "http_5xx"
    polly = _POLLY_RESULT.search(msg) if "Execution attempt" in msg else None
    if polly:
        return "http_5xx" if polly.group(1)[0] == "5" else "timeout"
    if TLS_REMOTE.search(msg):
        return "tls_handshake"
    if HTTP_POOL_WAIT.search(msg) or "{overflow}" in msg:  # Envoy's circuit breaker: the caller's own pool is full
        return "pool_wait"
    if HOST_UNREACHABLE.search(msg):
        return "unreachable"
    if NET_REFUSED.search(msg):
        # "failed to connect to X: dial error: timeout" says how the connect failed: it timed out
        refused = re.search(r"refused|unreachable|no route|UNAVAILABLE|no server available", msg, re.I)
        return "timeout" if not refused and NET_TIMEOUT.search(msg) else "refused"
    if NET_TIMEOUT.search(msg):
        # the service's own request deadline killing a request it was still working on is not a call that failed
        return None if _OWN_DEADLINE.search(msg) else "timeout"
    if NET_RESET.search(msg):
        return "reset"
    if _CONNECT_FAILED.search(msg):
        return "refused"
    # a 5xx the service received from a call it made: the message names the call (a URL, "upstream", "calling"),
    # or a client SDK's error carries the server's status ("StripeAPIError: ... (status 500)")
    if (UPSTREAM_5XX.search(msg) and _OUTBOUND.search(msg)) or _SDK_5XX.search(msg):
        return "http_5xx"
    return None


# the API a Google Cloud resource path belongs to
_GCP_APIS = {"topics": "pubsub.googleapis.com", "subscriptions": "pubsub.googleapis.com"}


def _target(msg: str) -> str | None:
    for rx in _TARGET_PATTERNS:
        for m in rx.finditer(msg):
            name = m.group(1).strip("\"'.,:;").rstrip(".")
            if name in _GCP_APIS and m.group(0).startswith("projects/"):
                return _GCP_APIS[name]
            word = name.split(":")[0].lower()
            if word in _NOT_A_NAME or word in _LEVEL_WORDS or len(word) < 2 or word.isdigit():
                continue
            if _SOURCE_FILE.search(name) or (":" in name and m.start(1) > 0 and msg[m.start(1) - 1] in "._"):
                continue  # a source file's line (_http_client.js:661), or the tail of a longer word
            if ":" in name and "_" in word and "." not in word and not word.startswith("_"):
                continue  # a key:value pair (protobuf text, "max_resolution_window:60000"): host names have no "_"
            if msg[m.end(1) : m.end(1) + 2] == "::" or name.endswith(":"):
                continue  # a Rust module path (tracing's target=apollo_router::query_planner), not a host
            if ":" in name and re.match(r":\d", msg[m.end(1) : m.end(1) + 2]):
                continue  # a stack frame's file:line:column (node:internal/process/task_queues:95:5)
            if name.isupper() and len(name) <= 5 and re.match(r" [a-z]{3,}", msg[m.end(1) : m.end(1) + 8]):
                continue  # an acronym before a noun ("connect to SMS center", "DB server"): a kind, not a name
            before = msg[max(0, m.start() - 120) : m.start(1)]
            if _DOC_LINK.search(before[-48:]) or _DOC_ARTICLE.search(before):
                continue  # "(see https://curl.haxx.se/libcurl/...)": a documentation link, not the call
            return name
    return None


_DNS_NAME = re.compile(
    rf"(?:(?:lookup|resolve host:?|resolve|ENOTFOUND|UnknownHostException:?|host name)\s+|dns:///)\"?({_NAME})", re.I
)
_NOT_A_HOST = frozenset({"name", "names", "failed", "error", "host", "hostname", "address", "the", "of", "for", "to"})


def _dns_name(msg: str) -> str | None:
    """The name that did not resolve: a dotted or hyphenated name after the resolver's words first ('Failed to
    resolve name' and 'lookup failed' are words, not names), else a single-label service name."""
    names = [m.group(1).split(":")[0] for m in _DNS_NAME.finditer(msg)]
    named = [n for n in names if n.lower().rstrip(".") not in _NOT_A_HOST]
    hostlike = [n for n in named if "." in n.rstrip(".") or "-" in n]
    if hostlike or named:
        return (hostlike or named)[0]
    return _target(msg)


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
