"""The in-memory twin: exact search with numpy. The reference every other index is checked against."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memory.index.abstract import VectorIndex


class NumpyIndex(VectorIndex):
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._vecs: dict[int, np.ndarray] = {}

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        for i, v in zip(ids.tolist(), vectors, strict=True):
            self._vecs[int(i)] = np.asarray(v, dtype=np.float32)

    def remove(self, ids: np.ndarray) -> None:
        for i in ids.tolist():
            self._vecs.pop(int(i), None)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if not self._vecs or k <= 0:
            return []
        ids = np.fromiter(self._vecs.keys(), dtype=np.int64)
        mat = np.stack(list(self._vecs.values()))
        sims = mat @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-sims)[:k]
        return [(int(ids[j]), float(sims[j])) for j in top]

    def __len__(self) -> int:
        return len(self._vecs)

    def save(self, path: Path) -> None:
        ids = np.fromiter(self._vecs.keys(), dtype=np.int64, count=len(self._vecs))
        vecs = np.stack(list(self._vecs.values())) if self._vecs else np.zeros((0, self.dim), np.float32)
        with path.open("wb") as fh:
            np.savez(fh, ids=ids, vecs=vecs)

    @classmethod
    def load(cls, path: Path, dim: int) -> NumpyIndex:
        index = cls(dim)
        data = np.load(path, allow_pickle=False)
        index.add(data["ids"], data["vecs"])
        return index
