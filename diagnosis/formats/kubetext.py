"""What `kubectl` prints for a person: `kubectl describe` (pods, nodes, deployments, claims, and the events of any
object) and `kubectl get` tables (pods, events, nodes), as operators paste them into tickets and chat, with or
without the `$ kubectl ...` prompt line, several commands in one file.

They become the same items `kubectl get -o json` gives (`k8s/Pod`, `k8s/Node`, `k8s/Deployment`,
`k8s/PersistentVolumeClaim`, `k8s/Event`), rebuilt from the fields the text shows, so the analyzers read them
unchanged; each object carries `"x-opsgraph-from": "kubectl describe" | "kubectl get"` and yields to a JSON export
of the same object. kubectl prints event times as ages ("2m (x15 over 10m)") relative to when it ran, which the text
does not say: ages count back from the newest dated evidence of the bundle (the describe's own absolute times
included), or stay unknown when there is none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

FROM_KEY = "x-opsgraph-from"

# "$ kubectl describe pod x -n shop", "user@host:~$ kubectl get pods -A", "PS C:\> kubectl get events"
_PROMPT = re.compile(r"^\s*(?:[\w@.\-:~/\\\[\] ]*[$#>%]\s*)?(?P<cmd>(?:kubectl|oc|k)\s.*)$")
_NAME = re.compile(r"^Name:\s+(\S+)\s*$")
# a describe key: single-spaced words then a colon ("Restart Count:", "Controlled By:"); never a table row
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w.()/-]*(?: [\w.()/-]+)*):(?:\s+(?P<value>.*?))?\s*$")
_RFC1123 = r"\w{3}, \d{1,2} \w{3} \d{4} \d{2}:\d{2}:\d{2} (?:[+-]\d{4}|[A-Z]{2,5})"
_AGE = r"<unknown>|<invalid>|\d+[smhdy](?:\d+[smhdy])*"
_DESCRIBE_EVENT = re.compile(
    rf"^\s+(?P<type>Normal|Warning)\s+(?P<reason>\S+)\s+(?P<age>{_AGE})"
    rf"(?:\s+\(x(?P<count>\d+) over (?P<over>{_AGE})\))?\s+(?P<source>\S+(?:, \S+)?)\s+(?P<message>.*?)\s*$"
)
_NODE_CONDITION = re.compile(
    rf"^\s+(?P<type>\w+)\s+(?P<status>True|False|Unknown)\s+(?P<heartbeat>{_RFC1123})\s+(?P<transition>{_RFC1123})"
    rf"\s+(?P<reason>\S+)\s+(?P<message>.*?)\s*$"
)
_QUANTITY_LINE = re.compile(r"^\s+(?P<name>[\w./-]+):\s+(?P<value>\S+)")
_PROBE = re.compile(
    r"^(?P<kind>http-get|tcp-socket|exec|grpc)\s+(?P<target>.*?)\s+delay=(?P<delay>\d+)s\s+timeout=(?P<timeout>\d+)s"
    r"\s+period=(?P<period>\d+)s\s+#success=(?P<success>\d+)\s+#failure=(?P<failure>\d+)"
)
_HTTP_TARGET = re.compile(r"^(?P<scheme>https?)://[^:/]*:(?P<port>[\w-]+)(?P<path>/\S*)?")
_TABLE_HEADERS = {
    "pods": ("NAME", "READY", "STATUS", "RESTARTS", "AGE"),
    "events": ("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"),
    "nodes": ("NAME", "STATUS", "ROLES", "AGE", "VERSION"),
    "deployments": ("NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"),
    "hpa": ("NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS"),
    "pvc": ("NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS"),
}
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


def _seconds(age: str | None) -> float | None:
    """'3m27s' -> 207; '<unknown>' -> None."""
    if not age or not age[0].isdigit():
        return None
    return float(sum(int(n) * _DURATION_UNITS[u] for n, u in re.findall(r"(\d+)([smhdy])", age)))


def _iso(text: str | None) -> str | None:
    """kubectl's RFC 1123 times -> the RFC 3339 strings the JSON carries."""
    if not text or not re.match(_RFC1123, text.strip()):
        return None
    try:
        dt = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError):
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------------ segments


