"""What the kubernetes, alerts and changes analyzers share: an index of the Kubernetes evidence, object tags,
references and the reading of a crashed container's last log lines."""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from diagnosis.analyzers._common import GPU_LOST, MISSING_SETTING, records_with
from diagnosis.evidence import EvidenceSet
from diagnosis.formats.kubetext import FROM_KEY
from diagnosis.links import workload_of_pod
from diagnosis.model import EvidenceItem, EvidenceRef
from diagnosis.timeline import evidence_now, parse_ts

RECENT_S = 3600.0  # a failure seen within this long before "now" is current; older and since recovered is history

_RS_HASH = re.compile(r"^(?P<base>.+)-[a-z0-9]{6,10}$")


def ref(item: EvidenceItem, field: str | None = None, value: Any = None, line: int | None = None) -> EvidenceRef:
    if isinstance(value, str):
        value = value[:300]
    return EvidenceRef(item=item.id, field=field, value=value, line=line)


def meta(item: EvidenceItem) -> dict[str, Any]:
    m = item.data.get("metadata")
    return m if isinstance(m, dict) else {}


def ns_name(item: EvidenceItem) -> tuple[str, str]:
    m = meta(item)
    if m.get("name"):
        return str(m.get("namespace") or ""), str(m["name"])
    parts = item.object.split("/")
    if len(parts) >= 3:
        return parts[1], parts[2]
    return "", parts[-1]


def app_name(labels: dict[str, Any] | None) -> str | None:
    for key in ("app.kubernetes.io/name", "app", "k8s-app", "name", "app.kubernetes.io/instance", "component"):
        v = (labels or {}).get(key)
        if isinstance(v, str) and v:
            return v
    return None


def owner_workload(item: EvidenceItem) -> tuple[str, str] | None:
    """(kind, name) of the workload that owns a pod: a ReplicaSet's Deployment, a StatefulSet, a Job..."""
    for o in meta(item).get("ownerReferences") or ():
        kind, name = str(o.get("kind") or ""), str(o.get("name") or "")
        if not name:
            continue
        if kind == "ReplicaSet":
            m = _RS_HASH.match(name)
            return ("Deployment", m.group("base")) if m else ("ReplicaSet", name)
        return kind, name
    return None


def pod_tags(ns: str, pod: str, item: EvidenceItem | None = None) -> list[str]:
    tags = [f"pod:{ns}/{pod}", f"namespace:{ns}"]
    workload = workload_of_pod(pod)
    if item is not None:
        owner = owner_workload(item)
        if owner:
            workload = owner[1]
        app = app_name(meta(item).get("labels"))
        if app:
            tags.append(f"service:{app}")
    tags.append(f"workload:{ns}/{workload}")
    return tags


def workload_tags(ns: str, name: str, labels: dict[str, Any] | None = None) -> list[str]:
    tags = [f"workload:{ns}/{name}", f"namespace:{ns}"]
    app = app_name(labels)
    if app and app != name:
        tags.append(f"service:{app}")
    return tags


@dataclass
class KubeIndex:
    """The Kubernetes evidence of one set, indexed by object."""

    now: float | None
    objects: dict[tuple[str, str, str], EvidenceItem] = field(default_factory=dict)  # (kind, ns, name)
    pods: dict[tuple[str, str], EvidenceItem] = field(default_factory=dict)
    events: dict[tuple[str, str, str], list[EvidenceItem]] = field(default_factory=lambda: defaultdict(list))
    logs: dict[tuple[str, str], list[EvidenceItem]] = field(default_factory=lambda: defaultdict(list))
    pods_by_ns: dict[str, list[tuple[str, EvidenceItem]]] = field(default_factory=lambda: defaultdict(list))
    pods_by_node: dict[str, list[tuple[str, str, EvidenceItem]]] = field(default_factory=lambda: defaultdict(list))
    other_logs: list[EvidenceItem] = field(default_factory=list)  # logs no pod is named for (an app's own file)
    evidence: EvidenceSet | None = None
    _gpu_lost: bool | None = None

    def gpu_lost(self) -> bool:
        """Whether a log reports a GPU lost or failing (NVIDIA Xid 79 and the like); read once per evidence set."""
        if self._gpu_lost is None:
            hits = records_with(self.evidence, ("Xid", "fallen off")) if self.evidence is not None else ()
            self._gpu_lost = any(GPU_LOST.search(r.msg) for r in hits)
        return self._gpu_lost

    def of_kind(self, kind: str) -> list[EvidenceItem]:
        return [item for (k, _, _), item in self.objects.items() if k == kind]

    def events_for(self, kind: str, ns: str, name: str) -> list[EvidenceItem]:
        return self.events.get((kind, ns, name), [])

    def recent(self, ts: float | None, window: float = RECENT_S) -> bool:
        """Whether a time is within `window` of now (unknown times count as recent: they cannot be ruled old)."""
        return ts is None or self.now is None or ts >= self.now - window


