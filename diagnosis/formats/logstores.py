"""Query results of the log stores operators search during an incident, each becoming `log` items the analyzers
read like files.

- Grafana Loki HTTP API (`/loki/api/v1/query_range` and `/query`, also what `logcli --output=raw` wraps):
  `{"status": "success", "data": {"resultType": "streams", "result": [{"stream": {labels}, "values":
  [["<unix ns>", "<line>"], ...]}]}}` -> one item per pod (labels namespace + pod [+ container]: `Pod/<ns>/<pod>`,
  as `kubectl logs` files are) or per service (`loki/<app|service_name|job|...>`).
- Elasticsearch / OpenSearch `_search` responses over log documents: `{"hits": {"hits": [{"_index", "_source":
  {...}}]}}` with ECS (`@timestamp`, `message`, `log.level`, `service.name`, `kubernetes.pod.name`, `host.name`,
  `error.*`) or Filebeat/Fluentd fields (`log`, `level`, `kubernetes.pod_name`) -> one item per pod or service.
- Splunk search results (REST `output_mode=json`, `splunk search ... -output json`, the export endpoint's JSON
  lines `{"preview": false, "result": {...}}`): `{"results": [{"_time", "_raw", "host", "source", "sourcetype",
  ...}]}` -> one item per host and source (the file a forwarder read, its service named by the source's path or
  the sourcetype); `_raw` is the event as it was logged, read by the line parser.

Each message is read by the log line parser too, so a JSON or levelled text message keeps its own level and
time where the store's are missing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.logs import LineParser, normalise_level, with_error_details
from diagnosis.model import EvidenceItem

Record = dict[str, Any]
# the labels or fields that name the service a stream or document speaks for, most specific first; then the
# weaker names a stream has without one (a systemd unit, a container, a scrape job)
_APP_KEYS = ("app", "app_kubernetes_io_name", "service_name", "service", "component")
_OTHER_KEYS = ("unit", "systemd_unit", "container", "container_name", "job")
_HOST_KEYS = ("host", "hostname", "host_name", "node_name", "nodename", "instance")


def emit_groups(
    doc: Document, ctx: ParseContext, groups: dict[str, list[Record]], sources: dict[str, dict[str, Any]], export: str
) -> Iterator[EvidenceItem]:
    for obj, records in groups.items():
        records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0, r["line"]))
        kept = records[-ctx.max_log_records :]
        stamps = [r["ts"] for r in kept if r["ts"] is not None]
        source = {"path": doc.path, "export": export, **sources.get(obj, {})}
        data = {"records": kept, "source": source, "truncated": len(kept) < len(records)}
        yield ctx.item(doc.path, "log", obj, data, max(stamps) if stamps else None)


def _record(parser: LineParser, n: int, ts: float | None, level: str | None, text: str) -> Record:
    own_ts, own_level, msg = parser.parse(text.rstrip("\n"))
    return {"ts": ts if ts is not None else own_ts, "level": level or own_level, "msg": msg, "line": n}


def object_of(labels: dict[str, Any], prefix: str, doc: Document) -> tuple[str, dict[str, Any]]:
    """The item a stream or document belongs to, and what its source says of it (service, host)."""
    ns = labels.get("namespace") or labels.get("k8s_namespace_name") or labels.get("namespace_name")
    pod = labels.get("pod") or labels.get("k8s_pod_name") or labels.get("pod_name")
    container = labels.get("container") or labels.get("k8s_container_name") or labels.get("container_name")
    app = next((str(labels[k]) for k in _APP_KEYS if isinstance(labels.get(k), str) and labels[k]), None)
    source: dict[str, Any] = {"service": app} if app else {}
    if ns and pod:
        return (f"Pod/{ns}/{pod}/{container}" if container else f"Pod/{ns}/{pod}"), source
    host = next((str(labels[k]) for k in _HOST_KEYS if isinstance(labels.get(k), str) and labels[k]), None)
    if host:
        source["host"] = host
    filename = labels.get("filename")
    if not app and isinstance(filename, str) and filename.startswith("/"):  # promtail's file target: the path speaks
        return f"{prefix}/{host or 'file'}{filename}", source
    name = app or next((str(labels[k]) for k in _OTHER_KEYS if isinstance(labels.get(k), str) and labels[k]), None)
    if name:
        name = name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".service")
        source["service"] = name
        return f"{prefix}/{name}", source
    return (f"{prefix}/{host}", source) if host else (doc.path, source)


# --- Grafana Loki -------------------------------------------------------------------------------------------


def _loki_streams(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, dict) and isinstance(v.get("response"), dict):  # saved beside its query
        v = v["response"]
    data = v.get("data") if isinstance(v, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "streams" or not isinstance(data.get("result"), list):
        return None
    streams = data["result"]
    if all(isinstance(s, dict) and isinstance(s.get("values"), list) for s in streams):
        return streams
    return None


def detect_loki(doc: Document) -> bool:
    return _loki_streams(doc.value) is not None


@FORMATS.format("loki", shapes={"json"}, detect=detect_loki, order=14)
def parse_loki(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    sources: dict[str, dict[str, Any]] = {}
    n = 0
    for stream in _loki_streams(doc.value) or []:
        labels: dict[str, Any] = stream["stream"] if isinstance(stream.get("stream"), dict) else {}
        obj, source = object_of(labels, "loki", doc)
        sources.setdefault(obj, source)
        # a level label (promtail/alloy pipelines, OTel severity_text) is the store's own word on the line
        level = normalise_level(labels.get("level") or labels.get("detected_level") or labels.get("severity_text"))
        for pair in stream["values"]:
            if not isinstance(pair, list) or len(pair) < 2:
                continue
            n += 1
            ts = _ns_ts(pair[0])
            groups[obj].append(_record(parser, n, ts, level, str(pair[1])))
    yield from emit_groups(doc, ctx, groups, sources, "loki")


def _ns_ts(value: Any) -> float | None:
    """Loki's timestamps are unix nanoseconds as a string."""
    try:
        return int(str(value)) / 1e9
    except ValueError:
        return parse_ts(value)