@dataclass
class _Segment:
    """One command's output: the lines after a prompt (or the whole file when there is none)."""

    command: str
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)

    @property
    def namespace(self) -> str:
        m = re.search(r"(?:-n|--namespace)[= ](\S+)", self.command)
        return m.group(1) if m else ""


def _segments(doc: Document) -> list[_Segment]:
    out = [_Segment("")]
    for n, line in enumerate(doc.lines(), 1):
        m = _PROMPT.match(line)
        if m and not line.startswith(" "):
            out.append(_Segment(m["cmd"].strip()))
            continue
        out[-1].lines.append((n, line.rstrip("\r")))
    return [s for s in out if any(t.strip() for _, t in s.lines)]


def _describe_blocks(seg: _Segment) -> list[list[tuple[int, str]]]:
    """The objects of one `kubectl describe` output: each starts at a `Name:` line in the first column."""
    blocks: list[list[tuple[int, str]]] = []
    for n, line in seg.lines:
        if _NAME.match(line):
            blocks.append([])
        if blocks:
            blocks[-1].append((n, line))
    return [b for b in blocks if _is_describe(b)]


def _is_describe(block: list[tuple[int, str]]) -> bool:
    keys = {m["key"] for _, line in block[:40] if (m := _KEY.match(line)) and not m["indent"]}
    return "Name" in keys and bool(keys & {"Namespace", "Roles", "CreationTimestamp", "Labels", "Events"})


def _tables(seg: _Segment) -> list[tuple[str, list[tuple[int, dict[str, str]]]]]:
    """The `kubectl get` tables of one output, each with its kind and rows as {column: text}, cut at its header's
    column positions. `kubectl get deploy,job,pods` prints one table per kind, separated by a blank line."""
    blocks: list[list[tuple[int, str]]] = [[]]
    for n, line in seg.lines:
        if line.strip():
            blocks[-1].append((n, line))
        elif blocks[-1]:
            blocks.append([])
    out = []
    for body in blocks:
        table = _block_table(body)
        if table:
            out.append(table)
    return out


def _block_table(body: list[tuple[int, str]]) -> tuple[str, list[tuple[int, dict[str, str]]]] | None:
    if not body:
        return None
    header = body[0][1]
    for kind, columns in _TABLE_HEADERS.items():
        if all(re.search(rf"(?:^|\s){re.escape(c)}(?:\s|$)", header) for c in columns):
            starts = sorted(
                (m.start(), m.group(0).strip())
                for m in re.finditer(r"\S+(?: (?=[A-Z]+\b)[A-Z]+)*", header)  # "LAST SEEN", "NOMINATED NODE"
            )
            rows = []
            for n, line in body[1:]:
                cells = {}
                for i, (start, name) in enumerate(starts):
                    end = starts[i + 1][0] if i + 1 < len(starts) else None
                    cells[name] = line[start:end].strip() if name != starts[-1][1] else line[start:].strip()
                if "/" in cells.get("NAME", ""):  # `kubectl get all`: "pod/x", "deployment.apps/y"
                    cells["NAME"] = cells["NAME"].split("/", 1)[1]
                rows.append((n, cells))
            return kind, rows
    return None


# `kubectl describe pod x | sed -n '/^Events:/,$p'`, `... | grep 'Failed to pull'`: the object from the command
_DESCRIBED = re.compile(r"\bdescribe\s+(?P<kind>[\w.]+)(?:/|\s+)(?P<name>[a-z0-9][\w.\-]*)")


def _cut_describe_events(seg: _Segment) -> list[tuple[int, re.Match[str]]]:
    """The event lines of a `kubectl describe` whose output was cut (no `Name:` line left to say whose they are)."""
    if not _DESCRIBED.search(seg.command):
        return []
    return [(n, m) for n, line in seg.lines if (m := _DESCRIBE_EVENT.match(line))]


def detect(doc: Document) -> bool:
    head = Document(doc.path, "text", text=doc.text[:65536])
    return any(_describe_blocks(seg) or _tables(seg) or _cut_describe_events(seg) for seg in _segments(head))


# ------------------------------------------------------------------------------------------------ parsing


