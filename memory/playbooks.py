"""Playbooks: DAG templates kept as YAML data, with slots the planner fills from the request."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from core.types import OnFailure

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
    """Chooses the playbook whose keywords best match a request (the memory issue makes this semantic)."""

    def __init__(self, playbooks: list[Playbook]) -> None:
        if not any(p.fallback for p in playbooks):
            raise ValueError("the playbook library needs one fallback playbook (fallback: true)")
        self.playbooks = playbooks
        self.by_name = {p.name: p for p in playbooks}

    @classmethod
    def default(cls) -> PlaybookLibrary:
        return cls(load_playbooks())

    @property
    def fallback(self) -> Playbook:
        return next(p for p in self.playbooks if p.fallback)

    def rank(self, text: str) -> list[tuple[Playbook, float]]:
        words = request_words(text)
        scored = []
        for book in self.playbooks:
            keywords = {k.lower() for k in book.keywords}
            hits = len(words & keywords)
            scored.append((book, hits + (0.01 * hits / max(1, len(keywords)))))
        return sorted(scored, key=lambda pair: pair[1], reverse=True)

    def choose(self, text: str) -> tuple[Playbook, float]:
        best, score = self.rank(text)[0]
        return (best, score) if score >= 1 else (self.fallback, 0.0)
