"""The vector index contract: inner product on normalised vectors (cosine), integer ids, removal, persistence."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np


class VectorIndex(ABC):
    dim: int

    @abstractmethod
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under int64 ids; an id already present is replaced."""

    @abstractmethod
    def remove(self, ids: np.ndarray) -> None:
        """Remove ids; unknown ids are ignored."""

    @abstractmethod
    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k nearest live ids with their similarity, best first."""

    @abstractmethod
    def __len__(self) -> int:
        """Live (not removed) vectors."""

    @abstractmethod
    def save(self, path: Path) -> None: ...

    @classmethod
    @abstractmethod
    def load(cls, path: Path, dim: int) -> VectorIndex: ...
