"""What the domain analyzers share: the evidence set's "now", log records and their templates, object names."""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from diagnosis.evidence import EvidenceSet
from diagnosis.links import workload_of_pod
from diagnosis.model import EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import evidence_now, fmt_ts

# ---------------------------------------------------------------- now


# one "now" and one time format for every analyzer (diagnosis/timeline.py); the names stay for the callers here
now_of = evidence_now


# ---------------------------------------------------------------- log records

_LEVEL_WORDS = {
    "error": "error",
    "err": "error",
    "fatal": "fatal",
    "critical": "fatal",
    "crit": "fatal",
    "panic": "fatal",
    "emerg": "fatal",
    "alert": "fatal",
    "warn": "warn",
    "warning": "warn",
    "info": "info",
    "notice": "info",
    "debug": "debug",
    "trace": "debug",
}
_LEVEL_IN_TEXT = re.compile(
    r"(?:^|[\s\[\"'=|:])(ERROR|ERR|FATAL|CRITICAL|CRIT|PANIC|EMERG|WARN|WARNING|INFO|NOTICE|DEBUG|TRACE)(?:$|[\s\]\"':|])"
)
_ERRORISH = re.compile(
    r"\b(Traceback \(most recent call last\)|Exception|panic:|Unhandled|unhandled|Out of memory|oom-kill)|"
    # a command-line program's own last words, first on its line (restic's, and cobra CLIs', "Fatal: ...")
    r"(?:^|\]: )(?:Fatal|Error): ",
)


def level_of(record: dict[str, Any]) -> str | None:
    """The record's level, lower-case; read from the text (`ERROR`, `level=error`, postgres `FATAL:`) when the
    parser left it unset."""
    lvl = record.get("level")
    if isinstance(lvl, str) and lvl:
        return _LEVEL_WORDS.get(lvl.lower(), lvl.lower())
    msg = record.get("msg") or ""
    m = _LEVEL_IN_TEXT.search(msg[:200])
    if m:
        return _LEVEL_WORDS.get(m.group(1).lower())
    m2 = re.search(r"\blevel=\"?(\w+)", msg[:200])
    if m2:
        return _LEVEL_WORDS.get(m2.group(1).lower())
    if _ERRORISH.search(msg):
        return "error"
    return None


def is_error(record: dict[str, Any]) -> bool:
    return level_of(record) in ("error", "fatal")


@dataclass
class Rec:
    item: EvidenceItem
    ts: float | None
    msg: str
    line: int | None
    level: str | None


# A burst of failures is over when its own log went on this long without one, where at the burst's rate this many
# would have come (a Poisson count of 20 comes out 0 about once in 500 million): a restart's refusals that ended.
BURST_MIN_FAILURES = 5
BURST_QUIET_S = 120.0
BURST_EXPECTED = 20.0


def burst_ended(count: int, first: float, last: float, log_end: float) -> bool:
    """Whether `count` failures from `first` to `last` were a burst that ended: their log goes on to `log_end`,
    quiet, for at least as long as the burst lasted (and 2 minutes), where at the burst's own rate 20 or more
    failures were due."""
    if count < BURST_MIN_FAILURES:
        return False
    quiet, lasted = log_end - last, max(last - first, 1.0)
    return quiet >= max(BURST_QUIET_S, lasted) and count / lasted * quiet >= BURST_EXPECTED


def span_calls(item: EvidenceItem) -> Iterator[tuple[int, list[Any], list[Any]]]:
    """(index of the parent, parent, child) for every span of a `trace/spans` item whose parent is in the same
    trace (spans are [trace, id, parent, service, operation, duration_ms, ...])."""
    spans = item.data.get("spans") or ()
    ids = {(str(s[0]), str(s[1])): (i, s) for i, s in enumerate(spans)}
    for s in spans:
        hit = ids.get((str(s[0]), str(s[2]))) if s[2] else None
        if hit is not None:
            yield hit[0], hit[1], s


def log_records(evidence: EvidenceSet) -> Iterator[Rec]:
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            yield Rec(item, r.get("ts"), str(r.get("msg") or ""), r.get("line"), level_of(r))


def records_with(evidence: EvidenceSet, hints: tuple[str, ...]) -> Iterator[Rec]:
    """The log records whose message holds one of `hints` (plain substrings): a rule's cheap first test, so that
    the level of every other line of a large bundle is never worked out."""
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if any(h in msg for h in hints):
                yield Rec(item, r.get("ts"), msg, r.get("line"), level_of(r))


# a setting a unified diff changed: "-maxmemory-policy allkeys-lru" then "+maxmemory-policy noeviction" (ansible
# --diff, git diff, a config management report); "key value", "key = value" and "key: value"
_DIFF_LINE = re.compile(
    r"^(?P<sign>[+-])(?![+-])\s*(?P<key>[A-Za-z_][\w.\-]*)\s*(?:[=:]\s*|\s+)(?P<value>\S[^#\n]*?)\s*$"
)


@dataclass(frozen=True)
class SettingDiff:
    ts: float | None
    key: str
    old: str
    new: str
    ref: EvidenceRef


def setting_diffs(evidence: EvidenceSet) -> list[SettingDiff]:
    """Settings a diff in the logs changed from one value to another, dated by the newest timed line above it."""
    out: list[SettingDiff] = []
    for item in evidence.kind("log"):
        when: float | None = None
        removed: dict[str, str] = {}
        for r in item.data.get("records") or ():
            if isinstance(r.get("ts"), int | float):
                when = float(r["ts"])
            msg = str(r.get("msg") or "")
            if "\n-" not in msg and "\n+" not in msg and msg[:1] not in "+-":
                continue  # cheap test first: no diff line here
            for line in msg.splitlines():
                m = _DIFF_LINE.match(line)
                if not m:
                    continue
                key, value = m["key"], m["value"].strip().strip("\"'")
                if m["sign"] == "-":
                    removed[key] = value
                elif key in removed and removed[key] != value:
                    ref = EvidenceRef(item=item.id, line=r.get("line"), value=f"{key}: {removed[key]} -> {value}")
                    out.append(SettingDiff(when, key, removed.pop(key), value, ref))
    return out


def ref_of(rec: Rec, value: str | None = None) -> EvidenceRef:
    text = value if value is not None else rec.msg
    return EvidenceRef(item=rec.item.id, line=rec.line, value=text[:300])


def record_ref(item: EvidenceItem, record: dict[str, Any]) -> EvidenceRef:
    """A reference to one raw record of a log item (its line and its message), as `ref_of` gives for a Rec."""
    return EvidenceRef(item=item.id, line=record.get("line"), value=str(record.get("msg") or "")[:300])


def log_end(recs: list[Rec], default: float | None) -> float | None:
    """The newest record time of the logs these records come from: how long those logs went on after them."""
    logs = {r.item.id: r.item for r in recs if r.item.kind == "log"}.values()
    return max(
        (t for item in logs for x in item.data.get("records") or () if isinstance(t := x.get("ts"), int | float)),
        default=default,
    )


