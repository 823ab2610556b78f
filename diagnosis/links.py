"""How findings name objects and link to each other: the primitives the reasoning and its passes share.

Two findings are *linked* when they name a common object (tags reduced to entity names: a pod's name also names
its workload, `host:web-1:9100` names `web-1`). A cause *explains* a finding when they are linked, the finding's code
is in the cause's `explains` (an alert is explained by any linked cause), and the cause did not begin after it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from diagnosis.evidence import EvidenceSet
from diagnosis.model import Category, Domain, Finding

CAUSE, SYMPTOM, BENIGN = "cause", "symptom", "benign"
TIME_SLACK_S = 300.0  # clocks and export granularity: a cause may appear to start this much after its symptom
# failures that begin this long after a rollout are not its doing: the new version served fine in between
DEPLOY_EFFECT_WINDOW_S = 2 * 3600

# tag types that scope rather than name: sharing only these does not link two findings
_SCOPE_TAGS = frozenset({"namespace", "ns", "cluster", "region", "zone", "az", "env", "environment", "account"})
# tag values too generic to link two findings by themselves
_GENERIC_NAMES = frozenset({"app", "main", "default", "container", "service", "", "-"})
# a Deployment's pod: <name>-<replicaset hash 5-10>-<pod suffix 5>; a StatefulSet's: <name>-<ordinal>
# (Kubernetes draws generated suffixes from an alphabet without vowels, so "redis-cache" keeps its name)
_SFX = "[bcdfghjklmnpqrstvwxz2-9]"
_POD_DEPLOY = re.compile(rf"^(?P<base>.+?)-{_SFX}{{5,10}}-{_SFX}{{5}}$")
# names written by hand (a runbook, a ticket) with any letters in the hashes: taken when a hash holds a digit
_POD_DEPLOY_LOOSE = re.compile(r"^(?P<base>.+?)-(?=[a-z0-9]*\d)[a-z0-9]{6,10}-[a-z0-9]{5}$")
_POD_SUFFIX = re.compile(rf"^(?P<base>.+?)-(?:{_SFX}{{5}}|\d+)$")
_PORT = re.compile(r":\d+$")
WORD = re.compile(r"[a-z0-9][a-z0-9_.\-]*[a-z0-9]|[a-z0-9]")


def workload_of_pod(pod: str) -> str:
    """checkout-7d9f8b6c5-x2k4p -> checkout; db-0 -> db; a name with no pod suffix is itself."""
    for rx in (_POD_DEPLOY, _POD_DEPLOY_LOOSE, _POD_SUFFIX):
        m = rx.match(pod)
        if m:
            return m.group("base")
    return pod


def entity_names(f: Finding) -> frozenset[str]:
    """The objects a finding names, reduced to comparable names (namespace-like scopes excluded)."""
    out: set[str] = set()
    for tag in f.tags:
        typ, sep, val = tag.partition(":")
        if not sep:
            typ, val = "", typ
        typ = typ.strip().lower()
        val = val.strip().lower()
        if typ in _SCOPE_TAGS or not val:
            continue
        if typ in ("pid", "xid", "query", "fingerprint", "statement"):
            out.add(f"{typ}:{val}")
            continue
        parts = [p for p in val.split("/") if p]
        if not parts:
            continue
        if typ == "container" and len(parts) >= 2:
            name = parts[-2]  # ns/pod/container: the pod names it, "app" would link everything
            out.update((name, workload_of_pod(name)))
            continue
        name = parts[-1]
        if typ in ("host", "instance", "node", "endpoint", "upstream", "url"):
            name = _PORT.sub("", name)
        if typ in ("pod", ""):
            out.add(workload_of_pod(name))
        out.add(name)
    return frozenset(n for n in out if n not in _GENERIC_NAMES)


_UPSTREAM_TAGS = frozenset({"upstream", "dependency", "target", "peer", "tls", "backend", "remote"})


def upstream_names(f: Finding) -> frozenset[str]:
    """The names of what a finding's object depends on (`upstream:payments-api`): a fault there explains it."""
    return _upstream_names(tuple(f.tags))


@functools.lru_cache(maxsize=4096)  # asked once per pair of findings while linking: thousands of times each
def _upstream_names(tags: tuple[str, ...]) -> frozenset[str]:
    out: set[str] = set()
    for tag in tags:
        typ, sep, val = tag.partition(":")
        if sep and typ.strip().lower() in _UPSTREAM_TAGS and val.strip():
            name = _PORT.sub("", val.strip().lower().rstrip("/").rsplit("/", 1)[-1])
            out.update((name, name.split(".")[0]))
    return frozenset(n for n in out if n not in _GENERIC_NAMES)


def is_alert(f: Finding) -> bool:
    return f.code.startswith("alert:") or f.domain == Domain.ALERTS


def link_strength(a_names: frozenset[str], b_names: frozenset[str]) -> float:
    """1 when two findings name a common object, 0.5 when either names none (unscoped), else 0."""
    if a_names & b_names:
        return 1.0
    if not a_names or not b_names:
        return 0.5
    return 0.0


def code_in(code: str, explains: Iterable[str]) -> bool:
    return any(e == code or (e.endswith("*") and code.startswith(e[:-1])) for e in explains)


def explains(cause: Finding, cause_names: frozenset[str], other: Finding, other_names: frozenset[str]) -> float:
    """How strongly `cause` explains `other` (0 when it does not)."""
    if cause is other:
        return 0.0
    if (
        other.role == CAUSE
        and other.category == Category.DEPENDENCY_FAILURE
        and cause.category not in (Category.DEPENDENCY_FAILURE, Category.HEALTHY, Category.UNKNOWN)
        and cause.domain != Domain.CHANGES
        and cause_names & upstream_names(other)
    ):
        # callers failing on a dependency are explained by what is wrong with the dependency itself
        if cause.ts is not None and other.ts is not None and cause.ts > other.ts + TIME_SLACK_S:
            return 0.0
        return 1.0
    link = link_strength(cause_names, other_names)
    if link == 0.0:
        return 0.0
    if is_alert(other):
        # an alert is a symptom of the objects its labels name: any cause on them explains it, but an alert
        # that names nothing is only weakly explained by a cause that does not list it
        if link < 1.0 and not code_in(other.code, cause.explains):
            link = 0.5
    elif not code_in(other.code, cause.explains):
        return 0.0
    if cause.ts is not None and other.ts is not None and cause.ts > other.ts + TIME_SLACK_S:
        return 0.0  # a cause cannot begin after its effect
    if (
        cause.code == "recent_deploy"
        and cause.ts is not None
        and other.ts is not None
        and other.ts - cause.ts > DEPLOY_EFFECT_WINDOW_S
    ):
        return 0.0  # a release that served for hours before the failures began did not bring them
    return link


def checked_findings(findings: Iterable[Finding], evidence: EvidenceSet) -> list[Finding]:
    """Findings with only real references; one whose every reference is unreal is dropped."""
    out: list[Finding] = []
    for f in findings:
        refs = [r for r in f.evidence if evidence.check(r)]
        if f.evidence and not refs:
            continue
        if not f.evidence and f.role != BENIGN:
            continue  # a claim that cites nothing is not evidence
        out.append(f if len(refs) == len(f.evidence) else f.model_copy(update={"evidence": refs}))
    return out
