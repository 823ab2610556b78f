"""Prometheus HTTP API query responses (/api/v1/query and /api/v1/query_range): one `metric` item per series.

`{"status": "success", "data": {"resultType": "vector" | "matrix" | "scalar", "result": ...}}`, or the bare
result list promtool prints with --format=json. The series name
is its `__name__` label; a query result without one (rate(...), sums) takes a file-level hint: a "query" or
"name" field saved beside the response, else the file name. Values are strings ("NaN", "+Inf" included);
points that are not finite numbers are dropped.

Graphite's render API (`/render?format=json`, also what Grafana's Graphite data source returns): a list of
`{"target", "datapoints": [[value, unix_s], ...], "tags"?}`; the series name is the `name` tag (the metric path
inside the functions) or the target, the other tags its labels, null values dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, FormatError, ParseContext, metric_object
from diagnosis.model import EvidenceItem

UNIT_SUFFIXES = (
    ("_seconds_total", "seconds"), ("_seconds", "seconds"), ("_bytes_total", "bytes"), ("_bytes", "bytes"),
    ("_ratio", "ratio"), ("_percent", "percent"), ("_celsius", "celsius"), ("_total", "count"),
)  # fmt: skip


def _is_series(s: Any) -> bool:
    return isinstance(s, dict) and isinstance(s.get("metric"), dict) and ("value" in s or "values" in s)


def _response(v: Any) -> dict[str, Any] | None:
    """The API response, also when saved wrapped as {"query": ..., "response": {...}}, or the bare result list
    `promtool query instant|range --format=json` prints (an envelope is made for it)."""
    if isinstance(v, list) and v and all(map(_is_series, v)):
        kind = "matrix" if "values" in v[0] else "vector"
        return {"status": "success", "data": {"resultType": kind, "result": v}}
    if isinstance(v, dict) and isinstance(v.get("response"), dict):
        v = v["response"]
    if isinstance(v, dict) and v.get("status") in ("success", "error") and ("data" in v or "errorType" in v):
        data = v.get("data")
        if v["status"] == "error" or (isinstance(data, dict) and "resultType" in data):
            return v
    return None


def detect(doc: Document) -> bool:
    return _response(doc.value) is not None


def unit_of(name: str) -> str | None:
    return next((unit for suffix, unit in UNIT_SUFFIXES if name.endswith(suffix)), None)


def _point(pair: Any) -> tuple[float, float] | None:
    try:
        ts, value = float(pair[0]), float(pair[1])
    except (TypeError, ValueError, IndexError):
        return None
    return (ts, value) if math.isfinite(value) else None


@FORMATS.format("prometheus", shapes={"json"}, detect=detect, order=15)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    resp = _response(v)
    assert resp is not None
    if resp["status"] == "error":
        raise FormatError(f"Prometheus API error response: {resp.get('errorType')}: {resp.get('error')}")
    hint = None
    if isinstance(v, dict):
        hint = v.get("name") or v.get("query")
    hint = str(hint) if hint else doc.stem
    data = resp["data"]
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        series: list[tuple[dict[str, Any], list[Any]]] = [({}, [result])]
    elif kind == "vector" and isinstance(result, list):
        series = [(s.get("metric") or {}, [s.get("value")]) for s in result if isinstance(s, dict)]
    elif kind == "matrix" and isinstance(result, list):
        series = [(s.get("metric") or {}, s.get("values") or []) for s in result if isinstance(s, dict)]
    else:
        raise FormatError(f"Prometheus response with resultType {kind!r}: opsgraph reads vector, matrix and scalar")
    for metric, raw_points in series:
        labels = {str(k): str(val) for k, val in metric.items()}
        name = labels.pop("__name__", None) or hint
        points = sorted(p for p in map(_point, raw_points) if p is not None)
        item = {
            "name": name,
            "labels": labels,
            "unit": unit_of(name),
            "points": [list(p) for p in points],
            "source": "prometheus",
        }
        yield ctx.item(doc.path, "metric", metric_object(name, labels), item, points[-1][0] if points else None)


# --- Graphite render API ----------------------------------------------------------------------------------------


def _graphite_series(v: Any) -> list[dict[str, Any]] | None:
    if (
        isinstance(v, list)
        and v
        and all(isinstance(s, dict) and "target" in s and isinstance(s.get("datapoints"), list) for s in v)
    ):
        return v
    return None


def detect_graphite(doc: Document) -> bool:
    return _graphite_series(doc.value) is not None


@FORMATS.format("graphite", shapes={"json"}, detect=detect_graphite, order=15)
def parse_graphite(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for s in _graphite_series(doc.value) or []:
        tags = {str(k): str(v) for k, v in (s.get("tags") or {}).items()}
        name = tags.pop("name", None) or str(s["target"])
        for k in ("summarize", "summarizeFunction", "aggregatedBy"):
            tags.pop(k, None)  # how Graphite rolled the series up, not what it measures
        points = sorted(
            (float(p[1]), float(p[0]))
            for p in s["datapoints"]
            if isinstance(p, list | tuple)
            and len(p) == 2
            and p[0] is not None
            and p[1] is not None
            and math.isfinite(float(p[0]))
        )
        item = {
            "name": name,
            "labels": tags,
            "unit": unit_of(name),
            "points": [list(p) for p in points],
            "source": "graphite",
        }
        yield ctx.item(doc.path, "metric", metric_object(name, tags), item, points[-1][0] if points else None)
