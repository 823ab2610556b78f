"""Google Cloud Monitoring time series (`projects.timeSeries.list`, what `gcloud monitoring` and the console's API
explorer return): one `metric` per series, named by the metric type's last part
(`run.googleapis.com/request_latencies` -> `request_latencies`), labelled by the metric's and the resource's
labels; a distribution's mean stands for its points.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, metric_object
from diagnosis.model import EvidenceItem


def _series(v: Any) -> list[dict[str, Any]] | None:
    ts = v.get("timeSeries") if isinstance(v, dict) else None
    if isinstance(ts, list) and ts and all(isinstance(s, dict) and isinstance(s.get("points"), list) for s in ts):
        return ts
    return None


def _value(v: dict[str, Any]) -> float | None:
    for key in ("doubleValue", "int64Value"):
        if key in v:
            try:
                return float(v[key])
            except (TypeError, ValueError):
                return None
    dist = v.get("distributionValue")
    if isinstance(dist, dict) and "mean" in dist:
        return float(dist["mean"])
    if "boolValue" in v:
        return 1.0 if v["boolValue"] else 0.0
    return None


@FORMATS.format("gcp-monitoring", shapes={"json"}, detect=lambda d: _series(d.value) is not None, order=30)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    unit = str(doc.value.get("unit") or "")
    for s in _series(doc.value) or []:
        metric, resource = s.get("metric") or {}, s.get("resource") or {}
        name = str(metric.get("type") or "metric").rsplit("/", 1)[-1]
        labels = {str(k): str(v) for k, v in (resource.get("labels") or {}).items() if k != "project_id"}
        labels.update({str(k): str(v) for k, v in (metric.get("labels") or {}).items()})
        points = []
        for p in s["points"]:
            t = parse_ts((p.get("interval") or {}).get("endTime"))
            value = _value(p.get("value") or {})
            if t is not None and value is not None:
                points.append([t, value])
        points.sort()
        data = {"name": name, "labels": labels, "unit": str(s.get("unit") or unit), "points": points, "source": "gcp"}
        yield ctx.item(doc.path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)
