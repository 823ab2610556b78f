"""What PaaS platforms export beyond their logs.

- Metrics from a platform's dashboard as named series: a JSON object whose keys are the metrics and whose values
  are lists of series, each {labels, unit, values: [{timestamp, value}]} (Render's metrics API and its dashboard
  export), or a metric's points directly ([{timestamp, value}]). Labels may be a {name: value} object or a list of
  {field, value} pairs. One `metric` item per series.
- Fly.io's machines (`fly machines list --json`, the Machines API), read as `cloud/status`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, metric_item
from diagnosis.model import EvidenceItem

_TS = ("timestamp", "time", "ts", "t")
_VALUE = ("value", "v", "y")


def _is_point(p: Any) -> bool:
    return isinstance(p, dict) and any(k in p for k in _TS) and any(k in p for k in _VALUE)


def _series_of(value: Any) -> list[dict[str, Any]] | None:
    """The series under one metric name, or None when the value is not series."""
    if isinstance(value, list) and value and all(_is_point(p) for p in value[:5]):
        return [{"values": value}]
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(s, dict) and isinstance(s.get("values"), list) and all(_is_point(p) for p in s["values"][:5])
            for s in value[:5]
        )
    ):
        return value
    return None


def _named(v: Any) -> dict[str, list[dict[str, Any]]] | None:
    if not isinstance(v, dict) or not v or len(v) > 50:
        return None
    out = {str(k): s for k, val in v.items() if (s := _series_of(val)) is not None}
    return out if out and len(out) * 2 >= len(v) else None


def _labels(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return {str(x.get("field") or x.get("name")): str(x.get("value")) for x in raw if isinstance(x, dict)}
    return {}


def _number(p: dict[str, Any]) -> float | None:
    value = next((p[k] for k in _VALUE if k in p), None)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@FORMATS.format("dashboard-series", shapes={"json"}, detect=lambda d: _named(d.value) is not None, order=60)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for name, series in (_named(doc.value) or {}).items():
        for s in series:
            labels = _labels(s.get("labels"))
            points = []
            for p in s.get("values") or ():
                t = parse_ts(next((p[k] for k in _TS if k in p), None))
                value = _number(p)
                if t is not None and value is not None:
                    points.append([t, value])
            points.sort()
            yield metric_item(ctx, doc, name, labels, points, "dashboard", str(s.get("unit") or ""))


# --- a platform's machines as its API lists them: Fly.io (`fly machines list --json`, the Machines API) -------------


def _fly_machines(v: Any) -> list[dict[str, Any]] | None:
    rows = v if isinstance(v, list) else None
    if rows and all(isinstance(m, dict) and "host_status" in m and "id" in m and "state" in m for m in rows[:5]):
        return rows
    return None


@FORMATS.format("fly-machines", shapes={"json"}, detect=lambda d: _fly_machines(d.value) is not None, order=30)
def parse_fly_machines(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each machine -> `cloud/status` {resource, resource_type machine, status, checks, az (region), state,
    provider fly}: a host Fly reports unreachable impairs the machine on it; its failing checks say so too."""
    for m in _fly_machines(doc.value) or []:
        host = str(m.get("host_status") or "")
        checks = {"machine.host": host or "unknown"}
        for c in m.get("checks") or ():
            if isinstance(c, dict) and c.get("name"):
                checks[f"check.{c['name']}"] = str(c.get("status") or "")
        state = str(m.get("state") or "")
        status = "impaired" if host == "unreachable" else "failed" if state == "failed" else "ok"
        data: dict[str, Any] = {
            "resource": str(m["id"]),
            "resource_type": "machine",
            "status": status,
            "checks": checks,
            "events": [],
            "actions": [],
            "az": m.get("region"),
            "state": state,
            "provider": "fly",
        }
        updated = [parse_ts(c.get("updated_at")) for c in m.get("checks") or () if isinstance(c, dict)]
        stamps = [t for t in updated if t is not None]
        yield ctx.item(doc.path, "cloud/status", f"machine/{m['id']}", data, max(stamps) if stamps else None)
