"""Alertmanager webhook payloads (version "4"), one or a list of them: one `alert` item per alert.

Documented at https://prometheus.io/docs/alerting/latest/configuration/#webhook_config. Also reads Grafana-managed
alerting's webhook (the same shape with version "1", orgId, title and per-alert values) and the Alertmanager API v2
alert list (GET /api/v2/alerts), whose alerts carry `status.state` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem


def _is_payload(v: Any) -> bool:
    """Alertmanager's webhook (version "4"), or Grafana-managed alerting's, which extends it (version "1", orgId)."""
    if not isinstance(v, dict) or not isinstance(v.get("alerts"), list):
        return False
    return str(v.get("version")) == "4" or (str(v.get("version")) == "1" and "orgId" in v)


def _is_api_alert(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("labels"), dict) and "startsAt" in v and "fingerprint" in v


def detect(doc: Document) -> bool:
    v = doc.value
    if _is_payload(v):
        return True
    return isinstance(v, list) and bool(v) and (all(map(_is_payload, v)) or all(map(_is_api_alert, v)))


@FORMATS.format("alertmanager", shapes={"json"}, detect=detect, order=10)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    payloads = [v] if isinstance(v, dict) else v
    for payload in payloads:
        if _is_payload(payload):
            group_key, receiver = payload.get("groupKey"), payload.get("receiver")
            for alert in payload["alerts"]:
                yield _alert(doc, ctx, alert, alert.get("status") or payload.get("status"), group_key, receiver)
        else:  # API v2 alert: status {state: active|suppressed|unprocessed}; an active alert is firing
            state = (payload.get("status") or {}).get("state")
            receivers = [r.get("name") for r in payload.get("receivers") or [] if isinstance(r, dict)]
            status = "resolved" if state == "resolved" else "firing"
            yield _alert(doc, ctx, payload, status, None, ",".join(filter(None, receivers)) or None)


def _alert(
    doc: Document, ctx: ParseContext, alert: dict[str, Any], status: Any, group_key: Any, receiver: Any
) -> EvidenceItem:
    labels = {str(k): str(v) for k, v in (alert.get("labels") or {}).items()}
    starts, ends = parse_ts(alert.get("startsAt")), parse_ts(alert.get("endsAt"))
    data = {
        "status": "resolved" if status == "resolved" else "firing",
        "labels": labels,
        "annotations": {str(k): str(v) for k, v in (alert.get("annotations") or {}).items()},
        "starts_at": starts,
        "ends_at": ends,
        "fingerprint": alert.get("fingerprint"),
        "group_key": group_key,
        "receiver": receiver,
    }
    name = labels.get("alertname", "unnamed")
    return ctx.item(doc.path, "alert", f"alert/{name}", data, ends if data["status"] == "resolved" and ends else starts)
