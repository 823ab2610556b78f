"""Approximate search (faiss HNSW) for large partitions. HNSW cannot remove, so removals are tombstones,
filtered at search time and dropped by a rebuild once they pass a share of the index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from memory.index.abstract import VectorIndex

REBUILD_TOMBSTONE_SHARE = 0.2


class HNSWIndex(VectorIndex):
    def __init__(self, dim: int, m: int = 32, ef_search: int = 64) -> None:
        self.dim = dim
        self.m = m
        self.ef_search = ef_search
        self._reset()

    def _reset(self) -> None:
        self._index: Any = faiss.IndexHNSWFlat(self.dim, self.m, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efSearch = self.ef_search
        self._index.hnsw.efConstruction = 80
        self._ids: list[int] = []  # faiss row -> our id
        self._rows: dict[int, int] = {}  # our id -> live faiss row
        self._dead: set[int] = set()  # faiss rows whose id was removed or replaced

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self.remove(ids)
        start = len(self._ids)
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        for offset, i in enumerate(ids.tolist()):
            self._ids.append(int(i))
            self._rows[int(i)] = start + offset

    def remove(self, ids: np.ndarray) -> None:
        for i in np.asarray(ids, dtype=np.int64).tolist():
            row = self._rows.pop(int(i), None)
            if row is not None:
                self._dead.add(row)
        if self._dead and len(self._dead) > REBUILD_TOMBSTONE_SHARE * max(1, len(self._ids)):
            self.rebuild()

    def rebuild(self) -> None:
        live = sorted(self._rows.items(), key=lambda kv: kv[1])
        vectors = np.stack([self._index.reconstruct(row) for _, row in live]) if live else None
        self._reset()
        if vectors is not None:
            self.add(np.array([i for i, _ in live], dtype=np.int64), vectors)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if not self._rows or k <= 0:
            return []
        want = min(len(self._ids), k + len(self._dead))
        sims, rows = self._index.search(np.asarray(vector, dtype=np.float32).reshape(1, -1), want)
        out = []
        for row, sim in zip(rows[0].tolist(), sims[0].tolist(), strict=True):
            if row == -1 or row in self._dead:
                continue
            out.append((self._ids[row], float(sim)))
            if len(out) == k:
                break
        return out

    def __len__(self) -> int:
        return len(self._rows)

    def save(self, path: Path) -> None:
        faiss.write_index(self._index, str(path))
        state = {"ids": self._ids, "rows": list(self._rows.items()), "dead": sorted(self._dead)}
        path.with_suffix(".ids.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, path: Path, dim: int) -> HNSWIndex:
        index = cls(dim)
        index._index = faiss.read_index(str(path))
        if index._index.d != dim:
            raise ValueError(f"{path}: dimension {index._index.d}, expected {dim}")
        index._index.hnsw.efSearch = index.ef_search
        state = json.loads(path.with_suffix(".ids.json").read_text())
        index._ids = [int(i) for i in state["ids"]]
        index._rows = {int(i): int(r) for i, r in state["rows"]}
        index._dead = {int(r) for r in state["dead"]}
        return index
