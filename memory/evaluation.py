"""Calibrate a semantic cache on labelled pairs: does b hit an entry stored for a, and should it?

Used by `opsgraph cache-eval` (users calibrate their own cache) and by bench/cache.py.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.db import Store
from core.errors import UserError
from core.policy import CachePolicy
from core.settings import Settings
from memory.cache import CacheKind, SemanticCache
from memory.embeddings import Embedder
from memory.entities import extract_entities, same_entities

TARGET_PRECISION = 0.97
# never propose below this: a pair that names no entity is judged by its embedding alone, and with this model
# "the site is down" and "the site is slow" are 0.62 apart
MIN_PROPOSED = 0.70


@dataclass
class Pair:
    a: str
    b: str
    category: str
    same: bool


def load_pairs(path: Path) -> list[Pair]:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    pairs = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            pairs.append(Pair(str(raw["a"]), str(raw["b"]), str(raw["category"]), bool(raw["same"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f'{path}:{n}: expected {{"a", "b", "category", "same"}} ({exc})') from exc
    if not pairs:
        raise UserError(f"{path}: no pairs")
    return pairs


def _scores(tp: int, fp: int, fn: int, tn: int) -> dict[str, Any]:
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": round(tp / (tp + fp), 4) if tp + fp else None,
        "recall": round(tp / (tp + fn), 4) if tp + fn else None,
    }


def propose_threshold(sims: np.ndarray, verified: np.ndarray, same: np.ndarray) -> float | None:
    """The lowest threshold whose precision reaches the target (most recall); else the best F1's."""
    best_f1, best_f1_t = -1.0, None
    for t in sorted({t for t in np.round(sims, 4).tolist() if t >= MIN_PROPOSED}):
        hit = (sims >= t) & verified
        tp, fp = int((hit & same).sum()), int((hit & ~same).sum())
        fn = int((~hit & same).sum())
        if tp == 0:
            continue
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        if precision >= TARGET_PRECISION:
            return round(float(t), 4)
        f1 = 2 * precision * recall / (precision + recall)
        if f1 > best_f1:
            best_f1, best_f1_t = f1, round(float(t), 4)
    return best_f1_t


def evaluate(pairs: list[Pair], embedder: Embedder, policy: CachePolicy, *, verify: bool = True) -> dict[str, Any]:
    """Ask a real cache (its own temporary SQLite database) about every pair, and propose thresholds."""
    vectors = embedder.embed([p.a for p in pairs] + [p.b for p in pairs])
    va, vb = vectors[: len(pairs)], vectors[len(pairs) :]
    with tempfile.TemporaryDirectory(prefix="opsgraph-cache-eval-") as tmp:
        store = Store.from_settings(Settings(var_dir=Path(tmp), database_url=""))
        cache = SemanticCache(store, embedder, policy, index_folder=None, verify=verify)
        outcome, latency = [], []
        for i, p in enumerate(pairs):
            tenant = f"eval-{i}"  # one entry per tenant: b can only hit a's entry
            cache.put(tenant, p.category, CacheKind.ANSWER, p.a, {"pair": i}, vector=va[i])
            found = cache.lookup(tenant, p.category, CacheKind.ANSWER, p.b, vector=vb[i])
            outcome.append(found.hit)
            latency.append(found.search_ms)
        store.engine.dispose()
    sims = np.einsum("ij,ij->i", va, vb)
    verified = np.array([(not verify) or same_entities(extract_entities(p.a), extract_entities(p.b))[0] for p in pairs])
    same = np.array([p.same for p in pairs])
    hits = np.array(outcome)
    report: dict[str, Any] = {"categories": {}}
    for category in sorted({p.category for p in pairs}):
        m = np.array([p.category == category for p in pairs])
        h, s = hits[m], same[m]
        report["categories"][category] = {
            **_scores(int((h & s).sum()), int((h & ~s).sum()), int((~h & s).sum()), int((~h & ~s).sum())),
            "threshold": policy.for_category(category).threshold,
            "proposed_threshold": propose_threshold(sims[m], verified[m], s),
            "lookup_ms_p50": round(float(np.median(np.array(latency)[m])), 3),
        }
    report["overall"] = {
        **_scores(
            int((hits & same).sum()), int((hits & ~same).sum()), int((~hits & same).sum()), int((~hits & ~same).sum())
        ),
        "pairs": len(pairs),
        "verifier": verify,
        "lookup_ms_p50": round(float(np.median(latency)), 3),
        "lookup_ms_p99": round(float(np.percentile(latency, 99)), 3),
    }
    return report
