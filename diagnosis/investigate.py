"""The pure entry points an investigation is made of: run a domain's analyzers, conclude, or both at once.

The LangGraph investigation calls `analyze_domain` from each specialist and `conclude` from the lead; the CLI and
tests call `investigate`. Nothing here does I/O beyond reading the evidence it is given.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

from diagnosis.analyzers.base import ANALYZERS, Analyzer
from diagnosis.evidence import EvidenceSet, control_plane
from diagnosis.model import Category, Diagnosis, Domain, Finding
from diagnosis.reasoning import REPORTED_PROBLEM, reason
from diagnosis.timeline import evidence_now, fmt_ts

log = logging.getLogger(__name__)

# one module per domain; a module not on this branch yet is skipped, any other import failure is a real error
ANALYZER_MODULES = (
    "kubernetes",
    "certmanager",
    "alerts",
    "changes",
    "diffs",
    "database",
    "host",
    "disk_io",
    "remote_fs",
    "sockets",
    "clock",
    "sandbox",
    "environments",
    "chaos",
    "quorum",
    "mesh",
    "schedules",
    "memory",
    "containers",
    "metrics",
    "units",
    "propagation",
    "serverless",
    "payloads",
    "regressions",
    "stalls",
    "versions",
    "network",
    "routing",
    "balancers",
    "caching",
    "runtime",
    "profiles",
    "secrets",
    "tables",
    "spans",
    "logs",
)
_loaded = False


def load_analyzers() -> None:
    """Import the analyzer modules so their decorators register them (idempotent)."""
    global _loaded
    if _loaded:
        return
    for name in ANALYZER_MODULES:
        module = f"diagnosis.analyzers.{name}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    _loaded = True


def _run(analyzer: Analyzer, evidence: EvidenceSet) -> list[Finding]:
    try:
        return analyzer.run(evidence)
    except Exception as exc:  # an analyzer bug must cost its findings, never the investigation
        log.warning("analyzer %s failed: %s: %s", analyzer.name, type(exc).__name__, exc)
        evidence.errors.append({"path": f"analyzer:{analyzer.name}", "error": f"{type(exc).__name__}: {exc}"})
        return []


def analyze_domain(domain: Domain, evidence: EvidenceSet) -> list[Finding]:
    """The findings of one domain's registered analyzers. An analyzer that raises is recorded in
    `evidence.errors` (path `analyzer:<name>`) and contributes nothing."""
    load_analyzers()
    findings: list[Finding] = []
    for analyzer in ANALYZERS.for_domain(domain):
        findings.extend(_run(analyzer, evidence))
    return findings


def conclude(findings: list[Finding], evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
    """The Diagnosis the findings support: every reference checked against the evidence, a claim citing nothing
    real dropped, the evidence set's ignored files and errors carried over."""
    return reason(findings, evidence, question)


def _analyze(evidence: EvidenceSet, question: str | None) -> Diagnosis:
    findings: list[Finding] = []
    for domain in Domain:
        findings.extend(analyze_domain(domain, evidence))
    return conclude(findings, evidence, question)


# an operator asking what caused a failure that is over: "what caused the outage at 03:47?", "why did X go down
# last night?", "threw 502s for 15 min and recovered - was it the database?"
_PAST_FAILURE = re.compile(
    r"\bwhat (?:caused|made|broke|triggered)\b|\bwhy did\b|\broot cause\b|\bpost-?mortem\b|\bRCA\b|\bwhat happened\b|"
    r"\bincident (?:doc|report|review|write-?up|timeline)\b|"
    r"\b(?:recovered|fixed|resolved|cleared|went away)(?: itself| on its own| by itself)?\b[^?]*\bwas (?:it|that)\b",
    re.I,
)


# a question that takes a present failure as given ("why are card payments failing?", "what's the root cause?"):
# the operator sees it fail, so "nothing is failing" contradicts what they report rather than answering them
_FAILING_NOW = re.compile(
    r"^\W*why (?:is|are|do|does|can'?t|cannot|won'?t|isn'?t|aren'?t)\b|\bwhat(?:'s| is) the root cause\b|"
    r"\bwhat(?:'s| is) (?:broken|wrong|failing)\b|"  # (not "what broke?": a post-mortem of planned work asks that)
    r"(?:^|[.!?,;:-]\s*)why\s*\??\s*$",  # "... the app says the code is invalid. why?"
    re.I,
)


def _reported_unseen(d: Diagnosis, question: str) -> bool:
    """Whether a healthy reading contradicts the operator: they take a present failure as given, or they report a
    failure (now or over) of which nothing read shows a trace, not even a benign one (a recovered spike, a resolved
    alert, planned work)."""
    if _FAILING_NOW.search(question):
        return not _planned_and_resolved(d, question)
    if _ASKS_WHETHER.match(question):
        return False  # "is the ledger database down?" asks; "healthy" answers it
    reported = REPORTED_PROBLEM.search(question) or _PAST_FAILURE.search(question) or _5XX.search(question)
    return bool(reported) and not any(f.role == "benign" for f in d.findings)


_WORD = re.compile(r"[a-z]{4,}")


def _planned_and_resolved(d: Diagnosis, question: str) -> bool:
    """Whether what the operator reports is an alert that fired during planned work and resolved since: the alert
    they name (a word of its name in the question: "the pending-jobs alert") is among the resolved ones, and planned
    work explains it. Then "nothing is failing, it was the maintenance" answers them."""
    if not any(f.code == "planned_work" for f in d.findings):
        return False
    asked = set(_WORD.findall(question.lower()))
    for f in d.findings:
        if f.role != "benign" or not f.code.startswith("alert:") or "resolved" not in f.title:
            continue
        name = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", f.code.split(":", 1)[1]).lower()
        words = {w.rstrip("s") for w in _WORD.findall(name)} - {"high", "alert", "firing", "rate", "total"}
        if words & {w.rstrip("s") for w in asked}:
            return True
    return False


