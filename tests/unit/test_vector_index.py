"""One conformance suite every vector index passes: the numpy twin, FAISS flat, FAISS HNSW."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from memory.index import FlatIndex, HNSWIndex, NumpyIndex, PartitionedIndex, VectorIndex

DIM = 32
KINDS = [NumpyIndex, FlatIndex, HNSWIndex]


def unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(params=KINDS, ids=lambda k: k.__name__)
def kind(request: pytest.FixtureRequest) -> type[VectorIndex]:
    return request.param  # type: ignore[no-any-return]


def test_nearest_neighbours_match_the_exact_reference(kind: type[VectorIndex]) -> None:
    vecs = unit(1000)
    ids = np.arange(1000, 2000, dtype=np.int64)
    index, ref = kind(DIM), NumpyIndex(DIM)
    index.add(ids, vecs)
    ref.add(ids, vecs)
    queries = unit(50, seed=1)
    recall = np.mean(
        [len({i for i, _ in index.search(q, 10)} & {i for i, _ in ref.search(q, 10)}) / 10 for q in queries]
    )
    assert recall >= (1.0 if kind is not HNSWIndex else 0.95)
    top_id, top_sim = index.search(vecs[7], 1)[0]
    assert top_id == 1007 and top_sim == pytest.approx(1.0, abs=1e-5)
    assert len(index) == 1000


def test_add_replaces_and_remove_forgets(kind: type[VectorIndex]) -> None:
    vecs = unit(20)
    index = kind(DIM)
    index.add(np.arange(20, dtype=np.int64), vecs)
    index.add(np.array([3], dtype=np.int64), vecs[15:16])  # id 3 now holds vector 15
    assert len(index) == 20
    hits = index.search(vecs[15], 2)
    assert {i for i, _ in hits} == {3, 15}
    index.remove(np.array([3, 15, 999], dtype=np.int64))
    assert len(index) == 18
    assert all(i not in (3, 15) for i, _ in index.search(vecs[15], 18))
    assert index.search(vecs[0], 0) == []
    assert kind(DIM).search(vecs[0], 5) == []


def test_save_and_load_round_trip(kind: type[VectorIndex], tmp_path: Path) -> None:
    vecs = unit(50)
    index = kind(DIM)
    index.add(np.arange(50, dtype=np.int64), vecs)
    index.remove(np.array([4], dtype=np.int64))
    path = tmp_path / "part.idx"
    index.save(path)
    again = kind.load(path, DIM)
    assert len(again) == 49
    assert again.search(vecs[9], 1)[0][0] == 9
    assert all(i != 4 for i, _ in again.search(vecs[4], 49))


def test_hnsw_rebuilds_once_tombstones_pile_up() -> None:
    vecs = unit(100)
    index = HNSWIndex(DIM)
    index.add(np.arange(100, dtype=np.int64), vecs)
    index.remove(np.arange(0, 30, dtype=np.int64))
    assert len(index._dead) == 0 and len(index._ids) == 70  # rebuilt without the dead rows
    assert index.search(vecs[50], 1)[0][0] == 50


def partitioned(
    tmp_path: Path, rows: dict[str, tuple[np.ndarray, np.ndarray]], hnsw_above: int = 1000
) -> PartitionedIndex:
    empty = (np.zeros(0, np.int64), np.zeros((0, DIM), np.float32))
    return PartitionedIndex(DIM, tmp_path, loader=lambda key: rows.get(key, empty), hnsw_above=hnsw_above)


def test_a_missing_or_corrupt_partition_file_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    vecs = unit(30)
    db = {"t1/cache/health": (np.arange(30, dtype=np.int64), vecs)}
    idx = partitioned(tmp_path, db)
    assert idx.search("t1/cache/health", vecs[3], 1)[0][0] == 3
    idx.save()
    files = list(tmp_path.glob("*.faiss"))
    assert len(files) == 1
    files[0].write_bytes(b"not a faiss index")
    again = partitioned(tmp_path, db)
    assert again.search("t1/cache/health", vecs[3], 1)[0][0] == 3  # corrupt file: rebuilt
    files[0].unlink()
    assert partitioned(tmp_path, db).size("t1/cache/health") == 30  # missing file: rebuilt


def test_partitions_are_isolated_and_grow_into_hnsw(tmp_path: Path) -> None:
    vecs = unit(60)
    db: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    idx = partitioned(tmp_path, db, hnsw_above=40)
    idx.add("tenant-a", np.arange(30, dtype=np.int64), vecs[:30])
    assert idx.search("tenant-b", vecs[0], 5) == []
    db["tenant-a"] = (np.arange(50, dtype=np.int64), vecs[:50])  # the database holds what was added
    idx.add("tenant-a", np.arange(30, 50, dtype=np.int64), vecs[30:50])
    assert isinstance(idx._parts["tenant-a"], HNSWIndex)
    assert idx.search("tenant-a", vecs[45], 1)[0][0] == 45


def test_concurrent_readers_and_one_writer(tmp_path: Path) -> None:
    vecs = unit(400)
    idx = partitioned(tmp_path, {})
    idx.add("p", np.arange(200, dtype=np.int64), vecs[:200])
    errors: list[Exception] = []

    def reader() -> None:
        try:
            for j in range(200):
                hit = idx.search("p", vecs[j % 200], 1)
                assert hit and hit[0][0] == j % 200
        except Exception as exc:  # surfaced below
            errors.append(exc)

    def writer() -> None:
        for j in range(200, 400):
            idx.add("p", np.array([j], dtype=np.int64), vecs[j : j + 1])

    threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and idx.size("p") == 400