_CACHE: weakref.WeakKeyDictionary[EvidenceSet, tuple[int, KubeIndex]] = weakref.WeakKeyDictionary()


def kube_index(evidence: EvidenceSet) -> KubeIndex:
    cached = _CACHE.get(evidence)
    if cached is not None and cached[0] == len(evidence):
        return cached[1]
    idx = KubeIndex(now=evidence_now(evidence), evidence=evidence)
    for item in evidence.kind("k8s/"):
        kind = item.kind.split("/", 1)[1]
        if kind == "Event":
            inv = item.data.get("involved") or {}
            key = (str(inv.get("kind") or ""), str(inv.get("namespace") or ""), str(inv.get("name") or ""))
            idx.events[key].append(item)
            continue
        ns, name = ns_name(item)
        prev = idx.objects.get((kind, ns, name))
        if prev is not None and _text_rank(prev) < _text_rank(item):
            continue  # a JSON export says more than `kubectl describe`, which says more than `kubectl get`
        idx.objects[(kind, ns, name)] = item
        if kind == "Pod":
            idx.pods[(ns, name)] = item
            idx.pods_by_ns[ns].append((name, item))
            node = (item.data.get("spec") or {}).get("nodeName")
            if node:
                idx.pods_by_node[str(node)].append((ns, name, item))
    _drop_retold_events(idx)
    for item in evidence.kind("log"):
        parts = item.object.split("/")
        if len(parts) >= 3 and parts[0] == "Pod":
            idx.logs[(parts[1], parts[2])].append(item)
            continue
        src = item.data.get("source") or {}
        if isinstance(src, dict) and src.get("pod"):
            idx.logs[(str(src.get("namespace") or ""), str(src["pod"]))].append(item)
        else:
            idx.other_logs.append(item)
    _CACHE[evidence] = (len(evidence), idx)
    return idx


_TEXT_RANKS = {"kubectl describe": 1, "kubectl get": 2}


def _text_rank(item: EvidenceItem) -> int:
    return _TEXT_RANKS.get(str(item.data.get(FROM_KEY) or ""), 0)


def _drop_retold_events(idx: KubeIndex) -> None:
    """An event both exported as JSON and pasted from `kubectl describe` or `kubectl get events` counts once: the
    JSON one, which carries its real times."""
    for key, events in idx.events.items():
        if not any(e.data.get(FROM_KEY) for e in events):
            continue
        exported = {(e.data.get("reason"), e.data.get("message")) for e in events if not e.data.get(FROM_KEY)}
        seen: set[tuple[Any, ...]] = set()
        kept = []
        for e in events:
            said = (e.data.get("reason"), e.data.get("message"))
            if e.data.get(FROM_KEY):
                if said in exported or (*said, e.data.get("count")) in seen:
                    continue
                seen.add((*said, e.data.get("count")))
            kept.append(e)
        idx.events[key] = kept


def event_ts(ev: EvidenceItem) -> float | None:
    d = ev.data
    return parse_ts(d.get("last_ts")) or parse_ts(d.get("first_ts")) or ev.ts


# ------------------------------------------------------------------------------ reading a crash from its logs


@dataclass(frozen=True)
class LogVerdict:
    category: str  # a Category value
    code: str
    why: str  # what the line shows, in words
    item: EvidenceItem
    record: dict[str, Any]
    text: str = ""  # the line that shows it (a record may hold a whole stack trace)


