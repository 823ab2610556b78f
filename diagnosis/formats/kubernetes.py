"""`kubectl get -o json` output: kind List, a typed list (PodList, EventList ...) or a single object.

Objects become `k8s/<Kind>` items holding the object as kubectl prints it, less `metadata.managedFields` and
the last-applied-configuration annotation (bookkeeping, often half the bytes). Events of core/v1 and
events.k8s.io/v1 are normalised to one shape (see diagnosis.model).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, get_path
from diagnosis.formats.changes import argo_sync_line
from diagnosis.model import EvidenceItem

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _is_object(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("kind"), str) and isinstance(v.get("metadata"), dict)


def _is_list(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and isinstance(v.get("kind"), str)
        and v["kind"].endswith("List")
        and isinstance(v.get("items"), list)
        and "apiVersion" in v
    )


def detect(doc: Document) -> bool:
    v = doc.value
    return _is_list(v) or (_is_object(v) and "apiVersion" in v)


@FORMATS.format("kubernetes", shapes={"json"}, detect=detect, order=20)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    if _is_list(v):
        # a typed list (PodList from the API) leaves kind and apiVersion off its items
        default_kind = v["kind"][: -len("List")] or None
        for obj in v["items"]:
            if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                yield from _object(doc, ctx, obj, obj.get("kind") or default_kind)
    else:
        yield from _object(doc, ctx, v, v["kind"])


def _object(doc: Document, ctx: ParseContext, obj: dict[str, Any], kind: str | None) -> Iterator[EvidenceItem]:
    if not kind:
        return
    if kind == "List" and isinstance(obj.get("items"), list):  # a List nested in a List
        for inner in obj["items"]:
            if isinstance(inner, dict):
                yield from _object(doc, ctx, inner, inner.get("kind"))
        return
    if kind == "Event":
        yield _event(doc, ctx, obj)
        return
    meta = obj["metadata"]
    meta.pop("managedFields", None)
    if isinstance(meta.get("annotations"), dict):
        meta["annotations"].pop(LAST_APPLIED, None)
    obj.setdefault("kind", kind)
    ns, name = meta.get("namespace"), meta.get("name", "")
    if kind == "Pod" and ns:  # a stern stream names pods without their namespace
        ctx.shared.setdefault("pod_namespaces", {})[name] = ns
    yield ctx.item(doc.path, f"k8s/{kind}", f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}", obj)
    if kind == "Application" and str(obj.get("apiVersion", "")).startswith("argoproj.io/"):
        yield from _argo_syncs(doc, ctx, obj, name)


def _argo_syncs(doc: Document, ctx: ParseContext, app: dict[str, Any], name: str) -> Iterator[EvidenceItem]:
    """An Argo CD Application's sync history (`status.history`) as the log of its deploys, the same lines
    `argocd app history` gives ("argocd synced billing-api-prod to revision e4c19a7 (history 312)"), the latest
    with the images the application now runs: the release rules read them."""
    status: dict[str, Any] = app["status"] if isinstance(app.get("status"), dict) else {}
    history = [h for h in status.get("history") or () if isinstance(h, dict)]
    images = [str(i) for i in (status.get("summary") or {}).get("images") or ()]
    records: list[dict[str, Any]] = []
    for i, h in enumerate(history):
        ts = parse_ts(str(h.get("deployedAt") or h.get("deployStartedAt") or ""))
        if ts is None:
            continue
        msg = argo_sync_line(name, str(h.get("revision") or "?")[:7], h.get("id"))
        if i == len(history) - 1 and images:
            msg += f", images {', '.join(images)}"
        records.append({"ts": ts, "level": "info", "msg": msg, "line": None})
    if records:
        data = {"records": records, "source": {"path": doc.path, "export": "argocd-application"}, "truncated": False}
        yield ctx.item(doc.path, "log", f"argocd/{name}", data, max(r["ts"] for r in records))


def _event(doc: Document, ctx: ParseContext, ev: dict[str, Any]) -> EvidenceItem:
    if "regarding" in ev or "note" in ev or str(ev.get("apiVersion", "")).startswith("events.k8s.io"):
        involved = ev.get("regarding") or {}
        message = ev.get("note") or ""
        series = ev.get("series") or {}
        count = series.get("count") or ev.get("deprecatedCount") or 1
        first = parse_ts(ev.get("deprecatedFirstTimestamp")) or parse_ts(ev.get("eventTime"))
        last = (
            parse_ts(series.get("lastObservedTime"))
            or parse_ts(ev.get("deprecatedLastTimestamp"))
            or parse_ts(ev.get("eventTime"))
        )
        source = ev.get("reportingController") or get_path(ev, "deprecatedSource", "component") or ""
    else:
        involved = ev.get("involvedObject") or {}
        message = ev.get("message") or ""
        series = ev.get("series") or {}
        count = ev.get("count") or series.get("count") or 1
        first = parse_ts(ev.get("firstTimestamp")) or parse_ts(ev.get("eventTime"))
        last = (
            parse_ts(ev.get("lastTimestamp"))
            or parse_ts(series.get("lastObservedTime"))
            or parse_ts(ev.get("eventTime"))
            or first
        )
        source = get_path(ev, "source", "component") or ev.get("reportingComponent") or ""
    inv = {
        "kind": involved.get("kind") or "",
        "namespace": involved.get("namespace") or get_path(ev, "metadata", "namespace") or "",
        "name": involved.get("name") or "",
    }
    if inv["kind"] == "Node":
        inv["namespace"] = ""  # node events are filed in "default" but a node has no namespace
    data = {
        "type": ev.get("type") or "Normal",
        "reason": ev.get("reason") or "",
        "message": message,
        "involved": inv,
        "count": int(count) if isinstance(count, int | float | str) and str(count).isdigit() else 1,
        "first_ts": first or last,
        "last_ts": last or first,
        "source": source,
    }
    obj = f"{inv['kind']}/{inv['namespace']}/{inv['name']}" if inv["namespace"] else f"{inv['kind']}/{inv['name']}"
    return ctx.item(doc.path, "k8s/Event", obj, data, last or first)