def first_and_last_refs(recs: list[Rec]) -> list[EvidenceRef]:
    """The first and the last of a run of matching lines (the one line once when there is only one)."""
    return [ref_of(recs[0]), ref_of(recs[-1])] if len(recs) > 1 else [ref_of(recs[0])]


# ---------------------------------------------------------------- objects


_KERNEL_WORDS = "dmesg|syslog|kern|kernel|messages|journal|journalctl"
_KERNEL_FILE = re.compile(rf"^(?:{_KERNEL_WORDS})[-_.]+|[-_.]+(?:{_KERNEL_WORDS})$", re.I)


def host_of_kernel_file(item: EvidenceItem) -> str | None:
    """The machine a kernel log was saved for, from its name: `dmesg-ip-10-0-1-23.txt`, `web-1.syslog`."""
    name = item.object.rstrip("/").rsplit("/", 1)[-1]
    name = re.sub(r"(\.(log|txt|out|gz|zst|\d+))+$", "", name)
    host = _KERNEL_FILE.sub("", name)
    if host == name and (node := re.match(r"^(?:node|host)[-_.]+(?=[\w.\-]*\d)", name)):
        host = name[node.end() :]  # "node-ip-10-42-13-201.txt": a node's kernel log saved under its name
    # ("dmesg-T.txt" is `dmesg -T` saved under its flag, not a host named T)
    return host if host and host != name and len(host) > 2 else None


def service_of(item: EvidenceItem) -> str | None:
    """The service a log or metric item speaks for: a Datadog service, a pod's workload, a log file's name."""
    src = item.data.get("source")
    if isinstance(src, dict):
        for key in ("service", "app", "container"):
            if isinstance(src.get(key), str) and src[key]:
                return str(src[key])
    obj = item.object
    if obj.startswith("Pod/"):
        parts = obj.split("/")
        if len(parts) >= 3:
            return workload_of_pod(parts[2])
    if obj.startswith("datadog/"):
        return obj.split("/", 1)[1] or None
    parts = obj.rstrip("/").split("/")
    # an ECS task's or a Lambda instance's log stream ends with its id (ecs/checkout-api/6a0f2c91d4e8...): the
    # stream speaks for the container or function named before it
    while len(parts) > 1 and re.fullmatch(r"[0-9a-f]{24,}|\[\$LATEST\][0-9a-f]{16,}", parts[-1]):
        parts.pop()
    name = parts[-1]
    name = re.sub(r"(\.(log|txt|json|jsonl|ndjson|out|err|gz|xz|zst|\d+))+$", "", name)
    # "journal-quote-pricer.txt" (journalctl -u quote-pricer) speaks for the unit
    name = re.sub(r"^(?:journal|journalctl|syslog)[-_.]+(?=[a-z])", "", name, flags=re.I)
    # "kubectl-logs-previous-billing-api-6d9c7b8f5-k2x8q.txt" (kubectl logs --previous) speaks for the pod's workload
    pod = re.match(
        r"^(?:kubectl[-_])?logs?[-_](?:previous[-_]|prev[-_]|p[-_])?(?P<pod>[a-z0-9][a-z0-9\-]*-[a-z0-9]{5})$", name
    )
    if pod and workload_of_pod(pod["pod"]) != pod["pod"]:
        return workload_of_pod(pod["pod"])
    if name.lower() in ("", "syslog", "messages", "kern", "dmesg", "journal", "stdout", "stderr", "app", "log"):
        return None
    # nginx/apache's access.log and error.log speak for the server whose folder holds them (edge-01/error.log)
    if name.lower() in ("access", "error", "access_log", "error_log", "ssl_access", "ssl_error") and "/" in obj:
        parent = obj.rstrip("/").rsplit("/", 2)[-2]
        if parent and parent.lower() not in ("logs", "log", "nginx", "apache2", "httpd", "var", "."):
            return parent
    return name


def pod_tag(item: EvidenceItem) -> str | None:
    if item.object.startswith("Pod/"):
        parts = item.object.split("/")
        if len(parts) >= 3:
            return f"pod:{parts[1]}/{parts[2]}"
    return None


def object_tags(item: EvidenceItem, service: str | None = None) -> list[str]:
    tags = []
    svc = service or service_of(item)
    if svc:
        tags.append(f"service:{svc}")
    pt = pod_tag(item)
    if pt:
        tags.append(pt)
    return tags


# ---------------------------------------------------------------- templates

_MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\"(?:[^\"\\]|\\.){0,200}\"|'(?:[^'\\]|\\.){0,200}'"), "<str>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<ip>"),
    # a logfmt value that is a path or an object key (key=partners/x/NLS-0119/EP01.mov): one per file, not the template
    (re.compile(r"(?<==)[^\s\"'=]*/[^\s\"'=]*"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:ms|us|µs|ns|s|m|h)\b"), "<dur>"),
    (re.compile(r"(?<![A-Za-z])-?\d+(?:\.\d+)?"), "<n>"),
]


def template_of(msg: str) -> str:
    """The message with its variable parts masked (quoted strings, timestamps, ids, IPs, hex, durations,
    numbers), so "timed out after 5000ms" and "timed out after 4800ms" are one template."""
    t = msg.strip()[:500]
    for rx, repl in _MASKS:
        t = rx.sub(repl, t)
    return re.sub(r"\s+", " ", t)


@dataclass
class Template:
    template: str
    count: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    level: str | None = None
    sample: Rec | None = None
    lines: list[int] = field(default_factory=list)  # the first few line numbers
    stamps: list[float] = field(default_factory=list)  # every record's ts (for rates and buckets)

    def add(self, rec: Rec) -> None:
        self.count += 1
        if rec.ts is not None:
            self.stamps.append(rec.ts)
            self.first_ts = rec.ts if self.first_ts is None else min(self.first_ts, rec.ts)
            self.last_ts = rec.ts if self.last_ts is None else max(self.last_ts, rec.ts)
        if self.sample is None:
            self.sample = rec
            self.level = rec.level
        if rec.line is not None and len(self.lines) < 5:
            self.lines.append(rec.line)


def group_templates(records: list[Rec]) -> list[Template]:
    """Records grouped by template, most frequent first."""
    groups: dict[str, Template] = {}
    for rec in records:
        key = template_of(rec.msg)
        t = groups.get(key)
        if t is None:
            t = groups[key] = Template(key)
        t.add(rec)
    return sorted(groups.values(), key=lambda t: -t.count)


def span_text(first: float | None, last: float | None) -> str:
    from diagnosis.series import human_duration

    if first is None or last is None:
        return ""
    if last - first < 1:
        return f"at {fmt_ts(first)}"
    return f"from {fmt_ts(first)} to {fmt_ts(last)} ({human_duration(last - first)})"


# ---------------------------------------------------------------- signatures other domains own
# The logs analyzer groups every error, but a message whose mechanism another analyzer names (a timeout to an
# upstream, a kernel OOM kill, a full database) is left to that analyzer, so one failure gives one cause.


