"""Logs: error templates with counts and time spans; exceptions (code_defect), bad data (data_quality), an
application running out of memory; old errors and a steady background are benign.

Messages whose mechanism another analyzer names (a timeout to an upstream, a full disk, a kernel OOM kill, too
many database clients) count toward the service's `errors` symptom here, and their cause is left to the
network, database or host analyzer.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from diagnosis.analyzers._common import (
    MISSING_SETTING,
    NET_TIMEOUT,
    Rec,
    Template,
    claimed_elsewhere,
    first_and_last_refs,
    fmt_ts,
    group_templates,
    level_of,
    log_records,
    now_of,
    object_tags,
    ref_of,
    service_of,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import human_duration, median
from diagnosis.timeline import parse_ts

# An error template whose last record is this long before "now" has stopped: the fault recovered (15 min is
# three times the usual 5-minute alert evaluation window, long enough that "still failing" would show).
STOPPED_AFTER_S = 15 * 60
LOG_START_SLACK_S = 60.0  # errors within this of a log's first record began at or before the log did
# errors that are the last thing their log says are stopped only this long before now
ENDED_LONG_AGO_S = 60 * 60
# A background is errors present over most of a long log at a low, even rate: at most 2 a minute, spread over
# at least 60% of a log that covers 30 minutes or more, with no 5-minute bucket above 3x the typical one.
BACKGROUND_MIN_SPAN_S = 30 * 60
BACKGROUND_MAX_RATE_PER_MIN = 2.0
BACKGROUND_COVERAGE = 0.6
BACKGROUND_BURST_FACTOR = 3.0
# ... and beginning within the first fifth of the log: errors that start after a clean stretch are new
BACKGROUND_LATE_START = 0.2
# ... and a small share of a log that says more than its errors: at most 15% of its lines, when at least 20
# other lines show what the service does (an export of error lines only says nothing of the share)
BACKGROUND_MAX_SHARE = 0.15
BACKGROUND_MIN_OTHERS = 20
# Fewer occurrences than this are sporadic: the finding is kept below the reasoning's stand-alone score (0.5), so it
# names the cause only when it explains something observed (a crash, a restart), not on a healthy system.
SPORADIC = 3
FEW_ERRORS, FEW_ERRORS_AMONG, FEW_ERRORS_SHARE = 4, 50, 0.02  # at most 4 errors in 50+ lines, under 2% of them
# A deploy this long before the first exception makes the deploy the likely origin of the bug.
DEPLOY_WINDOW_S = 2 * 3600
ROLLOUT_SLACK_S = 300

BAD_DATA = re.compile(
    # generic wording of rejected input
    r"invalid input (?:syntax|value)|schema mismatch|unexpected null|null value in column|failed to parse|parse error|"
    r"could not parse|unable to parse|cannot parse|malformed|missing (?:required )?(?:field|property|key)|"
    r"required (?:field|property) \S+ (?:is )?missing|unexpected (?:token|field|type|character|end of (?:json )?input)|"
    r"invalid (?:json|format|value|record|payload|utf-?8|byte sequence|character|date|timestamp|enum|message)|"
    r"is not valid JSON|deserializ\w+ (?:error|failed|exception)|error deserializing|failed to (?:deserializ|decod)\w*|"
    r"violates (?:not-null|check|foreign key) constraint|type mismatch|"
    # CSV readers on a file with another delimiter or a ragged row (Rust csv, Python csv, pandas, Go encoding/csv)
    r"found record with \d+ fields?|wrong number of fields|expected \d+ fields?,? (?:saw|got|but)|"
    r"Error tokenizing data|header has \d+ columns?|column \S+ does not exist|no such column|"
    r"schema validation failed|incompatible schema|schema (?:is )?incompatible|"
    r"unknown (?:field|column|magic byte)|Unrecognized field|value too long for type|out of range for type|"
    r"invalid literal for \w+\(\)|could not convert string to \w+|does not match format|"
    r"duplicate key value|Duplicate entry|duplicate (?:record|row|message|event|id)s?\b|"
    r"poison(?:ed)? (?:message|pill|record)|"
    # rejected rows and dead-lettered records, column counts, NaN, corrupt input, failed data checks
    r"rejected \d+ (?:rows|records|messages|documents|lines|events)|(?:rows|records|messages|events) rejected|"
    r"(?:sent|routed|moved|published|written|forwarded) to (?:the )?(?:dead[- ]?letter|DLQ|DLT)|"
    r"expected \d+ (?:columns|fields),? (?:but )?(?:got|found|saw) \d+|wrong number of (?:columns|fields)|"
    # CSV readers on a file with another delimiter or column count (Rust csv, Go encoding/csv, a header check)
    r"found record with \d+ fields?, but the previous record has \d+|wrong number of fields|"
    r"\bheader has \d+ (?:column|field)s?(?:\(s\))?,? (?:but )?expected \d+|"
    # a batch refused as a whole because too much of it failed validation
    r"reject(?:ed|ion) (?:share|ratio|rate) (?:of )?[\d.]+ ?% (?:is )?(?:above|over|exceeds)|"
    r"(?:moved|sent) (?:\S+ )?to (?:the )?quarantine\b|"
    r"Error tokenizing data|contains NaN|\bNaN (?:value|found|in column)|value is NaN|"
    r"corrupt(?:ed)? (?:record|row|message|input|gzip|parquet|avro|csv)|"
    r"data (?:quality|validation) (?:check )?failed|expectation (?:suite )?failed|"
    r"(?:not_null|unique|accepted_values|relationships) test failed|"
    # Java/Kotlin: Jackson, Kafka serdes, Avro, protobuf, java.time, charsets, bean validation
    r"Json(?:Parse|Mapping|EOF)Exception|MismatchedInputException|InvalidFormatException|"
    r"UnrecognizedPropertyException|InvalidDefinitionException|SerializationException|RecordDeserializationException|"
    r"DeserializationException|InvalidProtocolBufferException|AvroTypeException|SchemaParseException|"
    r"DateTimeParseException|NumberFormatException|MalformedInputException|UnmappableCharacterException|"
    r"CharacterCodingException|ConstraintViolationException|DataIntegrityViolationException|HttpMessageNotReadable|"
    # XML parsers on an input file in the wrong encoding or not XML at all (.NET, Java SAX, libxml2/lxml, expat)
    r"XmlException|SAXParseException|XMLSyntaxError|ExpatError|Content is not allowed in prolog|"
    r"Data at the root level is invalid|Invalid byte \d of \d-byte UTF-8|not well-formed \(invalid token\)|"
    r"DecoderFallbackException|(?:unexpected|invalid|unsupported) (?:byte order mark|BOM)|"
    # Python, Go, Node, Ruby
    r"JSONDecodeError|UnicodeDecodeError|UnicodeEncodeError|Expecting value: line \d+|decimal\.ConversionSyntax|"
    # .NET: System.Text.Json and Newtonsoft on a value of the wrong shape, and a number that does not parse
    r"System\.Text\.Json\.JsonException|JsonReaderException|JsonSerializationException|"
    r"could not be converted to System\.\w+|Input string was not in a correct format|"
    r"json: cannot unmarshal|invalid character '.{1,4}' (?:looking for|after|in)|cannot unmarshal|"
    r"strconv\.\w+: parsing|"
    r"proto: cannot parse|parsing time \S+ as|JSON::ParserError|ActiveRecord::RecordInvalid|invalid byte sequence in|"
    r"Encoding::(?:Undefined|InvalidByteSequence)\w*|"
    # MySQL / PostgreSQL data errors (SQLSTATE class 22 and 23)
    r"Incorrect (?:string|integer|decimal|datetime|date) value|Data truncated for column|Data too long for column|"
    r"Out of range value for column|Column '\w+' cannot be null|Unknown column|has no equivalent in encoding|"
    r"date/time field value out of range|SQLSTATE\[?2[23]\d{3}",
    re.I,
)
# The exception class (or phrase) that names the bad data in a message: the innermost one (Java prints causes last)
_DATA_CLASS = re.compile(r"\b((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))\b")
# a consumer stuck on one record: Kafka's "Seeking to offset 88213 for partition postings-3", spring-kafka's
# "...-3@88213", librdkafka's "[3] offset 88213"
_OFFSET = re.compile(
    r"offset[\s=:]+(?P<off>\d+)(?:\s+for\s+partition\s+(?P<part>[\w.\-]+))?|(?P<topic>[\w.\-]+-\d+)@(?P<off2>\d+)",
    re.I,
)
# An exception class named in a message; the network/database ones (timeouts, refusals) are claimed elsewhere.
EXCEPTION = re.compile(
    r"\b((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))\b(?!\s+(?:rate|count|budget)|[\"']\s*:)|"
    r"\bpanic: |\bpanicked at\b|called `(?:Option|Result)::(?:unwrap|expect)\(\)` on|"
    r"\bnil pointer dereference|\bSIGSEGV\b|\bsegmentation fault|\bUnhandled(?: promise)? rejection|"
    r"\bunhandled exception|\buncaught exception|\bTraceback \(most recent call last\)|\bassertion failed|"
    r"Cannot read propert(?:y|ies) of (?:undefined|null)|is not a function|index out of range|"
    r"Java-level deadlock|all goroutines are asleep - deadlock|thread-pool starvation deadlock",
    re.I,
)
# Exceptions a client raises when the other side failed (the server answered 5xx, refused, timed out): the
# dependency failed; the error count stays this service's `errors` symptom.
REMOTE_FAILURE = re.compile(
    r"\b\w*(?:Transport|Connection|Connect|Timeout|Unavailable|Remote|Rpc|Grpc|Http|Network|Socket|Upstream|Gateway|"
    r"ServiceUnavailable|Throttl)\w*(?:Error|Exception)\b|\(5\d\d\b|\b(?:status|code)[=: ]+5\d\d\b|\b50[234]\b|"
    # a datastore's own failure, as its client library relays it: shards missing, a cluster down or read-only,
    # no leader or primary to talk to
    r"search_phase_execution_exception|all shards failed|missing shards|no_shard_available|cluster_block_exception|"
    r"\bCLUSTERDOWN\b|\bNOREPLICAS\b|\bMASTERDOWN\b|LOADING Redis is loading|READONLY You can't write|"
    r"NotWritablePrimary|not master and slaveOk|No primary (?:server )?available|LEADER_NOT_AVAILABLE|"
    r"NotLeaderOrFollower|NOT_ENOUGH_REPLICAS|the database system is (?:starting up|shutting down|in recovery)",
)
_CAUSED_BY = re.compile(r"Caused by: ((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))")
APP_OOM = re.compile(
    r"java\.lang\.OutOfMemoryError|JavaScript heap out of memory|\bMemoryError\b|fatal error: runtime: out of memory|"
    r"Cannot allocate memory|std::bad_alloc",
)


# A service's own workers or threads all busy, or a consumer too slow for its group: a capacity it set ran out.
# Servers log these at WARN as often as at ERROR, so every record is read.
APP_CAPACITY = re.compile(
    r"(?P<pool>RejectedExecutionException|rejected from (?:java\.util\.concurrent\.)?\w*ThreadPoolExecutor|"
    r"All threads \(\d+\) are currently busy|Thread pool (?:is )?(?:exhausted|saturated)|"
    r"server reached (?:pm\.)?max_children setting|WORKER TIMEOUT \(pid|listen queue of socket \S+ full|"
    r"worker_connections are not enough|max(?:imum)? (?:number of )?(?:worker|thread)s? reached|"
    r"MaxRequestWorkers|ServerLimit)|"
    r"(?P<poll>max\.poll\.interval\.ms|consumer poll timeout has expired|CommitFailedException|"
    r"the group has already rebalanced)",
)
CAPACITY_MIN = 3


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def app_capacity(evidence: EvidenceSet) -> list[Finding]:
    """A service whose worker or thread pool is full (requests rejected or queued), or a Kafka consumer whose
    processing outlasts max.poll.interval.ms (evicted from its group, rebalancing, lag growing)."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits: dict[str, list[dict[str, Any]]] = {}
        for r in item.data.get("records") or ():
            m = APP_CAPACITY.search(str(r.get("msg") or ""))
            if m:
                hits.setdefault("poll" if m["poll"] else "pool", []).append(r)
        for kind, recs in hits.items():
            last = max((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            if len(recs) < CAPACITY_MIN or (now is not None and last is not None and now - last >= STOPPED_AFTER_S):
                continue
            first = min((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            waiting = kind == "pool" and _waits_on_calls(item, first)
            who = service_of(item) or item.object
            sample = " ".join(str(recs[0].get("msg") or "").split())[:200]
            if kind == "poll":
                what = (
                    f"{who}'s consumer takes longer between polls than max.poll.interval.ms: the broker evicts it "
                    "from its group, the group rebalances and its partitions' lag grows"
                )
                title = f"{who}: consumer exceeds max.poll.interval.ms ({len(recs)}x)"
            else:
                what = f"{who}'s worker/thread pool is exhausted: requests are rejected or queue"
                title = f"{who}: worker/thread pool exhausted ({len(recs)}x)"
            if waiting:
                what += ": its threads are held by calls that time out, which began first"
            out.append(
                Finding(
                    analyzer="app_capacity",
                    domain=Domain.LOGS,
                    # a pool full of threads waiting on a slow dependency is that dependency's symptom
                    role="symptom" if waiting else "cause",
                    code="consumer_too_slow" if kind == "poll" else "app_pool_exhausted",
                    category=Category.UNKNOWN if waiting else Category.RESOURCE_EXHAUSTION,
                    title=title,
                    mechanism=f"{what}: '{sample}' x{len(recs)} {span_text(first, last)}.",
                    object=who,
                    score=0.75,
                    ts=first,
                    tags=object_tags(item, service_of(item)),
                    explains=[
                        "errors",
                        "latency",
                        "http_5xx",
                        "backlog",
                        "queue_backlog",
                        "metric_shift",
                        "upstream_timeout",
                        "exception",
                        "probe_*",
                    ],
                    evidence=[
                        EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300]) for r in recs[:2]
                    ],
                    actions=[
                        Action(
                            description="See the rejections and the pool or consumer settings around them",
                            command=f"grep -n -E 'max.poll|rejected|busy|max_children' <{item.object} log>",
                        )
                    ],
                )
            )
    return with_aliases(out)


def _waits_on_calls(item: EvidenceItem, pool_first: float | None) -> bool:
    """Whether the same log shows outbound calls timing out (3+) from before its pool filled up."""
    stamps = [
        r["ts"]
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float)
        and NET_TIMEOUT.search(msg := str(r.get("msg") or ""))
        and not APP_CAPACITY.search(msg)  # gunicorn's own "WORKER TIMEOUT" is the pool, not a call
    ]
    return len(stamps) >= CAPACITY_MIN and (pool_first is None or min(stamps) <= pool_first)


# A web framework refusing the request's Host header (Django ALLOWED_HOSTS, Rails config.hosts, ASP.NET Core
# AllowedHosts, Vite/webpack dev servers): the host named is missing from the allow-list. Group 1: the host.
HOST_REJECTED = re.compile(
    r"Invalid HTTP_HOST header: '([^']+)'|\bBlocked hosts?: ([\w.\-:]+)|"
    r"The host '([^']+)' does not match an allowed host|This host \(\"?([\w.\-:]+)\"?\) is not allowed|"
    r"Invalid Host header(?: '([^']+)')?",
)
_HOST_SETTING = (
    ("HTTP_HOST", "ALLOWED_HOSTS"),
    ("Blocked host", "config.hosts"),
    ("allowed host", "AllowedHosts"),
)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def host_not_allowed(evidence: EvidenceSet) -> list[Finding]:
    """A service rejecting requests because their Host header is not on its allow-list (typically after a domain
    or DNS change sent a new name to an unchanged app): a configuration error of the allow-list, whatever the CDN
    or the 400s around it look like."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hosts: dict[str, list[dict[str, Any]]] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "host" not in msg.lower():
                continue
            m = HOST_REJECTED.search(msg)
            if m:
                hosts.setdefault(next((g for g in m.groups() if g), "?"), []).append(r)
        for host, recs in hosts.items():
            last = max((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            if len(recs) < CAPACITY_MIN or (now is not None and last is not None and now - last >= STOPPED_AFTER_S):
                continue
            first = min((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            who = service_of(item) or item.object
            sample = " ".join(str(recs[0].get("msg") or "").split())[:200]
            setting = next((v for k, v in _HOST_SETTING if k.lower() in sample.lower()), "the allowed-hosts setting")
            out.append(
                Finding(
                    analyzer="host_not_allowed",
                    domain=Domain.LOGS,
                    role="cause",
                    code="host_not_allowed",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"{who} rejects requests for host {host}: not in {setting} ({len(recs)}x)",
                    mechanism=(
                        f"{who} refuses every request whose Host header is {host} (answering 400): {host} is missing "
                        f"from {setting}: '{sample}' x{len(recs)} {span_text(first, last)}."
                    ),
                    object=who,
                    score=0.8,
                    ts=first,
                    tags=[*object_tags(item, service_of(item)), f"host:{host}"],
                    explains=["errors", "http_4xx", "http_5xx", "metric_shift", "alert:*"],
                    evidence=[
                        EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300]) for r in recs[:2]
                    ],
                    actions=[
                        Action(
                            description=f"Add {host} to {setting} and redeploy; list the hosts refused",
                            command=f"grep -c '{host}' <{item.object} log>",
                        )
                    ],
                )
            )
    return with_aliases(out)


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def log_errors(evidence: EvidenceSet) -> list[Finding]:
    """Every log source: its error templates; exceptions, bad data and memory errors as causes; the burst of
    errors as a symptom of the service; stopped or background errors as benign."""
    now = now_of(evidence)
    deploys = _deploys(evidence)
    changes = config_changes(evidence)
    findings: list[Finding] = []
    for item in evidence.kind("log"):
        findings.extend(_analyze_source(item, now, deploys, changes))
    return with_aliases(findings)


# ---------------------------------------------------------------- configuration changes quoted by errors

CONFIG_CHANGE_WINDOW_S = 6 * 3600  # a change this long before the errors began can still be what they quote
_CHANGE_WORD = re.compile(
    r"\b(?:flag|feature|toggle|config(?:uration)?|setting|parameter|param|variable|env|property|option|key|"
    r"variation|override|configmap|secret|rollout rule|targeting)\b",
    re.I,
)
_NEW_VALUE = re.compile(
    r"\b(?:new_?value|new|to_?value|after|value_?after|variation|value)=\"?([^\s\",;)]+)|"
    r"\bfrom\s+['\"]?[^\s'\"]*['\"]?\s+to\s+['\"]?([^\s'\",;)]+)|"
    r"\b(?:set|changed|updated|switched)\b[^=]{0,80}?\bto\s+['\"]?([^\s'\",;)]+)",
    re.I,
)
_CHANGE_SUBJECT = re.compile(
    r"\b(?:flag|feature|key|setting|parameter|param|name|property|option|variable|config)[=:]\s*['\"]?([\w.\-/]+)",
    re.I,
)
# values too common to attribute an error to: booleans, on/off, empties, small numbers
_PLAIN_VALUES = frozenset({"true", "false", "on", "off", "yes", "no", "null", "none", "enabled", "disabled", "0", "1"})


@dataclass(frozen=True)
class ConfigChange:
    ts: float
    subject: str
    value: str
    ref: EvidenceRef


def config_changes(evidence: EvidenceSet) -> list[ConfigChange]:
    """Records that set a flag, setting or variable to a new value (audit exports, change logs, flag services)."""
    out: list[ConfigChange] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            ts = r.get("ts")
            if not isinstance(ts, int | float) or ("=" not in msg and " to " not in msg):
                continue
            if not _CHANGE_WORD.search(msg):
                continue
            m = _NEW_VALUE.search(msg)
            value = next((g for g in m.groups() if g), None) if m else None
            if not value or len(value) < 3 or value.lower() in _PLAIN_VALUES or value.replace(".", "").isdigit():
                continue
            subj = _CHANGE_SUBJECT.search(msg)
            out.append(
                ConfigChange(
                    float(ts),
                    subj.group(1) if subj else "a setting",
                    value,
                    EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200]),
                )
            )
    return out


def _quoted_change(changes: list[ConfigChange], tpl: Template) -> ConfigChange | None:
    """The latest change before the errors began whose new value the errors quote."""
    if tpl.sample is None or tpl.first_ts is None:
        return None
    msg = tpl.sample.msg
    best: ConfigChange | None = None
    for c in changes:
        if not -300.0 <= tpl.first_ts - c.ts <= CONFIG_CHANGE_WINDOW_S:  # clocks disagree a little
            continue
        if not re.search(rf"(?<![\w\-]){re.escape(c.value)}(?![\w\-])", msg):
            continue
        if best is None or c.ts > best.ts:
            best = c
    return best


_ERROR_LEVELS = {"error", "fatal", "critical", "crit", "err", "panic", "emerg", "alert"}


def _error_records(item: EvidenceItem) -> tuple[list[Rec], float | None, float | None]:
    """The source's error records (by level, or by an exception in an unlevelled line), and its time span."""
    errors: list[Rec] = []
    first: float | None = None
    last: float | None = None
    for r in item.data.get("records") or ():
        ts = r.get("ts")
        if isinstance(ts, int | float):
            first = ts if first is None or ts < first else first
            last = ts if last is None or ts > last else last
        lvl = r.get("level")
        if isinstance(lvl, str) and lvl:
            if lvl.lower() not in _ERROR_LEVELS:
                continue
            level: str | None = "error"
        else:
            level = level_of(r)
        msg = str(r.get("msg") or "")
        if level in ("error", "fatal") or (level is None and (EXCEPTION.search(msg) or APP_OOM.search(msg))):
            errors.append(Rec(item, ts, msg, r.get("line"), level or "error"))
    return errors, first, last


def _analyze_source(
    item: EvidenceItem,
    now: float | None,
    deploys: list[tuple[float, str, EvidenceRef]],
    changes: list[ConfigChange] | None = None,
) -> list[Finding]:
    errors, log_first, log_last = _error_records(item)
    if not errors:
        return []
    service = service_of(item)
    tags = object_tags(item, service)
    who = service or item.object
    findings: list[Finding] = []
    active: list[Template] = []
    gave_up = functools.cache(lambda: _gave_up_at(item))  # read only when an error template seems to have stopped
    snapshot = bool((item.data.get("source") or {}).get("snapshot"))  # a run's report, not a running log
    for tpl in group_templates(errors):
        verdict = _quiet_verdict(tpl, log_first, log_last, now, len(item.data.get("records") or ()))
        if verdict == "stopped" and (snapshot or _ended_with(tpl, gave_up())):
            verdict = None  # it stopped because what failed gave up for good, not because it recovered
        if verdict:
            findings.append(_benign(item, tpl, who, tags, verdict))
            continue
        active.append(tpl)
    if not active:
        return findings
    for tpl in active:
        cause = _changed_setting(item, tpl, who, tags, changes or []) or _cause_of(
            item, tpl, who, tags, deploys, active
        )
        if cause and cause.ts is not None and log_first is not None and cause.ts - log_first <= LOG_START_SLACK_S:
            # errors from the log's first lines began at or before the export's start (`--since`, `--tail`, a
            # rotated file): when is unknown, so they may explain what began before the log does
            cause = cause.model_copy(update={"ts": None})
        if cause:
            findings.append(cause)
    findings.append(_errors_symptom(item, active, who, tags))
    return findings


# a process or task that stops for good after its error: the errors end because nothing runs any more
GAVE_UP = re.compile(
    r"will not recover|unrecoverable exception|until (?:it is )?manually restarted|giving up\b|gave up\b|"
    r"shutting down due to|exiting due to|exiting with (?:status|code) [1-9]|aborting (?:the )?(?:job|task|run)",
    re.I,
)


def _ended_with(tpl: Template, gave_up: float | None) -> bool:
    """Whether the template's last record came just before what failed gave up for good."""
    return gave_up is not None and tpl.last_ts is not None and -5 <= gave_up - tpl.last_ts <= 120


def _gave_up_at(item: EvidenceItem) -> float | None:
    stamps = [
        r["ts"]
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float) and GAVE_UP.search(str(r.get("msg") or ""))
    ]
    return max(stamps) if stamps else None


