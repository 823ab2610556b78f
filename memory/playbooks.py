"""Playbooks: DAG templates kept as YAML data, with slots the planner fills from the request."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from core.types import OnFailure
from memory.embeddings import Embedder

PLAYBOOK_DIR = Path(__file__).parent / "playbooks"
_WORD = re.compile(r"[a-z][a-z0-9]+")
_URL = re.compile(r"https?://\S+")


class SlotSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="urls | window_minutes | service | path | process | pattern | text")
    default: Any = None
    required: bool = False


class NodeTemplate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    on_failure: OnFailure = OnFailure.CONTINUE
    pool: str | None = None
    foreach: str | None = None  # a list slot: one node per item, ids id-1, id-2 ...
    when: str | None = None  # a slot that must be non-empty for this node to be planned


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    category: str
    keywords: list[str]
    examples: list[str] = Field(default_factory=list, description="Typical requests, for semantic choice.")
    slots: dict[str, SlotSpec] = Field(default_factory=dict)
    nodes: list[NodeTemplate]
    fallback: bool = False


def load_playbooks(folder: Path = PLAYBOOK_DIR) -> list[Playbook]:
    books = []
    for path in sorted(folder.glob("*.yaml")):
        with path.open() as fh:
            books.append(Playbook.model_validate(yaml.safe_load(fh)))
    return books


def request_words(text: str) -> set[str]:
    """Lowercase words of a request, URLs removed (their parts are not what the request is about)."""
    words = set(_WORD.findall(_URL.sub(" ", text.lower())))
    # crude stemming so "endpoints" meets "endpoint" and "errors" meets "error"
    return words | {w[:-1] for w in words if w.endswith("s") and len(w) > 3}


class PlaybookLibrary:
    """Chooses the playbook that best matches a request: keyword overlap, plus the cosine similarity of the
    request to each playbook's description when an embedder is attached (semantic memory)."""

    # a playbook with no keyword in common must be this close in meaning to be chosen over the fallback
    MIN_SIMILARITY = 0.45

    def __init__(self, playbooks: list[Playbook], embedder: Embedder | None = None) -> None:
        if not any(p.fallback for p in playbooks):
            raise ValueError("the playbook library needs one fallback playbook (fallback: true)")
        self.playbooks = playbooks
        self.by_name = {p.name: p for p in playbooks}
        self.embedder = embedder
        self._vectors: np.ndarray | None = None

    def _playbook_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """One vector per example request and per description; owner[i] is the playbook of row i."""
        assert self.embedder is not None
        if self._vectors is None:
            texts, owner = [], []
            for i, b in enumerate(self.playbooks):
                for t in [b.description, *b.examples]:
                    texts.append(t)
                    owner.append(i)
            self._vectors = self.embedder.embed(texts)
            self._owner = np.array(owner)
        return self._vectors, self._owner

    def similarities(self, text: str) -> list[float]:
        """Per playbook, the best similarity of the request to its description or any of its examples."""
        if self.embedder is None:
            return [0.0] * len(self.playbooks)
        vectors, owner = self._playbook_vectors()
        sims = vectors @ self.embedder.embed([text])[0]
        return [float(sims[owner == i].max()) for i in range(len(self.playbooks))]

    @classmethod
    def default(cls, embedder: Embedder | None = None) -> PlaybookLibrary:
        return cls(load_playbooks(), embedder)

    @property
    def fallback(self) -> Playbook:
        return next(p for p in self.playbooks if p.fallback)

    def rank(self, text: str) -> list[tuple[Playbook, float]]:
        """Score = keyword hits + 2 x similarity; a playbook with neither scores under 1."""
        words = request_words(text)
        scored = []
        for book, sim in zip(self.playbooks, self.similarities(text), strict=True):
            keywords = {k.lower() for k in book.keywords}
            hits = len(words & keywords)
            meaning = 2 * sim if (hits or sim >= self.MIN_SIMILARITY) else 0.0
            scored.append((book, hits + meaning + (0.01 * hits / max(1, len(keywords)))))
        return sorted(scored, key=lambda pair: pair[1], reverse=True)

    # a keyword in common, or meaning alone at MIN_SIMILARITY (2 x 0.45), makes a playbook a candidate
    MIN_SCORE = 0.9

    def candidates(self, text: str) -> list[Playbook]:
        """Playbooks that fit the request, best first; the fallback only when none does."""
        fitting = [b for b, score in self.rank(text) if score >= self.MIN_SCORE]
        return fitting or [self.fallback]

    def choose(self, text: str) -> tuple[Playbook, float]:
        best, score = self.rank(text)[0]
        return (best, score) if score >= self.MIN_SCORE else (self.fallback, 0.0)