# --- Elasticsearch / OpenSearch -----------------------------------------------------------------------------

_ES_MESSAGE = ("message", "msg", "log", "event.original", "error.message")
_ES_LEVEL = ("log.level", "level", "severity", "loglevel", "log_level")
_ES_TIME = ("@timestamp", "timestamp", "time", "event.created")


def _es_hits(v: Any) -> list[dict[str, Any]] | None:
    hits = v.get("hits") if isinstance(v, dict) else None
    inner = hits.get("hits") if isinstance(hits, dict) else None
    if not isinstance(inner, list) or not all(
        isinstance(h, dict) and isinstance(h.get("_source"), dict) for h in inner
    ):
        return None
    if not inner and "took" not in v:
        return None
    return inner


def _field(src: dict[str, Any], dotted: str) -> Any:
    """A field by its dotted ECS name, whether the document nests it (`{"log": {"level": ..}}`) or not."""
    if dotted in src:
        return src[dotted]
    cur: Any = src
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _is_log_doc(src: dict[str, Any]) -> bool:
    return any(_field(src, k) is not None for k in _ES_TIME) and any(
        isinstance(_field(src, k), str) for k in _ES_MESSAGE
    )


def detect_es(doc: Document) -> bool:
    hits = _es_hits(doc.value)
    return hits is not None and (
        not hits or sum(map(_is_log_doc, (h["_source"] for h in hits[:20]))) * 2 >= len(hits[:20])
    )


def _es_labels(src: dict[str, Any]) -> dict[str, Any]:
    k8s: dict[str, Any] = src["kubernetes"] if isinstance(src.get("kubernetes"), dict) else {}
    pod = _field(k8s, "pod.name") or k8s.get("pod_name")
    container = _field(k8s, "container.name") or k8s.get("container_name")
    ns = k8s.get("namespace") or k8s.get("namespace_name")
    labels = {
        "namespace": ns,
        "pod": pod,
        "container": container,
        "service_name": _field(src, "service.name") or src.get("service"),
        "app": src.get("app"),
        "host": _field(src, "host.name") or _field(src, "host.hostname") or src.get("host"),
    }
    return {k: v for k, v in labels.items() if isinstance(v, str) and v}


