"""Semantic memory: durable facts about the estate, with provenance and a validity window.

A new fact with the same subject and predicate but another object contradicts the current one: the old fact
is closed (valid_to = now, superseded_by = the new id), never deleted, so the history stays answerable.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from core.db import Store
from memory._tables import FactRow, init_memory_tables
from memory.embeddings import Embedder
from memory.entities import entity_values, extract_entities
from memory.index.partitioned import PartitionedIndex, arrays_from_rows


@dataclass
class Fact:
    id: int
    subject: str
    predicate: str
    object: str
    source: str
    valid_from: float
    valid_to: float | None
    valid_until: float | None
    superseded_by: int | None

    @classmethod
    def of(cls, r: FactRow) -> Fact:
        return cls(
            r.id, r.subject, r.predicate, r.object, r.source, r.valid_from, r.valid_to, r.valid_until, r.superseded_by
        )

    @property
    def current(self) -> bool:
        return self.valid_to is None

    def text(self) -> str:
        return f"{self.subject} {self.predicate.replace('_', ' ')} {self.object}"

    def view(self) -> dict[str, Any]:
        return {**self.__dict__, "text": self.text(), "current": self.current}


ALIAS_PREDICATES = ("alias_of", "also_known_as", "is_alias_of")
ALIAS_REFRESH_S = 5.0
_WORDS = re.compile(r"[a-z0-9][a-z0-9._/-]*[a-z0-9]")


def _norm(value: str) -> str:
    return " ".join(value.strip().split())


class SemanticMemory:
    def __init__(self, store: Store, embedder: Embedder, index_folder: Path | None = None) -> None:
        self.store = store
        self.embedder = embedder
        init_memory_tables(store.engine)
        self.index = PartitionedIndex(embedder.dim, index_folder, loader=self._load)
        self._aliases: dict[str, tuple[float, dict[str, str]]] = {}

    def _load(self, tenant: str) -> tuple[np.ndarray, np.ndarray]:
        with self.store.session() as s:
            rows = s.execute(
                sa.select(FactRow.id, FactRow.vector).where(FactRow.tenant == tenant, FactRow.valid_to.is_(None))
            ).all()
        return arrays_from_rows(rows, self.embedder.dim)

    def assert_fact(
        self,
        tenant: str,
        subject: str,
        predicate: str,
        obj: str,
        *,
        source: str,
        valid_until: float | None = None,
    ) -> tuple[Fact, list[Fact]]:
        """Record a fact; returns it and the facts it closed. Asserting a current fact again changes nothing."""
        subject, predicate, obj = _norm(subject), _norm(predicate).replace(" ", "_"), _norm(obj)
        now = time.time()
        closed: list[FactRow] = []
        with self.store.session() as s:
            current = list(
                s.scalars(
                    sa.select(FactRow).where(
                        FactRow.tenant == tenant,
                        FactRow.subject == subject,
                        FactRow.predicate == predicate,
                        FactRow.valid_to.is_(None),
                    )
                )
            )
            same = next((f for f in current if f.object == obj), None)
            if same is not None:
                return Fact.of(same), []
            vec = self.embedder.embed([f"{subject} {predicate.replace('_', ' ')} {obj}"])[0]
            row = FactRow(
                tenant=tenant,
                subject=subject,
                predicate=predicate,
                object=obj,
                source=source,
                valid_from=now,
                valid_to=None,
                valid_until=valid_until,
                superseded_by=None,
                vector=np.asarray(vec, np.float32).tobytes(),
                created_at=now,
            )
            s.add(row)
            s.flush()
            for old in current:  # the same subject and predicate with another object: contradicted
                old.valid_to = now
                old.superseded_by = row.id
                closed.append(old)
            fact = Fact.of(row)
            closed_facts = [Fact.of(c) for c in closed]
        self.index.add(tenant, np.array([fact.id], np.int64), np.asarray(vec, np.float32).reshape(1, -1))
        if closed:
            self.index.remove(tenant, np.array([c.id for c in closed], np.int64))
        if fact.predicate in ALIAS_PREDICATES:
            self._aliases.pop(tenant, None)
        return fact, closed_facts

    def aliases(self, tenant: str) -> dict[str, str]:
        """Other names of a tenant's services, from current facts "X alias_of Y" (or "X also_known_as Y"):
        the cache reads a request naming X as naming Y. Read at most every ALIAS_REFRESH_S per tenant (a cache
        lookup must not wait for the database), and at once after this process records an alias."""
        cached = self._aliases.get(tenant)
        if cached is not None and time.monotonic() - cached[0] < ALIAS_REFRESH_S:
            return cached[1]
        with self.store.session() as s:
            rows = s.execute(
                sa.select(FactRow.subject, FactRow.object).where(
                    FactRow.tenant == tenant,
                    FactRow.valid_to.is_(None),
                    FactRow.predicate.in_(ALIAS_PREDICATES),
                )
            ).all()
        found = {subject.lower(): obj.lower() for subject, obj in rows}
        self._aliases[tenant] = (time.monotonic(), found)
        return found

    def about(self, tenant: str, text: str) -> list[Fact]:
        """Current facts whose subject or object is an entity the text names (services, hosts, systems...),
        as written or in canonical form."""
        names = set(entity_values(extract_entities(text))) | set(_WORDS.findall(text.lower()))
        if not names:
            return []
        with self.store.session() as s:
            rows = s.scalars(
                sa.select(FactRow).where(
                    FactRow.tenant == tenant,
                    FactRow.valid_to.is_(None),
                    sa.or_(FactRow.subject.in_(names), FactRow.object.in_(names)),
                )
            )
            return [Fact.of(r) for r in rows]

    def search(self, tenant: str, text: str, k: int = 10) -> list[tuple[Fact, float]]:
        found = self.index.search(tenant, self.embedder.embed([text])[0], k)
        sims = dict(found)
        with self.store.session() as s:
            rows = s.scalars(sa.select(FactRow).where(FactRow.id.in_(list(sims)), FactRow.tenant == tenant))
            facts = [(Fact.of(r), sims[r.id]) for r in rows if r.valid_to is None]
        return sorted(facts, key=lambda p: p[1], reverse=True)

    def history(self, tenant: str, subject: str, predicate: str | None = None) -> list[Fact]:
        stmt = sa.select(FactRow).where(FactRow.tenant == tenant, FactRow.subject == _norm(subject))
        if predicate:
            stmt = stmt.where(FactRow.predicate == _norm(predicate).replace(" ", "_"))
        with self.store.session() as s:
            return [Fact.of(r) for r in s.scalars(stmt.order_by(FactRow.valid_from))]

    def expire(self, now: float | None = None) -> int:
        """Close current facts whose stated validity ended."""
        now = now or time.time()
        with self.store.session() as s:
            rows = list(s.scalars(sa.select(FactRow).where(FactRow.valid_to.is_(None), FactRow.valid_until <= now)))
            for r in rows:
                r.valid_to = now
            by_tenant: dict[str, list[int]] = {}
            for r in rows:
                by_tenant.setdefault(r.tenant, []).append(r.id)
        for tenant, ids in by_tenant.items():
            self.index.remove(tenant, np.array(ids, np.int64))
        return len(rows)
