"""Datadog exports.

- Logs Search API v2 (POST /api/v2/logs/events/search, GET /api/v2/logs/events): `data` entries of type "log"
  with attributes {timestamp, status, service, host, message, attributes, tags} -> one `log` item per service,
  object `datadog/<service>`, records in time order, `line` the entry's 1-based position in the response.
  The v1 list API (POST /api/v1/logs-queries/list: `logs` entries with `content`) is read the same way.
- Monitors API v1 (GET /api/v1/monitor, a list; GET /api/v1/monitor/{id}, one) -> `datadog/monitor`.
- Metrics queries: v1 (GET /api/v1/query: `series` of {metric, scope, pointlist [[ms, value]], unit}) and v2
  (POST /api/v2/query/timeseries: `data.attributes` {series [{group_tags, unit}], times [ms], values [[...]]}) ->
  one `metric` per series, named by the metric, labelled by its scope's tags, scaled by its unit to the family's
  base unit (nanoseconds -> seconds, KiB -> bytes).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, metric_object
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


# --- metrics queries ----------------------------------------------------------------------------------------------

# a unit family's base unit, the one the analyzers read (a "time" series in seconds, "bytes" in bytes)
_BASE_UNITS = {"time": "seconds", "bytes": "bytes", "percentage": "percent"}
_QUERY_METRIC = re.compile(r"^(?:\w+:)?([\w.]+)\s*\{")


def _tags(tags: Any) -> dict[str, str]:
    """Datadog's "env:prod,host:acct-api-01" (a scope) or ["host:acct-api-01"] (tag_set, group_tags) as labels."""
    items = tags.split(",") if isinstance(tags, str) else tags if isinstance(tags, list) else []
    out: dict[str, str] = {}
    for t in items:
        key, sep, value = str(t).strip().partition(":")
        if sep and key and value and key != "*":
            out[key] = value
    return out


def _unit(unit: Any) -> tuple[str, float]:
    """(base unit, factor to it) of a Datadog unit list ([numerator, denominator]); a rate keeps its numerator's."""
    first = unit[0] if isinstance(unit, list) and unit else unit
    if not isinstance(first, dict):
        return "", 1.0
    try:
        factor = float(first.get("scale_factor") or 1.0)
    except (TypeError, ValueError):
        factor = 1.0
    family = str(first.get("family") or "")
    return _BASE_UNITS.get(family, str(first.get("name") or "")), factor


def _metric_series(v: Any) -> list[tuple[str, dict[str, str], Any, list[Any]]] | None:
    """(name, labels, unit, [[ms, value]]) of each series of a v1 or v2 metrics query response, or None."""
    if not isinstance(v, dict):
        return None
    series = v.get("series")
    if (
        isinstance(series, list)
        and ("res_type" in v or "from_date" in v or series)
        and all(isinstance(s, dict) and isinstance(s.get("pointlist"), list) for s in series)
    ):
        if not series and "from_date" not in v:
            return None
        return [
            (str(s.get("metric") or s.get("display_name") or "metric"), _tags(s.get("scope")), s.get("unit"),
             s["pointlist"])
            for s in series
        ]  # fmt: skip
    attrs = (v.get("data") or {}).get("attributes") if isinstance(v.get("data"), dict) else None
    if not (isinstance(attrs, dict) and isinstance(attrs.get("times"), list) and isinstance(attrs.get("series"), list)):
        return None
    values: list[Any] = attrs["values"] if isinstance(attrs.get("values"), list) else []
    queries = [q for q in (v.get("meta") or {}).get("queries") or [] if isinstance(q, dict)]
    out: list[tuple[str, dict[str, str], Any, list[Any]]] = []
    for n, s in enumerate(attrs["series"]):
        if not isinstance(s, dict) or n >= len(values) or not isinstance(values[n], list):
            continue
        qi = s.get("query_index")
        q = queries[qi] if isinstance(qi, int) and qi < len(queries) else {}
        m = _QUERY_METRIC.match(str(q.get("query") or ""))
        name = m.group(1) if m else str(q.get("name") or f"query{s.get('query_index', n)}")
        points = list(zip(attrs["times"], values[n], strict=False))
        out.append((name, _tags(s.get("group_tags")), s.get("unit"), points))
    return out


def detect_metrics(doc: Document) -> bool:
    return _metric_series(doc.value) is not None


@FORMATS.format("datadog-metrics", shapes={"json"}, detect=detect_metrics, order=30)
def parse_metrics(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for name, labels, unit, pointlist in _metric_series(doc.value) or []:
        base, factor = _unit(unit)
        points = sorted(
            [float(p[0]) / 1000.0, float(p[1]) * factor]
            for p in pointlist
            if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], int | float)
            and isinstance(p[1], int | float) and math.isfinite(p[1])
        )  # fmt: skip
        data = {"name": name, "labels": labels, "unit": base or None, "points": points, "source": "datadog"}
        yield ctx.item(doc.path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)