@FORMATS.format("elasticsearch-logs", shapes={"json"}, detect=detect_es, order=30)
def parse_es(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    sources: dict[str, dict[str, Any]] = {}
    for n, hit in enumerate(_es_hits(doc.value) or [], 1):
        src = hit["_source"]
        obj, source = object_of(_es_labels(src), "es", doc)
        sources.setdefault(obj, source)
        msg = next((str(m) for k in _ES_MESSAGE if isinstance(m := _field(src, k), str) and m), "")
        level = next((lv for k in _ES_LEVEL if (lv := normalise_level(_field(src, k)))), None)
        ts = next((t for k in _ES_TIME if (t := parse_ts(_field(src, k))) is not None), None)
        # ECS error.type / error.message / error.stack_trace beside the message
        error = src.get("error")
        if not isinstance(error, dict):  # ECS flattened: "error.type", "error.message", "error.stack_trace"
            error = {k[6:]: v for k, v in src.items() if k.startswith("error.")}
        if error:
            msg = with_error_details(msg, {"error": error}) if msg else str(error.get("message") or "")
        labels = src.get("labels")
        if level in ("error", "fatal", "warn") and isinstance(labels, dict):  # ECS custom fields: feed, tenant ...
            pairs = " ".join(
                f"{k}={v}" for k, v in labels.items() if isinstance(v, str | int | float) and f"{v}" not in msg
            )
            msg = f"{msg} [{pairs}]" if pairs else msg
        groups[obj].append(_record(parser, n, ts, level, msg))
    yield from emit_groups(doc, ctx, groups, sources, "elasticsearch")


# --- Splunk ---------------------------------------------------------------------------------------------------


def _splunk_results(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, dict) and isinstance(v.get("results"), list):
        rows = v["results"]
    elif isinstance(v, list) and v and all(isinstance(x, dict) and isinstance(x.get("result"), dict) for x in v):
        rows = [x["result"] for x in v]  # the export endpoint's stream, one object per line
    else:
        return None
    if rows and all(isinstance(r, dict) and ("_raw" in r or "_time" in r) for r in rows):
        return rows
    return None


def detect_splunk(doc: Document) -> bool:
    return _splunk_results(doc.value) is not None


def _splunk_object(r: dict[str, Any], doc: Document) -> tuple[str, dict[str, Any]]:
    """`splunk/<host>/<service>`: a forwarder's source path names the service (/var/log/<service>/...), else the
    sourcetype (`kyc:gateway:json` -> kyc-gateway)."""
    host = str(r.get("host") or "") or None
    source = str(r.get("source") or "")
    service = None
    parts = [p for p in source.split("/") if p]
    if len(parts) >= 3 and parts[0] == "var" and parts[1] == "log":
        service = parts[2].rsplit(".", 1)[0] if len(parts) == 3 else parts[2]
    elif parts:
        service = parts[-1].rsplit(".", 1)[0]
    sourcetype = str(r.get("sourcetype") or "")
    if not service and sourcetype:
        words = [w for w in sourcetype.split(":") if w and w not in ("json", "log", "text", "access_combined")]
        service = "-".join(words[:2]) or None
    labels = {"host": host, "service": service}
    return object_of({k: v for k, v in labels.items() if v}, "splunk", doc)


@FORMATS.format("splunk", shapes={"json", "jsonl"}, detect=detect_splunk, order=30)
def parse_splunk(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    sources: dict[str, dict[str, Any]] = {}
    for n, r in enumerate(_splunk_results(doc.value) or [], 1):
        obj, source = _splunk_object(r, doc)
        sources.setdefault(obj, source)
        raw = r.get("_raw")
        if not isinstance(raw, str) or not raw.strip():
            raw = " ".join(f"{k}={v}" for k, v in r.items() if not k.startswith("_") and v not in (None, ""))
        level = next((lv for k in ("level", "severity", "log_level") if (lv := normalise_level(r.get(k)))), None)
        groups[obj].append(_record(parser, n, parse_ts(r.get("_time")), level, raw))
    yield from emit_groups(doc, ctx, groups, sources, "splunk")