class Guarded:
    """A regular expression behind a cheap substring test: alternations with IGNORECASE cost ~0.1 ms on a long
    record, and almost no record carries any of the words that every alternative needs."""

    def __init__(self, rx: re.Pattern[str], words: tuple[str, ...]) -> None:
        self.rx, self.words, self.pattern = rx, words, rx.pattern

    def search(self, text: str) -> re.Match[str] | None:
        low = text.lower()
        return self.rx.search(text) if any(w in low for w in self.words) else None


Searcher = re.Pattern[str] | Guarded  # what the signature constants are


NET_TIMEOUT = re.compile(
    r"timed? ?out|timeout|deadline exceeded|DeadlineExceeded|DEADLINE_EXCEEDED|ETIMEDOUT|SocketTimeoutException|"
    r"ConnectTimeout|ReadTimeout",
    re.I,
)
# refused or unreachable: TCP refusals, no route, gRPC UNAVAILABLE (Go `code = Unavailable`, Java `Status
# UNAVAILABLE`, Python `StatusCode.UNAVAILABLE`), an HAProxy backend with no server up
NET_REFUSED = Guarded(
    re.compile(
        r"connection refused|ECONNREFUSED|ConnectionRefusedError|actively refused|code = Unavailable|"
        r"StatusCode\.UNAVAILABLE|StatusRuntimeException: UNAVAILABLE|(?-i:\bUNAVAILABLE: )|No route to host|"
        r"EHOSTUNREACH|"
        r"NoRouteToHostException|Network is unreachable|ENETUNREACH|has no server available|"
        # OkHttp / java.net "Failed to connect to host/ip:port", aiohttp "Cannot connect to host h:443", asyncio
        # "Connect call failed"
        r"Failed to connect to \S|Cannot connect to host|Connect call failed|ClientConnectorError|"
        # Kafka clients: "Connection to node 1 (kafka-1:9092) could not be established. Broker may not be available."
        r"could not be established\. Broker may not be available",
        re.I,
    ),
    (
        "refused",
        "unavailable",
        "no route",
        "ehostunreach",
        "noroutetohost",
        "unreach",
        "no server available",
        "connect to",
        "connect call",
        "clientconnector",
        "could not be established",
    ),
)
# a caller's circuit breaker open on an upstream (resilience4j, Hystrix, Polly, gobreaker, opossum): the upstream
# failed first; the breaker is how the caller says so
NET_CIRCUIT_OPEN = re.compile(
    r"CircuitBreaker '[^']+' is (?:OPEN|FORCED_OPEN)|CallNotPermittedException|short-circuited|"
    r"BrokenCircuitException|circuit breaker (?:is )?open|breaker is open|circuit (?:is )?open|"
    r"ErrOpenState|Breaker is open",
    re.I,
)
NET_RESET = Guarded(
    re.compile(
        # (not a server's word for its client going away: PostgreSQL's "could not receive data from client")
        r"(?<!from client: )connection reset by peer|ECONNRESET|upstream connect error or disconnect/reset|"
        r"broken pipe|socket hang up|"
        r"upstream prematurely closed|EOF occurred|no healthy upstream|server closed the connection unexpectedly|"
        # the server hung up mid-call: aiohttp, http.client / requests, reactor-netty, Envoy details, HTTP/2 resets
        r"ServerDisconnectedError|Server disconnected|RemoteDisconnected|Remote end closed connection|"
        r"Connection prematurely closed|PrematureCloseException|Connection aborted|upstream_reset_before_response|"
        r"ChunkedEncodingError|IncompleteRead|RST_STREAM",
        re.I,
    ),
    (
        "reset",
        "broken pipe",
        "hang up",
        "premature",
        "eof occurred",
        "no healthy upstream",
        "closed the connection",
        "disconnect",
        "aborted",
        "remote end closed",
        "chunkedencoding",
        "incompleteread",
        "rst_stream",
    ),
)
# the other side aborted the TLS handshake with an alert that is not about our certificate (its TLS setup or the
# server itself failed): Go "remote error: tls: handshake failure", OpenSSL/Python "sslv3 alert handshake
# failure", Java "Received fatal alert: handshake_failure", "Remote host terminated the handshake"
TLS_REMOTE = Guarded(
    re.compile(
        r"remote error: tls: (?:handshake failure|internal error|unexpected message|protocol version|illegal parameter|"
        r"decode error|insufficient security)|alert handshake failure|alert internal error|"
        r"Received fatal alert: (?:handshake_failure|internal_error|unexpected_message|protocol_version)|"
        r"Remote host (?:terminated|closed connection during) the handshake|peer closed connection in SSL handshake|"
        r"SSL_ERROR_SYSCALL in connection",
        re.I,
    ),
    ("remote error", "alert", "handshake", "ssl_error"),
)
# a client's connection pool to an upstream ran dry because its calls are slow to return (Apache HttpClient,
# reactor-netty, urllib3, Go, generic): the upstream holds the connections; a database pool is APP_POOL
HTTP_POOL_WAIT = Guarded(
    re.compile(
        r"Timeout waiting for connection from pool|ConnectionPoolTimeoutException|PoolAcquireTimeoutException|"
        r"PoolAcquirePendingLimitException|Pool#acquire\(Duration\) has been pending|"
        r"(?:connection )?pool (?:is )?(?:exhausted|full)\W{0,3}(?:\w+\W+){0,3}?(?:waiting for|to|for|calling) "
        r"(?:[a-z]+://)?[A-Za-z0-9]",
        re.I,
    ),
    ("pool",),
)
# a cloud provider's API failing on its side: botocore "An error occurred (ServiceUnavailable) when calling the
# PutObject operation", AWS SDK for Java "(Service: S3, Status Code: 503", SDK for Go v2 "https response error
# StatusCode: 500"
CLOUD_5XX = re.compile(
    r"An error occurred \((?:ServiceUnavailable\w*|InternalError|InternalFailure|InternalServerError\w*|"
    r"RequestTimeout\w*|ServiceException)\) when calling the \w+ operation|"
    r"Status Code: 5\d\d\b|StatusCode: 5\d\d\b|api error (?:ServiceUnavailable|InternalError|InternalFailure)|"
    # .NET (HttpClient, the Azure SDKs): "Response status code does not indicate success: ServiceUnavailable (503)"
    r"status code does not indicate success: (?:\w+ \()?5\d\d\b|"
    # Confluent's REST clients (schema registry, REST proxy): a server error's code is the HTTP status and two digits
    r"RestClientException: .{0,80}error code: 5\d\d\d\d\b|Error while sending request to .{0,200}error code: 5\d{4}\b",
)
# the other side refuses more calls from us: a rate limit or quota at a provider (AWS throttling, DynamoDB
# provisioned throughput, S3 SlowDown, HTTP 429, gRPC RESOURCE_EXHAUSTED): our share of its capacity ran out
RATE_LIMITED = Guarded(
    re.compile(
        r"ThrottlingException|Throttling: Rate exceeded|\bRate exceeded\b|TooManyRequestsException|"
        r"ProvisionedThroughputExceededException|RequestLimitExceeded|\(SlowDown\)|api error SlowDown|"
        r"\b429\b[^\n]{0,30}Too Many Requests|Too Many Requests[^\n]{0,30}\b429\b|"
        r"(?:status(?: code)?|returned|responded with|HTTPError:?)\W{0,3}429\b|RESOURCE_EXHAUSTED|"
        r"code = ResourceExhausted|rate limit(?:ed| exceeded)|(?<!Memory )(?<!disk )quota exceeded|RateLimitError|"
        # a credit or usage quota a monitor enforces ("resource monitor 'RM_X' has exceeded its quota")
        r"\bexceeded (?:its|the|your|their) (?:\w+ ){0,2}quota\b|"
        # Google Maps Platform and Google APIs' quota statuses
        r"\bOVER_QUERY_LIMIT\b|\bOVER_DAILY_LIMIT\b|\b(?:daily|user)(?:Rate)?LimitExceeded\b|\bquotaExceeded\b|"
        r"LimitExceededException|"
        # a broker or store refusing writes at an account or stream limit (NATS JetStream, Kafka quotas)
        r"resource limits exceeded for account|maximum (?:bytes|messages) exceeded|insufficient storage resources",
        re.I,
    ),
    (
        "throttl",
        "rate exceeded",
        "too many requests",
        "toomanyrequests",
        "throughputexceeded",
        "requestlimitexceeded",
        "slowdown",
        "429",
        "resource_exhausted",
        "resourceexhausted",
        "rate limit",
        "quota exceeded",
        "exceeded its ",
        "exceeded the ",
        "exceeded your ",
        "exceeded their ",
        "ratelimit",
        "limitexceeded",
        "over_query_limit",
        "over_daily_limit",
        "quotaexceeded",
        "resource limits exceeded",
        "maximum bytes exceeded",
        "maximum messages exceeded",
        "insufficient storage",
    ),
)
# a Kafka client told by the brokers that they cannot take or serve the request: too few in-sync replicas, no
# leader for the partition, a broker's log directory failed: the broker cluster is failing its clients
KAFKA_BROKER_ERR = re.compile(
    r"NOT_ENOUGH_REPLICAS|NotEnoughReplicas(?:AfterAppend)?Exception|NOT_LEADER_(?:OR_FOLLOWER|FOR_PARTITION)|"
    r"NotLeader(?:OrFollower|ForPartition)Exception|LEADER_NOT_AVAILABLE|LeaderNotAvailableException|"
    r"KAFKA_STORAGE_ERROR|KafkaStorageException|not present in metadata after \d+ ?ms|"
    # Pulsar: a producer whose sends the broker stopped acknowledging (its bookies cannot take writes)
    r"ProducerQueueIsFullError|Not enough non-faulty bookies|BKNotEnoughBookiesException|"
    # a datastore up but not serving: Redis loading its dataset, a Sentinel-less replica set with no master
    r"LOADING Redis is loading the dataset|MASTERDOWN Link with MASTER is down|CLUSTERDOWN The cluster is down",
)
# names an HTTP(S)/gRPC endpoint rather than a database
NAMES_HTTP_UPSTREAM = re.compile(r"\b(?:https?|grpcs?)://|\broute: |\bfor https?\b", re.I)
DNS_NXDOMAIN = re.compile(
    r"no such host|NXDOMAIN|Name or service not known|nodename nor servname|could not resolve host|"
    r"UnknownHostException|\bENOTFOUND\b|could not translate host name|Unknown host|failed to resolve|"
    # "could not resolve placeholder" (Spring) is not DNS: the generic phrasings count only before a dotted name
    r"(?:could not|cannot|unable to|failed to) resolve (?:host(?:name)?:?\s*)?[\"']?[A-Za-z0-9\-]+\.[A-Za-z0-9.\-]+",
    re.I,
)
DNS_TEMPORARY = re.compile(
    r"Temporary failure in name resolution|EAI_AGAIN|server misbehaving|SERVFAIL|"
    r"lookup \S+ on \S+:53: .*(i/o timeout|read udp)|:53: i/o timeout",
    re.I,
)
TLS_EXPIRED = re.compile(
    r"certificate has expired|certificate expired|CERT_HAS_EXPIRED|expired certificate|"
    r"certificate is not yet valid|current time \S+ is after",
    re.I,
)
TLS_INVALID = re.compile(
    r"x509: |certificate verify failed|SSLHandshakeException|tls: handshake failure|self[- ]signed certificate|"
    r"unable to get local issuer|certificate signed by unknown authority|PKIX path building failed",
    re.I,
)
UPSTREAM_5XX = re.compile(
    r"(?:upstream|backend|returned|responded|response|status(?: code)?|HTTP)\W{0,3}(?:with\s+|code\s+|status\s+)?"
    r"(50[0-4])\b"
    # the status with its reason phrase: "503 Service Unavailable", requests' "502 Server Error: Bad Gateway"
    r"|\b(50[0-4])(?= \(?(?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Time-?out|Server Error))"
    # a JSON error object's status: {"errorMessage":"Service Unavailable","code":503,...}
    r"|\"(?:code|status|statusCode|status_code)\"\s*:\s*(50[0-4])\b",
    re.I,
)
# Kubernetes' admission refusal at a ResourceQuota, wherever it is printed (a controller's event, a CI job's `kubectl
# get events`, helm, Argo CD): 'pods "x" is forbidden: exceeded quota: compute-quota, requested: limits.memory=4Gi,
# used: limits.memory=30Gi, limited: limits.memory=32Gi'
KUBE_QUOTA = re.compile(
    r"exceeded quota: (?P<quota>[\w.\-]+)(?:, requested: (?P<requested>.+?), used: (?P<used>.+?), "
    r"limited: (?P<limited>[^\s\"']+(?:,[^\s\"']+)*))?"
)


