"""Distributed traces, read as what each service's spans say: one `log` item per service, one record per span.

- Jaeger's query API and UI export (`/api/traces`, "Download JSON"): `{"data": [{"traceID", "spans": [...],
  "processes": {pid: {"serviceName", "tags"}}}]}`; times in microseconds.
- OpenTelemetry OTLP/JSON (a collector's file exporter, `/v1/traces` bodies): `{"resourceSpans": [{"resource":
  {"attributes"}, "scopeSpans" | "instrumentationLibrarySpans": [{"spans": [...]}]}]}`; times in nanoseconds.
- Zipkin v2 (`/api/v2/trace/{id}`, `/api/v2/traces`): a list of spans (or of traces) with `localEndpoint`.
- OpenTelemetry OTLP/JSON logs (`resourceLogs` of a collector's file exporter or a `/v1/logs` body): the same
  resources, each log record (body, severity, time in nanoseconds, attributes) a record of its service.

A span that failed (error tag, OTLP status ERROR, an exception event, HTTP 5xx) is an error record naming the
operation, the peer it called and why it failed ("span GET /charge to payments-api failed after 5003 ms:
context deadline exceeded"); other spans are info records with their duration, so the error share and the
latency stay visible. The analyzers then read them as they read any service's log.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.logs import LineParser, normalise_level
from diagnosis.formats.logstores import Record, emit_groups, object_of
from diagnosis.model import EvidenceItem


class _Span:
    __slots__ = ("attrs", "duration_ms", "error", "id", "kind", "name", "parent", "resource", "start", "trace")

    def __init__(self) -> None:
        self.trace = ""  # trace id
        self.id = ""  # span id
        self.parent = ""  # parent span id ("" for a root)
        self.name = ""
        self.start: float | None = None  # unix seconds
        self.duration_ms: float | None = None
        self.kind = ""  # client, server, producer, consumer, internal
        self.error: str | None = None  # why it failed; "" when it failed without saying why
        self.attrs: dict[str, Any] = {}
        self.resource: dict[str, Any] = {}  # the process/resource labels: service, pod, host


# the attributes that name the other side of a call (OTel semantic conventions, old and new, and Jaeger/Zipkin's)
_PEER_KEYS = ("peer.service", "server.address", "net.peer.name", "rpc.service", "db.name", "db.namespace",
              "messaging.destination.name", "messaging.destination", "http.host", "net.peer.ip")  # fmt: skip
_URL_KEYS = ("url.full", "http.url")
_STATUS_KEYS = ("http.response.status_code", "http.status_code", "rpc.grpc.status_code")


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _peer(attrs: dict[str, Any]) -> str | None:
    for k in _PEER_KEYS:
        if attrs.get(k) not in (None, ""):
            return str(attrs[k])
    for k in _URL_KEYS:
        url = attrs.get(k)
        if isinstance(url, str) and "://" in url:
            return url.split("://", 1)[1].split("/", 1)[0]
    return None


def _record(span: _Span, n: int) -> Record:
    peer = _peer(span.attrs)
    status = next((span.attrs[k] for k in _STATUS_KEYS if span.attrs.get(k) not in (None, "")), None)
    took = f" after {span.duration_ms:.0f} ms" if span.duration_ms is not None else ""
    to = f" to {peer}" if peer and span.kind in ("client", "producer", "") else ""
    code = f" (status {status})" if status is not None else ""
    failed = span.error is not None or (str(status).isdigit() and int(str(status)) >= 500)
    if failed:
        why = f": {span.error}" if span.error else ""
        msg = f"span {span.name}{to} failed{took}{code}{why}"
    else:
        msg = f"span {span.name}{to} ok{took}{code}"
    return {"ts": span.start, "level": "error" if failed else "info", "msg": msg, "line": n}


def _emit(doc: Document, ctx: ParseContext, spans: list[_Span], export: str) -> Iterator[EvidenceItem]:
    groups: dict[str, list[Record]] = defaultdict(list)
    sources: dict[str, dict[str, Any]] = {}
    tree: list[list[Any]] = []
    for n, span in enumerate(spans, 1):
        obj, source = object_of(span.resource, "traces", doc)
        sources.setdefault(obj, source)
        groups[obj].append(_record(span, n))
        if span.trace and span.id and span.duration_ms is not None:
            service = str(span.resource.get("service_name") or obj.rsplit("/", 1)[-1])
            tree.append(
                [span.trace, span.id, span.parent, service, span.name, span.duration_ms, span.error is not None]
            )
    yield from emit_groups(doc, ctx, groups, sources, export)
    if tree:  # the call tree itself, for where the time of a slow request is spent
        starts = [s.start for s in spans if s.start is not None]
        fields = ["trace", "span", "parent", "service", "operation", "duration_ms", "error"]
        yield ctx.item(doc.path, "trace/spans", f"traces {doc.path}", {"fields": fields, "spans": tree},
                       max(starts) if starts else None)  # fmt: skip


def _labels(attrs: dict[str, Any]) -> dict[str, Any]:
    """Resource attributes as the labels object_of reads (service.name -> service_name, k8s.pod.name -> ...)."""
    return {k.replace(".", "_"): v for k, v in attrs.items()} | {
        "namespace": attrs.get("k8s.namespace.name"),
        "pod": attrs.get("k8s.pod.name"),
        "container": attrs.get("k8s.container.name"),
        "host": attrs.get("host.name") or attrs.get("hostname") or attrs.get("k8s.node.name"),
    }


# --- Jaeger -------------------------------------------------------------------------------------------------


def _tags(tags: Any) -> dict[str, Any]:
    return {str(t["key"]): t.get("value") for t in tags or [] if isinstance(t, dict) and "key" in t}


def _jaeger_traces(v: Any) -> list[dict[str, Any]] | None:
    data = v.get("data") if isinstance(v, dict) else v
    if (
        isinstance(data, list)
        and data
        and all(isinstance(t, dict) and isinstance(t.get("spans"), list) and "traceID" in t for t in data)
    ):
        return data
    return None


def detect_jaeger(doc: Document) -> bool:
    return _jaeger_traces(doc.value) is not None


def _jaeger_error(tags: dict[str, Any], logs: Any) -> str | None:
    fields = [_tags(entry.get("fields")) for entry in logs or [] if isinstance(entry, dict)]
    said = next(
        (
            str(f.get("error.object") or f.get("message") or f.get("error.message") or f.get("exception.message"))
            for f in fields
            if f.get("event") in ("error", "exception") or "error.object" in f or "exception.message" in f
        ),
        None,
    )
    if tags.get("error") in (True, "true") or tags.get("otel.status_code") == "ERROR":
        return said or str(tags.get("otel.status_description") or tags.get("error.message") or "")
    return said


@FORMATS.format("jaeger", shapes={"json"}, detect=detect_jaeger, order=30)
def parse_jaeger(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    spans: list[_Span] = []
    for trace in _jaeger_traces(doc.value) or []:
        processes = _dict(trace.get("processes"))
        for raw in trace["spans"]:
            if not isinstance(raw, dict):
                continue
            s = _Span()
            proc = processes.get(str(raw.get("processID"))) or raw.get("process") or {}
            s.resource = _labels(_tags(proc.get("tags"))) | {"service_name": proc.get("serviceName")}
            s.attrs = _tags(raw.get("tags"))
            s.name = str(raw.get("operationName") or "")
            s.trace, s.id = str(raw.get("traceID") or trace.get("traceID") or ""), str(raw.get("spanID") or "")
            s.parent = next(
                (
                    str(r.get("spanID"))
                    for r in raw.get("references") or ()
                    if isinstance(r, dict) and r.get("refType") in ("CHILD_OF", None) and r.get("spanID")
                ),
                "",
            )
            s.kind = str(s.attrs.get("span.kind") or "")
            s.start = raw["startTime"] / 1e6 if isinstance(raw.get("startTime"), int | float) else None
            s.duration_ms = raw["duration"] / 1e3 if isinstance(raw.get("duration"), int | float) else None
            s.error = _jaeger_error(s.attrs, raw.get("logs"))
            spans.append(s)
    yield from _emit(doc, ctx, sorted(spans, key=lambda s: s.start or 0.0), "jaeger")


# --- OpenTelemetry OTLP/JSON --------------------------------------------------------------------------------

_OTLP_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _any_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_any_value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    return None


def _attrs(attrs: Any) -> dict[str, Any]:
    return {str(a["key"]): _any_value(a.get("value")) for a in attrs or [] if isinstance(a, dict) and "key" in a}


def _otlp_batches(v: Any) -> list[dict[str, Any]] | None:
    batches = v.get("resourceSpans") if isinstance(v, dict) else None
    if isinstance(batches, list) and all(isinstance(b, dict) for b in batches):
        return batches
    return None


def detect_otlp(doc: Document) -> bool:
    return _otlp_batches(doc.value) is not None


def _nanos(v: Any) -> float | None:
    try:
        return int(str(v)) / 1e9
    except ValueError:
        return None


def _otlp_span(raw: dict[str, Any], resource: dict[str, Any]) -> _Span:
    s = _Span()
    s.resource = resource
    s.attrs = _attrs(raw.get("attributes"))
    s.name = str(raw.get("name") or "")
    s.trace, s.id, s.parent = (str(raw.get(k) or "") for k in ("traceId", "spanId", "parentSpanId"))
    kind = raw.get("kind")
    s.kind = _OTLP_KINDS.get(kind, "") if isinstance(kind, int) else str(kind or "").removeprefix("SPAN_KIND_").lower()
    s.start, end = _nanos(raw.get("startTimeUnixNano")), _nanos(raw.get("endTimeUnixNano"))
    s.duration_ms = (end - s.start) * 1e3 if s.start is not None and end is not None else None
    status = _dict(raw.get("status"))
    exceptions = [
        _attrs(e.get("attributes"))
        for e in raw.get("events") or []
        if isinstance(e, dict) and e.get("name") == "exception"
    ]
    said = next(
        (": ".join(str(x[k]) for k in ("exception.type", "exception.message") if x.get(k)) for x in exceptions), None
    )
    if status.get("code") in (2, "STATUS_CODE_ERROR", "ERROR"):
        s.error = said or str(status.get("message") or "")
    elif said:
        s.error = said
    return s


@FORMATS.format("otlp-traces", shapes={"json"}, detect=detect_otlp, order=30)
def parse_otlp(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    spans: list[_Span] = []
    for batch in _otlp_batches(doc.value) or []:
        resource = _labels(_attrs((batch.get("resource") or {}).get("attributes")))
        for scope in batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []:
            for raw in scope.get("spans") or [] if isinstance(scope, dict) else []:
                if isinstance(raw, dict):
                    spans.append(_otlp_span(raw, resource))
    yield from _emit(doc, ctx, sorted(spans, key=lambda s: s.start or 0.0), "otlp")


# --- OTLP logs ----------------------------------------------------------------------------------------------


def _otlp_log_batches(v: Any) -> list[dict[str, Any]] | None:
    batches = v.get("resourceLogs") if isinstance(v, dict) else None
    if isinstance(batches, list) and all(isinstance(b, dict) for b in batches):
        return batches
    return None


def detect_otlp_logs(doc: Document) -> bool:
    return _otlp_log_batches(doc.value) is not None


# OTLP severityNumber ranges: 1-4 trace, 5-8 debug, 9-12 info, 13-16 warn, 17-20 error, 21-24 fatal
_SEVERITY = ((21, "fatal"), (17, "error"), (13, "warn"), (9, "info"), (1, "debug"))


def _otlp_log_record(raw: dict[str, Any], parser: LineParser, n: int) -> Record:
    body = _any_value(raw.get("body"))
    text = body if isinstance(body, str) else " ".join(f"{k}={v}" for k, v in _dict(body).items()) or str(body or "")
    attrs = _attrs(raw.get("attributes"))
    # what the record says beside its body (exception.type/message, the fields a structured logger adds)
    extra = " ".join(
        f"{k}={v}"
        for k, v in attrs.items()
        if not k.startswith(("code.", "thread.", "log.")) and v not in (None, "") and f"{v}" not in text
    )
    own_ts, own_level, msg = parser.parse(f"{text} {extra}".strip())
    number = raw.get("severityNumber")
    level = normalise_level(raw.get("severityText")) or next(
        (name for floor, name in _SEVERITY if isinstance(number, int) and number >= floor), None
    )
    ts = _nanos(raw.get("timeUnixNano")) if raw.get("timeUnixNano") not in (None, "0", 0) else None
    ts = ts if ts is not None else _nanos(raw.get("observedTimeUnixNano") or "x")
    return {"ts": ts if ts is not None else own_ts, "level": level or own_level, "msg": msg, "line": n}


@FORMATS.format("otlp-logs", shapes={"json"}, detect=detect_otlp_logs, order=30)
def parse_otlp_logs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    sources: dict[str, dict[str, Any]] = {}
    n = 0
    for batch in _otlp_log_batches(doc.value) or []:
        resource = _labels(_attrs((batch.get("resource") or {}).get("attributes")))
        obj, source = object_of(resource, "otlp", doc)
        sources.setdefault(obj, source)
        for scope in batch.get("scopeLogs") or batch.get("instrumentationLibraryLogs") or []:
            for raw in scope.get("logRecords") or [] if isinstance(scope, dict) else []:
                if isinstance(raw, dict):
                    n += 1
                    groups[obj].append(_otlp_log_record(raw, parser, n))
    yield from emit_groups(doc, ctx, groups, sources, "otlp-logs")


# --- Zipkin v2 ----------------------------------------------------------------------------------------------


def _is_zipkin_span(s: Any) -> bool:
    return isinstance(s, dict) and "traceId" in s and "id" in s and isinstance(s.get("localEndpoint"), dict)


def _zipkin_spans(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, list) and v and all(isinstance(t, list) for t in v):  # /api/v2/traces: a list of traces
        v = [s for t in v for s in t]
    if isinstance(v, list) and v and all(map(_is_zipkin_span, v)):
        return v
    return None


def detect_zipkin(doc: Document) -> bool:
    return _zipkin_spans(doc.value) is not None


@FORMATS.format("zipkin", shapes={"json"}, detect=detect_zipkin, order=30)
def parse_zipkin(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    spans: list[_Span] = []
    for raw in _zipkin_spans(doc.value) or []:
        s = _Span()
        s.resource = {"service_name": raw["localEndpoint"].get("serviceName")}
        tags = _dict(raw.get("tags"))
        remote = _dict(raw.get("remoteEndpoint"))
        s.attrs = dict(tags) | ({"peer.service": remote["serviceName"]} if remote.get("serviceName") else {})
        s.name = str(raw.get("name") or "")
        s.trace, s.id, s.parent = (str(raw.get(k) or "") for k in ("traceId", "id", "parentId"))
        s.kind = str(raw.get("kind") or "").lower()
        s.start = raw["timestamp"] / 1e6 if isinstance(raw.get("timestamp"), int | float) else None
        s.duration_ms = raw["duration"] / 1e3 if isinstance(raw.get("duration"), int | float) else None
        s.error = str(tags["error"]) if "error" in tags else None
        spans.append(s)
    yield from _emit(doc, ctx, sorted(spans, key=lambda s: s.start or 0.0), "zipkin")