def _quiet_verdict(
    tpl: Template, log_first: float | None, log_last: float | None, now: float | None, total: int = 0
) -> str | None:
    """'stopped' when the template's last record is long before now; 'background' when it is a steady low
    rate present all along; None when it is a live signal."""
    if tpl.last_ts is None or now is None:
        return None
    if now - tpl.last_ts >= STOPPED_AFTER_S and (
        # the log went on without it; or the log ends with it (a sparse event stream says nothing until the
        # next change) and even so it is long past
        log_last is None or log_last - tpl.last_ts >= STOPPED_AFTER_S or now - tpl.last_ts >= ENDED_LONG_AGO_S
    ):
        return "stopped"
    if log_first is None or log_last is None or tpl.first_ts is None:
        return None
    span = log_last - log_first
    if span < BACKGROUND_MIN_SPAN_S:
        return None
    coverage = (tpl.last_ts - tpl.first_ts) / span
    rate = tpl.count / max(span / 60.0, 1.0)
    if coverage < BACKGROUND_COVERAGE or rate > BACKGROUND_MAX_RATE_PER_MIN:
        return None
    # a background is a small share of what the service logs: more than 15% of its lines (of its requests) is a fault
    if total - tpl.count >= BACKGROUND_MIN_OTHERS and tpl.count > BACKGROUND_MAX_SHARE * total:
        return None
    # all along: from the start of the log; errors that begin after a long clean stretch began with the fault
    if tpl.first_ts - log_first > BACKGROUND_LATE_START * span:
        return None
    # even: no 5-minute bucket well above the typical (median non-empty) one, and the last quarter no busier
    buckets: dict[int, int] = {}
    for ts in tpl.stamps:
        b = int((ts - log_first) // 300)
        buckets[b] = buckets.get(b, 0) + 1
    if not buckets:
        return None
    typical = median(list(buckets.values()))
    if max(buckets.values()) > BACKGROUND_BURST_FACTOR * max(typical, 1.0):
        return None
    return "background"


def _benign(item: EvidenceItem, tpl: Template, who: str, tags: list[str], verdict: str) -> Finding:
    assert tpl.sample is not None
    if verdict == "stopped":
        why = f"stopped at {fmt_ts(tpl.last_ts)}, long before the newest evidence: it recovered"
        code = "errors_stopped"
    else:
        why = (
            f"a steady background ({tpl.count} over {span_text(tpl.first_ts, tpl.last_ts)}) present all along, "
            "not a new fault"
        )
        code = "errors_background"
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="benign",
        code=code,
        category=Category.HEALTHY,
        title=f"{who}: '{_short(tpl.template)}' x{tpl.count} ({verdict})",
        mechanism=f"{who} logged '{_short(tpl.sample.msg)}' {tpl.count} times; {why}.",
        object=f"log {item.object}",
        score=0.2,
        ts=tpl.first_ts,
        tags=tags,
        evidence=[ref_of(tpl.sample)],
    )