@FORMATS.format("kubectl-text", shapes={"text"}, detect=detect, order=18)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for seg in _segments(doc):
        blocks = _describe_blocks(seg)
        if blocks:
            for block in blocks:
                yield from _describe(doc, ctx, seg, block)
            continue
        cut = _cut_describe_events(seg)
        if cut:
            yield from _events_of_command(doc, ctx, seg, cut)
            continue
        for table in _tables(seg):
            yield from _table_items(doc, ctx, seg, *table)


@dataclass
class _Node:
    key: str
    value: str
    line: int
    indent: int
    children: list[_Node] = field(default_factory=list)
    rows: list[tuple[int, str]] = field(default_factory=list)  # lines that are not `key: value` (tables, lists)

    def get(self, key: str) -> _Node | None:
        return next((c for c in self.children if c.key == key), None)

    def text(self, key: str) -> str:
        node = self.get(key)
        return node.value if node is not None else ""


def _tree(block: list[tuple[int, str]]) -> _Node:
    root = _Node("", "", 0, -1)
    stack = [root]
    for n, line in block:
        if not line.strip():
            continue
        m = _KEY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        while len(stack) > 1 and indent <= stack[-1].indent:
            stack.pop()
        if m and not _DESCRIBE_EVENT.match(line) and not _NODE_CONDITION.match(line):
            node = _Node(m["key"], (m["value"] or "").strip(), n, indent)
            stack[-1].children.append(node)
            stack.append(node)
        else:
            stack[-1].rows.append((n, line))
    return root


def _labels(node: _Node | None) -> dict[str, str]:
    if node is None:
        return {}
    out = {}
    for text in [node.value, *(line.strip() for _, line in node.rows)]:
        k, sep, v = text.partition("=")
        if sep and k and " " not in k:
            out[k] = v
    return out


def _describe_kind(seg: _Segment, root: _Node) -> str:
    m = re.search(r"\bdescribe\s+(\S+)", seg.command)
    said = (m.group(1).split("/")[0].lower() if m else "").rstrip("s")
    aliases = {
        "po": "Pod",
        "pod": "Pod",
        "no": "Node",
        "node": "Node",
        "deploy": "Deployment",
        "deployment": "Deployment",
        "pvc": "PersistentVolumeClaim",
        "persistentvolumeclaim": "PersistentVolumeClaim",
        "sts": "StatefulSet",
        "statefulset": "StatefulSet",
        "d": "DaemonSet",
        "daemonset": "DaemonSet",
        "r": "ReplicaSet",
        "replicaset": "ReplicaSet",
        "job": "Job",
        "svc": "Service",
        "service": "Service",
        "hpa": "HorizontalPodAutoscaler",
        "horizontalpodautoscaler": "HorizontalPodAutoscaler",
        "ingres": "Ingress",
        "ing": "Ingress",
        "cronjob": "CronJob",
        "cj": "CronJob",
    }
    if said in aliases:
        return aliases[said]
    keys = {c.key for c in root.children}
    if "Containers" in keys and ("Node" in keys or "IP" in keys or "Status" in keys) and "Replicas" not in keys:
        return "Pod"
    if "Roles" in keys or ("Taints" in keys and "Namespace" not in keys):
        return "Node"
    if "StrategyType" in keys:
        return "Deployment"
    if "Access Modes" in keys or "StorageClass" in keys:
        return "PersistentVolumeClaim"
    if "Update Strategy" in keys and "Volume Claims" in keys:
        return "StatefulSet"
    if "Desired Number of Nodes Scheduled" in keys:
        return "DaemonSet"
    if "Completions" in keys:
        return "Job"
    if "Min replicas" in keys:
        return "HorizontalPodAutoscaler"
    if "Pods Status" in keys:
        return "ReplicaSet"
    if "Endpoints" in keys and "Type" in keys:
        return "Service"
    return ""


