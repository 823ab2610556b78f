"""Datadog exports.

- Logs Search API v2 (POST /api/v2/logs/events/search, GET /api/v2/logs/events): `data` entries of type "log"
  with attributes {timestamp, status, service, host, message, attributes, tags} -> one `log` item per service,
  object `datadog/<service>`, records in time order, `line` the entry's 1-based position in the response.
  The v1 list API (POST /api/v1/logs-queries/list: `logs` entries with `content`) is read the same way.
- Monitors API v1 (GET /api/v1/monitor, a list; GET /api/v1/monitor/{id}, one) -> `datadog/monitor`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.logs import normalise_level, with_error_details
from diagnosis.model import EvidenceItem


def _v2_entries(v: Any) -> list[dict[str, Any]] | None:
    data = v.get("data") if isinstance(v, dict) else None
    if isinstance(data, list) and all(
        isinstance(e, dict) and e.get("type") == "log" and isinstance(e.get("attributes"), dict) for e in data
    ):
        return [e["attributes"] | {"_id": e.get("id")} for e in data]
    logs = v.get("logs") if isinstance(v, dict) else None
    if isinstance(logs, list) and all(isinstance(e, dict) and isinstance(e.get("content"), dict) for e in logs):
        return [e["content"] | {"_id": e.get("id")} for e in logs]
    return None


def detect_logs(doc: Document) -> bool:
    entries = _v2_entries(doc.value)
    return entries is not None and (bool(entries) or "meta" in doc.value or "links" in doc.value)


@FORMATS.format("datadog-logs", shapes={"json"}, detect=detect_logs, order=30)
def parse_logs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    by_service: dict[str, list[dict[str, Any]]] = defaultdict(list)
    hosts: dict[str, set[str]] = defaultdict(set)
    for n, entry in enumerate(_v2_entries(doc.value) or [], 1):
        service = str(entry.get("service") or "unknown")
        # Datadog's status "ok"/"success" is info; "emergency", "alert" and "critical" are fatal
        level = normalise_level(entry.get("status"))
        msg = entry.get("message")
        if not isinstance(msg, str):
            msg = str(get_nested_message(entry.get("attributes")) or "")
        # Datadog's standard error attributes (error.kind, error.message, error.stack) and whatever error object
        # the logger attached: the message alone ("bulk item rejected") hides what failed
        msg = with_error_details(msg, entry.get("attributes"), skip="message")
        by_service[service].append({"ts": parse_ts(entry.get("timestamp")), "level": level, "msg": msg, "line": n})
        if entry.get("host"):
            hosts[service].add(str(entry["host"]))
    for service, records in by_service.items():
        records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0, r["line"]))
        records = records[-ctx.max_log_records :]
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        data = {
            "records": records,
            "source": {"service": service, "hosts": sorted(hosts[service]), "path": doc.path},
            "truncated": False,
        }
        yield ctx.item(doc.path, "log", f"datadog/{service}", data, max(stamps) if stamps else None)


def get_nested_message(attributes: Any) -> Any:
    return attributes.get("message") if isinstance(attributes, dict) else None


MONITOR_KEYS = {"id", "name", "type", "query", "overall_state"}


def _is_monitor(v: Any) -> bool:
    return isinstance(v, dict) and v.keys() >= MONITOR_KEYS


def detect_monitors(doc: Document) -> bool:
    v = doc.value
    return _is_monitor(v) or (isinstance(v, list) and bool(v) and all(map(_is_monitor, v)))


@FORMATS.format("datadog-monitors", shapes={"json"}, detect=detect_monitors, order=30)
def parse_monitors(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    for m in [v] if isinstance(v, dict) else v:
        modified = parse_ts(m.get("overall_state_modified")) or parse_ts(m.get("modified"))
        data = {
            "id": m["id"],
            "name": m.get("name") or "",
            "type": m.get("type") or "",
            "query": m.get("query") or "",
            "state": m.get("overall_state") or "",
            "message": m.get("message") or "",
            "tags": list(m.get("tags") or []),
            "modified_ts": modified,
        }
        yield ctx.item(doc.path, "datadog/monitor", f"monitor/{m['id']}", data, modified)
