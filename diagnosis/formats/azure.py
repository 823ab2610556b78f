"""Azure Monitor exports:

- the common alert schema (what an action group's webhook receives: `schemaId: azureMonitorCommonAlertSchema`,
  `data.essentials` and `data.alertContext`) -> `alert`, firing or resolved; a Service Health notice of planned
  maintenance is also the log of that maintenance, so planned work knows it
- the metrics REST response (`az monitor metrics list`: `value[].timeseries[].data[]`) -> `metric` per series
- Application Insights query results of numbers (`tables[].columns/rows` with a typed datetime column and no
  message column) -> a `metric` per numeric column and group; tables with messages are cloudlogs' azure-logs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, metric_item
from diagnosis.model import EvidenceItem

_TAG = re.compile(r"<[^>]+>")


def _is_common_alert(v: Any) -> bool:
    return isinstance(v, dict) and str(v.get("schemaId", "")).lower() == "azuremonitorcommonalertschema"


def _resource(resource_id: str) -> str:
    """'/subscriptions/../providers/microsoft.web/sites/warranty-claims' -> 'warranty-claims'."""
    return resource_id.rstrip("/").rsplit("/", 1)[-1]


@FORMATS.format(
    "azure-alert",
    shapes={"json"},
    detect=lambda d: (
        _is_common_alert(d.value)
        or (isinstance(d.value, list) and bool(d.value) and all(map(_is_common_alert, d.value)))
    ),
    order=10,
)
def parse_alert(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for payload in doc.value if isinstance(doc.value, list) else [doc.value]:
        data = payload.get("data") or {}
        ess, context = data.get("essentials") or {}, data.get("alertContext") or {}
        props: dict[str, Any] = context["properties"] if isinstance(context.get("properties"), dict) else {}
        targets = [_resource(str(t)) for t in ess.get("alertTargetIDs") or ()]
        items = [str(c) for c in ess.get("configurationItems") or ()]
        resolved = (
            str(ess.get("monitorCondition", "")).lower() == "resolved"
            or str(context.get("status", "")).lower() == "resolved"
            or str(props.get("stage", "")).lower() in ("complete", "resolved")
        )
        rule = str(ess.get("alertRule") or props.get("title") or "azure-alert")
        labels = {
            "alertname": rule,
            "severity": str(ess.get("severity") or "").lower(),
            "service": items[0] if items else (targets[0] if targets else ""),
            "monitoring_service": str(ess.get("monitoringService") or ""),
            "signal_type": str(ess.get("signalType") or ""),
        }
        for cond in (context.get("condition") or {}).get("allOf") or ():
            if isinstance(cond, dict) and cond.get("metricName"):
                labels["metric"] = str(cond["metricName"])
        summary = str(ess.get("description") or props.get("title") or rule)
        description = _TAG.sub(" ", str(props.get("defaultLanguageContent") or props.get("communication") or ""))
        starts = parse_ts(ess.get("firedDateTime")) or parse_ts(props.get("impactStartTime"))
        ends = parse_ts(ess.get("resolvedDateTime")) or (
            parse_ts(props.get("impactMitigationTime")) if resolved else None
        )
        item = {
            "status": "resolved" if resolved else "firing",
            "labels": {k: v for k, v in labels.items() if v},
            "annotations": {
                "summary": summary,
                **({"description": " ".join(description.split())} if description else {}),
            },
            "starts_at": starts,
            "ends_at": ends,
            # alertId names one alert instance from fired to resolved; a log alert's originAlertId may change
            "fingerprint": ess.get("alertId") or ess.get("originAlertId"),
            "group_key": ess.get("alertRule"),
            "receiver": "azure-monitor",
        }
        yield ctx.item(doc.path, "alert", f"alert/{rule}", item, ends if resolved and ends else starts)
        if str(props.get("incidentType", "")).lower() == "maintenance":
            yield _maintenance_log(doc, ctx, props, summary, item, starts, ends if resolved else None)


def _maintenance_log(
    doc: Document,
    ctx: ParseContext,
    props: dict[str, Any],
    summary: str,
    alert: dict[str, Any],
    starts: float | None,
    ends: float | None,
) -> EvidenceItem:
    """A Service Health notice of planned maintenance as the log of that maintenance: started, and complete."""
    tracking, title = props.get("trackingId", ""), str(props.get("title") or summary)
    said = alert["annotations"].get("description", "")
    records = [
        {"ts": starts, "level": "info", "msg": f"planned maintenance {tracking}: {title}; {said}"[:1000], "line": 1}
    ]
    if ends is not None:
        records.append({"ts": ends, "level": "info", "msg": f"maintenance {tracking} complete: {title}", "line": 2})
    log = {"records": records, "source": {"path": doc.path, "format": "azure service health"}, "truncated": False}
    return ctx.item(doc.path, "log", f"azure/{props.get('service') or 'service-health'}", log, ends or starts)


# --- metrics ----------------------------------------------------------------------------------------------------

_AGGREGATIONS = ("average", "total", "maximum", "minimum", "count")


def _is_metrics(v: Any) -> bool:
    values = v.get("value") if isinstance(v, dict) else None
    return (
        isinstance(values, list)
        and bool(values)
        and all(
            isinstance(m, dict) and isinstance(m.get("timeseries"), list) and isinstance(m.get("name"), dict)
            for m in values
        )
    )


@FORMATS.format("azure-metrics", shapes={"json"}, detect=lambda d: _is_metrics(d.value), order=30)
def parse_metrics(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for m in doc.value["value"]:
        name = str(m["name"].get("value") or m["name"].get("localizedValue") or "metric")
        resource = _resource(str(m.get("id") or "").split("/providers/Microsoft.Insights/metrics")[0])
        for ts in m["timeseries"]:
            labels = {"resource": resource} if resource else {}
            for md in ts.get("metadatavalues") or ():
                key = (md.get("name") or {}).get("value") if isinstance(md.get("name"), dict) else md.get("name")
                if key and md.get("value") is not None:
                    labels[str(key)] = str(md["value"])
            points = []
            for point in ts.get("data") or ():
                t = parse_ts(point.get("timeStamp"))
                value = next((point[a] for a in _AGGREGATIONS if isinstance(point.get(a), int | float)), None)
                if t is not None and value is not None:
                    points.append([t, float(value)])
            points.sort()
            yield metric_item(ctx, doc, name, labels, points, "azure", str(m.get("unit") or ""))


# --- Application Insights query results of numbers ------------------------------------------------------------
# (a table with a message column is a log: cloudlogs' azure-logs reads it)

_NUMERIC = ("long", "real", "int", "decimal", "double")


def _tables(v: Any) -> list[dict[str, Any]] | None:
    tables = v.get("tables") if isinstance(v, dict) else None
    if not isinstance(tables, list) or not tables:
        return None
    ok = all(
        isinstance(t, dict) and isinstance(t.get("columns"), list) and isinstance(t.get("rows"), list) for t in tables
    )
    return tables if ok else None


def _detect_query(doc: Document) -> bool:
    """Query results with a typed datetime column (Application Insights' `timestamp`) that azure-logs, offered
    first, did not take: summaries of numbers."""
    return any(
        isinstance(c, dict) and str(c.get("type", "")).lower() == "datetime"
        for t in _tables(doc.value) or []
        for c in t["columns"]
    )


@FORMATS.format("azure-log-query", shapes={"json"}, detect=_detect_query, order=31)
def parse_log_query(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A `metric` per numeric column and group of string columns (`failed{target=api.x,resultCode=503}`)."""
    for table in _tables(doc.value) or []:
        cols = [
            (str(c.get("name") or ""), str(c.get("type") or "").lower())
            for c in table["columns"]
            if isinstance(c, dict)
        ]
        time_col = next((i for i, (_, t) in enumerate(cols) if t == "datetime"), None)
        if time_col is None:
            continue
        rows = [r for r in table["rows"] if isinstance(r, list) and len(r) == len(cols)]
        dims = [i for i, (_, t) in enumerate(cols) if t in ("string", "dynamic", "guid") and i != time_col]
        series: dict[tuple[int, tuple[str, ...]], list[list[float]]] = defaultdict(list)
        for r in rows:
            t = parse_ts(r[time_col])
            if t is None:
                continue
            key = tuple(str(r[i]) for i in dims)
            for i, (_, kind) in enumerate(cols):
                if kind in _NUMERIC and isinstance(r[i], int | float):
                    series[(i, key)].append([t, float(r[i])])
        for (i, key), points in series.items():
            labels = {cols[d][0]: v for d, v in zip(dims, key, strict=True)}
            name = cols[i][0]
            points.sort()
            yield metric_item(ctx, doc, name, labels, points, "log analytics")


# --- App Service Key Vault references (`.../config/configreferences/appsettings`) ---------------------------


def _config_references(v: Any) -> list[dict[str, Any]] | None:
    rows = v.get("value") if isinstance(v, dict) else v
    if not isinstance(rows, list) or not rows:
        return None
    refs = [
        r
        for r in rows
        if isinstance(r, dict)
        and "configreferences" in str(r.get("type") or r.get("id") or "").lower()
        and isinstance(r.get("properties"), dict)
    ]
    return refs if len(refs) == len(rows) else None


@FORMATS.format(
    "azure-config-references", shapes={"json"}, detect=lambda d: bool(_config_references(d.value)), order=30
)
def parse_config_references(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `config/reference` item per app setting that points at a secret store: its name, the reference, and
    whether the platform resolved it (Resolved, AccessToKeyVaultDenied, SecretNotFound, VaultNotFound, ...)."""
    for r in _config_references(doc.value) or []:
        p = r["properties"]
        rid = str(r.get("id") or "")
        site = rid.split("/sites/", 1)[1].split("/", 1)[0] if "/sites/" in rid else None
        data = {
            "name": str(r.get("name") or ""),
            "app": site,
            "reference": p.get("reference"),
            "status": str(p.get("status") or ""),
            "store": p.get("vaultName"),
            "secret": p.get("secretName"),
            "identity": p.get("identityType"),
            "details": p.get("details"),
        }
        yield ctx.item(doc.path, "config/reference", f"appsetting/{site or 'app'}/{data['name']}", data, None)


# --- the Activity Log (`az monitor activity-log list`, or the REST API's `{"value": [...]}`) --------------------


def _activity_entries(v: Any) -> list[dict[str, Any]] | None:
    rows = v.get("value") if isinstance(v, dict) and set(v) <= {"value", "nextLink"} else v
    if not isinstance(rows, list) or not rows:
        return None
    if all(isinstance(r, dict) and "eventTimestamp" in r and "operationName" in r for r in rows):
        return rows
    return None


def _localized(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("localizedValue") or v.get("value") or "")
    return str(v or "")


_ACTIVITY_LEVELS = {
    "critical": "fatal",
    "error": "error",
    "warning": "warn",
    "informational": "info",
    "verbose": "debug",
}


@FORMATS.format("azure-activity-log", shapes={"json"}, detect=lambda d: bool(_activity_entries(d.value)), order=30)
def parse_activity_log(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `log` per resource: each entry a record "<resource>: <title> <details> (<category>: <operation>
    <status>, <cause>, <type>)", at the entry's level (a Resource Health event's Critical is an error). Resource
    Health's "unexpected failure on the host server" so reads as the host failing under the VM."""
    by_resource: dict[str, list[dict[str, Any]]] = {}
    for n, e in enumerate(_activity_entries(doc.value) or [], 1):
        ts = parse_ts(e.get("eventTimestamp"))
        rid = str(e.get("resourceId") or "")
        name = rid.rstrip("/").rsplit("/", 1)[-1] if rid else "subscription"
        raw = e.get("properties")
        props: dict[str, Any] = raw if isinstance(raw, dict) else {}
        words = [w for w in (props.get("title"), props.get("details"), props.get("statusMessage")) if w]
        extra = ", ".join(f"{k} {props[k]}" for k in ("cause", "type") if props.get(k))
        what = f"{_localized(e.get('category'))}: {_localized(e.get('operationName'))} {_localized(e.get('status'))}"
        msg = (
            f"{name}: "
            + (f"{' '.join(str(w) for w in words)} ({what}" if words else f"{what} (")
            + (f", {extra})" if extra else ")")
        )
        level = _ACTIVITY_LEVELS.get(str(e.get("level") or "").lower())
        if level == "fatal":
            level = "error"
        by_resource.setdefault(name, []).append({"ts": ts, "level": level, "msg": msg, "line": n})
    for name, records in by_resource.items():
        records.sort(key=lambda r: r["ts"] or 0)
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        data = {"records": records, "source": {"path": doc.path, "export": "azure-activity-log"}, "truncated": False}
        yield ctx.item(doc.path, "log", f"azure/{name}", data, max(stamps) if stamps else None)
