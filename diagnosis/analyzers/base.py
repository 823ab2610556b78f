"""The analyzer contract: the evidence kinds it reads, the findings it returns. Registered by decorator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from diagnosis.evidence import EvidenceSet
from diagnosis.model import Domain, Finding

AnalyzerFn = Callable[[EvidenceSet], list[Finding]]


@dataclass(frozen=True)
class Analyzer:
    name: str
    domain: Domain
    reads: frozenset[str]  # evidence kinds (a trailing '/' is a prefix: "k8s/")
    fn: AnalyzerFn

    def applies(self, evidence: EvidenceSet) -> bool:
        have = evidence.kinds()
        return any(k in have or (k.endswith("/") and any(h.startswith(k) for h in have)) for k in self.reads)

    def run(self, evidence: EvidenceSet) -> list[Finding]:
        return self.fn(evidence) if self.applies(evidence) else []


@dataclass
class AnalyzerRegistry:
    _analyzers: dict[str, Analyzer] = field(default_factory=dict)

    def analyzer(
        self, *, domain: Domain, reads: set[str] | list[str], name: str | None = None
    ) -> Callable[[AnalyzerFn], AnalyzerFn]:
        def register(fn: AnalyzerFn) -> AnalyzerFn:
            a = Analyzer(name or fn.__name__, domain, frozenset(reads), fn)
            if a.name in self._analyzers:
                raise ValueError(f"analyzer {a.name!r} registered twice")
            self._analyzers[a.name] = a
            return fn

        return register

    def for_domain(self, domain: Domain) -> list[Analyzer]:
        return [a for a in self._analyzers.values() if a.domain == domain]

    def all(self) -> list[Analyzer]:
        return list(self._analyzers.values())


ANALYZERS = AnalyzerRegistry()