# ordered by precedence: a traceback that ends in a missing setting is a configuration error, not a bug
_LOG_RULES: list[tuple[str, str, str, re.Pattern[str]]] = [
    (
        # Kubernetes injects <SERVICE>_PORT=tcp://ip:port for every Service of the namespace (enableServiceLinks):
        # a Service named like a setting the application reads as a number (REDIS_PORT) breaks it
        "configuration_error",
        "crash_config",
        "a Service's injected environment variable (<NAME>_PORT=tcp://...) overrides a setting it reads as a number "
        "(enableServiceLinks)",
        re.compile(
            r"invalid literal for int\(\) with base 10: '?tcp://|For input string: \"tcp://|parsing \"tcp://|"
            r"(?:port|PORT)\W{1,4}(?:must be|is not|invalid)[^\n]{0,40}tcp://(?:\d{1,3}\.){3}\d{1,3}:\d+"
        ),
    ),
    (
        "configuration_error",
        "crash_config",
        "a required setting is missing or invalid",
        re.compile(
            MISSING_SETTING.pattern
            + r"|executable file not found|exec format error|command not found|permission denied"
            r"|password authentication failed|authentication failed|invalid credentials|access denied for user"
            r"|secret .* not found|configmap .* not found"
            # a model server whose model configuration does not match the model it loads (Triton's config.pbtxt)
            r"|but the model configuration specifies|model configuration (?:is )?(?:invalid|inconsistent)",
            re.I,
        ),
    ),
    (
        "resource_exhaustion",
        "crash_resource",
        "the process ran out of a resource",
        re.compile(
            r"OutOfMemoryError|out of memory|cannot allocate memory|MemoryError|heap out of memory|"
            r"too many open files|no space left on device|disk (?:is )?full|quota exceeded|resource "
            r"temporarily unavailable",
            re.I,
        ),
    ),
    (
        "configuration_error",
        "crash_dns",
        "a host name it needs does not resolve",
        re.compile(
            r"no such host|name or service not known|could not resolve host|NXDOMAIN|getaddrinfo ENOTFOUND", re.I
        ),
    ),
    (
        "dependency_failure",
        "crash_dependency",
        "a dependency it needs at start-up is unreachable",
        re.compile(
            r"connection refused|ECONNREFUSED|could not connect|couldn't connect|failed to connect|unable to connect|"
            r"cannot connect|connection (?:timed out|reset)|ETIMEDOUT|i/o timeout|dial tcp|"
            r"temporary failure in name resolution|no route to host|broker(?:s)? (?:not available|unavailable)|"
            r"service unavailable|upstream .*(?:timed out|unavailable)|"
            # a server it calls at start-up answering 5xx (a model registry, a config service)
            r"(?:error|status|response) code:? 5\d\d\b|\b5\d\d (?:Internal Server Error|Bad Gateway|Gateway Time-?out)",
            re.I,
        ),
    ),
    (
        "data_quality",
        "crash_data",
        "it could not process malformed or unexpected input data",
        re.compile(
            r"(?:malformed|corrupt(?:ed)?|invalid|unexpected|bad) (?:record|row|payload|message|input|data|json|csv|"
            r"event|line|file|schema|utf-?8|byte sequence)|JSONDecodeError|cannot unmarshal|unexpected end of json|"
            r"invalid input syntax|is not valid JSON|Unexpected token .{1,12} in JSON|"
            r"schema (?:mismatch|drift|validation)|column \"?\w+\"? (?:does not "
            r"exist|of relation)|"
            r"unexpected (?:null|nil|none) (?:in|for|value)|validation (?:failed|error).*(?:record|row|field|input)|"
            r"\brow \d+\b.*(?:not a|invalid|expected|cannot|missing)|is not a (?:valid "
            r")?(?:number|integer|date|decimal)|"
            r"could not convert|invalid literal for|ConversionSyntax|NumberFormatException|unparseable|"
            r"(?:bad|invalid|malformed) ?row",
            re.I,
        ),
    ),
    (
        # a rank of a distributed job (NCCL, Gloo) failing because another rank exited or its network went: the
        # other rank's failure says why
        "unknown",
        "crash_peer",
        "a peer process of its distributed job exited or lost its connection",
        re.compile(r"\bncclRemoteError\b|remote process exit(?:ed|ing)|Connection closed by peer \[", re.I),
    ),
    (
        "code_defect",
        "crash_code",
        "the application hit a bug (unhandled error)",
        re.compile(
            r"panic:|nil pointer dereference|NullPointerException|"
            r"segmentation fault|SIGSEGV|\bTypeError\b|\bAttributeError\b|\bIndexError\b|\bZeroDivisionError\b|"
            r"\bReferenceError\b|is not a function|unhandled (?:exception|error|rejection)|uncaught exception|"
            r"assertion failed|AssertionError|fatal error:|index out of range|"
            r"(?-i:^[\w.]*[A-Z]\w*(?:Error|Exception): )",
            re.I | re.M,
        ),
    ),
    (
        # stack frames and traceback headers: a crash, but the line that names it is elsewhere
        "code_defect",
        "crash_code",
        "the application hit a bug (unhandled error)",
        re.compile(r"Traceback \(most recent call last\)|^\s+at [\w$.<>]+[\s(]|^goroutine \d+ \[|^\s+File \"", re.M),
    ),
]


_QUIET_LEVELS = frozenset({"info", "debug", "trace", "warn", "warning", "notice"})
_QUIET_TEXT = re.compile(r"^.{0,40}?(?:\b(?:INFO|DEBUG|TRACE|WARN|WARNING|NOTICE)\b|level=\"?(?:info|debug|warn\w*)\b)")