def _describe(doc: Document, ctx: ParseContext, seg: _Segment, block: list[tuple[int, str]]) -> Iterator[EvidenceItem]:
    root = _tree(block)
    name = root.text("Name")
    ns = root.text("Namespace") or seg.namespace
    if ns == "<none>":
        ns = ""
    kind = _describe_kind(seg, root)
    builders = {
        "Pod": _pod,
        "Node": _node,
        "Deployment": _deployment,
        "PersistentVolumeClaim": _pvc,
        "HorizontalPodAutoscaler": _hpa,
    }
    obj: dict[str, Any] | None = None
    if kind in builders:
        obj = builders[kind](root, name, ns)
        meta = obj["metadata"]
        meta.setdefault("labels", _labels(root.get("Labels")))
        created = _iso(root.text("CreationTimestamp"))
        if created:
            meta["creationTimestamp"] = created
        obj[FROM_KEY] = "kubectl describe"
        if kind == "Node":
            ns = ""
        yield ctx.item(doc.path, f"k8s/{kind}", f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}", obj)
    events = root.get("Events")
    if events is not None and kind:
        involved = {"kind": kind, "namespace": "" if kind == "Node" else ns, "name": name}
        for n, line in events.rows:
            m = _DESCRIBE_EVENT.match(line)
            if m:
                yield _describe_event(doc, ctx, involved, n, m)
    _note_times(ctx, block)


def _describe_event(
    doc: Document, ctx: ParseContext, involved: dict[str, str], n: int, m: re.Match[str]
) -> EvidenceItem:
    """One event line of a describe's Events table, against the object it is about."""
    return _aged_event(
        doc, ctx, involved, m["type"], m["reason"], m["message"], m["source"], n,
        age=m["age"], count=m["count"], over=m["over"],
    )  # fmt: skip


def _events_of_command(
    doc: Document, ctx: ParseContext, seg: _Segment, lines: list[tuple[int, re.Match[str]]]
) -> Iterator[EvidenceItem]:
    m = _DESCRIBED.search(seg.command)
    assert m is not None
    kind = _describe_kind(_Segment(f"describe {m['kind']}"), _Node("", "", 0, 0)) or m["kind"].capitalize()
    involved = {"kind": kind, "namespace": "" if kind == "Node" else seg.namespace, "name": m["name"]}
    for n, e in lines:
        yield _describe_event(doc, ctx, involved, n, e)


def _note_times(ctx: ParseContext, block: list[tuple[int, str]]) -> None:
    """The describe's absolute times bound when it ran from below: the anchor of its ages."""
    stamps = [_iso(m.group(0)) for _, line in block for m in re.finditer(_RFC1123, line)]
    values = [t for t in (parse_ts(s) for s in stamps if s) if t is not None]
    if values:
        newest = max(values)
        prev = ctx.shared.get("kubetext_newest")
        ctx.shared["kubetext_newest"] = max(newest, prev) if prev is not None else newest


def _aged_event(
    doc: Document,
    ctx: ParseContext,
    involved: dict[str, str],
    typ: str,
    reason: str,
    message: str,
    source: str,
    line: int,
    *,
    age: str | None,
    count: str | None = None,
    over: str | None = None,
) -> EvidenceItem:
    data: dict[str, Any] = {
        "type": typ or "Normal",
        "reason": reason,
        "message": message,
        "involved": involved,
        "count": int(count) if count and count.isdigit() else 1,
        "first_ts": None,
        "last_ts": None,
        "source": source,
        "line": line,
        FROM_KEY: "kubectl text",
    }
    obj = (
        f"{involved['kind']}/{involved['namespace']}/{involved['name']}"
        if involved["namespace"]
        else (f"{involved['kind']}/{involved['name']}")
    )
    item = ctx.item(doc.path, "k8s/Event", obj, data)
    pending = ctx.shared.setdefault("kubetext_aged", [])
    if not pending:
        ctx.after.append(_date_ages)
    pending.append((item, _seconds(age), _seconds(over)))
    return item


def _date_ages(ctx: ParseContext) -> None:
    """Ages count back from the newest dated evidence (the time the output was taken is not printed)."""
    anchors = [t for t in (ctx.latest_dated_ts, ctx.shared.get("kubetext_newest")) if t is not None]
    if not anchors:
        return
    now = max(anchors)
    for item, age, over in ctx.shared.get("kubetext_aged", []):
        if age is None:
            continue
        last = now - age
        first = now - over if over is not None else last
        item.data["last_ts"] = last
        item.data["first_ts"] = min(first, last)
        item.ts = last


# ------------------------------------------------------------------------------------------------ objects