_ASKS_WHETHER = re.compile(r"^\W*(?:is|are|was|were|does|do|did|has|have|can|could|should)\b", re.I)
_5XX = re.compile(r"\b5\d\ds\b|\b5xx\b", re.I)


def _not_seen(d: Diagnosis, question: str) -> Diagnosis:
    """A healthy reading made unknown when the operator reports a failure the evidence read does not show: the
    evidence that shows it is missing."""
    d.category = Category.UNKNOWN
    d.confidence = min(d.confidence, 0.3)
    d.root_cause = (
        f"The failure reported ('{question.strip()[:160]}') shows nowhere in the evidence read: "
        f"{d.root_cause[0].lower()}{d.root_cause[1:]} The evidence that shows it failing is missing."
    )
    d.missing = [*d.missing, "evidence of the reported failure itself: the failing service's logs, metrics or alerts"]
    d.text = f"**Unknown.** {d.root_cause}\n\n{d.text}"
    return d


_READ_AFTER_END_S = 60.0  # a failure that is over is read as of this long after it last showed
UNREAD_MIN = 3  # files in no known format that, outnumbering the files read, leave "healthy" unproven


def _unread(d: Diagnosis, evidence: EvidenceSet) -> Diagnosis:
    """A healthy answer made unknown when more of the bundle's files went unread (no known format) than were read:
    what was read shows nothing failing, but most of what the operator handed over was not looked at."""
    # a commit's diff or a cloud's activity log says what was changed, not whether anything works: no file read for
    # health
    read = {item.source for item in evidence if item.kind != "change/diff" and not control_plane(item)}
    unread = [e.get("path", "?") for e in evidence.ignored]
    unread += sorted({item.source for item in evidence.kind("change/diff")} - read)
    if len(unread) < UNREAD_MIN or len(unread) <= len(read):
        return d
    paths = ", ".join(unread[:5])
    d.category = Category.UNKNOWN
    d.confidence = min(d.confidence, 0.3)
    d.root_cause = (
        f"Nothing failing shows in the {len(read)} file(s) read, but "
        f"{len(unread)} of the bundle's files are in no format read here ({paths}): the failure may be in "
        "them, so this is not a healthy answer."
    )
    d.missing = [*d.missing, f"the failure in a readable export: {paths}"]
    d.text = f"**Unknown.** {d.root_cause}\n\n{d.text}"
    return d


def _failure_end(evidence: EvidenceSet, findings: list[Finding]) -> float | None:
    """When the failure that is over last showed: the newest log record that a stopped failure's finding cites."""
    newest: float | None = None
    for f in findings:
        if not f.code.endswith(("_stopped", "_recovered")):
            continue
        for ref in f.evidence:
            item = evidence.get(ref.item)
            if item is None:
                continue
            stamps: list[Any] = []
            if item.kind == "log" and ref.line is not None:
                stamps = [r.get("ts") for r in item.data.get("records") or () if r.get("line") == ref.line]
            elif item.kind == "metric":
                # a series that spiked and came back: the failure lasted while it stood above its usual level
                stamps = [_spike_end(item.data.get("points") or ())]
            for ts in stamps:
                if isinstance(ts, int | float):
                    newest = ts if newest is None or ts > newest else newest
    return newest


def _spike_end(points: Any) -> float | None:
    """The last point of a series that stands well above its median (the end of its spike)."""
    values = sorted(float(p[1]) for p in points if isinstance(p, list | tuple) and len(p) == 2)
    if len(values) < 4:
        return None
    typical = values[len(values) // 2]
    high = [float(p[0]) for p in points if float(p[1]) > 2 * typical + 1e-9]
    return max(high) if high else None


def _named_when_over(now: Diagnosis, past: Diagnosis) -> bool:
    """Whether the cause read as of a failure's end is one that reads as stopped now (a dependency that failed and
    came back), not a symptom that only reads as a cause once its later context is cut away."""
    stopped = {
        (f.code.removesuffix("_stopped").removesuffix("_recovered"), f.object)
        for f in now.findings
        if f.code.endswith(("_stopped", "_recovered"))
    }
    return past.category != Category.UNKNOWN and any(
        f.role == "cause" and f.category == past.category and (f.code, f.object) in stopped for f in past.findings
    )


def investigate(evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
    """All domains' analyzers, then the conclusion. Asked what caused a failure that is over, the evidence is read
    again as of that failure's end: "nothing is failing now" (or "only symptoms are left") answers another
    question."""
    d = _analyze(evidence, question)
    if d.category not in (Category.HEALTHY, Category.UNKNOWN):
        return d
    if d.category == Category.HEALTHY:
        d = _unread(d, evidence)
    if d.category == Category.HEALTHY and question and _reported_unseen(d, question):
        d = _not_seen(d, question)
    if d.category not in (Category.HEALTHY, Category.UNKNOWN) or not question or not _PAST_FAILURE.search(question):
        return d
    end = _failure_end(evidence, d.findings)
    if end is not None and end < (evidence_now(evidence) or end):
        past = _analyze(evidence.at(end + _READ_AFTER_END_S), question)
        if past.category != Category.HEALTHY and (d.category == Category.HEALTHY or _named_when_over(d, past)):
            past.root_cause = f"(a failure that is over: read as of its end, {fmt_ts(end)}) {past.root_cause}"
            past.text = f"_Read as of {fmt_ts(end)}, when the failure asked about last showed._\n\n{past.text}"
            return past
    return d
