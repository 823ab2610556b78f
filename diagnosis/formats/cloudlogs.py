"""Log exports of the cloud providers' log services, each becoming `log` items the analyzers read like files.

- CloudWatch Logs (`aws logs filter-log-events` / `get-log-events`): `events` [{timestamp (ms), message,
  logStreamName?}] -> one item per log stream, object `cloudwatch/<stream>` (the file's path when unnamed).
- Google Cloud Logging (`gcloud logging read --format=json`): a list of LogEntry {timestamp, severity,
  textPayload | jsonPayload | protoPayload, resource {type, labels}} -> one item per resource; a k8s_container
  resource is its pod (`Pod/<ns>/<pod>/<container>`, as `kubectl logs` files are).
- Azure Monitor / Log Analytics query results: the REST API's `tables` [{columns, rows}], or the rows as
  objects (`az monitor log-analytics query`), with a TimeGenerated column -> one item per pod, computer or
  resource.
- Windows event log as PowerShell writes it (`Get-WinEvent | ConvertTo-Json`: TimeCreated, Message, Level,
  ProviderName, MachineName) -> one item per machine, `windows/<MachineName>`.

Each message is read by the log line parser too, so a JSON or levelled text message keeps its level.
"""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.logs import LineParser, normalise_level, with_error_details
from diagnosis.model import EvidenceItem

Record = dict[str, Any]


def _emit(doc: Document, ctx: ParseContext, groups: dict[str, list[Record]], source: str) -> Iterator[EvidenceItem]:
    for obj, records in groups.items():
        records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0, r["line"]))
        kept = records[-ctx.max_log_records :]
        stamps = [r["ts"] for r in kept if r["ts"] is not None]
        data = {"records": kept, "source": {"path": doc.path, "export": source}, "truncated": len(kept) < len(records)}
        item = ctx.item(doc.path, "log", obj, data, max(stamps) if stamps else None)
        if obj == f"lambda/{doc.stem}":  # streams of a function the export does not name
            ctx.shared.setdefault("lambda_unnamed", []).append(item)
            if len(ctx.shared["lambda_unnamed"]) == 1:
                ctx.after.append(_name_lambda_streams)
        yield item


def _name_lambda_streams(ctx: ParseContext) -> None:
    """Streams of an unnamed function belong to the one Lambda function the bundle's metrics are about, if one."""
    functions = ctx.shared.get("lambda_functions") or set()
    if len(functions) == 1:
        for item in ctx.shared.get("lambda_unnamed", ()):
            item.object = f"lambda/{next(iter(functions))}"


def _record(parser: LineParser, n: int, ts: float | None, level: str | None, text: str) -> Record:
    """A record from an export's own time and level, and what the message itself says where the export is silent."""
    own_ts, own_level, msg = parser.parse(text.rstrip("\n"))
    return {"ts": ts if ts is not None else own_ts, "level": level or own_level, "msg": msg, "line": n}


# --- CloudWatch Logs ------------------------------------------------------------------------------------------


def _cw_events(v: Any) -> list[dict[str, Any]] | None:
    events = v.get("events") if isinstance(v, dict) else None
    if isinstance(events, list) and all(
        isinstance(e, dict) and "timestamp" in e and isinstance(e.get("message"), str) for e in events
    ):
        return events
    return None


def detect_cloudwatch_logs(doc: Document) -> bool:
    events = _cw_events(doc.value)
    return events is not None and (bool(events) or "nextForwardToken" in doc.value or "searchedLogStreams" in doc.value)


# a Lambda function's log stream: "2025/06/21/[$LATEST]f3b0..." (one per execution environment)
_LAMBDA_STREAM = re.compile(r"^\d{4}/\d{2}/\d{2}/\[[^\]]+\][0-9a-f]{8,}$")
# how the function's own lines name it: its ARN, or Powertools' function_name field
_FUNCTION_NAME = re.compile(r'arn:aws:lambda:[\w-]+:\d+:function:([\w-]+)|"function_name"\s*:\s*"([\w-]+)"')