def _state(node: _Node | None) -> dict[str, Any]:
    """`State: Waiting / Reason: CrashLoopBackOff` -> {"waiting": {"reason": ...}}."""
    if node is None or not node.value:
        return {}
    which = node.value.split()[0].lower()
    if which not in ("waiting", "running", "terminated"):
        return {}
    out: dict[str, Any] = {}
    if node.text("Reason"):
        out["reason"] = node.text("Reason")
    if node.text("Message"):
        out["message"] = node.text("Message")
    code = node.text("Exit Code")
    if code.lstrip("-").isdigit():
        out["exitCode"] = int(code)
    if node.text("Signal").isdigit():
        out["signal"] = int(node.text("Signal"))
    for key, json_key in (("Started", "startedAt"), ("Finished", "finishedAt")):
        iso = _iso(node.text(key))
        if iso:
            out[json_key] = iso
    return {which: out}


def _quantities(node: _Node | None) -> dict[str, str]:
    return {c.key: c.value for c in node.children if c.value} if node is not None else {}


def _probe(text: str) -> dict[str, Any] | None:
    m = _PROBE.match(text.strip())
    if not m:
        return None
    probe: dict[str, Any] = {
        "initialDelaySeconds": int(m["delay"]),
        "timeoutSeconds": int(m["timeout"]),
        "periodSeconds": int(m["period"]),
        "successThreshold": int(m["success"]),
        "failureThreshold": int(m["failure"]),
    }
    target = m["target"].strip()
    if m["kind"] == "http-get":
        h = _HTTP_TARGET.match(target)
        if h:
            port: int | str = int(h["port"]) if h["port"].isdigit() else h["port"]
            probe["httpGet"] = {"path": h["path"] or "/", "port": port, "scheme": h["scheme"].upper()}
    elif m["kind"] == "tcp-socket":
        port_text = target.rsplit(":", 1)[-1]
        probe["tcpSocket"] = {"port": int(port_text) if port_text.isdigit() else port_text}
    elif m["kind"] == "exec":
        probe["exec"] = {"command": target.strip("[]").split()}
    else:
        probe["grpc"] = {"port": int(target.rsplit(":", 1)[-1]) if target.rsplit(":", 1)[-1].isdigit() else 0}
    return probe


def _container(node: _Node) -> tuple[dict[str, Any], dict[str, Any]]:
    """One container of a describe: (its spec, its status)."""
    spec: dict[str, Any] = {"name": node.key, "image": node.text("Image")}
    ports = []
    for key in ("Port", "Ports"):
        for part in node.text(key).split(","):
            number, _, proto = part.strip().partition("/")
            if number.isdigit() and number != "0":
                ports.append({"containerPort": int(number), "protocol": proto or "TCP"})
    if ports:
        spec["ports"] = ports
    resources = {
        k: v
        for k, v in (("limits", _quantities(node.get("Limits"))), ("requests", _quantities(node.get("Requests"))))
        if v
    }
    if resources:
        spec["resources"] = resources
    for key, json_key in (("Liveness", "livenessProbe"), ("Readiness", "readinessProbe"), ("Startup", "startupProbe")):
        probe = _probe(node.text(key))
        if probe:
            spec[json_key] = probe
    env_node = node.get("Environment")
    if env_node is not None and env_node.children:
        env = []
        for c in env_node.children:
            secret = re.match(r"<set to the key '([^']+)' (?:in|of) (secret|config map) '([^']+)'>", c.value)
            if secret:
                ref_kind = "secretKeyRef" if secret.group(2) == "secret" else "configMapKeyRef"
                env.append({"name": c.key, "valueFrom": {ref_kind: {"name": secret.group(3), "key": secret.group(1)}}})
            else:
                env.append({"name": c.key, "value": c.value})
        spec["env"] = env
    restarts = node.text("Restart Count")
    status: dict[str, Any] = {
        "name": node.key,
        "image": node.text("Image"),
        "ready": node.text("Ready") == "True",
        "restartCount": int(restarts) if restarts.isdigit() else 0,
        "state": _state(node.get("State")),
        "lastState": _state(node.get("Last State")),
    }
    return spec, status