def _changed_setting(
    item: EvidenceItem, tpl: Template, who: str, tags: list[str], changes: list[ConfigChange]
) -> Finding | None:
    """Errors that quote the value a recent flag or setting change introduced: the change is the cause, whatever
    exception the code throws on it (an invalid enum, a bad URL, a number that does not parse)."""
    change = _quoted_change(changes, tpl)
    if change is None or tpl.sample is None or tpl.first_ts is None:
        return None
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="bad_config_value",
        category=Category.CONFIGURATION_ERROR,
        title=f"{who} fails on the value {change.value} that {change.subject} was set to ({tpl.count}x)",
        mechanism=(
            f"{change.subject} was set to {change.value} {human_duration(tpl.first_ts - change.ts)} before {who} "
            f"began failing on exactly that value: '{_short(tpl.sample.msg)}' x{tpl.count} "
            f"{span_text(tpl.first_ts, tpl.last_ts)}; the configuration change is the cause."
        ),
        object=f"{change.subject} = {change.value}",
        score=0.85 if tpl.count >= SPORADIC else 0.65,
        ts=change.ts,
        tags=[*tags, f"config:{change.subject}"],
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop", "exception", "latency"],
        evidence=[change.ref, ref_of(tpl.sample)],
        actions=[
            Action(
                description=f"Set {change.subject} back to its previous value",
                command=f"# flag/config service: revert {change.subject} (now {change.value})",
                kind="write",
            )
        ],
    )