def _quiet(rec: dict[str, Any], msg: str) -> bool:
    """An info or warning line is not why a process died ("config file not found, using defaults")."""
    level = rec.get("level")
    if isinstance(level, str) and level:
        return level.lower() in _QUIET_LEVELS
    return bool(_QUIET_TEXT.match(msg))


_TARGET = re.compile(
    r"(?:\w+://)?(?P<host>(?!localhost\b|127\.|0\.0\.0\.0)[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*):(?P<port>\d{2,5})\b", re.I
)


def crash_target(verdict: LogVerdict) -> str | None:
    """The host a start-up dependency failure was about: named in the failing line, or in the few lines before it
    ("connecting to mosquitto.telemetry.svc:1883 (attempt 2/5)" then "connect failed: Connection refused")."""
    records = verdict.item.data.get("records") or []
    at = next((i for i, r in enumerate(records) if r is verdict.record), None)
    window = [verdict.text] + (
        [str(r.get("msg") or "") for r in reversed(records[max(0, at - 4) : at])] if at is not None else []
    )
    for text in window:
        if m := _TARGET.search(text):
            return m["host"].lower()
    return None


EARLIER_RECORDS = 400  # how far back a log is read for a resource that ran out before the crash it caused


def read_crash(log_items: list[EvidenceItem], container: str | None) -> LogVerdict | None:
    """Why a container's process exited, from its (previous) log: the last lines decide.

    Previous logs (the crashed instance) come first; within a log the last 60 records are read, the most specific
    rule wins (configuration over resources over DNS over dependencies over data over code)."""

    def rank(item: EvidenceItem) -> tuple[int, int]:
        src = item.data.get("source") or {}
        c = src.get("container") if isinstance(src, dict) else None
        if c is None:
            parts = item.object.split("/")
            c = parts[3] if len(parts) >= 4 else None
        same = 0 if (container is None or c is None or c == container) else 1
        prev = 0 if (isinstance(src, dict) and src.get("previous")) else 1
        return same, prev

    for item in sorted(log_items, key=rank):
        if rank(item)[0]:
            continue
        records = (item.data.get("records") or [])[-60:]
        best: tuple[int, tuple[int, int], LogVerdict] | None = None
        caused: LogVerdict | None = None
        for pos, rec in enumerate(records):
            msg = str(rec.get("msg") or "")
            if _quiet(rec, msg):
                continue
            # a record may hold a whole stack trace: judge it line by line
            lines = msg.splitlines() or [msg]
            if len(lines) > 80:  # Java names the error first, Python last: read both ends of a long trace
                lines = lines[:40] + lines[-40:]
            for lpos, text in enumerate(lines):
                if text.lstrip().startswith("Caused by:"):
                    # the wrapped error decides, by the first rule it meets (a bad record, a setting, a bug)
                    rule = next((r for r in _LOG_RULES if r[3].search(text)), None)
                    cat, code, why = rule[:3] if rule else ("code_defect", "crash_code", "the application hit a bug")
                    caused = LogVerdict(cat, code, why, item, rec, text.strip())
                for prio, (category, code, why, rx) in enumerate(_LOG_RULES):
                    if rx.search(text):
                        at = (pos, lpos)
                        # most specific rule first, the later line breaks ties (the fatal line is last)
                        if best is None or (prio, -at[0], -at[1]) < (best[0], -best[1][0], -best[1][1]):
                            best = (prio, at, LogVerdict(category, code, why, item, rec, text.strip()))
                        break
        if best is None or best[2].code == "crash_code":
            # a resource that ran out is said once, before the cascade of tracebacks it sets off (every rank of a
            # distributed job failing its own way): read further back for it
            res = next(r for r in _LOG_RULES if r[1] == "crash_resource")
            for rec in reversed((item.data.get("records") or [])[-EARLIER_RECORDS:-60]):
                msg = str(rec.get("msg") or "")
                if not _quiet(rec, msg) and res[3].search(msg):
                    return LogVerdict(res[0], res[1], res[2], item, rec, msg.strip()[:300])
        if best is not None:
            verdict = best[2]
            if verdict.category == "code_defect" and caused is not None:
                # Java (and Node's error causes) wrap the real error: the last "Caused by:" names it
                verdict = caused
            return verdict
    return None


def last_lines(log_items: list[EvidenceItem], n: int = 3) -> list[tuple[EvidenceItem, dict[str, Any]]]:
    out: list[tuple[EvidenceItem, dict[str, Any]]] = []
    for item in log_items:
        for rec in (item.data.get("records") or [])[-n:]:
            out.append((item, rec))
    return out[-n:]