def _pod(root: _Node, name: str, ns: str) -> dict[str, Any]:
    containers = [_container(c) for c in (root.get("Containers") or _Node("", "", 0, 0)).children]
    inits = [_container(c) for c in (root.get("Init Containers") or _Node("", "", 0, 0)).children]
    node_name = root.text("Node").split("/")[0]
    spec: dict[str, Any] = {"containers": [s for s, _ in containers]}
    if inits:
        spec["initContainers"] = [s for s, _ in inits]
    if node_name and node_name != "<none>":
        spec["nodeName"] = node_name
    selectors = root.text("Node-Selectors")
    if selectors and selectors != "<none>":
        spec["nodeSelector"] = _labels(root.get("Node-Selectors"))
    status: dict[str, Any] = {"phase": root.text("Status") or None}
    for key, json_key in (("Reason", "reason"), ("Message", "message")):
        if root.text(key):
            status[json_key] = root.text(key)
    start = _iso(root.text("Start Time"))
    if start:
        status["startTime"] = start
    conditions = root.get("Conditions")
    if conditions is not None:
        status["conditions"] = [
            {"type": parts[0], "status": parts[1]}
            for _, line in conditions.rows
            if len(parts := line.split()) >= 2 and parts[1] in ("True", "False", "Unknown")
        ]
    status["containerStatuses"] = [s for _, s in containers]
    if inits:
        status["initContainerStatuses"] = [s for _, s in inits]
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    owner = root.text("Controlled By")
    if "/" in owner:
        okind, oname = owner.split("/", 1)
        meta["ownerReferences"] = [{"kind": okind, "name": oname, "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _node(root: _Node, name: str, ns: str) -> dict[str, Any]:
    conditions = []
    cond_node = root.get("Conditions")
    for _, line in cond_node.rows if cond_node is not None else ():
        m = _NODE_CONDITION.match(line)
        if m:
            conditions.append(
                {
                    "type": m["type"],
                    "status": m["status"],
                    "lastHeartbeatTime": _iso(m["heartbeat"]),
                    "lastTransitionTime": _iso(m["transition"]),
                    "reason": m["reason"],
                    "message": m["message"],
                }
            )
    taints = []
    taint_node = root.get("Taints")
    for text in ([taint_node.value] + [t.strip() for _, t in taint_node.rows]) if taint_node is not None else []:
        m = re.match(r"^([\w./-]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$", text.strip())
        if m:
            taints.append({"key": m.group(1), "value": m.group(2) or "", "effect": m.group(3)})
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    if root.text("Unschedulable") == "true":
        spec["unschedulable"] = True
    status = {
        "conditions": conditions,
        "capacity": _quantities(root.get("Capacity")),
        "allocatable": _quantities(root.get("Allocatable")),
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec, "status": status}


def _deployment(root: _Node, name: str, ns: str) -> dict[str, Any]:
    counts = {
        k: int(v) for v, k in re.findall(r"(\d+) (desired|updated|total|available|unavailable)", root.text("Replicas"))
    }
    template = root.get("Pod Template")
    listed = template.get("Containers") if template is not None else None
    containers = [_container(c)[0] for c in listed.children] if listed is not None else []
    conditions = []
    cond_node = root.get("Conditions")
    for _, line in cond_node.rows if cond_node is not None else ():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in ("True", "False", "Unknown") and parts[0] != "----":
            conditions.append({"type": parts[0], "status": parts[1], "reason": parts[2] if len(parts) > 2 else ""})
    annotations = _labels(root.get("Annotations"))
    revision = re.search(
        r"deployment\.kubernetes\.io/revision:\s*(\d+)",
        " ".join([root.text("Annotations")] + [t for _, t in (root.get("Annotations") or _Node("", "", 0, 0)).rows]),
    )
    if revision:
        annotations["deployment.kubernetes.io/revision"] = revision.group(1)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"replicas": counts.get("desired", 0), "template": {"spec": {"containers": containers}}},
        "status": {
            "replicas": counts.get("total", 0),
            "updatedReplicas": counts.get("updated", 0),
            "availableReplicas": counts.get("available", 0),
            "unavailableReplicas": counts.get("unavailable", 0),
            "conditions": conditions,
        },
    }


