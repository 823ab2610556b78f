"""What a service says about its own health: a provider's status page, the cloud's health events, a datastore's
cluster health. Each becomes an item the analyzers weigh beside the logs that show the failure.

- Atlassian Statuspage public API v2 (`/api/v2/summary.json`, `status.json`, `components.json`,
  `incidents.json`, `incidents/unresolved.json`): `{page, status: {indicator, description}, components: [{name,
  status}], incidents: [{name, status, impact, created_at, incident_updates}]}` -> one `external/status` item
  naming the provider, its components that are not operational and its unresolved incidents.
- AWS Health DescribeEvents (`{"events": [{service, eventTypeCode, eventTypeCategory, region, statusCode,
  startTime}]}`) -> one `external/status` item for provider AWS; open `issue` events are its failing components.
- Google Cloud's status incidents (`status.cloud.google.com/incidents.json`, or one incident): `[{begin, end,
  external_desc, service_name, affected_products: [{title}], currently_affected_locations: [{id}], status_impact,
  severity}]` -> one `external/status` item for provider Google Cloud; an incident without `end` is open, and its
  products in their locations are the failing components.
- Elasticsearch / OpenSearch `GET _cluster/health` -> `datastore/health` {engine, cluster, status
  green|yellow|red, unassigned_shards, ...}.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

# Statuspage component statuses; anything but operational (and maintenance, which is planned) is a failure
COMPONENT_FAILING = ("degraded_performance", "partial_outage", "major_outage")
INCIDENT_CLOSED = ("resolved", "postmortem", "completed")
_STATUSPAGE_KEYS = ("status", "components", "incidents", "scheduled_maintenances")


def _is_statuspage(v: Any) -> bool:
    if not isinstance(v, dict) or not isinstance(v.get("page"), dict):
        return False
    page = v["page"]
    if not ("name" in page or "id" in page or "url" in page):
        return False
    status = v.get("status")
    return (isinstance(status, dict) and "indicator" in status) or any(
        isinstance(v.get(k), list) for k in _STATUSPAGE_KEYS[1:]
    )


def _domain(url: Any) -> str | None:
    """The provider's own domain from its status page URL: https://status.payvia.example -> payvia.example."""
    m = re.match(r"(?:[a-z]+://)?([^/:\s]+)", str(url or ""), re.I)
    if not m or "." not in m[1]:
        return None
    host = m[1].lower()
    for prefix in ("status.", "www.", "statuspage."):
        host = host.removeprefix(prefix)
    return host if "." in host and not host.endswith("statuspage.io") else None


