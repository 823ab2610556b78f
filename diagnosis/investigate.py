"""The pure entry points an investigation is made of: run a domain's analyzers, conclude, or both at once.

The LangGraph investigation calls `analyze_domain` from each specialist and `conclude` from the lead; the CLI and
tests call `investigate`. Nothing here does I/O beyond reading the evidence it is given.
"""

from __future__ import annotations

import importlib
import logging

from diagnosis.analyzers.base import ANALYZERS, Analyzer
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Diagnosis, Domain, Finding
from diagnosis.reasoning import reason

log = logging.getLogger(__name__)

# one module per domain; a module not on this branch yet is skipped, any other import failure is a real error
ANALYZER_MODULES = (
    "kubernetes",
    "certmanager",
    "alerts",
    "changes",
    "database",
    "host",
    "disk_io",
    "clock",
    "sandbox",
    "memory",
    "containers",
    "metrics",
    "units",
    "propagation",
    "serverless",
    "regressions",
    "network",
    "routing",
    "balancers",
    "runtime",
    "profiles",
    "secrets",
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


def investigate(evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
    """All domains' analyzers, then the conclusion."""
    findings: list[Finding] = []
    for domain in Domain:
        findings.extend(analyze_domain(domain, evidence))
    return conclude(findings, evidence, question)