def _cause_of(
    item: EvidenceItem,
    tpl: Template,
    who: str,
    tags: list[str],
    deploys: list[tuple[float, str, EvidenceRef]],
    active: list[Template],
) -> Finding | None:
    assert tpl.sample is not None
    msg = tpl.sample.msg
    refs = [ref_of(tpl.sample)]
    span = span_text(tpl.first_ts, tpl.last_ts)
    oom = APP_OOM.search(msg)
    if oom:
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="app_out_of_memory",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{who} ran out of memory: {oom.group(0).rsplit('.', 1)[-1]} ({tpl.count}x)",
            mechanism=f"{who} exhausted its memory: '{_short(msg)}' x{tpl.count} {span}.",
            object=who,
            score=0.75,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "pod_restarts", "latency", "http_5xx", "memory_high"],
            evidence=refs,
            actions=_mem_actions(item, who),
        )
    if claimed_elsewhere(msg) or APP_CAPACITY.search(msg):  # app_capacity names a pool or worker limit reached
        return None
    setting = _missing_setting(item, tpl, who, tags, active)
    if setting is not None:
        return setting
    if BAD_DATA.search(msg):
        what = _data_error_name(msg)
        stuck = (
            (_stuck_offset(item) or _input_file(item, tpl.first_ts))
            + _bad_field(msg)
            + _producer(item, tpl.first_ts, msg)
        )
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="bad_data",
            category=Category.DATA_QUALITY,
            title=f"{who} rejects bad data ({what}): '{_short(tpl.template, 80)}' x{tpl.count}",
            mechanism=(
                f"{who} fails on its input with {what}{stuck}: '{_short(_around(msg, what))}' x{tpl.count} {span}; "
                "the data (its format, schema or a field) does not match what the code expects."
            ),
            object=who,
            score=0.7 if tpl.count >= SPORADIC else 0.45,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "http_5xx", "pod_restarts"],
            evidence=refs,
            actions=[
                Action(
                    description="Find the first rejected records and their producer",
                    command=f"grep -n -m 20 {_grep_word(msg)} <{item.object} log>",
                ),
            ],
        )
    if KILLED_FROM_OUTSIDE.search(msg):
        return _killed(item, tpl, who, tags)
    if MISSING_RESOURCE.search(msg):
        return None  # the thing it asked for is not there (a table, a bucket key): not a bug in its code
    exc = EXCEPTION.search(msg)
    if not exc or REMOTE_FAILURE.search(msg):
        return None  # a client library reporting that its server failed is the dependency's fault, not a bug here
    # the class that was thrown, wherever the message names it ("An unhandled exception ...: System.Invalid...")
    named = next((m.group(1) for m in EXCEPTION.finditer(msg) if m.group(1)), None)
    exc_name = _python_raised(msg) or named or exc.group(0).strip()
    # Java prints the root cause last ("Caused by: java.lang.NullPointerException"): name that one
    caused = _CAUSED_BY.findall(msg)
    if caused:
        exc_name = caused[-1]
    # one cause per source for exceptions: the most frequent; the others are listed in its mechanism
    first_exc = next(
        (
            t
            for t in active
            if t.sample
            and EXCEPTION.search(t.sample.msg)
            and not claimed_elsewhere(t.sample.msg)
            and not BAD_DATA.search(t.sample.msg)
            and not APP_OOM.search(t.sample.msg)
            and not REMOTE_FAILURE.search(t.sample.msg)
            and not APP_CAPACITY.search(t.sample.msg)
        ),
        None,
    )
    if first_exc is not tpl:
        return None
    deploy = _deploy_before(deploys, who, tpl.first_ts)
    after = ""
    score = 0.6 if tpl.count >= SPORADIC else 0.45
    if deploy:
        delta = (tpl.first_ts or deploy[0]) - deploy[0]
        after = (
            f", starting {human_duration(delta)} after {deploy[1]}"
            if delta >= 0
            else f", starting while the new pods rolled out ({deploy[1]} {human_duration(-delta)} later)"
        )
        refs.append(deploy[2])
        score = 0.85 if tpl.count >= SPORADIC else 0.7
    msg = msg + _panic_payload(item, tpl)
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="exception",
        category=Category.CODE_DEFECT,
        title=f"{who} throws {exc_name} ({tpl.count}x)",
        mechanism=(
            f"{who} is stuck in a {exc_name}: threads (or goroutines) each hold a lock the other waits for, a "
            f"lock-ordering bug: '{_short(msg)}' x{tpl.count} {span}{after}."
            if "deadlock" in exc_name.lower() and "starvation" not in exc_name.lower()
            else f"{who} is stuck in a {exc_name}: tasks running on a pool block waiting for other tasks queued to "
            f"that same pool, so once every thread waits nothing completes (a code defect; a bigger pool only delays "
            f"it): '{_short(msg)}' x{tpl.count} {span}{after}."
            if "starvation" in exc_name.lower()
            else f"{who} fails with an unhandled {exc_name.removeprefix('unhandled ')}: '{_short(msg)}' x{tpl.count} "
            f"{span}{after}."
        ),
        object=who,
        score=score,
        ts=tpl.first_ts,
        tags=tags,
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop"],
        evidence=refs,
        actions=[
            Action(
                description="Read the full stack trace", command=f"grep -n -A 30 {_grep_word(msg)} <{item.object} log>"
            ),
            *(
                [
                    Action(
                        description=f"Roll back the deploy of {who}",
                        command=f"kubectl rollout undo deployment/{who}",
                        kind="write",
                    )
                ]
                if deploy
                else []
            ),
        ],
    )


