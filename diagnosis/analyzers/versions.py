"""Errors broken down by the version that threw them (an Application Insights / Log Analytics summary by
`application_Version` and exception type, a Sentry release breakdown, any series labelled with both): an exception
that only the newest version throws, many times, is that release's defect, named with where it is thrown. The same
exception thrown by the old version as well is not new (a timeout, a cancelled task), whatever its count."""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.series import points_of

MIN_THROWN = 10
_VERSION_KEYS = ("application_version", "app_version", "version", "service_version", "release", "appversion")
_TYPE_KEYS = ("type", "exception", "exception_type", "exceptiontype", "problemid", "error_type", "errortype")
_WHERE_KEYS = ("method", "outermethod", "function", "operation_name", "operation", "culprit")
_MESSAGE_KEYS = ("outermessage", "message", "innermostmessage", "error_message")


def _get(labels: dict[str, str], keys: tuple[str, ...]) -> str | None:
    low = {k.lower().replace(".", "_"): v for k, v in labels.items()}
    return next((low[k] for k in keys if low.get(k)), None)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def errors_by_version(evidence: EvidenceSet) -> list[Finding]:
    thrown: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    refs: dict[tuple[str, str], EvidenceRef] = {}
    messages: dict[tuple[str, str], str] = {}
    for m in evidence.kind("metric"):
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        version, kind = _get(labels, _VERSION_KEYS), _get(labels, _TYPE_KEYS)
        if not version or not kind or not re.search(r"\d", version):
            continue
        where = _get(labels, _WHERE_KEYS) or ""
        total = sum(v for _, v in points_of(m.data.get("points")))
        key = (kind, where)
        thrown[key][version] += total
        refs.setdefault(key, EvidenceRef(item=m.id, field="points", value=f"{kind} x{total:.0f} in {version}"))
        messages.setdefault(key, _get(labels, _MESSAGE_KEYS) or "")
    versions = sorted({v for by in thrown.values() for v in by}, key=_version_key)
    if len(versions) < 2:
        return []
    newest, older = versions[-1], versions[:-1]
    out: list[Finding] = []
    for (kind, where), by in thrown.items():
        count = by.get(newest, 0.0)
        if count < MIN_THROWN or any(by.get(v, 0.0) > 0 for v in older):
            continue
        short = kind.rsplit(".", 1)[-1]
        at = f" in {where}" if where else ""
        msg = messages[(kind, where)]
        out.append(
            Finding(
                analyzer="errors_by_version",
                domain=Domain.METRICS,
                role="cause",
                code="new_exception",
                category=Category.CODE_DEFECT,
                title=f"version {newest} throws {short}{at} ({count:.0f}x), which {', '.join(older)} never did",
                mechanism=(
                    f"version {newest} throws {kind}{at}" + (f" ('{msg[:160]}')" if msg else "") + f" {count:.0f} "
                    f"times, and {', '.join(older)} never did: a defect the {newest} release brought"
                ),
                object=f"{where or short} {newest}",
                score=0.8,
                tags=[f"version:{newest}", *([f"function:{where}"] if where else [])],
                explains=["http_5xx", "errors", "error_rate", "exception", "metric_shift", "alert:*", "latency"],
                evidence=[refs[(kind, where)]],
                actions=[
                    Action(
                        description=f"The stack traces of {short} in {newest}",
                        command=f"exceptions | where application_Version == '{newest}' and type == '{kind}'",
                    ),
                    Action(
                        description=f"Roll back to {older[-1]} while {where or short} is fixed",
                        command=f"redeploy {older[-1]}",
                        kind="write",
                    ),
                ],
            )
        )
    return out
