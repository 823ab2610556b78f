"""Load balancers' view of their backends: one `lb/target` item per backend server, with its health and why.

- Azure Application Gateway backend health (`az network application-gateway show-backend-health`):
  `backendAddressPools[].backendHttpSettingsCollection[].servers[]` with `health` and `healthProbeLog`
- AWS ELBv2 target health (`aws elbv2 describe-target-health`): `TargetHealthDescriptions[]` with `TargetHealth`
  (`State`, `Reason` such as Target.ResponseCodeMismatch, `Description` "Health checks failed with these codes: [404]")
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_CODE = re.compile(r"(?:status code:?|codes?:?\s*\[?)\s*(\d{3})\b", re.I)


def _name(resource_id: Any) -> str:
    return str(resource_id or "").rstrip("/").rsplit("/", 1)[-1]


def _is_azure(v: Any) -> bool:
    pools = v.get("backendAddressPools") if isinstance(v, dict) else None
    return (
        isinstance(pools, list)
        and bool(pools)
        and all(isinstance(p, dict) and "backendHttpSettingsCollection" in p for p in pools)
    )


def _is_aws(v: Any) -> bool:
    targets = v.get("TargetHealthDescriptions") if isinstance(v, dict) else None
    return isinstance(targets, list) and all(isinstance(t, dict) and "TargetHealth" in t for t in targets)


def _target(doc: Document, ctx: ParseContext, data: dict[str, Any]) -> EvidenceItem:
    why = str(data.get("reason") or "")
    code = _CODE.search(why)
    data["probe_status"] = int(code.group(1)) if code else None
    return ctx.item(doc.path, "lb/target", f"{data['balancer']}/{data['pool']}/{data['target']}", data)


@FORMATS.format("lb-target-health", shapes={"json"}, detect=lambda d: _is_azure(d.value) or _is_aws(d.value), order=30)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    if _is_aws(v):
        for t in v["TargetHealthDescriptions"]:
            target, health = t.get("Target") or {}, t.get("TargetHealth") or {}
            reason = " ".join(str(x) for x in (health.get("Reason"), health.get("Description")) if x)
            yield _target(doc, ctx, {
                "balancer": "elb", "pool": _name(t.get("TargetGroupArn")) or "target-group",
                "target": f"{target.get('Id')}:{target.get('Port')}" if target.get("Port") else str(target.get("Id")),
                "health": str(health.get("State") or "").lower(), "reason": reason, "source": "aws",
            })  # fmt: skip
        return
    for pool in v["backendAddressPools"]:
        pool_id = str((pool.get("backendAddressPool") or {}).get("id") or "")
        gateway = (
            pool_id.split("/applicationGateways/", 1)[-1].split("/", 1)[0] if "/applicationGateways/" in pool_id else ""
        )
        for settings in pool.get("backendHttpSettingsCollection") or ():
            for server in settings.get("servers") or ():
                data = {
                    "balancer": gateway or "gateway",
                    "pool": _name(pool_id),
                    "target": str(server.get("address")),
                    "health": str(server.get("health") or "").lower(),
                    "reason": str(server.get("healthProbeLog") or ""),
                    "settings": _name((settings.get("backendHttpSettings") or {}).get("id")),
                    "source": "azure",
                }
                yield _target(doc, ctx, data)
