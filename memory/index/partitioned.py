"""Partitions (tenant x layer x category, or any key) of vector indexes: exact while small, HNSW above a size,
one file each beside the database, rebuilt from the database rows when a file is missing or corrupt.

Safe under concurrent readers and one writer: searches share a read lock; writes take it exclusively.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from memory.index.abstract import VectorIndex
from memory.index.faiss_flat import FlatIndex
from memory.index.faiss_hnsw import HNSWIndex

log = structlog.get_logger(__name__)

# measured by bench/cache.py on this 2-core CPU: exact search of 384-d vectors takes 0.08 ms at 1k, 1.0 ms at
# 10k and 19 ms at 100k; HNSW (M=32, ef 64) 0.3 ms at 10k and 1.0 ms at 100k. Exact stays under ~0.5 ms to ~4k
HNSW_ABOVE = 4_000

Loader = Callable[[str], tuple[np.ndarray, np.ndarray]]  # partition key -> (ids, vectors) from the database


def arrays_from_rows(rows: Sequence[Any], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(id, float32 vector bytes) database rows as the (ids, vectors) arrays a partition is built from."""
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    if not rows:
        return ids, np.zeros((0, dim), dtype=np.float32)
    return ids, np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])


class RWLock:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class PartitionedIndex:
    def __init__(self, dim: int, folder: Path | None, loader: Loader, hnsw_above: int = HNSW_ABOVE) -> None:
        self.dim = dim
        self.folder = folder
        self.loader = loader
        self.hnsw_above = hnsw_above
        self._parts: dict[str, VectorIndex] = {}
        self._lock = RWLock()

    def _file(self, key: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / (hashlib.sha1(key.encode()).hexdigest()[:20] + ".faiss")

    def _kind_for(self, size: int) -> type[FlatIndex] | type[HNSWIndex]:
        return HNSWIndex if size > self.hnsw_above else FlatIndex

    def _open(self, key: str) -> VectorIndex:
        """The partition, from its file, else rebuilt from the database (a missing or corrupt file heals)."""
        part = self._parts.get(key)
        if part is not None:
            return part
        path = self._file(key)
        if path is not None and path.exists():
            # an HNSW file has its id map beside it; a flat file carries its ids inside
            kinds = (HNSWIndex,) if path.with_suffix(".ids.json").exists() else (FlatIndex,)
            for kind in kinds:
                try:
                    part = kind.load(path, self.dim)
                    break
                except Exception:
                    continue
            if part is None:
                log.warning("index file unreadable; rebuilding from the database", partition=key, path=str(path))
        if part is None:
            ids, vecs = self.loader(key)
            part = self._kind_for(len(ids))(self.dim)
            if len(ids):
                part.add(ids, vecs)
        self._parts[key] = part
        return part

    def search(self, key: str, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        with self._lock.read():
            part = self._parts.get(key)
        if part is None:
            with self._lock.write():
                part = self._open(key)
        with self._lock.read():
            return part.search(vector, k)

    def add(self, key: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        with self._lock.write():
            part = self._open(key)
            part.add(ids, vectors)
            if isinstance(part, FlatIndex) and len(part) > self.hnsw_above:
                self._parts[key] = self._upgrade(key)

    def _upgrade(self, key: str) -> VectorIndex:
        ids, vecs = self.loader(key)
        hnsw = HNSWIndex(self.dim)
        hnsw.add(ids, vecs)
        return hnsw

    def remove(self, key: str, ids: np.ndarray) -> None:
        with self._lock.write():
            self._open(key).remove(ids)

    def drop(self, key: str | None = None) -> None:
        """Forget partitions in memory (all, or one); the next use reloads them from the database."""
        with self._lock.write():
            keys = list(self._parts) if key is None else [key]
            for k in keys:
                self._parts.pop(k, None)
                path = self._file(k)
                if path is not None:
                    path.unlink(missing_ok=True)
                    path.with_suffix(".ids.json").unlink(missing_ok=True)

    def size(self, key: str) -> int:
        with self._lock.write():
            return len(self._open(key))

    def save(self) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._lock.read():
            for key, part in self._parts.items():
                path = self._file(key)
                assert path is not None
                tmp = path.with_suffix(".tmp")
                part.save(tmp)
                tmp.replace(path)  # readers of the folder never see half a file
                side = tmp.with_suffix(".ids.json")
                if side.exists():
                    side.replace(path.with_suffix(".ids.json"))