def quota_detail(m: re.Match[str]) -> str:
    """' (requested X, used Y, limited Z)' from a KUBE_QUOTA match, where the message says them."""
    return f" (requested {m['requested']}, used {m['used']}, limited {m['limited']})" if m["requested"] else ""


# the other side understood the call and refused who made it: wrong or expired credentials, missing permissions
# a database user without the role or grant for a command it runs (MongoDB code 13, PostgreSQL, MySQL)
DB_DENIED = re.compile(
    r"not authorized on \S+ to execute command|permission denied for (?:table|relation|schema|database) \S+|"
    r"command denied to user \S+"
)
AUTH_DENIED = re.compile(
    r"\b401\b[^\n]{0,24}Unauthori[sz]ed|Unauthori[sz]ed[^\n]{0,12}\b401\b|\b403\b[^\n]{0,24}Forbidden|"
    r"(?:status(?: code)?|returned|responded with|HTTPError:?)\W{0,3}40[13]\b|"
    r"is forbidden: User \"[^\"]+\" cannot|AccessDenied(?:Exception)?\b|not authorized to perform|"
    # Google's client libraries ("google.api_core.exceptions.Forbidden: 403 POST ...") and IAM's own wording
    # ("Access Denied: Table x: Permission bigquery.tables.updateData denied", "does not have storage.objects.get
    # access"), a storage class or other setting refusing an operation is not this
    r"\b(?:Forbidden|Unauthorized): 40[13]\b|googleapi: Error 40[13]\b|Access Denied: |"
    r"\bPermission '?[a-z]+\.[\w.]+'? denied|"
    r"does not have '?[a-z]+\.[a-zA-Z]+\.[a-zA-Z]+'? (?:access|permission)|" + DB_DENIED.pattern + "|"
    r"UnrecognizedClientException|InvalidClientTokenId|SignatureDoesNotMatch|ExpiredToken(?:Exception)?\b|"
    # (gRPC's codes are upper case: MySQL's "user: 'unauthenticated'" is a health check's connection, not a refusal)
    r"(?-i:PERMISSION_DENIED|UNAUTHENTICATED)|code = (?:PermissionDenied|Unauthenticated)|"
    r"invalid[ _]api[ _]?key|invalid (?:access |bearer )?token|invalid_grant|invalid_client|jwt expired|"
    # an OAuth app or token without the scope the call needs (HubSpot, Google, GitHub, Slack)
    r"MISSING_SCOPES|insufficient[_ ]scopes?\b|missing (?:required )?scopes?\b|(?:hasn't|has not) been granted|"
    r"token (?:has )?expired|authentication failed for|bad credentials|"
    # a datastore refusing the password it is sent (PostgreSQL and its poolers, MySQL, SQL Server, Redis, MongoDB,
    # Kafka's SASL): a rotated credential that one side did not get
    r"password authentication failed|Access denied for user '[^']*'@|Login failed for user '|WRONGPASS|"
    r"no pg_hba\.conf entry for host|"
    # a DNS primary refusing its secondaries' zone transfers (allow-transfer, a TSIG key they do not hold)
    r"zone transfer '[^']+' denied|"
    # an MQTT broker's ACL refusing a client's publish or subscribe (EMQX's authz, MQTT 5 reason code 0x87)
    r"authorization_permission_denied|cannot_publish_to_topic_due_to_not_authorized|non-retryable reason code 0x87|"
    r"NOAUTH Authentication required|SASL authentication failed|Authentication failed\. User:|"
    # a partner refusing calls from an address it does not allow (our egress IP changed)
    r"not on the allow-?list|IP_NOT_ALLOWED|not (?:allow|white)listed|origin [\d.]+ is not allowed|"
    # Vault's Kubernetes auth refusing a ServiceAccount its role is not bound to
    r"service account (?:name|namespace) not authorized|"
    # a service refusing tokens it cannot verify: the key id is missing from the key set it fetched (a JWKS URL of
    # another environment, a rotated key)
    r"kid \\?\"?[\w.\-]+\\?\"? not found in (?:the )?key ?set|jwt (?:verification|validation) failed|"
    r"unable to find (?:a )?(?:matching )?(?:signing )?key for kid|"
    # a client that cannot get its own credential (GCP Workload Identity, a metadata server refusing it)
    r"Received 40[13]\W{0,3}Unable to generate access token|unable to (?:generate|fetch|obtain) (?:an )?access token|"
    # an SMTP relay refusing to relay for a client it does not count as its own (Postfix mynetworks, Exchange)
    r"Relay access denied|relaying denied|Unable to relay|Client host rejected: Access denied|"
    # a mailbox provider refusing our mail as unauthenticated (SPF/DKIM do not align: DMARC, 5.7.26)
    r"Unauthenticated email from|\b5\.7\.26\b|domain's DMARC policy",
    re.I,
)
NETWORK_SIGNATURES = (
    KAFKA_BROKER_ERR,
    RATE_LIMITED,
    CLOUD_5XX,
    TLS_REMOTE,
    HTTP_POOL_WAIT,
    NET_TIMEOUT,
    NET_REFUSED,
    NET_CIRCUIT_OPEN,
    NET_RESET,
    DNS_NXDOMAIN,
    DNS_TEMPORARY,
    TLS_EXPIRED,
    TLS_INVALID,
)

