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
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, FormatError, ParseContext, metric_object
from diagnosis.formats.logs import csv_time_column
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


# --- metrics saved as CSV (Grafana's panel "Download CSV", a query exported to a spreadsheet) -------------------

# a column header that is a Prometheus series: `name{k="v", ...}`, or a legend that is only the labels
_SERIES_HEADER = re.compile(r"^\s*(?P<name>[A-Za-z_:][\w:.\-]*)?\s*\{(?P<labels>[^{}]*)\}\s*$")
_LABEL_PAIR = re.compile(r'([A-Za-z_]\w*)\s*=~?\s*"((?:[^"\\]|\\.)*)"')
# a formatted value ("45.2 ms", "12%", "1.2 GiB", "3.4k"): the number and what follows it
_VALUE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z%/µ]*)\s*$")
_NULLS = {"", "null", "none", "nan", "n/a", "-", "no data", "undefined"}
_LONG_NAME = re.compile(r"^(?:series|metric|metric_?name|name|__name__|measurement)$", re.I)
_LONG_VALUE = re.compile(r"^(?:value|val|_value)$", re.I)
# Grafana's units: "K", "Mil", "Bil" (short), B/KB/KiB (bytes), ns/µs/ms/s/min (time); "/s" rates keep their base
_SCALE = {"k": 1e3, "mil": 1e6, "bil": 1e9, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10,
          "mib": 2**20, "gib": 2**30, "tib": 2**40, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0,
          "min": 60.0}  # fmt: skip
_UNIT_NAMES = {"%": "percent", "ms": "seconds", "us": "seconds", "µs": "seconds", "s": "seconds", "min": "seconds",
               "b": "bytes", "kb": "bytes", "mb": "bytes", "gb": "bytes", "tb": "bytes", "kib": "bytes",
               "mib": "bytes", "gib": "bytes", "tib": "bytes"}  # fmt: skip


def _csv_value(text: str | None) -> tuple[float, str] | None:
    """A cell as (number, unit), the number scaled to the unit's base (ms -> s, GiB -> bytes, k -> x1000)."""
    if text is None or text.strip().lower() in _NULLS:
        return None
    m = _VALUE.match(text)
    if m is None:
        return None
    value = float(m["num"])
    unit = m["unit"].lower().removesuffix("/s")
    return value * _SCALE.get(unit, 1.0), _UNIT_NAMES.get(unit, "")


# a column header that says what is measured; one that does not is a legend naming whose series it is
_MEASURE_WORD = re.compile(
    r"cpu|mem|latency|p\d\d|percentile|duration|error|fail|5xx|4xx|rate|bytes|count|total|usage|requests|rps|qps|"
    r"load|disk|iops|throughput|percent|ratio|seconds|time|size|connections|lag|queue|restarts|drops|loss|retrans",
    re.I,
)
_LEGEND = re.compile(r"^[A-Za-z0-9][\w.\-]*(?::\d+)?$")


def _legend_labels(legend: str) -> dict[str, str]:
    """The label a bare legend stands for: an address is an instance, a pod name a pod, else a service."""
    if re.match(r"^[\d.]+:\d+$|^[\w.\-]+:\d{2,5}$", legend):
        return {"instance": legend}
    if re.match(r"^[a-z0-9\-]+-[a-z0-9]{8,10}-[a-z0-9]{5}$|^[a-z0-9\-]+-[bcdfghjklmnpqrstvwxz2-9]{5}$", legend):
        return {"pod": legend}
    return {"service": legend}


# a column per service and measure, as per-service exports name them: carts_cpu, front-end_latency-90,
# ts-order-service_mem (the measure after the last underscore; a few prefixes name no service)
_SERVICE_MEASURE = re.compile(
    r"^(?P<svc>[a-z][a-z0-9\-]*[a-z0-9])_(?:cpu|mem|memory|latency(?:[-_]?p?\d{2})?|p\d{2}|(?:rx|tx)[-_]?(?:bytes|pkts|"
    r"packets)|disk[-_]?(?:read|write|io)\w*|errors?|error[-_]?rate|rps|qps|requests|threads|sockets?|fds)$",
    re.I,
)
_NOT_A_SERVICE = frozenset({"node", "process", "container", "go", "system", "host", "total", "avg", "max", "min",
                            "jvm", "db", "machine", "kube", "pod", "cluster", "instance", "cgroup"})  # fmt: skip