def _hpa(root: _Node, name: str, ns: str) -> dict[str, Any]:
    ref_kind, _, ref_name = root.text("Reference").partition("/")
    pods = next((c.value for c in root.children if c.key.endswith(" pods")), "")
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (current|desired)", pods))
    conditions = []
    cond_node = root.get("Conditions")
    for _, line in cond_node.rows if cond_node is not None else ():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in ("True", "False", "Unknown"):
            conditions.append(
                {
                    "type": parts[0],
                    "status": parts[1],
                    "reason": parts[2],
                    "message": parts[3] if len(parts) > 3 else "",
                }
            )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"kind": ref_kind, "name": ref_name},
            "minReplicas": _int(root.text("Min replicas")),
            "maxReplicas": _int(root.text("Max replicas")),
        },
        "status": {
            "currentReplicas": counts.get("current"),
            "desiredReplicas": counts.get("desired"),
            "conditions": conditions,
        },
    }


def _pvc(root: _Node, name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"storageClassName": root.text("StorageClass") or None, "volumeName": root.text("Volume") or None},
        "status": {"phase": root.text("Status") or None, "capacity": {"storage": root.text("Capacity")}},
    }


# ------------------------------------------------------------------------------------------------ tables

# what `kubectl get pods` prints in STATUS, as the container state it stands for
_WAITING = {
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError", "ContainerCreating", "PodInitializing",
}  # fmt: skip
_TERMINATED = {"OOMKilled", "Error", "Completed", "ContainerCannotRun", "DeadlineExceeded", "StartError"}


def _table_items(
    doc: Document, ctx: ParseContext, seg: _Segment, kind: str, rows: list[tuple[int, dict[str, str]]]
) -> Iterator[EvidenceItem]:
    for n, cells in rows:
        ns = cells.get("NAMESPACE") or seg.namespace
        if kind == "pods" and cells.get("NAME"):
            yield _table_pod(doc, ctx, cells, ns)
        elif kind == "nodes" and cells.get("NAME"):
            obj = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": cells["NAME"]},
                "spec": {"unschedulable": True} if "SchedulingDisabled" in cells.get("STATUS", "") else {},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True"
                            if cells.get("STATUS", "").startswith("Ready")
                            else "Unknown"
                            if "Unknown" in cells.get("STATUS", "")
                            else "False",
                            "reason": "NodeStatusUnknown" if "NotReady" in cells.get("STATUS", "") else "",
                        }
                    ]
                },
                FROM_KEY: "kubectl get",
            }
            yield ctx.item(doc.path, "k8s/Node", f"Node/{cells['NAME']}", obj)
        elif kind in ("deployments", "hpa", "pvc") and cells.get("NAME"):
            yield _table_object(doc, ctx, kind, cells, ns)
        elif kind == "events" and cells.get("OBJECT"):
            okind, _, oname = cells["OBJECT"].partition("/")
            involved = {
                "kind": _capitalised_kind(okind),
                "namespace": "" if okind.lower() == "node" else ns,
                "name": oname,
            }
            age = re.match(rf"^({_AGE})(?: \(x(\d+) over ({_AGE})\))?", cells.get("LAST SEEN", ""))
            yield _aged_event(
                doc,
                ctx,
                involved,
                cells.get("TYPE", ""),
                cells.get("REASON", ""),
                cells.get("MESSAGE", ""),
                "",
                n,
                age=age.group(1) if age else None,
                count=age.group(2) if age else None,
                over=age.group(3) if age else None,
            )


def _capitalised_kind(kind: str) -> str:
    known = {
        "pod": "Pod",
        "node": "Node",
        "deployment": "Deployment",
        "replicaset": "ReplicaSet",
        "statefulset": "StatefulSet",
        "daemonset": "DaemonSet",
        "job": "Job",
        "cronjob": "CronJob",
        "service": "Service",
        "persistentvolumeclaim": "PersistentVolumeClaim",
        "endpoints": "Endpoints",
        "horizontalpodautoscaler": "HorizontalPodAutoscaler",
        "ingress": "Ingress",
    }
    return known.get(kind.lower(), kind[:1].upper() + kind[1:])