PG_TOO_MANY = re.compile(
    r"too many clients already|remaining connection slots are reserved|too many (?:open )?connections|"
    r"connection limit exceeded|FATAL:\s+sorry",
    re.I,
)
# a database's own words for having no room left: Redshift's error 1016, MySQL's ER_RECORD_FILE_FULL, SQL Server's 1105
# (and an embedded store's: LMDB's map used up - OpenLDAP's olcDbMaxSize - and SQLite's SQLITE_FULL)
_DB_FULL = (
    r"(?-i:\bDisk Full\b)|The table '[^'\n]+' is full|filegroup is full|MDB_MAP_FULL|database or disk is full|"
    r"SQLITE_FULL|"
    # Oracle unable to extend a table, index, partition, LOB, temp or undo segment in a full tablespace, or a
    # user's tablespace quota used up
    r"ORA-0165[2-4]\b|ORA-0168[38]\b|ORA-01691\b|ORA-01536\b|ORA-30036\b|unable to extend (?:table|index|temp|lob)"
)
# (a write refused because the file system went read-only is the disk's failure, not a full disk)
PG_STORAGE = re.compile(
    r"could not extend file|could not write to file(?![^\n]*Read-only file system)|No space left on device|"
    r"storage[- ]full|" + _DB_FULL,
    re.I,
)
PG_LOCK = re.compile(
    r"deadlock detected|lock timeout|canceling statement due to lock|idle-in-transaction timeout|"
    r"still waiting for \w+Lock|acquired \w+Lock",
    re.I,
)
APP_POOL = re.compile(
    r"Connection is not available, request timed out|QueuePool limit of size \d+ overflow \d+ reached|"
    r"pool (?:is )?exhausted|timeout acquiring (?:a )?connection|Timed out fetching a new connection from the "
    r"connection pool|could not obtain (?:a )?connection from (?:the )?pool|Cannot get a connection, pool error",
    re.I,
)
# A process that stops because a setting it needs is absent or unreadable: an unset env var (Python's
# `KeyError: 'PAYMENT_API_KEY'` from os.environ, Go's "required env FOO not set", Node's "FOO is undefined"), an
# unknown flag, a config file that is not there. The configuration is at fault, whatever exception the code throws.
MISSING_SETTING = re.compile(
    r"missing (?:required )?(?:env|environment|config|configuration|variable|setting|secret|flag|"
    r"argument|option)"
    r"|(?:env(?:ironment)?(?: var(?:iable)?)?|setting|option|config(?:uration)? "
    r"(?:key|value))\s+[\"'`]?[A-Za-z_][\w.]*[\"'`]?\s+"
    r"(?:is )?(?:not set|missing|required|undefined|empty|must be set)"
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b[\"'`]? (?:is )?(?:not set|missing|required|undefined|must be set|is empty)"
    r"|required (?:env|environment variable|config|configuration|setting|flag|option|argument)"
    # a library telling the operator where to look: "Please check database schema history topic configuration"
    r"|please check (?:the |your )?(?:[\w.\-]+ ){0,5}(?:configuration|config|settings)\b"
    r"|KeyError: [\"'](?-i:[A-Z][A-Z0-9]*_[A-Z0-9_]+|[A-Z]{4,})[\"']"
    r"|(?:invalid|bad|malformed|unable to (?:load|parse|read)|failed to (?:load|parse|read)|could "
    r"not (?:load|parse|read)|cannot (?:load|parse|read)) "
    # (a value for a type is a conversion of data: "invalid value for int64 type: \"24.99\"")
    r"(?:the )?(?:config|configuration|settings|dsn|connection string|value for(?! (?:u?int\d*|float\d*|double|"
    r"bool(?:ean)?|string|enum|decimal|number|\w+ type)\b))"
    r"|(?:unknown|unrecognized|unrecognised|invalid) (?:flag|option|argument|command[- ]line)"
    r"|flag provided but not defined"
    r"|(?:config|configuration|settings) file\b.*(?:not found|no such file|missing|does not exist)"
    r"|no such file or directory.*(?:\.ya?ml|\.json|\.conf|\.toml|\.ini|\.properties|/etc/|config)"
    r"|(?:\.ya?ml|\.json|\.conf|\.toml|\.ini|\.properties|/etc/\S*|config\S*)\S*[\"']?:? no such "
    r"file or directory"
    # a secret or parameter the platform injects at start that does not exist (AWS SSM, Secrets Manager)
    r"|ParameterNotFound|Secrets Manager can't find the specified secret|unable to (?:pull|retrieve) secrets"
    # a server that answers that what the connection settings name does not exist on it: a RabbitMQ vhost, a
    # database, a bucket (the server is up and talking: the name the client was given is wrong)
    r"|vhost [\"']?\S+?[\"']? not found|NOT_ALLOWED - (?:access to )?vhost|database [\"']\S+[\"'] does not exist"
    r"|Unknown database [\"']\S+[\"']|NoSuchBucket|The specified bucket does not exist"
    # two members configured with one identity (a copied config): MySQL replicas sharing a server_id, brokers or
    # nodes sharing an id, static consumer group members sharing group.instance.id
    r"|same server_uuid/server_id|duplicate (?:server|node|broker|instance|member|client)[ _.\-]?id\b"
    r"|(?:server|node|broker)[._]?id \S+ (?:is )?already (?:in use|registered)|FencedInstanceIdException"
    r"|another (?:instance|process|node|member) with the same (?:id|name|server[._]id)",
    re.I,
)
REDIS_OOM = re.compile(r"OOM command not allowed when used memory > 'maxmemory'", re.I)
PG_CHECKPOINT = re.compile(r"checkpoints are occurring too frequently", re.I)
PG_VACUUM = re.compile(r"automatic (?:aggressive )?vacuum of table|to prevent wraparound", re.I)
PG_DOWN = re.compile(
    r"the database system is (?:starting up|shutting down|in recovery mode)|"
    r"terminating connection due to administrator command|could not connect to server|"
    r"connection to server at .* failed|server closed the connection unexpectedly|"
    r"terminating connection because of crash of another server process",
    re.I,
)
DB_SIGNATURES = (PG_TOO_MANY, PG_STORAGE, PG_LOCK, PG_CHECKPOINT, PG_VACUUM, PG_DOWN, REDIS_OOM, APP_POOL)

HOST_OOM = re.compile(
    r"Out of memory: Kill(?:ed)? process|oom-kill:|Memory cgroup out of memory|invoked oom-killer|oom_reaper|"
    r"was terminated by signal 9|killed by the OOM killer|result 'oom-kill'",
    re.I,
)
HOST_FDS = re.compile(
    r"Too many open files|EMFILE|ENFILE|file-max limit|"
    # Mosquitto refusing clients at its descriptor limit
    r"system socket count has been exceeded",
    re.I,
)
HOST_DISK = re.compile(
    r"No space left on device|ENOSPC|disk quota exceeded|filesystem full|"
    # Windows: ERROR_DISK_FULL (0x70) as .NET and Win32 word it
    r"There is not enough space on the disk|ERROR_DISK_FULL|0x80070070|"
    # Windows' srv event 2013
    r"The [A-Z]: disk is at or near capacity|"
    # IBM MQ formatting a log extent on a full file system (AMQ6708E)
    r"disk full condition was encountered|"
    # YARN's NodeManager disk checker: its local or log dirs past the utilisation threshold
    r"usable space is below configured utilization percentage",
    re.I,
)
# a GPU the NVIDIA driver reports lost or failing (Xid 79 fallen off the bus, 48 double-bit ECC, 74 NVLink, 95
# uncontained ECC)
GPU_LOST = re.compile(r"NVRM: Xid \([^)]*\): (?:79|48|74|92|94|95|119|120)\b|GPU has fallen off the bus")
HOST_HW = re.compile(
    r"I/O error, dev \S+|EXT4-fs error|XFS .* (?:metadata I/O error|Corruption)|Remounting filesystem read-only|"
    r"blocked for more than \d+ seconds|Hardware Error|Machine check|NMI watchdog|soft lockup|"
    # storage devices not answering: NVMe/SCSI command timeouts and resets, EBS/virtio stalls
    r"nvme\d*:? .*\btimeout, (?:aborting|reset)|I/O \d+ QID \d+ timeout|Buffer I/O error on dev|"
    r"blk_update_request: I/O error|critical medium error|SCSI error: return code|rejecting I/O to offline device|"
    # a SATA/SAS disk whose commands time out and whose link the kernel resets (libata, the SCSI layer)
    r"\bata\d+(?:\.\d+)?: failed command: |\[sd[a-z]+\] tag#\d+ FAILED Result: |"
    # memory: EDAC correctable/uncorrectable ECC errors, pages the kernel had to take offline; a kernel panic
    r"EDAC \S+: \d+ (?:CE|UE) memory|Memory failure: 0x|Kernel panic - not syncing|" + GPU_LOST.pattern + "|"
    # a GPU the NVIDIA driver reports lost or failing
    # network interfaces: a transmit queue that stopped completing, a NIC the driver had to reset or found hung
    r"NETDEV WATCHDOG: .*transmit queue \d+ timed out|Found a Tx that wasn't completed on time|"
    # a Mellanox/NVIDIA NIC's cable or optic module failing (overheating, cable errors): its link flaps
    r"Port module event\[error\]|"
    r"lost tx completions is above the threshold|Detected Hardware Unit Hang|\bTX timeout detected|"
    r"mlx5_core .*(?:health compromised|CQE error|cmd_work_handler.*timeout)|ixgbe .*Reset adapter|"
    # a link that drops (counted: one drop is a cable pulled or a switch reboot, several a failing optic or port)
    r"\bNIC Link is Down\b|link status definitely down for interface|"
    # a baseboard management controller's fault (ipmitool sel): power supplies, uncorrectable memory, a CPU's IERR
    r"ipmi: .*(?:Power Supply AC lost|Failure detected|Redundancy Lost|Insufficient Resources|Uncorrectable|IERR|"
    r"Drive Fault|Non-recoverable)[\w ]* \| Asserted|"
    # a storage controller (HBA, RAID) that faulted and could not be reset: every disk behind it is gone
    r"mpt\dsas_cm\d+: (?:fault_state|diag reset: FAILED)|megaraid_sas \S+: .*FW in FAULT state|"
    r"hpsa \S+: Controller lockup detected|aacraid: Host adapter (?:abort request|reset request)|"
    # ZFS suspending a pool whose devices stopped answering
    r"has encountered an uncorrectable I/O failure and has been suspended|"
    # storage reached over SAN paths: the last path of a multipath device failed (Solaris MPxIO, dm-multipath), and
    # Oracle ASM failing the I/O it submitted
    r"multipath status: failed|remaining active paths: 0|All paths? (?:to \S+ )?(?:are |have )?(?:down|failed)|"
    r"ORA-15081: failed to submit an I/O operation",
    re.I,
)
# a physical or virtualisation host that stopped (vSphere HA, Proxmox/corosync fencing, Hyper-V and Nova
# clusters): every guest on it goes down at once
HOST_LOST = re.compile(
    r"\bhost (?P<h1>[\w.\-]+) (?:in [\w.\- ]+ )?is not responding|host failure (?:of|on) host (?P<h2>[\w.\-]+)|"
    r"HostConnectionLostEvent|DasHostFailedEvent|lost connection to host (?P<h3>[\w.\-]+)|"
    r"(?:node|hypervisor|compute (?:node|host)) '?(?P<h4>[\w.\-]+)'? (?:is|went) (?:down|offline|unreachable)|"
    r"fencing (?:node|host) '?(?P<h5>[\w.\-]+)|"
    r"cluster node '?(?P<h6>[\w.\-]+)'? was removed from the active (?:failover )?cluster membership|"
    # Proxmox HA manager, Pacemaker, a Nomad server giving up on a client, Consul/Serf gossip
    r"node '(?P<h7>[\w.\-]+)': state changed from '\w+' => '(?:fence|unknown)'|"
    r"\bnode (?P<h8>[\w.\-]+) (?:state )?is now (?:lost|dead)\b|"
    r"marking allocations lost: node=(?P<h9>[\w.\-]+)|"
    r"EventMemberFailed: (?P<h10>[\w.\-]+)|"
    # Compute Engine stopping a VM because its physical host failed
    r"compute\.instances\.hostError (?P<h12>[\w.\-]+)|"
    # Azure Resource Health: a VM unavailable because its host server failed
    r"(?P<h13>[\w.\-]+): [^\n]{0,120}?(?:unexpected|unplanned) failure on the host server|"
    r"memberlist: (?:Marking|Suspect) (?P<h11>[\w.\-]+) (?:as|has) failed",
    re.I,
)
# a process-, kernel- or broker-level limit that ran out (each is a finite capacity, like memory or descriptors):
# ephemeral ports for outgoing connections, the conntrack table, the PID / thread limit, a message broker's disk
# or memory alarm, a search cluster's disk watermark
HOST_EPHEMERAL = Guarded(
    re.compile(
        r"cannot assign requested address|EADDRNOTAVAIL|Address not available|no free ports|"
        r"out of local (?:ports|addresses)",
        re.I,
    ),
    ("assign requested", "eaddrnotavail", "address not available", "free ports", "local ports", "local addresses"),
)
HOST_CONNTRACK = re.compile(r"nf_conntrack: (?:nf_conntrack: )?table full|ip_conntrack: table full", re.I)
HOST_PIDS = Guarded(
    re.compile(
        r"fork: (?:retry: )?Resource temporarily unavailable|fork rejected by pids controller|"
        r"failed to create new OS thread|unable to create (?:new )?native thread|can't start new thread|"
        r"pthread_create failed|spawn EAGAIN|Cannot fork|fork failed: Resource temporarily unavailable",
        re.I,
    ),
    ("fork", "os thread", "native thread", "new thread", "pthread_create", "eagain"),
)
BROKER_ALARM = Guarded(
    re.compile(
        r"(?P<res>disk|memory) resource limit alarm set on node (?P<node>\S+)|"
        r"Free disk space is insufficient|(?:vm_memory_high_watermark|memory high watermark) (?:set|exceeded)|"
        r"flood[ -]stage disk watermark \[[^\]]+\] exceeded on \[(?P<esnode>[^\]]+)\]|"
        r"high disk watermark \[[^\]]+\] exceeded on \[(?P<esnode2>[^\]]+)\]|"
        r"index read-only / allow delete|FORBIDDEN/12/index read-only",
        re.I,
    ),
    ("alarm", "disk space is insufficient", "watermark", "read-only"),
)
HOST_LIMITS = (HOST_EPHEMERAL, HOST_CONNTRACK, HOST_PIDS, BROKER_ALARM)
HOST_SIGNATURES = (HOST_OOM, HOST_FDS, HOST_DISK, HOST_HW, HOST_LOST, *HOST_LIMITS)


# Lower-case fragments at least one of which every signature above contains: a record without any of them is
# skipped with a few substring tests instead of a dozen regular expressions (bundles carry 500,000 lines).
_TRIGGERS = (
    "time",
    "failed command",  # libata: a disk command that timed out or failed
    "nvrm: xid",  # the NVIDIA driver reporting a GPU error
    "fallen off the bus",
    "moved ",  # a Redis Cluster redirecting a client that does not follow it
    "cluster support",
    "failed result",  # the SCSI layer giving up on a command
    "deadline",
    "refused",
    "code = unavailable",
    "hang up",
    "maxmemory",
    "pool",
    "reset",
    "broken pipe",
    "prematurely",
    "eof",
    "upstream",
    "closed the connection",
    "no such host",
    "nxdomain",
    "not known",
    "servname",
    "resolv",
    "unknownhost",
    "enotfound",
    "translate host",
    "unknown host",
    "eai_again",
    "misbehaving",
    "servfail",
    "certificat",
    "x509",
    "ssl",
    "tls",
    "pkix",
    ":53",
    "backend",
    "returned 5",
    "responded with 5",
    "status 5",
    "status=5",
    "status: 5",
    "status code 5",
    "http 5",
    "server error",
    "unauthori",
    "relay",  # an SMTP relay refusing to relay ("Relay access denied", "Unable to relay")
    "googleapi: error 40",
    "forbidden",
    "denied",
    "allowlist",
    "allow-list",
    "jwt",
    "key set",
    "keyset",
    "unauthenticated",
    "api key",
    "api_key",
    "token",
    "credentials",
    "authentication failed",
    "login failed",
    "pg_hba",
    "connect to",
    "connecting to",
    "wrongpass",
    "noauth",
    "not authorized",
    "bad gateway",
    "unavailable",
    "gateway time",
    "circuit",
    "breaker",
    "not permit",
    "no route",
    "unreachable",
    "no server available",
    "client",
    "connection",
    "max_conn",
    "sorry",
    "could not",
    "no space",
    "storage",
    "deadlock",
    "lock",
    "idle-in-transaction",
    "checkpoint",
    "vacuum",
    "wraparound",
    "database system",
    "administrator command",
    "crash",
    "out of memory",
    "oom",
    "memory cgroup",
    "signal 9",
    "open files",
    "emfile",
    "enfile",
    "file-max",
    "enospc",
    "quota",
    "filesystem full",
    "i/o error",
    "ext4-fs",
    "xfs",
    "read-only",
    "blocked for more than",
    "hardware error",
    "multipath status: failed",
    "remaining active paths: 0",
    "all paths",
    "ora-15081",
    "machine check",
    "edac",
    "ipmi: ",
    "memory failure",
    "kernel panic",
    "nmi",
    "lockup",
    "timeout, abort",
    "qid",
    "buffer i/o",
    "medium error",
    "scsi error",
    "offline device",
    "not responding",
    "ceph: mds",
    "hosterror",
    "failure on the host server",
    "host failure",
    "failed host",
    "host connection lost",
    "is down",
    "node down",
    "offline",
    "fenc",
    "state changed",
    "is now lost",
    "is now dead",
    "allocations lost",
    "memberfailed",
    "as failed",
    "has failed",
    "isolat",
    "membership",
    "connect to",
    "connect call",
    "clientconnector",
    "disconnect",
    "aborted",
    "premature",
    "chunkedencoding",
    "incompleteread",
    "rst_stream",
    "handshake",
    "fatal alert",
    "ssl_error",
    "assign requested",
    "eaddrnotavail",
    "address not available",
    "free ports",
    "local ports",
    "local addresses",
    "conntrack",
    "fork",
    "native thread",
    "os thread",
    "new thread",
    "pthread_create",
    "eagain",
    "alarm",
    "watermark",
    "disk space is insufficient",
    "read-only",
    "error occurred",
    "status code: 5",
    "statuscode: 5",
    "api error",
    "throttl",
    "rate exceeded",
    "too many requests",
    "status 429",
    "status=429",
    "status: 429",
    "status code 429",
    "returned 429",
    "responded with 429",
    "throughputexceeded",
    "limitexceeded",
    "resource_exhausted",
    "resourceexhausted",
    "rate limit",
    "quota exceeded",
    "ratelimit",
    "could not be established",
    "does not indicate success",
    "replicas",
    "not_leader",
    "notleader",
    "leader_not",
    "leadernot",
    "kafka_storage",
    "kafkastorage",
    "in metadata",
    "resource limits exceeded",
    "maximum bytes exceeded",
    "maximum messages exceeded",
    "not enough space",
    "near capacity",
    "disk full condition",
    "disk_full",
    "0x80070070",
    "mdb_map_full",
    "unable to extend",
    "ora-01536",
    "ora-30036",
    "database or disk is full",
    "sqlite_full",
    # a storage controller's fault and a pool ZFS suspended for it
    "fault_state",
    "diag reset",
    "in fault state",
    "controller lockup",
    "host adapter",
    "has been suspended",
)


# Informational records carry few signatures (postgres logs checkpoints, vacuums and lock waits at LOG level;
# some kernels log OOM kills as info): they are checked against these only, which keeps the common case cheap.
_INFO_TRIGGERS = (
    "checkpoint",
    "vacuum",
    "waiting for",
    "kill",
    "oom",
    "out of memory",
    "failover",
    "no space",
    "conntrack",
    "fork rejected",
    "alarm set",
    "watermark",
    "disk space is insufficient",
    "too many open connections",  # mongod logs its refusals at level I
    "password authentication failed",  # pgbouncer logs the refusal it forwards at LOG/WARNING
    "quota",  # a job runner relaying its tool's output at INFO ("resource monitor ... has exceeded its quota")
)
_QUIET_LEVELS = {"info", "debug", "trace", "notice", "log"}


# one alternation instead of a substring test per trigger: this runs on every log line of a bundle
_TRIGGER_RE = re.compile("|".join(re.escape(t) for t in _TRIGGERS))
_INFO_TRIGGER_RE = re.compile("|".join(re.escape(t) for t in _INFO_TRIGGERS))


def may_carry_signature(msg: str, level: object = None) -> bool:
    low = msg.lower()
    if isinstance(level, str) and level.lower() in _QUIET_LEVELS:
        return _INFO_TRIGGER_RE.search(low) is not None
    return _TRIGGER_RE.search(low) is not None


_SIG_CACHE: weakref.WeakKeyDictionary[EvidenceSet, tuple[int, list[Rec]]] = weakref.WeakKeyDictionary()


def signature_records(evidence: EvidenceSet) -> list[Rec]:
    """The log records that may carry a network, database or host signature (computed once per evidence set;
    each analyzer then runs its own expressions on these only)."""
    cached = _SIG_CACHE.get(evidence)
    if cached is not None and cached[0] == len(evidence):
        return cached[1]
    out: list[Rec] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if may_carry_signature(msg, r.get("level")):
                out.append(Rec(item, r.get("ts"), msg, r.get("line"), level_of(r)))
    _SIG_CACHE[evidence] = (len(evidence), out)
    return out


# a stack trace's frames: Python's `File "...", line N, in f` with the source line under it, Java's `at a.b.C.m(...)`
_FRAMES = re.compile(r'^  File "[^\n]*(?:\n    [^\n]*)?$|^\s+at [\w$.<>]+\([^\n]*\)$', re.M)


def claimed_elsewhere(msg: str) -> bool:
    """Whether a network, database or host analyzer names the mechanism behind this message (its words, not the
    source code of a stack trace's frames: `timeout=timeout` in a frame says nothing)."""
    if "\n" in msg:
        msg = _FRAMES.sub("", msg)
    return any(
        rx.search(msg) for rx in (*NETWORK_SIGNATURES, *DB_SIGNATURES, *HOST_SIGNATURES, UPSTREAM_5XX, AUTH_DENIED)
    )


_PG_CONTEXT = re.compile(
    r"could not extend file|could not write to file|pg_wal|pg_xlog|base/\d+/|PANIC:|postgres|" + _DB_FULL, re.I
)
_DB_SOURCE = re.compile(r"postgres|postgresql|\bpg\b|rds|mysql|mongod|database|\bdb\b", re.I)


def is_db_log(item: EvidenceItem) -> bool:
    """Whether a log source is a database server's own log (postgres, an RDS log export)."""
    return bool(_DB_SOURCE.search(item.object) or _DB_SOURCE.search(service_of(item) or ""))


def is_db_storage_line(rec: Rec) -> bool:
    """A 'No space left on device' the database owns (its data or WAL files), rather than a host disk."""
    return bool(PG_STORAGE.search(rec.msg)) and bool(_PG_CONTEXT.search(rec.msg) or is_db_log(rec.item))


# Symptom codes other analyzers use for the same effect (the kubernetes analyzer says "error_rate" and
# "log_errors" where these say "errors"): a cause lists both so the reasoning links it whichever spoke.
_EXPLAINS_ALIASES = {
    "errors": ("error_rate", "log_errors"),
    "upstream_timeout": ("upstream_unavailable",),
    "connection_refused": ("upstream_unavailable",),
    "pod_restarts": ("crashloop",),
}


def with_aliases(findings: list[Finding]) -> list[Finding]:
    out = []
    for f in findings:
        extra = [a for code in f.explains for a in _EXPLAINS_ALIASES.get(code, ()) if a not in f.explains]
        out.append(f.model_copy(update={"explains": [*f.explains, *dict.fromkeys(extra)]}) if extra else f)
    return out