def _series_of_header(header: str, hint: str) -> tuple[str, dict[str, str]]:
    m = _SERIES_HEADER.match(header)
    if m is None:
        header = header.strip()
        if _LEGEND.match(header) and not _MEASURE_WORD.search(header) and _MEASURE_WORD.search(hint):
            return hint, _legend_labels(header)  # p99-latency-by-workload.csv's column "currencyservice"
        if (sm := _SERVICE_MEASURE.match(header)) and sm["svc"].lower() not in _NOT_A_SERVICE:
            return header, {"service": sm["svc"]}
        # a legend of the service and then the measure in words: "recommendationservice throttled periods / periods"
        svc, _, measure = header.partition(" ")
        if (
            measure
            and _LEGEND.match(svc)
            and svc.lower() not in _NOT_A_SERVICE
            and not _MEASURE_WORD.search(svc)
            and (_MEASURE_WORD.search(measure) or "throttl" in measure.lower())
        ):
            return measure.strip(), {"service": svc}
        return header, {}
    labels = {k: v.replace('\\"', '"') for k, v in _LABEL_PAIR.findall(m["labels"])}
    return (m["name"] or hint), labels


def _metric_csv_layout(doc: Document) -> tuple[str, str | None, str | None] | None:
    """(time column, name column, value column) of a CSV of metric samples: long (one row per sample, with the
    series named in a column) or wide (a column per series, as Grafana writes "series joined by time"); None when
    the CSV is not one (a column of words other than labels, or no time column)."""
    tcol = csv_time_column(doc)
    if tcol is None:
        return None
    try:
        rows = [r for _, r in zip(range(20), doc.rows(), strict=False)]
    except FormatError:
        return None
    if not rows:
        return None
    others = [h for h in doc.header if h != tcol]
    ncol = next((h for h in others if _LONG_NAME.match(h.strip())), None)
    vcol = next((h for h in others if _LONG_VALUE.match(h.strip())), None)
    if ncol and vcol:
        ok = any(_csv_value(r.get(vcol)) is not None for r in rows)
        return (tcol, ncol, vcol) if ok else None
    numeric = [h for h in others if all(_csv_value(r.get(h)) is not None or (r.get(h) or "").strip().lower()
                                        in _NULLS for r in rows)]  # fmt: skip
    if not any(_csv_value(r.get(h)) is not None for r in rows for h in numeric):
        return None
    # a column of a few repeated words beside the numbers (a status, a run marker) is a note on each row, not an
    # event: anything with more varied words is a log
    words = [h for h in others if h not in numeric]
    if len(words) > len(numeric) or any(len({(r.get(h) or "").strip() for r in rows}) > 3 for h in words):
        return None
    return tcol, None, None


def detect_metric_csv(doc: Document) -> bool:
    return _metric_csv_layout(doc) is not None


@FORMATS.format("metric-csv", shapes={"csv"}, detect=detect_metric_csv, order=85)
def parse_metric_csv(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `metric` item per series. A wide CSV's column headers name the series (`name{label="v"}`, or a
    legend, or only labels, which take the file name as the series name); a long CSV names it in a
    series/metric/name column, its other text columns being labels. Formatted values ("45 ms", "12%",
    "1.2 GiB") are read in the unit's base (seconds, percent, bytes)."""
    layout = _metric_csv_layout(doc)
    assert layout is not None
    tcol, ncol, vcol = layout
    series: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[tuple[float, float]], set[str]]] = {}

    def add(name: str, labels: dict[str, str], ts: float | None, cell: str | None) -> None:
        got = _csv_value(cell)
        if ts is None or got is None:
            return
        points, units = series.setdefault((name, tuple(sorted(labels.items()))), ([], set()))
        points.append((ts, got[0]))
        if got[1]:
            units.add(got[1])

    headers = {h: _series_of_header(h, doc.stem) for h in doc.header if h not in (tcol, ncol, vcol)}
    for row in doc.rows():
        ts = parse_ts(row.get(tcol))
        if ncol and vcol:
            name, labels = _series_of_header(row.get(ncol) or doc.stem, doc.stem)
            extra = {h.strip(): (row.get(h) or "").strip() for h in headers}  # every other column is a label
            add(name, {**{k: v for k, v in extra.items() if v}, **labels}, ts, row.get(vcol))
        else:
            for h, (name, labels) in headers.items():
                add(name, labels, ts, row.get(h))
    for (name, label_items), (raw, units) in series.items():
        labels = dict(label_items)
        points = sorted(raw)
        unit = unit_of(name) or (units.pop() if len(units) == 1 else None)
        item = {"name": name, "labels": labels, "unit": unit, "points": [list(p) for p in points], "source": "csv"}
        yield ctx.item(doc.path, "metric", metric_object(name, labels), item, points[-1][0] if points else None)