def _table_pod(doc: Document, ctx: ParseContext, cells: dict[str, str], ns: str) -> EvidenceItem:
    name, status_text = cells["NAME"], cells.get("STATUS", "")
    ready, _, total = cells.get("READY", "").partition("/")
    restarts = re.match(r"\d+", cells.get("RESTARTS", ""))
    # the table names no container: one status with no name stands for the pod's worst one
    cs: dict[str, Any] = {
        "name": "",
        "ready": ready == total and ready.isdigit(),
        "state": {},
        "lastState": {},
        "restartCount": int(restarts.group(0)) if restarts else 0,
    }
    reason = status_text.removeprefix("Init:")
    if reason in _WAITING:
        cs["state"] = {"waiting": {"reason": reason}}
    elif reason in _TERMINATED:
        code = 137 if reason == "OOMKilled" else 0 if reason == "Completed" else None
        term = {"reason": reason} | ({"exitCode": code} if code is not None else {})
        cs["state" if reason != "OOMKilled" else "lastState"] = {"terminated": term}
        if reason == "OOMKilled":
            cs["state"] = {"running": {}}
    elif reason == "Running":
        cs["state"] = {"running": {}}
    pending = reason in _WAITING and reason not in ("CrashLoopBackOff", "RunContainerError")
    phase = (
        "Pending"
        if pending
        else {
            "Running": "Running",
            "Completed": "Succeeded",
            "Pending": "Pending",
            "Evicted": "Failed",
            "ContainerCreating": "Pending",
            "PodInitializing": "Pending",
            "Unknown": "Unknown",
        }.get(status_text, "Pending" if status_text.startswith("Init:") else "Running")
    )
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [cs]}
    live = phase == "Running" and status_text not in ("Terminating", "Unknown", "NodeLost")
    if ready.isdigit() and total.isdigit() and int(total) > 0:  # READY 3/3: the pod's Ready condition, time unknown
        status["conditions"] = [{"type": "Ready", "status": "True" if ready == total and live else "False"}]
    if status_text == "Evicted":
        status["reason"] = "Evicted"
    spec: dict[str, Any] = {"containers": [{"name": ""}]}
    node = cells.get("NODE", "")
    if node and node != "<none>":
        spec["nodeName"] = node
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
        "status": status,
        FROM_KEY: "kubectl get",
    }
    return ctx.item(doc.path, "k8s/Pod", f"Pod/{ns}/{name}" if ns else f"Pod/{name}", obj)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _table_object(doc: Document, ctx: ParseContext, kind: str, cells: dict[str, str], ns: str) -> EvidenceItem:
    name = cells["NAME"]
    meta = {"name": name, "namespace": ns}
    obj: dict[str, Any]
    if kind == "deployments":
        ready, _, desired = cells.get("READY", "").partition("/")
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": _int(desired)},
            "status": {
                "readyReplicas": _int(ready),
                "updatedReplicas": _int(cells.get("UP-TO-DATE")),
                "availableReplicas": _int(cells.get("AVAILABLE")),
            },
        }
    elif kind == "hpa":
        obj = _hpa_row(meta, cells)
    else:
        obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": {"storageClassName": cells.get("STORAGECLASS") or None, "volumeName": cells.get("VOLUME") or None},
            "status": {"phase": cells.get("STATUS") or None, "capacity": {"storage": cells.get("CAPACITY", "")}},
        }
    obj[FROM_KEY] = "kubectl get"
    return ctx.item(
        doc.path, f"k8s/{obj['kind']}", f"{obj['kind']}/{ns}/{name}" if ns else f"{obj['kind']}/{name}", obj
    )


def _hpa_row(meta: dict[str, Any], cells: dict[str, str]) -> dict[str, Any]:
    """`kubectl get hpa`: TARGETS "cpu: 163%/70%" (or "163%/70%"); the replicas the HPA wants follow from it the way
    the controller computes them (ceil(current replicas x current / target))."""
    ref_kind, _, ref_name = cells.get("REFERENCE", "").partition("/")
    current = _int(cells.get("REPLICAS"))
    spec = {
        "scaleTargetRef": {"kind": ref_kind, "name": ref_name},
        "minReplicas": _int(cells.get("MINPODS")),
        "maxReplicas": _int(cells.get("MAXPODS")),
    }
    status: dict[str, Any] = {"currentReplicas": current}
    ratios = [
        int(now) / int(target)
        for now, target in re.findall(r"(\d+)%?/(\d+)%?", cells.get("TARGETS", ""))
        if int(target) > 0
    ]
    if ratios and current is not None:
        status["desiredReplicas"] = math.ceil(current * max(ratios) - 1e-9)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }
