"""Exact inner-product search (faiss IndexFlatIP behind an id map): the choice while a partition is small."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

from memory.index.abstract import VectorIndex


class FlatIndex(VectorIndex):
    def __init__(self, dim: int, index: faiss.Index | None = None) -> None:
        self.dim = dim
        # faiss' type stubs take selectors where the SWIG wrapper also takes id arrays
        self._index: Any = index if index is not None else faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self._index.remove_ids(ids)  # replace, never duplicate
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)

    def remove(self, ids: np.ndarray) -> None:
        self._index.remove_ids(np.asarray(ids, dtype=np.int64))

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if self._index.ntotal == 0 or k <= 0:
            return []
        sims, ids = self._index.search(np.asarray(vector, dtype=np.float32).reshape(1, -1), min(k, self._index.ntotal))
        return [(int(i), float(s)) for i, s in zip(ids[0], sims[0], strict=True) if i != -1]

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def save(self, path: Path) -> None:
        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, dim: int) -> FlatIndex:
        index = faiss.read_index(str(path))
        if index.d != dim:
            raise ValueError(f"{path}: dimension {index.d}, expected {dim}")
        return cls(dim, index)
