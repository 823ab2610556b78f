"""Category-aware semantic cache: per category its own threshold, TTL per entry kind, quota and switch;
keyed by tenant (a tenant never sees another's entry); a verifier so that requests about different
services, hosts, numbers or time windows never share an entry; invalidation by tenant, category or entity.

Entries live in the database (the truth); the vectors of each (tenant, kind, category) partition are in an
in-memory FAISS index that a lookup searches without touching the database until it has a candidate.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from core.db import Store
from core.policy import CachePolicy, CategoryCachePolicy
from memory._tables import CacheEntryRow, init_memory_tables
from memory.embeddings import Embedder
from memory.entities import change_intent, entity_values, extract_entities, same_entities
from memory.index.partitioned import PartitionedIndex, arrays_from_rows


class CacheKind(StrEnum):
    PLAN = "plan"
    ANSWER = "answer"
    TOOL_RESULT = "tool_result"


@dataclass
class CacheLookup:
    hit: bool
    category: str
    kind: str
    reason: str  # hit | miss | disabled | change_request | below_threshold | verifier_rejected | expired
    similarity: float | None = None
    entry_id: int | None = None
    payload: dict[str, Any] | None = None
    cached_text: str | None = None
    age_s: float | None = None
    search_ms: float = 0.0


@dataclass
class _Counters:
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    verified_rejects: int = 0
    evictions: int = 0
    expirations: int = 0
    latency_ms: deque[float] = field(default_factory=lambda: deque(maxlen=2000))


def _key(tenant: str, kind: str, category: str) -> str:
    # JSON, not a delimiter: no tenant name can forge its way into another tenant's partition
    return json.dumps([tenant, kind, category])


def _unkey(key: str) -> tuple[str, str, str]:
    tenant, kind, category = json.loads(key)
    return tenant, kind, category


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 4)


class SemanticCache:
    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        policy: Callable[[], CachePolicy] | CachePolicy,
        index_folder: Path | None = None,
        candidates: int = 5,
        verify: bool = True,
        aliases: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self._policy = policy if callable(policy) else (lambda: policy)
        self.candidates = candidates
        self.verify = verify  # off only to measure what the verifier adds (bench, cache-eval)
        # a tenant's other names for its services (semantic-memory facts), so "shop-frontend" is "checkout"
        self._aliases = aliases or (lambda tenant: {})
        init_memory_tables(store.engine)
        self.index = PartitionedIndex(embedder.dim, index_folder, loader=self._load_partition)
        self._counters: dict[str, _Counters] = defaultdict(_Counters)
        self._count_lock = threading.Lock()
        # hits are counted in memory and written in batches: a lookup never waits for a database write
        self._pending_hits: dict[int, tuple[int, float]] = {}
        self._last_flush = time.monotonic()

    def policy_for(self, category: str) -> CategoryCachePolicy:
        return self._policy().for_category(category)

    def _load_partition(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        tenant, kind, category = _unkey(key)
        stmt = sa.select(CacheEntryRow.id, CacheEntryRow.vector).where(
            CacheEntryRow.tenant == tenant,
            CacheEntryRow.kind == kind,
            CacheEntryRow.category == category,
            CacheEntryRow.expires_at > time.time(),
        )
        with self.store.session() as s:
            rows = s.execute(stmt).all()
        return arrays_from_rows(rows, self.embedder.dim)

    def _count(self, category: str, **inc: int) -> None:
        with self._count_lock:
            c = self._counters[category]
            for name, n in inc.items():
                setattr(c, name, getattr(c, name) + n)

    def lookup(
        self, tenant: str, category: str, kind: CacheKind | str, text: str, vector: np.ndarray | None = None
    ) -> CacheLookup:
        kind = str(kind)
        policy = self.policy_for(category)
        if not policy.enabled:
            return CacheLookup(False, category, kind, "disabled")
        if change_intent(text):  # whatever playbook or category it matched: a change is done, not remembered
            return CacheLookup(False, category, kind, "change_request")
        vec = vector if vector is not None else self.embedder.embed([text])[0]
        started = time.perf_counter()
        result = self._search(tenant, category, kind, text, vec, policy)
        result.search_ms = (time.perf_counter() - started) * 1000
        with self._count_lock:
            c = self._counters[category]
            c.lookups += 1
            c.latency_ms.append(result.search_ms)
            if result.hit:
                c.hits += 1
            else:
                c.misses += 1
                if result.reason == "verifier_rejected":
                    c.verified_rejects += 1
        return result

    def _search(
        self, tenant: str, category: str, kind: str, text: str, vec: np.ndarray, policy: CategoryCachePolicy
    ) -> CacheLookup:
        key = _key(tenant, kind, category)
        found = [(i, s) for i, s in self.index.search(key, vec, self.candidates) if s >= policy.threshold]
        if not found:
            return CacheLookup(False, category, kind, "below_threshold")
        wanted = extract_entities(text, self._aliases(tenant))
        now = time.time()
        rejected: tuple[int, float] | None = None
        # the closest verified entry that had expired: how old it was tells the tuner what a longer TTL would serve
        stale: CacheLookup | None = None
        with self.store.session() as s:
            rows = {
                r.id: r for r in s.scalars(sa.select(CacheEntryRow).where(CacheEntryRow.id.in_([i for i, _ in found])))
            }
            for entry_id, sim in found:
                row = rows.get(entry_id)
                if row is None or row.tenant != tenant:  # gone from the database, or never this tenant's
                    continue
                ok = not self.verify or same_entities(wanted, {k: frozenset(v) for k, v in row.entities.items()})[0]
                if row.expires_at <= now:
                    if ok and stale is None:
                        age = round(now - row.created_at, 3)
                        stale = CacheLookup(False, category, kind, "expired", sim, entry_id, age_s=age)
                    continue
                if not ok:
                    rejected = rejected or (entry_id, sim)
                    continue
                self._note_hit(entry_id, now)
                return CacheLookup(
                    True, category, kind, "hit", sim, entry_id, row.payload, row.text, round(now - row.created_at, 3)
                )
        if rejected:
            return CacheLookup(False, category, kind, "verifier_rejected", rejected[1], rejected[0])
        return stale or CacheLookup(False, category, kind, "expired")

    def search(self, tenant: str, text: str, k: int = 10) -> list[dict[str, Any]]:
        """A tenant's live entries closest to a text, any kind and category (for people, not for serving)."""
        vec = self.embedder.embed([text])[0]
        with self.store.session() as s:
            partitions = s.execute(
                sa.select(CacheEntryRow.kind, CacheEntryRow.category)
                .where(CacheEntryRow.tenant == tenant, CacheEntryRow.expires_at > time.time())
                .distinct()
            ).all()
        found = [
            (entry_id, sim)
            for kind, category in partitions
            for entry_id, sim in self.index.search(_key(tenant, kind, category), vec, k)
        ]
        found.sort(key=lambda pair: pair[1], reverse=True)
        sims = dict(found[:k])
        with self.store.session() as s:
            rows = s.scalars(sa.select(CacheEntryRow).where(CacheEntryRow.id.in_(list(sims)))).all()
        now = time.time()
        out = [
            {
                "id": r.id,
                "kind": r.kind,
                "category": r.category,
                "text": r.text,
                "similarity": round(sims[r.id], 4),
                "age_s": round(now - r.created_at, 1),
                "expires_in_s": round(r.expires_at - now, 1),
                "hits": r.hits,
                "source_task": r.source_task,
            }
            for r in rows
            if r.tenant == tenant
        ]
        return sorted(out, key=lambda e: e["similarity"], reverse=True)

    def _note_hit(self, entry_id: int, ts: float) -> None:
        with self._count_lock:
            count, _ = self._pending_hits.get(entry_id, (0, ts))
            self._pending_hits[entry_id] = (count + 1, ts)
            due = time.monotonic() - self._last_flush > 5.0
        if due:
            self.flush_hits()

    def flush_hits(self) -> None:
        """Write the hit counts and last-hit times gathered since the last flush (LRU eviction reads them)."""
        with self._count_lock:
            pending, self._pending_hits = self._pending_hits, {}
            self._last_flush = time.monotonic()
        if not pending:
            return
        with self.store.session() as s:
            for entry_id, (count, ts) in pending.items():
                s.execute(
                    sa.update(CacheEntryRow)
                    .where(CacheEntryRow.id == entry_id)
                    .values(hits=CacheEntryRow.hits + count, last_hit_at=ts)
                )

    def get_exact(self, tenant: str, category: str, kind: CacheKind | str, text: str) -> dict[str, Any] | None:
        """An entry whose text is exactly this (tool calls: the same tool and arguments), if live."""
        kind = str(kind)
        policy = self.policy_for(category)
        if not policy.enabled or policy.ttl(kind) <= 0:
            return None
        stmt = (
            sa.select(CacheEntryRow)
            .where(
                CacheEntryRow.tenant == tenant,
                CacheEntryRow.kind == kind,
                CacheEntryRow.category == category,
                CacheEntryRow.text == text,
                CacheEntryRow.expires_at > time.time(),
            )
            .order_by(CacheEntryRow.created_at.desc())
            .limit(1)
        )
        found: dict[str, Any] | None
        with self.store.session() as s:
            row = s.scalar(stmt)
            found = (
                None if row is None else {"payload": row.payload, "age_s": time.time() - row.created_at, "id": row.id}
            )
        self._count(category, lookups=1, hits=int(found is not None), misses=int(found is None))
        if found is not None:
            self._note_hit(found["id"], time.time())
        return found

    def put(
        self,
        tenant: str,
        category: str,
        kind: CacheKind | str,
        text: str,
        payload: dict[str, Any],
        vector: np.ndarray | None = None,
        source_task: str | None = None,
    ) -> int | None:
        kind = str(kind)
        policy = self.policy_for(category)
        if not policy.enabled or policy.ttl(kind) <= 0 or change_intent(text):
            return None
        vec = vector if vector is not None else self.embedder.embed([text])[0]
        now = time.time()
        entities = {k: sorted(v) for k, v in extract_entities(text, self._aliases(tenant)).items()}
        row = CacheEntryRow(
            tenant=tenant,
            kind=kind,
            category=category,
            text=text,
            entities=entities,
            payload=payload,
            vector=np.asarray(vec, dtype=np.float32).tobytes(),
            source_task=source_task,
            created_at=now,
            expires_at=now + policy.ttl(kind),
            last_hit_at=now,
            hits=0,
        )
        with self.store.session() as s:
            s.add(row)
            s.flush()
            entry_id = int(row.id)
        key = _key(tenant, kind, category)
        self.index.add(key, np.array([entry_id], dtype=np.int64), np.asarray(vec, dtype=np.float32).reshape(1, -1))
        self._enforce_quota(tenant, category, kind, policy)
        return entry_id

    def _enforce_quota(self, tenant: str, category: str, kind: str, policy: CategoryCachePolicy) -> None:
        self.flush_hits()  # least recently used must mean used, including the hits not yet written
        where = (CacheEntryRow.tenant == tenant, CacheEntryRow.kind == kind, CacheEntryRow.category == category)
        with self.store.session() as s:
            count = s.scalar(sa.select(sa.func.count()).select_from(CacheEntryRow).where(*where)) or 0
            if count <= policy.max_entries:
                return
            victims = list(
                s.scalars(
                    sa.select(CacheEntryRow.id)
                    .where(*where)
                    .order_by(CacheEntryRow.last_hit_at, CacheEntryRow.id)
                    .limit(count - policy.max_entries)
                )
            )
        self._drop({_key(tenant, kind, category): victims})
        self._count(category, evictions=len(victims))

    def _drop(self, by_partition: dict[str, list[int]]) -> int:
        """Delete entries from the database and their vectors from the index: the one way entries leave."""
        ids = [i for group in by_partition.values() for i in group]
        if not ids:
            return 0
        with self.store.session() as s:
            s.execute(sa.delete(CacheEntryRow).where(CacheEntryRow.id.in_(ids)))
        for key, group in by_partition.items():
            self.index.remove(key, np.array(group, dtype=np.int64))
        return len(ids)

    def invalidate(
        self, tenant: str, *, category: str | None = None, entity: str | None = None, kind: str | None = None
    ) -> int:
        """Drop a tenant's entries, narrowed to a category, a kind, or those naming an entity."""
        self.flush_hits()
        stmt = sa.select(CacheEntryRow.id, CacheEntryRow.kind, CacheEntryRow.category, CacheEntryRow.entities).where(
            CacheEntryRow.tenant == tenant
        )
        if category:
            stmt = stmt.where(CacheEntryRow.category == category)
        if kind:
            stmt = stmt.where(CacheEntryRow.kind == kind)
        # the entity as written and in canonical form: invalidating "checkout-api" drops entries about "checkout"
        needles = {entity.lower(), *entity_values(extract_entities(entity, self._aliases(tenant)))} if entity else set()
        by_partition: dict[str, list[int]] = defaultdict(list)
        with self.store.session() as s:
            for row in s.execute(stmt):
                values = entity_values({k: frozenset(v) for k, v in row.entities.items()})
                if needles and not needles & set(values):
                    continue
                by_partition[_key(tenant, row.kind, row.category)].append(row.id)
        return self._drop(by_partition)

    def expire(self) -> int:
        """Delete expired entries (lookups already ignore them); returns how many."""
        by_partition: dict[str, list[int]] = defaultdict(list)
        stmt = sa.select(CacheEntryRow.id, CacheEntryRow.tenant, CacheEntryRow.kind, CacheEntryRow.category).where(
            CacheEntryRow.expires_at <= time.time()
        )
        with self.store.session() as s:
            for row in s.execute(stmt):
                by_partition[_key(row.tenant, row.kind, row.category)].append(row.id)
        for key, group in by_partition.items():
            self._count(_unkey(key)[2], expirations=len(group))
        return self._drop(by_partition)

    def stats(self, tenant: str | None = None) -> dict[str, Any]:
        self.flush_hits()
        stmt = sa.select(CacheEntryRow.category, CacheEntryRow.kind, sa.func.count()).where(
            CacheEntryRow.expires_at > time.time()
        )
        if tenant:
            stmt = stmt.where(CacheEntryRow.tenant == tenant)
        entries: dict[str, dict[str, int]] = defaultdict(dict)
        with self.store.session() as s:
            for category, kind, n in s.execute(stmt.group_by(CacheEntryRow.category, CacheEntryRow.kind)):
                entries[category][kind] = int(n)
        out: dict[str, Any] = {}
        with self._count_lock:
            for category in sorted(set(self._counters) | set(entries)):
                c = self._counters[category]
                lat = list(c.latency_ms)
                out[category] = {
                    "lookups": c.lookups,
                    "hits": c.hits,
                    "misses": c.misses,
                    "hit_rate": round(c.hits / c.lookups, 4) if c.lookups else None,
                    "verified_rejects": c.verified_rejects,
                    "evictions": c.evictions,
                    "expirations": c.expirations,
                    "entries": entries.get(category, {}),
                    "lookup_ms_p50": _pct(lat, 0.5),
                    "lookup_ms_p99": _pct(lat, 0.99),
                }
        return out