def _lambda_function(lines: list[tuple[str, str]]) -> str | None:
    """The one function whose streams these (stream, message) lines are, when they name it (and name no other)."""
    names = {
        m[1] or m[2]
        for stream, msg in lines[:2000]
        if _LAMBDA_STREAM.match(stream)
        for m in _FUNCTION_NAME.finditer(msg)
    }
    return next(iter(names)) if len(names) == 1 else None


def _stream_object(group: str | None, stream: str | None, function: str | None, doc: Document) -> str:
    """A Lambda stream is one instance of its function: the function speaks; other streams speak for themselves."""
    if group and group.startswith("/aws/lambda/"):
        return f"lambda/{group.removeprefix('/aws/lambda/')}"
    if stream and _LAMBDA_STREAM.match(stream):
        # one function's execution environments; unnamed, the export itself stands for the function
        return f"lambda/{function or doc.stem}"
    if stream:
        return f"cloudwatch/{stream}"
    return f"cloudwatch/{group}" if group else doc.path


@FORMATS.format("cloudwatch-logs", shapes={"json"}, detect=detect_cloudwatch_logs, order=30)
def parse_cloudwatch_logs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    events = _cw_events(doc.value) or []
    function = _lambda_function([(str(e.get("logStreamName") or ""), e["message"]) for e in events])
    for n, e in enumerate(events, 1):
        stream = e.get("logStreamName")
        obj = _stream_object(None, stream if isinstance(stream, str) else None, function, doc)
        groups[obj].append(_record(parser, n, parse_ts(e.get("timestamp")), None, e["message"]))
    yield from _emit(doc, ctx, groups, "cloudwatch-logs")


# --- CloudWatch Logs Insights (`aws logs get-query-results`) ----------------------------------------------------


def _insights_rows(v: Any) -> list[dict[str, Any]] | None:
    results = v.get("results") if isinstance(v, dict) else None
    if not isinstance(results, list) or not all(
        isinstance(row, list) and all(isinstance(f, dict) and "field" in f for f in row) for row in results
    ):
        return None
    return [{str(f["field"]): f.get("value") for f in row} for row in results]


def _ptr_group(ptr: Any) -> str | None:
    """The log group a result's @ptr points into (the pointer is base64 protobuf that holds 'account:group')."""
    if not isinstance(ptr, str):
        return None
    raw = base64.b64decode(
        ptr + "=" * (-len(ptr) % 4), altchars=b"-_" if "-" in ptr or "_" in ptr else None, validate=False
    )
    m = re.search(rb"\d{12}:(/[\w/.\-]+)", raw)
    return m.group(1).decode() if m else None


def detect_insights(doc: Document) -> bool:
    rows = _insights_rows(doc.value)
    return rows is not None and (bool(rows) and any("@message" in r or "@timestamp" in r for r in rows))