# The last line of a Python traceback names what was raised ("KeyError: 'sku'", "app.errors.QuotaError: ..."):
# the header "Traceback (most recent call last)" says only that something was.
_PY_RAISED = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::\s|:?$)", re.M)


# a store answering that what was asked for does not exist (BigQuery, S3, DynamoDB, a 404 from an API)
MISSING_RESOURCE = re.compile(
    r"Not found: (?:Table|Dataset|Project|Bucket|Object)\b|'reason': 'notFound'|NoSuchKey|NoSuchBucket|"
    r"ResourceNotFoundException|The specified key does not exist",
)


# a process stopped by a signal someone else sent: the exception it raises on the way out is not its bug
KILLED_FROM_OUTSIDE = re.compile(
    r"received SIGTERM|AirflowTaskTerminated|terminated by signal|killed by signal|"
    r"SIGTERM received|got signal (?:15|9)\b|exited with signal (?:15|9)\b",
    re.I,
)


def _killed(item: EvidenceItem, tpl: Template, who: str, tags: list[str]) -> Finding:
    assert tpl.sample is not None
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="symptom",
        code="killed_from_outside",
        category=Category.UNKNOWN,
        title=f"{who} was stopped by a signal from outside ({tpl.count}x)",
        mechanism=(
            f"{who} was terminated by a signal it did not send itself: '{_short(tpl.sample.msg)}' "
            f"x{tpl.count}{_spaced(span_text(tpl.first_ts, tpl.last_ts))}; what sent it decides the cause."
        ),
        object=who,
        score=0.5,
        ts=tpl.first_ts,
        tags=tags,
        evidence=[ref_of(tpl.sample)],
        needs=[
            f"who stopped {who}: the scheduler's or orchestrator's log (a timeout, a manual stop, a deploy), the "
            "node's events (eviction, preemption, scale-down) and the kernel's OOM killer"
        ],
    )


