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


# --- Cloud Monitoring alerting's webhook notification (schema version 1.2): one incident, open or closed ----------


def _is_incident(v: Any) -> bool:
    inc = v.get("incident") if isinstance(v, dict) else None
    return isinstance(inc, dict) and "state" in inc and ("policy_name" in inc or "condition_name" in inc)


@FORMATS.format(
    "gcp-alert-incident",
    shapes={"json"},
    detect=lambda d: (
        _is_incident(d.value) or (isinstance(d.value, list) and bool(d.value) and all(map(_is_incident, d.value)))
    ),
    order=11,
)
def parse_incident(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """An `alert` item per notification: the policy is the alert's name, the resource's service its object; a
    `closed` incident is resolved."""
    for v in doc.value if isinstance(doc.value, list) else [doc.value]:
        inc = v["incident"]
        resource = inc.get("resource") if isinstance(inc.get("resource"), dict) else {}
        rlabels: dict[str, Any] = resource["labels"] if isinstance(resource.get("labels"), dict) else {}
        metric = inc.get("metric") if isinstance(inc.get("metric"), dict) else {}
        user = (inc.get("metadata") or {}).get("user_labels") or inc.get("policy_user_labels") or {}
        policy = str(inc.get("policy_name") or inc.get("condition_name") or "unnamed")
        service = (
            rlabels.get("service_name")
            or rlabels.get("function_name")
            or rlabels.get("instance_id")
            or inc.get("resource_display_name")
            or ""
        )
        labels = {
            "alertname": policy,
            "service": str(service),
            "severity": str(user.get("severity") or inc.get("severity") or "").lower(),
            "metric": str(metric.get("type") or "").rsplit("/", 1)[-1],
            "resource_type": str(resource.get("type") or inc.get("resource_type_display_name") or ""),
        }
        resolved = str(inc.get("state")).lower() == "closed"
        starts, ends = parse_ts(inc.get("started_at")), parse_ts(inc.get("ended_at"))
        data = {
            "status": "resolved" if resolved else "firing",
            "labels": {k: v for k, v in labels.items() if v},
            "annotations": {"summary": str(inc.get("summary") or policy)},
            "starts_at": starts,
            "ends_at": ends if resolved else None,
            "fingerprint": inc.get("incident_id"),
            "group_key": inc.get("policy_name"),
            "receiver": "cloud-monitoring",
        }
        yield ctx.item(doc.path, "alert", f"alert/{policy}", data, ends if resolved and ends else starts)
