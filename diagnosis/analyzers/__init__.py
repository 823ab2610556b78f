"""Analyzers, one module per domain; importing this package registers them all in ANALYZERS."""

from diagnosis.analyzers.base import ANALYZERS, Analyzer, AnalyzerRegistry

__all__ = ["ANALYZERS", "Analyzer", "AnalyzerRegistry"]
