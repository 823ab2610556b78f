"""Investigations: evidence items, bundle formats, analyzers and the reasoning that makes a Diagnosis.

Pure: no I/O beyond reading the evidence it is given; imports only core.
"""

from diagnosis.evidence import EvidenceSet
from diagnosis.model import (
    Action,
    Category,
    Claim,
    Diagnosis,
    Domain,
    EvidenceItem,
    EvidenceRef,
    Finding,
    RuledOut,
)

__all__ = [
    "Action",
    "Category",
    "Claim",
    "Diagnosis",
    "Domain",
    "EvidenceItem",
    "EvidenceRef",
    "EvidenceSet",
    "Finding",
    "RuledOut",
]
