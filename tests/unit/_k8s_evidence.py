"""Small evidence items in the contract's shapes (diagnosis/model.py), built in code for the diagnosis unit tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from diagnosis.evidence import EvidenceSet
from diagnosis.model import EvidenceItem

NOW = 1_750_000_000.0  # the newest time in every set built here: 2025-06-15 15:06:40Z
_ids = itertools.count(1)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def evidence_item(
    kind: str, obj: str, data: dict[str, Any], ts: float | None = None, source: str = "bundle"
) -> EvidenceItem:
    return EvidenceItem(id=f"{source}#{next(_ids)}", kind=kind, source=source, object=obj, ts=ts, data=data)


def evidence(*items: EvidenceItem) -> EvidenceSet:
    return EvidenceSet(items)


def container_status(
    name: str = "app",
    *,
    ready: bool = True,
    restarts: int = 0,
    waiting: tuple[str, str] | None = None,
    last_terminated: tuple[str, int, float] | None = None,  # (reason, exitCode, finishedAt)
    running_since: float | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting:
        state["waiting"] = {"reason": waiting[0], "message": waiting[1]}
    else:
        state["running"] = {"startedAt": iso(running_since or NOW - 7200)}
    cs: dict[str, Any] = {"name": name, "ready": ready, "restartCount": restarts, "state": state, "image": f"{name}:1"}
    if last_terminated:
        reason, code, finished = last_terminated
        cs["lastState"] = {
            "terminated": {
                "reason": reason,
                "exitCode": code,
                "startedAt": iso(finished - 60),
                "finishedAt": iso(finished),
            }
        }
    return cs


def pod(
    name: str,
    ns: str = "shop",
    *,
    statuses: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    node: str = "node-1",
    owner: tuple[str, str] | None = None,
    status_extra: dict[str, Any] | None = None,
    volumes: list[dict[str, Any]] | None = None,
) -> EvidenceItem:
    statuses = statuses if statuses is not None else [container_status()]
    containers = containers or [{"name": s["name"], "image": f"{s['name']}:1"} for s in statuses]
    ready = all(s.get("ready") for s in statuses) and phase == "Running"
    md: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {"app": name.rsplit("-", 2)[0]}}
    if owner:
        md["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": iso(NOW - 600)}],
        "containerStatuses": statuses,
    }
    status.update(status_extra or {})
    spec: dict[str, Any] = {"nodeName": node, "containers": containers}
    if volumes:
        spec["volumes"] = volumes
    return evidence_item("k8s/Pod", f"Pod/{ns}/{name}", {"metadata": md, "spec": spec, "status": status})


def event(
    kind: str,
    name: str,
    reason: str,
    message: str,
    *,
    ns: str = "shop",
    type_: str = "Warning",
    ts: float = NOW - 120,
    count: int = 1,
) -> EvidenceItem:
    return evidence_item(
        "k8s/Event",
        f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}",
        {
            "type": type_,
            "reason": reason,
            "message": message,
            "involved": {"kind": kind, "namespace": ns, "name": name},
            "count": count,
            "first_ts": ts - 60 * (count - 1),
            "last_ts": ts,
            "source": "kubelet",
        },
        ts=ts,
    )


def log(
    ns: str, pod_name: str, container: str, lines: list[str], *, previous: bool = True, end: float = NOW - 90
) -> EvidenceItem:
    records = [
        {"ts": end - (len(lines) - i), "level": None, "msg": text, "line": i + 1} for i, text in enumerate(lines)
    ]
    return evidence_item(
        "log",
        f"Pod/{ns}/{pod_name}/{container}",
        {
            "records": records,
            "source": {"namespace": ns, "pod": pod_name, "container": container, "previous": previous},
            "truncated": False,
        },
        ts=end,
    )


def alert(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    status: str = "firing",
    starts: float = NOW - 300,
    ends: float | None = None,
    severity: str = "critical",
    summary: str = "",
    fingerprint: str | None = None,
) -> EvidenceItem:
    lab = {"alertname": name, "severity": severity, **(labels or {})}
    return evidence_item(
        "alert",
        f"alert/{name}",
        {
            "status": status,
            "labels": lab,
            "annotations": {"summary": summary or f"{name} on {labels}"},
            "starts_at": starts,
            "ends_at": ends,
            "fingerprint": fingerprint or f"{name}-{sorted(lab.items())}",
            "group_key": '{}:{alertname="' + name + '"}',
            "receiver": "opsgraph",
        },
        ts=ends or starts,
    )


def k8s(kind: str, name: str, ns: str = "shop", *, spec: Any = None, status: Any = None, **md: Any) -> EvidenceItem:
    metadata = {"name": name, **({"namespace": ns} if ns else {}), **md}
    data: dict[str, Any] = {"metadata": metadata}
    if spec is not None:
        data["spec"] = spec
    if status is not None:
        data["status"] = status
    obj = f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}"
    return evidence_item(f"k8s/{kind}", obj, data)


def node(
    name: str,
    *,
    ready: str = "True",
    pressure: dict[str, str] | None = None,
    since: float = NOW - 900,
    message: str = "",
    allocatable: dict[str, str] | None = None,
) -> EvidenceItem:
    conds = [
        {
            "type": "Ready",
            "status": ready,
            "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown",
            "message": message
            or ("kubelet is posting ready status" if ready == "True" else "Kubelet stopped posting node status."),
            "lastTransitionTime": iso(since),
        }
    ]
    for p in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        conds.append({"type": p, "status": (pressure or {}).get(p, "False"), "lastTransitionTime": iso(since)})
    return k8s(
        "Node", name, ns="", status={"conditions": conds, "allocatable": allocatable or {"cpu": "4", "memory": "16Gi"}}
    )


def metric_point_item(name: str, labels: dict[str, str], value: float) -> EvidenceItem:
    return evidence_item(
        "metric",
        f"metric/{name}",
        {"name": name, "labels": labels, "unit": "", "points": [[NOW, value]], "source": "prometheus"},
        ts=NOW,
    )