def _python_raised(msg: str) -> str | None:
    if "Traceback (most recent call last)" not in msg:
        return None
    raised = [m.group(1) for m in _PY_RAISED.finditer(msg) if m.group(1) != "Traceback"]
    return raised[-1] if raised else None


def _spaced(text: str) -> str:
    return f" {text}" if text else ""


_SETTING_NAME = re.compile(
    r"KeyError: [\"'](\w+)|\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b|ParameterNotFound:? (/?[\w./-]+)|"
    r"(vhost [\"']?[^\s\"']+|database [\"'][^\"']+[\"']|Unknown database [\"'][^\"']+[\"'])"
)


def _missing_setting(
    item: EvidenceItem, tpl: Template, who: str, tags: list[str], active: list[Template]
) -> Finding | None:
    """A process that fails because a setting it needs is unset or unreadable (an env var missing from its
    environment, an unknown flag, a config file that is not there): the configuration is the cause, whatever
    exception the code raises on it. One finding per log source, on the first such template."""
    assert tpl.sample is not None
    first = next((t for t in active if t.sample and MISSING_SETTING.search(t.sample.msg)), None)
    if first is not tpl:
        return None
    msg = tpl.sample.msg
    hit = MISSING_SETTING.search(msg)
    assert hit is not None
    named = _SETTING_NAME.search(hit.group(0)) or _SETTING_NAME.search(msg[hit.start() :]) or _SETTING_NAME.search(msg)
    name = next((g for g in named.groups() if g), None) if named else None
    what = f"the setting {name}" if name else "a setting it needs"
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="missing_setting",
        category=Category.CONFIGURATION_ERROR,
        title=f"{who} fails because {what} is missing or invalid ({tpl.count}x)",
        mechanism=(
            f"{who} cannot run because {what} is missing or invalid in its configuration: "
            f"'{_short(_around(msg, hit.group(0)))}' x{tpl.count}{_spaced(span_text(tpl.first_ts, tpl.last_ts))}; "
            "the code fails on the configuration it was given, not on a bug."
        ),
        object=f"{who} {name}" if name else who,
        score=0.8 if tpl.count >= SPORADIC else 0.6,
        ts=tpl.first_ts,
        tags=[*tags, *([f"config:{name}"] if name else [])],
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop", "exception", "service_down"],
        evidence=[ref_of(tpl.sample)],
        actions=[
            Action(
                description=f"Compare {who}'s environment and config with the last version that worked"
                + (f" and set {name}" if name else ""),
                command=f"grep -n {_grep_word(hit.group(0))} <{item.object} log>",
            )
        ],
    )


_PANIC_AT = re.compile(r"panicked at [^\s']+:\d+(?::\d+)?:?\s*$")


def _panic_payload(item: EvidenceItem, tpl: Template) -> str:
    """Rust (1.73+) prints a panic's message on the line after "thread 'x' panicked at src/f.rs:212:48:": when the
    sample ends there, the next line of the log is what panicked (`called Option::unwrap() on a None value`)."""
    sample = tpl.sample
    if sample is None or not _PANIC_AT.search(sample.msg) or sample.line is None:
        return ""
    nxt = next((r for r in item.data.get("records") or () if r.get("line") == sample.line + 1), None)
    return f" {str(nxt.get('msg') or '').strip()}" if nxt else ""


def _errors_symptom(item: EvidenceItem, active: list[Template], who: str, tags: list[str]) -> Finding:
    total = sum(t.count for t in active)
    first = min((t.first_ts for t in active if t.first_ts is not None), default=None)
    last = max((t.last_ts for t in active if t.last_ts is not None), default=None)
    top = active[:3]
    listing = "; ".join(f"'{_short(t.template, 100)}' x{t.count}" for t in top)
    lines = len(item.data.get("records") or ())
    # a handful of errors among a busy log's lines is what every working service logs, not a failure
    few = (total <= FEW_ERRORS and lines >= FEW_ERRORS_AMONG and total / lines < FEW_ERRORS_SHARE) or (
        # one error in a log that goes on: a blip, unless it ended the process
        total == 1 and lines >= 10 and not any(t.sample and t.sample.level == "fatal" for t in active)
    )
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="benign" if few else "symptom",
        code="errors_few" if few else "errors",
        category=Category.HEALTHY if few else Category.UNKNOWN,
        title=f"{who}: {total} errors in {len(active)} template(s)" + (f" among {lines} lines" if few else ""),
        mechanism=f"{who} logged {total} errors {span_text(first, last)}: {listing}"
        + (f"; {total} of {lines} lines: the background of a working service, not a failure." if few else "."),
        object=who,
        score=min(0.9, 0.3 + total / 200),
        ts=first,
        tags=tags,
        evidence=[
            EvidenceRef(item=item.id, line=t.sample.line, value=f"{t.template[:200]} (x{t.count})")
            for t in top
            if t.sample
        ],
    )