@FORMATS.format("cloudwatch-insights", shapes={"json"}, detect=detect_insights, order=30)
def parse_insights(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each result row as a log record of its log group (or stream): @message, or the other fields as k=v."""
    parser = LineParser()
    rows = _insights_rows(doc.value) or []
    function = _lambda_function([(str(r.get("@logStream") or ""), str(r.get("@message") or "")) for r in rows])
    groups: dict[str, list[Record]] = defaultdict(list)
    for n, r in enumerate(rows, 1):
        msg = r.get("@message")
        if not isinstance(msg, str):
            msg = " ".join(f"{k}={v}" for k, v in r.items() if not k.startswith("@") and v not in (None, ""))
        group = r.get("@log") if isinstance(r.get("@log"), str) else _ptr_group(r.get("@ptr"))
        group = str(group).split(":", 1)[-1] if group else None  # @log is "account:group"
        stream = r.get("@logStream") if isinstance(r.get("@logStream"), str) else None
        groups[_stream_object(group, stream, function, doc)].append(
            _record(parser, n, parse_ts(r.get("@timestamp")), None, msg)
        )
    yield from _emit(doc, ctx, groups, "cloudwatch-insights")


# --- AWS CloudTrail -------------------------------------------------------------------------------------------


def _trail_events(v: Any) -> list[dict[str, Any]] | None:
    """`aws cloudtrail lookup-events` (`Events` with EventName, EventTime, CloudTrailEvent) or a trail's log file
    (`Records` with eventName, eventTime, eventSource)."""
    if not isinstance(v, dict):
        return None
    events = v.get("Events")
    if isinstance(events, list) and events and all(isinstance(e, dict) and "EventName" in e for e in events):
        out = []
        for e in events:
            raw = e.get("CloudTrailEvent")
            try:
                inner = json.loads(raw) if isinstance(raw, str) else {}
            except ValueError:
                inner = {}
            out.append(inner | {k: v for k, v in e.items() if k != "CloudTrailEvent"})
        return out
    records = v.get("Records")
    if (
        isinstance(records, list)
        and records
        and all(isinstance(r, dict) and "eventName" in r and "eventSource" in r for r in records)
    ):
        return records
    return None


def _trail_text(e: dict[str, Any]) -> str:
    who = e.get("Username") or ((e.get("userIdentity") or {}).get("arn") if isinstance(e.get("userIdentity"), dict)
                                else None)  # fmt: skip
    resources = [str(r.get("ResourceName")) for r in e.get("Resources") or () if isinstance(r, dict)]
    params = e.get("requestParameters")
    if not resources and isinstance(params, dict):
        resources = [str(v) for k, v in params.items() if isinstance(v, str) and k.lower().endswith(("name", "url",
                     "arn", "id"))][:2]  # fmt: skip
    text = f"{e.get('eventName') or e.get('EventName')} {' '.join(resources)}".strip()
    if who:
        text += f" by {who}"
    if isinstance(params, dict) and params:
        text += f" requestParameters={json.dumps(params, sort_keys=True)[:600]}"
    if e.get("errorCode"):
        text += f" errorCode={e['errorCode']} {e.get('errorMessage') or ''}".rstrip()
    return text


@FORMATS.format("cloudtrail", shapes={"json"}, detect=lambda d: _trail_events(d.value) is not None, order=29)
def parse_cloudtrail(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `log` per event source (`cloudtrail/sqs.amazonaws.com`): who called what on which resource, with the
    request's parameters and the error it got; read-only calls that succeeded are left out (they change nothing)."""
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    for n, e in enumerate(_trail_events(doc.value) or [], 1):
        read_only = str(e.get("ReadOnly", e.get("readOnly", ""))).lower() == "true"
        if read_only and not e.get("errorCode"):
            continue
        ts = parse_ts(e.get("EventTime") or e.get("eventTime"))
        level = "error" if e.get("errorCode") else "info"
        source = str(e.get("EventSource") or e.get("eventSource") or "aws")
        groups[f"cloudtrail/{source}"].append(_record(parser, n, ts, level, _trail_text(e)))
    yield from _emit(doc, ctx, groups, "cloudtrail")


# --- Google Cloud Logging -------------------------------------------------------------------------------------

_GCP_PAYLOADS = ("textPayload", "jsonPayload", "protoPayload")


def _is_log_entry(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and "timestamp" in e
        and (any(k in e for k in _GCP_PAYLOADS) or isinstance(e.get("httpRequest"), dict))
        and "logName" in e
    )


def detect_gcp_logs(doc: Document) -> bool:
    v = doc.value
    return isinstance(v, list) and bool(v) and all(map(_is_log_entry, v))


def _gcp_object(resource: Any, doc: Document) -> str:
    if not isinstance(resource, dict):
        return doc.path
    labels: dict[str, Any] = resource["labels"] if isinstance(resource.get("labels"), dict) else {}
    rtype = str(resource.get("type") or "resource")
    if rtype == "k8s_container" and labels.get("namespace_name") and labels.get("pod_name"):
        container = labels.get("container_name")
        base = f"Pod/{labels['namespace_name']}/{labels['pod_name']}"
        return f"{base}/{container}" if container else base
    name = next(
        (labels[k] for k in ("service_name", "forwarding_rule_name", "function_name", "instance_id", "database_id",
                             "cluster_name", "job_id", "module_id", "pod_name", "node_name") if labels.get(k)),
        None,
    )  # fmt: skip
    return f"gcp/{rtype}/{name}" if name else f"gcp/{rtype}"


def _gcp_text(e: dict[str, Any]) -> str:
    req = e.get("httpRequest")
    payload = e.get("jsonPayload")
    if isinstance(req, dict) and (
        not any(k in e for k in _GCP_PAYLOADS) or (isinstance(payload, dict) and "statusDetails" in payload)
    ):
        # a request log (Cloud Run, load balancer): the request as an access-log line; a load balancer's entry adds
        # why it answered so (statusDetails: backend_timeout, failed_to_connect_to_backend...) and the backend
        line = (
            f'"{req.get("requestMethod", "GET")} {req.get("requestUrl", "/")} {req.get("protocol", "HTTP/1.1")}" '
            f"{req.get('status', '-')} {req.get('responseSize', '-')} latency={req.get('latency', '-')}"
        )
        if isinstance(payload, dict) and payload.get("statusDetails"):
            line += f" statusDetails={payload['statusDetails']}"
            labels = (e.get("resource") or {}).get("labels") or {}
            if isinstance(labels, dict) and labels.get("backend_service_name"):
                line += f" upstream={labels['backend_service_name']}"
        return line
    if isinstance(e.get("textPayload"), str):
        return str(e["textPayload"])
    if isinstance(payload, dict):
        msg = next(
            (payload[k] for k in ("message", "msg", "log", "textPayload", "event") if isinstance(payload.get(k), str)),
            "",
        )  # (structlog names its message `event`)
        return with_error_details(str(msg), payload, skip="message") if msg else json.dumps(payload, default=str)[:2000]
    proto = e.get("protoPayload")
    if isinstance(proto, dict):  # audit logs: who called what, and the status it got
        status: dict[str, Any] = proto["status"] if isinstance(proto.get("status"), dict) else {}
        parts = [str(proto.get(k)) for k in ("methodName", "resourceName") if proto.get(k)]
        who = (proto.get("authenticationInfo") or {}).get("principalEmail")
        if who:
            parts.append(f"by {who}")
        deltas = [
            f"{d.get('action')} {d.get('role')} for {d.get('member')}"
            for d in _binding_deltas(proto)
            if isinstance(d, dict) and d.get("action") and d.get("role") and d.get("member")
        ]
        if deltas:  # an IAM policy change: which roles it took from whom, and gave
            parts.append("bindingDeltas: " + "; ".join(deltas))
        if status.get("message"):
            parts.append(f"status: {status['message']}")
        return " ".join(parts)
    return ""


def _binding_deltas(proto: dict[str, Any]) -> list[Any]:
    """An audit entry's IAM binding changes: serviceData.policyDelta (IAM's SetIamPolicy) or BigQuery's metadata
    (datasetChange / tableChange)."""
    found: list[Any] = []
    for holder in (proto.get("serviceData"), proto.get("metadata")):
        if not isinstance(holder, dict):
            continue
        for part in (holder.get("policyDelta"), holder.get("datasetChange"), holder.get("tableChange")):
            if isinstance(part, dict) and isinstance(part.get("bindingDeltas"), list):
                found += part["bindingDeltas"]
            elif isinstance(part, dict) and isinstance(part.get("policyDelta"), dict):
                found += part["policyDelta"].get("bindingDeltas") or []
    return found


@FORMATS.format("gcp-logs", shapes={"json"}, detect=detect_gcp_logs, order=30)
def parse_gcp_logs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    for n, e in enumerate(doc.value, 1):
        level = normalise_level(e.get("severity"))  # DEFAULT is no level
        groups[_gcp_object(e.get("resource"), doc)].append(
            _record(parser, n, parse_ts(e.get("timestamp")), level, _gcp_text(e))
        )
    yield from _emit(doc, ctx, groups, "gcp-logging")


# --- Azure Monitor / Log Analytics ----------------------------------------------------------------------------

_AZ_MESSAGE = ("Message", "RenderedDescription", "SyslogMessage", "LogMessage", "LogEntry", "ResultDescription",
               "Description", "OperationName",
               # Application Insights' traces and exceptions tables
               "message", "outerMessage", "innermostMessage", "details")  # fmt: skip
_AZ_EXCEPTION = ("outerMessage", "innermostMessage")  # a row of the exceptions table is an error
_AZ_LEVEL = ("SeverityLevel", "severityLevel", "Level", "LogLevel", "Severity", "SeverityText")
# Log Analytics names its time column TimeGenerated; Application Insights' tables name it timestamp
_AZ_TIME = ("TimeGenerated", "timestamp")
# Application Insights' SeverityLevel: 0 verbose, 1 information, 2 warning, 3 error, 4 critical
_AZ_SEVERITY = {0: "debug", 1: "info", 2: "warn", 3: "error", 4: "fatal"}


def _az_rows(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, dict) and isinstance(v.get("tables"), list):
        rows: list[dict[str, Any]] = []
        for table in v["tables"]:
            if not isinstance(table, dict) or not isinstance(table.get("columns"), list):
                return None
            names = [str(c.get("name")) if isinstance(c, dict) else "" for c in table["columns"]]
            rows += [dict(zip(names, r, strict=False)) for r in table.get("rows") or [] if isinstance(r, list)]
        return rows
    if isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
        return v
    return None


def detect_azure_logs(doc: Document) -> bool:
    rows = _az_rows(doc.value)
    if rows is None:
        return False
    if isinstance(doc.value, dict) and not rows:  # an empty result still names its columns
        return any(
            isinstance(c, dict) and c.get("name") == "TimeGenerated"
            for t in doc.value["tables"]
            for c in t.get("columns") or []
        )
    if not rows:
        return False
    if all("TimeGenerated" in r for r in rows[:20]):
        return True
    # Application Insights: a timestamp and a message; without a message the table is numbers (azure-log-query)
    return all("timestamp" in r for r in rows[:20]) and any(k in rows[0] for k in _AZ_MESSAGE)


def _az_level(row: dict[str, Any]) -> str | None:
    for k in _AZ_LEVEL:
        v = row.get(k)
        if v is None or v == "":
            continue
        if isinstance(v, int) or (isinstance(v, str) and v.isdigit()):
            return _AZ_SEVERITY.get(int(v))
        return normalise_level(v)
    return None


def _az_object(row: dict[str, Any], doc: Document) -> str:
    ns, pod = row.get("PodNamespace") or row.get("Namespace"), row.get("PodName")
    if ns and pod:
        return f"Pod/{ns}/{pod}/{row['ContainerName']}" if row.get("ContainerName") else f"Pod/{ns}/{pod}"
    for k in ("AppRoleName", "Computer", "_ResourceId", "ResourceId", "Resource"):
        if row.get(k):
            return f"azure/{str(row[k]).rstrip('/').rsplit('/', 1)[-1]}"
    return doc.path


def _failed_dependency(row: dict[str, Any]) -> str | None:
    """A row of Application Insights' dependencies (one call, or a summary of calls) that failed with a server
    error or a timeout: said as the call that failed, so the row names its target as a failing upstream."""
    target = row.get("Target") or row.get("target")
    code = str(row.get("ResultCode") if row.get("ResultCode") is not None else row.get("resultCode") or "")
    failed = row.get("Failed", row.get("failed", row.get("itemCount")))
    ok = row.get("Success", row.get("success"))
    if not target or not (code.startswith("5") or code.lower() in ("timeout", "canceled", "-1")):
        return None
    if (isinstance(failed, int | float) and failed <= 0) or ok in (True, "True", "true"):
        return None
    count = f" ({int(failed)} calls)" if isinstance(failed, int | float) else ""
    return f"call to {target} failed with status {code}{count}"


@FORMATS.format("azure-logs", shapes={"json"}, detect=detect_azure_logs, order=30)
def parse_azure_logs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    for n, row in enumerate(_az_rows(doc.value) or [], 1):
        msg = next((row[k] for k in _AZ_MESSAGE if isinstance(row.get(k), str) and row[k]), None)
        if msg is None:  # no message column: the row's other fields as key=value
            msg = " ".join(f"{k}={v}" for k, v in row.items() if k not in _AZ_TIME and v not in (None, ""))
        ts = next((parse_ts(row[k]) for k in _AZ_TIME if row.get(k)), None)
        level = _az_level(row) or ("error" if any(row.get(k) for k in _AZ_EXCEPTION) else None)
        inner = row.get("innermostMessage")
        if isinstance(inner, str) and inner and inner != msg:
            # an exceptions row: the wrapper's message says only that the function failed, the innermost why
            kind = row.get("innermostType") or row.get("type")
            msg = f"{msg} ---> {kind + ': ' if isinstance(kind, str) and kind else ''}{inner}"
        failed = _failed_dependency(row)
        if failed:
            msg, level = f"{failed}: {msg}", level or "error"
        groups[_az_object(row, doc)].append(_record(parser, n, ts, level, str(msg)))
    yield from _emit(doc, ctx, groups, "azure-monitor")


# --- Windows event log (PowerShell `Get-WinEvent ... | ConvertTo-Json`) ---------------------------------------

# Get-WinEvent's Level: 1 critical, 2 error, 3 warning, 4 information, 5 verbose (0: LogAlways)
_WIN_LEVEL = {0: "info", 1: "fatal", 2: "error", 3: "warn", 4: "info", 5: "debug"}


def detect_windows_events(doc: Document) -> bool:
    v = doc.value
    return (
        isinstance(v, list)
        and bool(v)
        and all(isinstance(e, dict) and "TimeCreated" in e and "Message" in e for e in v[:20])
    )


@FORMATS.format("windows-events", shapes={"json"}, detect=detect_windows_events, order=30)
def parse_windows_events(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    groups: dict[str, list[Record]] = defaultdict(list)
    for n, e in enumerate(doc.value, 1):
        if not isinstance(e, dict):
            continue
        level = normalise_level(e.get("LevelDisplayName"))
        if level is None and isinstance(e.get("Level"), int):
            level = _WIN_LEVEL.get(e["Level"])
        source = e.get("ProviderName") or e.get("Source")
        msg = str(e.get("Message") or "")
        text = f"{source}: {msg}" if source else msg
        obj = f"windows/{e['MachineName']}" if e.get("MachineName") else doc.path
        groups[obj].append(_record(parser, n, parse_ts(e.get("TimeCreated")), level, text))
    yield from _emit(doc, ctx, groups, "windows-events")


# --- Windows event log as PowerShell prints it (`Get-WinEvent | Format-Table` / `Format-List`) --------------------

_WIN_TABLE_HEAD = re.compile(r"^\s*TimeCreated\s+.*\bMessage\s*$")
_WIN_STAMP = r"(?P<d>\d{1,2})[./](?P<m>\d{1,2})[./](?P<y>\d{4}) (?P<t>\d{1,2}:\d\d:\d\d)(?: ?(?P<ampm>[AP]M))?"
_WIN_ROW = re.compile(
    rf"^{_WIN_STAMP}\s+(?P<id>\d+)\s+(?P<prov>\S+(?: \S+)*?)\s+(?P<lvl>Critical|Error|Warning|Information|Verbose)\s+"
    r"(?P<msg>.*)$"
)
_WIN_FIELD = re.compile(r"^(?P<key>TimeCreated|Id|ProviderName|LevelDisplayName|Message|MachineName)\s*:\s?(?P<v>.*)$")


def _win_ts(m: re.Match[str]) -> float | None:
    """Day first with dots (16.11.2026), month first with slashes (11/16/2026) and AM/PM, as Windows prints them."""
    day, month = (int(m["d"]), int(m["m"])) if "." in m.group(0)[:6] else (int(m["m"]), int(m["d"]))
    hh, mm, ss = (int(x) for x in m["t"].split(":"))
    if m["ampm"] == "PM" and hh < 12:
        hh += 12
    elif m["ampm"] == "AM" and hh == 12:
        hh = 0
    try:
        return parse_ts(f"{int(m['y']):04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z")
    except ValueError:
        return None


def detect_winevent_text(doc: Document) -> bool:
    head = doc.text[:4000]
    return ("Get-WinEvent" in head or "TimeCreated" in head) and (
        any(_WIN_TABLE_HEAD.match(line) for line in head.splitlines())
        or bool(re.search(r"^TimeCreated\s*: \d", head, re.M))
    )


@FORMATS.format("windows-events-text", shapes={"text"}, detect=detect_winevent_text, order=19)
def parse_winevent_text(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    parser = LineParser()
    records: list[Record] = []
    current: dict[str, Any] | None = None  # the Format-List record being read
    last_key = ""

    def flush() -> None:
        if current and current.get("ts") is not None:
            level = normalise_level(current.get("LevelDisplayName"))
            text = f"{current.get('ProviderName') or 'event'}[{current.get('Id', '')}]: {current.get('Message', '')}"
            records.append(_record(parser, current["line"], current["ts"], level, text.strip()))

    for n, line in enumerate(doc.lines(), 1):
        row = _WIN_ROW.match(line)
        if row:
            text = f"{row['prov']}[{row['id']}]: {row['msg']}"
            records.append(_record(parser, n, _win_ts(row), normalise_level(row["lvl"]), text))
            continue
        field = _WIN_FIELD.match(line)
        if field:
            if field["key"] == "TimeCreated":
                flush()
                stamp = re.match(_WIN_STAMP, field["v"].strip())
                current = {"ts": _win_ts(stamp) if stamp else None, "line": n}
            elif current is not None:
                current[field["key"]] = field["v"].strip()
            last_key = field["key"]
            continue
        if current is not None and last_key == "Message" and line.startswith(" ") and line.strip():
            current["Message"] = f"{current.get('Message', '')} {line.strip()}"
        elif records and line.startswith(" ") and line.strip() and not current:  # a wrapped table row
            records[-1]["msg"] += " " + line.strip()
    flush()
    if records:
        yield from _emit(doc, ctx, {f"windows/{doc.stem}": records}, "windows-events-text")


# --- CloudWatch Logs Insights aggregates (`stats ... by ...`): a table, not log lines ----------------------------


def detect_insights_stats(doc: Document) -> bool:
    rows = _insights_rows(doc.value)
    if not rows:
        return False
    return not any("@message" in r or "@timestamp" in r or "@ptr" in r for r in rows)


@FORMATS.format("cloudwatch-insights-stats", shapes={"json"}, detect=detect_insights_stats, order=31)
def parse_insights_stats(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A `stats ... by ...` query's results: one `table` item, as a SQL client's result table is read."""
    rows = [{k: "" if v is None else str(v) for k, v in r.items()} for r in _insights_rows(doc.value) or []]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    data: dict[str, Any] = {"columns": columns, "rows": rows, "query": "", "relation": doc.stem}
    yield ctx.item(doc.path, "table", doc.stem, data)
