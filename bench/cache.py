"""Semantic cache figures: lookup latency at 1k/10k/100k entries (excluding and including the embedding),
exact vs HNSW search at each size, precision/recall per category against one global threshold, and the
memory the embedding model costs a process.

Run: make bench  (or .venv/bin/python -m bench.cache). Prints and writes bench/results/cache.json.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import sqlalchemy as sa

from core.db import Store
from core.policy import CachePolicy, CategoryCachePolicy
from core.settings import Settings
from memory._tables import CacheEntryRow, init_memory_tables
from memory.cache import CacheKind, SemanticCache
from memory.embeddings import DIM, MiniLMEmbedder
from memory.evaluation import evaluate, load_pairs
from memory.index import FlatIndex, HNSWIndex

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAIRS = ROOT / "tests" / "data" / "cache_pairs.jsonl"


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fill(store: Store, n: int, vectors: np.ndarray) -> None:
    now = time.time()
    rows = [
        {
            "tenant": "bench", "kind": "answer", "category": "health", "text": f"is service-{i}-api ok",
            "entities": {"services": [f"service-{i}-api"]}, "payload": {"i": i},
            "vector": vectors[i].tobytes(), "source_task": None, "created_at": now,
            "expires_at": now + 86_400, "last_hit_at": now, "hits": 0,
        }
        for i in range(n)
    ]  # fmt: skip
    with store.session() as s:
        for start in range(0, n, 5000):
            s.execute(sa.insert(CacheEntryRow), rows[start : start + 5000])


def search_latency(kind: type, vectors: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    index = kind(DIM)
    started = time.perf_counter()
    index.add(np.arange(len(vectors), dtype=np.int64), vectors)
    build_s = time.perf_counter() - started
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, 5)
        times.append((time.perf_counter() - t) * 1000)
    return {"build_s": round(build_s, 2), "p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}


def lookup_latency(embedder: MiniLMEmbedder, sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store.from_settings(Settings(var_dir=Path(tmp)))
            init_memory_tables(store.engine)
            vectors = unit(n, seed=n)
            fill(store, n, vectors)
            policy = CachePolicy(categories={"health": CategoryCachePolicy(threshold=0.9)})
            cache = SemanticCache(store, embedder, policy, index_folder=None)
            t = time.perf_counter()
            cache.lookup("bench", "health", CacheKind.ANSWER, "warm", vectors[0])  # loads the partition
            load_s = time.perf_counter() - t
            rng = np.random.default_rng(1)
            hits = vectors[rng.integers(0, n, 200)]  # a stored request asked again: candidate, DB row, verifier
            misses = unit(200, seed=7)  # nothing close: index search only
            excl, hit_count = [], 0
            for q in np.concatenate([hits, misses]):
                t = time.perf_counter()
                r = cache.lookup("bench", "health", CacheKind.ANSWER, "is service-1-api ok", q)
                excl.append((time.perf_counter() - t) * 1000)
                hit_count += r.hit
            incl = []
            for i in range(100):
                t = time.perf_counter()
                cache.lookup("bench", "health", CacheKind.ANSWER, f"is service-{i}-api ok")
                incl.append((time.perf_counter() - t) * 1000)
            search = {"flat": search_latency(FlatIndex, vectors, misses[:100])}
            if n >= 10_000:
                search["hnsw"] = search_latency(HNSWIndex, vectors, misses[:100])
            out[str(n)] = {
                "index": type(cache.index._parts[next(iter(cache.index._parts))]).__name__,
                "partition_load_s": round(load_s, 2),
                "excluding_embedding_ms": {"p50": pct(excl, 50), "p99": pct(excl, 99)},
                "including_embedding_ms": {"p50": pct(incl, 50), "p99": pct(incl, 99)},
                "search_only": search,
            }
            store.engine.dispose()
        print(
            f"{n:>7} entries: lookup excl. embedding p50 {out[str(n)]['excluding_embedding_ms']['p50']} ms "
            f"p99 {out[str(n)]['excluding_embedding_ms']['p99']} ms; incl. p50 "
            f"{out[str(n)]['including_embedding_ms']['p50']} ms p99 {out[str(n)]['including_embedding_ms']['p99']} ms "
            f"({out[str(n)]['index']}); search only {search}"
        )
    return out


def global_vs_category(embedder: MiniLMEmbedder) -> dict[str, Any]:
    pairs = load_pairs(PAIRS)
    ours = evaluate(pairs, embedder, Settings().cache_policy, verify=True)
    no_verifier = evaluate(pairs, embedder, Settings().cache_policy, verify=False)
    target_recall = ours["overall"]["recall"]
    sweep = []
    for t in np.arange(0.70, 1.0, 0.01):
        flat = CachePolicy(categories={}, default=CategoryCachePolicy(threshold=round(float(t), 2)))
        r = evaluate(pairs, embedder, flat, verify=False)["overall"]
        sweep.append({"threshold": round(float(t), 2), "precision": r["precision"], "recall": r["recall"]})
    at_recall = [s for s in sweep if (s["recall"] or 0) >= target_recall]
    best_global = max(at_recall, key=lambda s: s["precision"] or 0) if at_recall else None
    reach_97 = [s for s in sweep if (s["precision"] or 0) >= 0.97]
    return {
        "pairs": len(pairs),
        "category_aware_with_verifier": ours,
        "category_aware_without_verifier": no_verifier["overall"],
        "global_threshold_sweep_without_verifier": sweep,
        "best_global_at_same_recall": best_global,
        "best_global_recall_at_precision_0.97": max((s["recall"] or 0) for s in reach_97) if reach_97 else None,
        "note": "thresholds were chosen on this same labelled set (in-sample)",
    }


def main() -> None:
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    embedder = MiniLMEmbedder(device="cpu", memo_size=0)  # every lookup pays its embedding
    t = time.perf_counter()
    embedder.load()
    embedder.embed(["warm up"])
    load_s = time.perf_counter() - t
    rss_model = proc.memory_info().rss - rss_before
    print(f"model: loaded in {load_s:.1f} s, +{rss_model / 2**20:.0f} MiB RSS")
    latency = lookup_latency(embedder, [1_000, 10_000, 100_000])
    quality = global_vs_category(embedder)
    o = quality["category_aware_with_verifier"]["overall"]
    g = quality["best_global_at_same_recall"]
    print(
        f"category-aware + verifier: precision {o['precision']} recall {o['recall']}; "
        f"without verifier: precision {quality['category_aware_without_verifier']['precision']}; "
        f"best global threshold at that recall: {g}; best global recall at precision>=0.97: "
        f"{quality['best_global_recall_at_precision_0.97']}"
    )
    result = {
        "model": {"load_s": round(load_s, 2), "rss_mib": round(rss_model / 2**20, 1)},
        "lookup": latency,
        "quality": quality,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cache.json").write_text(json.dumps(result, indent=2))
    print(f"written to {RESULTS / 'cache.json'}")


if __name__ == "__main__":
    main()