@FORMATS.format("statuspage", shapes={"json"}, detect=lambda d: _is_statuspage(d.value), order=30)
def parse_statuspage(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    page = v["page"]
    provider = str(page.get("name") or page.get("id"))
    status = v.get("status") if isinstance(v.get("status"), dict) else {}
    components = [
        {"name": str(c.get("name")), "status": str(c.get("status") or "")}
        for c in v.get("components") or []
        if isinstance(c, dict) and c.get("name") and not c.get("group")  # a group repeats its members' state
    ]
    incidents: list[dict[str, Any]] = []
    for inc in v.get("incidents") or []:
        if not isinstance(inc, dict):
            continue
        updates = [u for u in inc.get("incident_updates") or [] if isinstance(u, dict)]
        latest = max(updates, key=lambda u: parse_ts(u.get("created_at")) or 0.0) if updates else {}
        incidents.append(
            {
                "name": str(inc.get("name") or ""),
                "status": str(inc.get("status") or ""),
                "impact": str(inc.get("impact") or ""),
                "created_at": parse_ts(inc.get("created_at")),
                "resolved_at": parse_ts(inc.get("resolved_at")),
                "components": [str(c.get("name")) for c in inc.get("components") or [] if isinstance(c, dict)],
                "latest_update": str(latest.get("body") or ""),
            }
        )
    failing = [c["name"] for c in components if c["status"] in COMPONENT_FAILING]
    active = [i for i in incidents if i["status"] not in INCIDENT_CLOSED]
    for inc in active:
        failing += [c for c in inc["components"] if c not in failing]
    data = {
        "provider": provider,
        "domain": _domain(page.get("url")),
        "indicator": str(status.get("indicator") or ""),  # none | minor | major | critical
        "description": str(status.get("description") or ""),
        "components": components,
        "failing": failing,
        "incidents": incidents,
        "active_incidents": [i["name"] for i in active],
        "degraded": bool(failing or active or status.get("indicator") in ("minor", "major", "critical")),
        "source": "statuspage",
    }
    stamps = [t for t in (parse_ts(page.get("updated_at")), *(i["created_at"] for i in active)) if t is not None]
    yield ctx.item(doc.path, "external/status", f"status/{provider}", data, max(stamps) if stamps else None)


# --- AWS Health -------------------------------------------------------------------------------------------


def _health_events(v: Any) -> Any:
    """The events of a DescribeEvents response, or the bare list a `--query 'events[...]'` prints."""
    return v.get("events") if isinstance(v, dict) else v if isinstance(v, list) else None


def _is_aws_health(v: Any) -> bool:
    events = _health_events(v)
    return (
        isinstance(events, list)
        and bool(events)
        and all(isinstance(e, dict) and "eventTypeCode" in e and "service" in e for e in events)
    )


@FORMATS.format("aws-health", shapes={"json"}, detect=lambda d: _is_aws_health(d.value), order=30)
def parse_aws_health(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    events: list[dict[str, Any]] = []
    for e in _health_events(doc.value):
        events.append(
            {
                "service": str(e.get("service")),
                "type": str(e.get("eventTypeCode")),
                "category": str(e.get("eventTypeCategory") or ""),
                "region": str(e.get("region") or ""),
                "az": str(e.get("availabilityZone") or ""),
                "status": str(e.get("statusCode") or ""),
                "start": parse_ts(e.get("startTime")),
                "end": parse_ts(e.get("endTime")),
            }
        )
    active = [e for e in events if e["status"] == "open" and e["category"] in ("issue", "investigation")]
    failing = list(dict.fromkeys(f"{e['service']} {e['region']}".strip() for e in active))
    data = {
        "provider": "AWS",
        "domain": "amazonaws.com",
        "indicator": "major" if active else "none",
        "description": "; ".join(e["type"] for e in active),
        "components": [{"name": f"{e['service']} {e['region']}".strip(), "status": e["status"]} for e in events],
        "failing": failing,
        "incidents": [
            {
                "name": e["type"],
                "status": e["status"],
                "created_at": e["start"],
                "category": e["category"],
                "service": e["service"],
            }
            for e in events
        ],
        "active_incidents": [e["type"] for e in active],
        "degraded": bool(active),
        "source": "aws-health",
    }
    stamps = [e["start"] for e in active if e["start"] is not None]
    yield ctx.item(doc.path, "external/status", "status/AWS", data, max(stamps) if stamps else None)


# --- Google Cloud status incidents ----------------------------------------------------------------------


def _gcp_incidents(v: Any) -> list[dict[str, Any]] | None:
    rows = v if isinstance(v, list) else [v]
    if rows and all(
        isinstance(i, dict) and "begin" in i and ("service_name" in i or "affected_products" in i) for i in rows
    ):
        return rows
    return None


@FORMATS.format("gcp-status", shapes={"json"}, detect=lambda d: _gcp_incidents(d.value) is not None, order=30)
def parse_gcp_status(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    incidents: list[dict[str, Any]] = []
    failing: list[str] = []
    for inc in _gcp_incidents(doc.value) or []:
        products = [str(p.get("title")) for p in inc.get("affected_products") or [] if isinstance(p, dict)]
        products = products or [str(inc.get("service_name") or "")]
        where = [
            str(loc.get("id") or loc.get("title"))
            for loc in inc.get("currently_affected_locations") or inc.get("previously_affected_locations") or []
            if isinstance(loc, dict)
        ]
        end = parse_ts(inc.get("end"))
        status = "resolved" if end is not None else "open"
        incidents.append(
            {
                "name": str(inc.get("external_desc") or inc.get("service_name") or ""),
                "status": status,
                "impact": str(inc.get("status_impact") or inc.get("severity") or ""),
                "created_at": parse_ts(inc.get("begin")),
                "resolved_at": end,
                "components": [f"{p} {loc}" for p in products for loc in where] or products,
            }
        )
        if end is None and inc.get("status_impact") != "SERVICE_INFORMATION":
            failing += [c for c in incidents[-1]["components"] if c not in failing]
    active = [i for i in incidents if i["status"] == "open"]
    data = {
        "provider": "Google Cloud",
        "domain": "googleapis.com",
        "indicator": "major" if failing else "none",
        "description": "; ".join(i["name"] for i in active),
        "components": [{"name": c, "status": i["status"]} for i in incidents for c in i["components"]],
        "failing": failing,
        "incidents": incidents,
        "active_incidents": [i["name"] for i in active],
        "degraded": bool(failing),
        "source": "gcp-status",
    }
    stamps = [i["created_at"] for i in active if i["created_at"] is not None]
    yield ctx.item(doc.path, "external/status", "status/Google Cloud", data, max(stamps) if stamps else None)


# --- Elasticsearch / OpenSearch cluster health ------------------------------------------------------------

_HEALTH_NUMBERS = (
    "number_of_nodes", "number_of_data_nodes", "active_primary_shards", "active_shards", "relocating_shards",
    "initializing_shards", "unassigned_shards", "delayed_unassigned_shards", "number_of_pending_tasks",
    "active_shards_percent_as_number",
)  # fmt: skip


def _is_cluster_health(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and "cluster_name" in v
        and str(v.get("status")).lower() in ("green", "yellow", "red")
        and ("unassigned_shards" in v or "active_shards" in v)
    )


@FORMATS.format("es-cluster-health", shapes={"json"}, detect=lambda d: _is_cluster_health(d.value), order=30)
def parse_cluster_health(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    cluster = str(v["cluster_name"])
    data: dict[str, Any] = {
        "engine": "elasticsearch",
        "cluster": cluster,
        "status": str(v["status"]).lower(),
        "timed_out": bool(v.get("timed_out")),
    }
    for key in _HEALTH_NUMBERS:
        value = v.get(key)
        data[key] = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    yield ctx.item(doc.path, "datastore/health", f"elasticsearch/{cluster}", data, None)


# --- why a shard is unassigned (`GET _cluster/allocation/explain`, Elasticsearch / OpenSearch) -------------------


def _is_allocation_explain(v: Any) -> bool:
    return isinstance(v, dict) and "index" in v and ("can_allocate" in v or "node_allocation_decisions" in v)


@FORMATS.format("es-allocation-explain", shapes={"json"}, detect=lambda d: _is_allocation_explain(d.value), order=30)
def parse_allocation_explain(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One item for the shard: where it may not go and, per node, which deciders said NO and why."""
    v = doc.value
    decisions = []
    for n in v.get("node_allocation_decisions") or ():
        if not isinstance(n, dict):
            continue
        deciders = [
            {"decider": str(x.get("decider") or ""), "decision": str(x.get("decision") or "").upper(),
             "explanation": str(x.get("explanation") or "")}
            for x in n.get("deciders") or () if isinstance(x, dict)
        ]  # fmt: skip
        decisions.append(
            {
                "node": str(n.get("node_name") or n.get("node_id") or ""),
                "node_id": str(n.get("node_id") or ""),
                "decision": str(n.get("node_decision") or "").lower(),
                "attributes": {
                    str(k): str(a)
                    for k, a in (n.get("node_attributes") or {}).items()
                    if not str(k).startswith(("ml.", "xpack.", "transform."))
                },
                "deciders": deciders,
            }
        )
    info = v.get("unassigned_info") if isinstance(v.get("unassigned_info"), dict) else {}
    data: dict[str, Any] = {
        "index": str(v["index"]),
        "shard": v.get("shard"),
        "primary": bool(v.get("primary")),
        "state": str(v.get("current_state") or ""),
        "can_allocate": str(v.get("can_allocate") or ""),
        "explanation": str(v.get("allocate_explanation") or ""),
        "unassigned_reason": str(info.get("reason") or ""),
        "unassigned_details": str(info.get("details") or ""),
        "decisions": decisions,
    }
    ts = parse_ts(info.get("at"))
    kind = "primary" if data["primary"] else "replica"
    yield ctx.item(doc.path, "search/allocation", f"shard {data['index']}[{data['shard']}] ({kind})", data, ts)


# --- an Elasticsearch/OpenSearch `_bulk` response: the items the cluster refused, and why ------------------------
def _is_bulk_response(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and "errors" in v
        and isinstance(v.get("items"), list)
        and any(isinstance(i, dict) and set(i) & {"index", "create", "update", "delete"} for i in v["items"][:5])
    )


@FORMATS.format("es-bulk-response", shapes={"json"}, detect=lambda d: _is_bulk_response(d.value), order=30)
def parse_bulk_response(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each refused item a record at error level ("offers-v12 S-1187-889100: mapper_parsing_exception: failed to
    parse field [weight] ..."), and a last record counting the accepted ones: a document the index's mapping
    refuses is bad input, a 429 or 503 is the cluster pushing back."""
    records: list[dict[str, Any]] = []
    ok = 0
    for n, item in enumerate(doc.value.get("items") or (), 1):
        if not isinstance(item, dict) or not item:
            continue
        op = next(iter(item.values()))
        if not isinstance(op, dict):
            continue
        err = op.get("error")
        if not isinstance(err, dict):
            ok += 1
            continue
        cause = err.get("caused_by") if isinstance(err.get("caused_by"), dict) else {}
        msg = (
            f"{op.get('_index')} {op.get('_id')}: status {op.get('status')} {err.get('type')}: {err.get('reason')}"
            + (f" (caused by {cause.get('type')}: {cause.get('reason')})" if cause else "")
        )
        records.append({"ts": None, "level": "error", "msg": msg[:600], "line": n})
    records.append({"ts": None, "level": "info", "msg": f"bulk: {ok} item(s) accepted, {len(records)} refused",
                    "line": 0})  # fmt: skip
    data = {"records": records, "source": {"path": doc.path, "export": "es-bulk"}, "truncated": False}
    yield ctx.item(doc.path, "log", doc.path, data, None)