def _deploys(evidence: EvidenceSet) -> list[tuple[float, str, EvidenceRef]]:
    """Rollouts seen in the evidence: ScalingReplicaSet events and ReplicaSet creation times."""
    out: list[tuple[float, str, EvidenceRef]] = []
    for ev in evidence.kind("k8s/Event"):
        d = ev.data
        if d.get("reason") == "ScalingReplicaSet" and "up" in str(d.get("message", "")) and d.get("first_ts"):
            out.append(
                (
                    float(d["first_ts"]),
                    f"the rollout '{d.get('message')}'",
                    EvidenceRef(item=ev.id, field="message", value=d.get("message")),
                )
            )
    for dep in evidence.kind("k8s/Deployment"):
        # a settled Deployment's Progressing condition was last updated when its newest ReplicaSet became available
        conds = (dep.data.get("status") or {}).get("conditions") or ()
        prog = next((c for c in conds if isinstance(c, dict) and c.get("type") == "Progressing"), None)
        ts = parse_ts(prog.get("lastUpdateTime")) if prog else None
        if prog and ts and prog.get("reason") in ("NewReplicaSetAvailable", "ReplicaSetUpdated"):
            containers = ((dep.data.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or ()
            images = ", ".join(str(c.get("image")) for c in containers if isinstance(c, dict) and c.get("image"))
            name = dep.object.rsplit("/", 1)[-1]
            out.append(
                (
                    ts,
                    f"the rollout of Deployment {name} ({images}) completed",
                    EvidenceRef(item=dep.id, field="status.conditions", value=prog.get("lastUpdateTime")),
                )
            )
    for rs in evidence.kind("k8s/ReplicaSet"):
        created = (rs.data.get("metadata") or {}).get("creationTimestamp")
        ts = parse_ts(created)
        if ts:
            out.append(
                (
                    ts,
                    f"ReplicaSet {rs.object} was created",
                    EvidenceRef(item=rs.id, field="metadata.creationTimestamp", value=created),
                )
            )
    return out


def _deploy_before(
    deploys: list[tuple[float, str, EvidenceRef]], who: str, first_ts: float | None
) -> tuple[float, str, EvidenceRef] | None:
    if first_ts is None:
        return None
    best = None
    for d in deploys:
        # a rollout reported complete may finish a minute or two after the new pods began failing
        if who in d[1] and -ROLLOUT_SLACK_S <= first_ts - d[0] <= DEPLOY_WINDOW_S and (best is None or d[0] > best[0]):
            best = d
    return best


def _mem_actions(item: EvidenceItem, who: str) -> list[Action]:
    acts = [
        Action(
            description="See the memory errors in context",
            command=f"grep -n -B 5 -A 20 OutOfMemory <{item.object} log>",
        )
    ]
    if item.object.startswith("Pod/"):
        _, ns, pod, *_ = [*item.object.split("/"), ""]
        acts.append(
            Action(
                description="Compare the container's memory use with its limit",
                command=f"kubectl top pod {pod} -n {ns} --containers",
            )
        )
    return acts


def _data_error_name(msg: str) -> str:
    """What names the bad data: the innermost exception class whose text is a data error (Java's nested causes
    come last), else the phrase the data-error pattern matched."""
    for m in reversed(list(_DATA_CLASS.finditer(msg))):
        if BAD_DATA.search(m.group(1)) or BAD_DATA.search(msg, m.end(), m.end() + 120):
            return m.group(1).rsplit(".", 1)[-1]
    phrase = BAD_DATA.search(msg)
    return phrase.group(0) if phrase else "bad input"


def _stuck_offset(item: EvidenceItem) -> str:
    """A consumer that keeps re-reading one record (a poison message): the offset (and partition) its log names
    at least 3 times, as ", re-reading offset N of partition P (a poison message)"; else ""."""
    counts: dict[tuple[str, str], int] = {}
    for r in item.data.get("records") or ():
        for m in _OFFSET.finditer(str(r.get("msg") or "")):
            off = m["off"] or m["off2"]
            key = (off, m["part"] or m["topic"] or "")
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    (off, part), n = max(counts.items(), key=lambda kv: kv[1])
    if n < SPORADIC or n < 0.5 * sum(counts.values()):
        return ""
    where = f" of partition {part}" if part else ""
    return f", re-reading offset {off}{where} {n}x (a poison message the consumer cannot skip)"


# a file name, not a namespace (System.Xml.XmlException) that happens to end in a data format's name
_DATA_FILE = re.compile(
    r"([\w.\-]+\.(?:csv|tsv|jsonl?|ndjson|xml|parquet|avro|orc|xlsx?|dat)(?:\.gz)?)\b(?!\.\w)", re.I
)
INPUT_WINDOW_S = 300.0  # the input a job picked up shortly before it failed on it


def _input_file(item: EvidenceItem, first_ts: float | None) -> str:
    """The data file the source names most around its first failure (an import or ETL job reading it), as
    ", reading <file>"; else ""."""
    counts: dict[str, int] = {}
    for r in item.data.get("records") or ():
        ts = r.get("ts")
        if first_ts is not None and isinstance(ts, int | float) and not (first_ts - INPUT_WINDOW_S <= ts <= first_ts):
            continue
        for m in _DATA_FILE.finditer(str(r.get("msg") or "")):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    if not counts:
        return ""
    return f", reading {max(counts.items(), key=lambda kv: kv[1])[0]}"


# the field or column a data error names: Elasticsearch "failed to parse field [price]", SQL 'column "country_code"',
# MySQL "Unknown column 'x'", Go "into Go struct field Reading.temp_c", pydantic "validation error for Order order_id"
_BAD_FIELD = re.compile(
    r"\bfield \[(?P<es>[\w.]+)\]|\bstruct field \w+\.(?P<go>\w+)|validation errors? for \w+\s+(?P<pyd>[a-z_][\w.]*)|"
    r"\b(?:column|field|property|attribute)\s+[\"'`](?P<q>[A-Za-z_][\w.]*)[\"'`]|"
    r"\b(?:column|field)\s+(?P<bare>[a-z][a-z0-9]*_[a-z0-9_]+)\b"
)


def _bad_field(msg: str) -> str:
    m = _BAD_FIELD.search(msg)
    name = next((g for g in m.groups() if g), None) if m else None
    return f", in field {name}" if name else ""


# who sent the data: a structured field on the error line (feed=, supplier=, carrier=, partner= ...) or, for a
# file, the host it was fetched from (sftp://sftp.nordcarrier.example/out/x.csv -> nordcarrier)
_PRODUCER_FIELD = re.compile(
    r"\b(?:feed|feed_source|feed_name|supplier|carrier|partner|producer|vendor|merchant|channel|provider)"
    r"[\"']?[=:]\s*[\"']?(?P<v>[A-Za-z][\w.\-]{1,40})"
)
_URL_HOST = re.compile(r"\b(?:s?ftps?|https?|s3|gs|az)://(?P<host>[\w.\-]+)")
_GENERIC_LABELS = frozenset(
    {"sftp", "ftp", "ftps", "www", "api", "files", "file", "data", "s3", "storage", "blob", "cdn", "dl", "download",
     "upload", "uploads", "feeds", "feed", "example", "com", "net", "org", "io", "internal", "local", "amazonaws",
     "core", "windows", "googleapis", "eu", "us"}
)  # fmt: skip


def _producer_named(text: str) -> str | None:
    """A producer field's value ('partner=northwind'), not a line of code that passes one ('partner=partner)')."""
    for m in _PRODUCER_FIELD.finditer(text):
        key = m.group(0).split("=", 1)[0].split(":", 1)[0].strip("\"'").lower()
        if m["v"].lower() != key and text[m.end() : m.end() + 1] not in (")", "("):
            return m["v"]
    return None


def _producer(item: EvidenceItem, first_ts: float | None, msg: str) -> str:
    named = _producer_named(msg)
    if named is None:  # the lines around the failure that report the bad value often name whose it was
        named = next(
            (p for r in (item.data.get("records") or ())[:5000] if BAD_DATA.search(str(r.get("msg") or ""))
             and (p := _producer_named(str(r.get("msg") or "")))),
            None,
        )  # fmt: skip
    if named:
        return f", from {named}"
    files = {f.group(1) for f in _DATA_FILE.finditer(msg)}
    if not files:
        named = _input_file(item, first_ts)
        files = {named.removeprefix(", reading ")} if named else set()
    for r in item.data.get("records") or ():
        text = str(r.get("msg") or "")
        if any(f in text for f in files):
            host = _URL_HOST.search(text)
            if host:
                label = next((p for p in host["host"].split(".") if p.lower() not in _GENERIC_LABELS), None)
                if label:
                    return f", from {label}"
    return ""


def _around(msg: str, what: str, n: int = 160) -> str:
    """The part of a long message around `what`, so the quoted sample shows the data error itself."""
    flat = " ".join(msg.split())
    i = flat.find(what)
    if i < 0 or i + len(what) <= n - 1:
        return flat
    start = max(0, i - 40)
    return "…" + flat[start:]


def _short(s: str, n: int = 160) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _grep_word(msg: str) -> str:
    m = EXCEPTION.search(msg) or BAD_DATA.search(msg)
    word = m.group(0) if m else msg[:40]
    return "'" + word.replace("'", "") + "'"


# ---------------------------------------------------------------- an input that arrived empty

# a count of zero for one partition, file or batch: "rows=0", "query returned 0 rows", "(0 rows", "partition is empty"
_ZERO = re.compile(
    r"\b(?:rows|records|row_count|num_rows|lines|documents|items)[=:]\s*0\b|\breturned 0 (?:rows|records)\b|"
    r"\(0 (?:rows|records)\b|\b0 (?:rows|records) (?:read|loaded|returned|exported|written|found)\b|"
    r"\bpartition is empty\b|\bempty (?:partition|input file|input|dataset|file)\b",
    re.I,
)
_COUNT = re.compile(
    r"\b(?:rows|records|row_count|num_rows|lines|documents|items)[=:]\s*(\d{3,})\b|"
    r"\breturned (\d{3,}) (?:rows|records)\b|\((\d{3,}) (?:rows|records)\b",
    re.I,
)
# what the count is about: a partition key, an object path, a data file
_INPUT_ID = re.compile(
    r"\b((?:dt|ds|date|day|hour|partition|batch|snapshot)=[\w\-:./]+)|((?:s3a?|gs|abfss?|hdfs)://\S+)|"
    r"(/[\w./\-]+\.(?:csv|parquet|json|jsonl|avro|orc|gz|zst))",
    re.I,
)
_COUNT_WORDS = ("row", "record", "empty", "lines", "document", "items")  # cheap test before the expressions
EMPTY_USUAL_MIN = 100  # other inputs of the same feed held at least this many rows


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def empty_input(evidence: EvidenceSet) -> list[Finding]:
    """A partition, file or batch that arrived with zero rows where the others of the same feed hold many: the
    data is missing (an export that wrote an empty result, a source view that returned nothing), and what
    consumes it fails or produces garbage - a data_quality fault, not the consumer's code."""
    zeros: dict[str, list[Rec]] = {}
    usual: list[int] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            low = msg.lower()
            if not any(w in low for w in _COUNT_WORDS):
                continue
            c = _COUNT.search(msg)
            if c:
                usual.append(int(next(g for g in c.groups() if g)))
                continue
            if not _ZERO.search(msg):
                continue
            m = _INPUT_ID.search(msg)
            if m:
                key = next(g for g in m.groups() if g).rstrip(".,;)")
                zeros.setdefault(key, []).append(Rec(item, r.get("ts"), msg, r.get("line"), level_of(r)))
    if not zeros or not usual or median([float(u) for u in usual]) < EMPTY_USUAL_MIN:
        return []
    # one partition key names the same input however each log writes it (dt=2025-04-16 in a path and alone)
    out: list[Finding] = []
    for key, recs in sorted(zeros.items(), key=lambda kv: -len(kv[1])):
        if any(key != k and k in key for k in zeros):
            continue  # the shorter key (the partition) names it for every log
        recs.sort(key=lambda r: r.ts or 0)
        mentions = [rec for rec in _mentions(evidence, key)]
        services = sorted({s for rec in [*recs, *mentions] if (s := service_of(rec.item))})
        failed_after = [
            rec
            for rec in log_records(evidence)
            if rec.level in ("error", "fatal") and recs[0].ts is not None and (rec.ts or 0) >= recs[0].ts
        ]
        out.append(
            Finding(
                analyzer="empty_input",
                domain=Domain.LOGS,
                role="cause",
                code="empty_input",
                category=Category.DATA_QUALITY,
                title=f"input {key} has 0 rows (the feed's others ~{median([float(u) for u in usual]):.0f})",
                mechanism=(
                    f"the input {key} arrived empty (0 rows: '{recs[0].msg.strip()[:140]}') while the feed's other "
                    f"inputs hold ~{median([float(u) for u in usual]):.0f} rows"
                    + (f"; {', '.join(services)} wrote or read it" if services else "")
                    + (", and what consumed it failed after" if failed_after else "")
                    + ": missing data upstream (an export that wrote an empty result), not the consumer's code."
                ),
                object=f"input {key}",
                score=0.8 if failed_after else 0.6,
                ts=recs[0].ts,
                tags=[f"input:{key}", *(f"service:{s}" for s in services)],
                explains=["errors", "exception", "job_failed", "crash_loop", "pod_restarts", "metric_shift"],
                evidence=first_and_last_refs(recs) + ([ref_of(failed_after[0])] if failed_after else []),
                actions=[
                    Action(
                        description=f"Count the rows of {key} at the source and compare with the day before",
                        command=f"# e.g. SELECT count(*) FROM <source> WHERE {key.split('/')[-1]}",
                    )
                ],
            )
        )
        break
    return out


def _mentions(evidence: EvidenceSet, key: str) -> list[Rec]:
    """Records of any log that name the input (so the services that read or wrote it are tagged)."""
    out = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if key in msg:
                out.append(Rec(item, r.get("ts"), msg, r.get("line"), level_of(r)))
                break
    return out
