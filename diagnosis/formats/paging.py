"""Incidents from a paging service, read as `alert` items like Alertmanager's (firing until resolved).

- PagerDuty REST API v2: `GET /incidents` (`{"incidents": [...]}`) and one incident (`{"incident": {...}}`):
  title, status (triggered, acknowledged, resolved), service.summary, urgency, created_at and, for a resolved
  one, last_status_change_at as its end; `GET /incidents/{id}/log_entries` (`{"log_entries": [...]}`): a trigger
  entry opens the incident, a resolve entry ends it.
- PagerDuty webhooks v3: `{"event": {"event_type": "incident.triggered" | "incident.resolved" | ...,
  "occurred_at", "data": {incident}}}`, one or a list of them.
- Opsgenie Alert API: `GET /v2/alerts` (`{"data": [{message, status (open, closed), acknowledged, priority,
  createdAt, updatedAt, tags}]}`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _is_pd_incident(v: Any) -> bool:
    return isinstance(v, dict) and v.get("type") in ("incident", "incident_reference") and "status" in v


def _pd_incidents(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, dict) and isinstance(v.get("incidents"), list) and all(map(_is_pd_incident, v["incidents"])):
        return list(v["incidents"])
    if isinstance(v, dict) and _is_pd_incident(v.get("incident")):
        return [v["incident"]]
    events = v if isinstance(v, list) else [v]
    if events and all(isinstance(e, dict) and _is_pd_incident(_dict(e.get("event")).get("data")) for e in events):
        # a webhook's incident is as it was when the event occurred: the newest event per incident wins
        latest: dict[str, dict[str, Any]] = {}
        for e in sorted(events, key=lambda e: str(e["event"].get("occurred_at") or "")):
            inc = dict(e["event"]["data"])
            if str(e["event"].get("event_type")) == "incident.resolved":
                inc["status"] = "resolved"
                inc.setdefault("last_status_change_at", e["event"].get("occurred_at"))
            latest[str(inc.get("id") or len(latest))] = inc
        return list(latest.values())
    return None


def _pd_log_entries(v: Any) -> list[dict[str, Any]] | None:
    entries = v.get("log_entries") if isinstance(v, dict) else None
    if isinstance(entries, list) and entries and all(isinstance(e, dict) and "type" in e for e in entries):
        return entries
    return None


def _og_alerts(v: Any) -> list[dict[str, Any]] | None:
    data = v.get("data") if isinstance(v, dict) else None
    if (
        isinstance(data, list)
        and data
        and all(isinstance(a, dict) and "message" in a and a.get("status") in ("open", "closed") for a in data)
        and all("tinyId" in a or "alias" in a for a in data)
    ):
        return data
    return None


def detect(doc: Document) -> bool:
    v = doc.value
    return _pd_incidents(v) is not None or _pd_log_entries(v) is not None or _og_alerts(v) is not None


def _item(
    doc: Document,
    ctx: ParseContext,
    name: str,
    labels: dict[str, str],
    resolved: bool,
    starts: Any,
    ends: Any,
    **ann: Any,
) -> EvidenceItem:
    start, end = parse_ts(starts), parse_ts(ends) if resolved else None
    data = {
        "status": "resolved" if resolved else "firing",
        "labels": {"alertname": name, **{k: v for k, v in labels.items() if v}},
        "annotations": {k: str(v) for k, v in ann.items() if v},
        "starts_at": start,
        "ends_at": end,
        "fingerprint": None,
        "group_key": None,
        "receiver": labels.get("source"),
    }
    return ctx.item(doc.path, "alert", f"alert/{name}", data, end if resolved and end else start)


@FORMATS.format("paging", shapes={"json"}, detect=detect, order=30)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    for inc in _pd_incidents(v) or []:
        service = _dict(inc.get("service")).get("summary")
        resolved = inc.get("status") == "resolved"
        yield _item(
            doc, ctx, str(inc.get("title") or inc.get("summary") or "incident"),
            {"service": str(service or ""), "severity": str(inc.get("urgency") or ""), "source": "pagerduty"},
            resolved, inc.get("created_at"), inc.get("last_status_change_at") or inc.get("resolved_at"),
            summary=inc.get("summary") or inc.get("title"), state=inc.get("status"),
        )  # fmt: skip
    by_incident: dict[str, dict[str, Any]] = {}
    for e in _pd_log_entries(v) or []:
        inc = _dict(e.get("incident"))
        key = str(inc.get("id") or inc.get("summary") or "incident")
        seen = by_incident.setdefault(key, {"title": inc.get("summary") or key, "service": None})
        seen["service"] = seen["service"] or _dict(e.get("service")).get("summary")
        kind = str(e.get("type"))
        if kind.startswith("trigger"):
            seen["start"] = e.get("created_at")
        elif kind.startswith("resolve"):
            seen["end"] = e.get("created_at")
    for seen in by_incident.values():
        yield _item(
            doc, ctx, str(seen["title"]),
            {"service": str(seen["service"] or ""), "source": "pagerduty"},
            "end" in seen, seen.get("start") or seen.get("end"), seen.get("end"), summary=seen["title"],
        )  # fmt: skip
    for a in _og_alerts(v) or []:
        tags = [str(t) for t in a.get("tags") or []]
        yield _item(
            doc, ctx, str(a["message"]),
            {"severity": str(a.get("priority") or ""), "source": "opsgenie", "tags": ",".join(tags)},
            a.get("status") == "closed", a.get("createdAt"), a.get("updatedAt"), summary=a.get("message"),
        )  # fmt: skip
