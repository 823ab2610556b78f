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
    kind: str = ""  # paraphrase | negative | change (optional in a user's file)


def load_pairs(path: Path) -> list[Pair]:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    pairs = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            kind = str(raw.get("kind") or ("paraphrase" if raw["same"] else "negative"))
            pairs.append(Pair(str(raw["a"]), str(raw["b"]), str(raw["category"]), bool(raw["same"]), kind))
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


def _groups(pairs: list[Pair], k: int) -> np.ndarray:
    """A fold per pair such that pairs sharing a request text never sit in two folds: a test fold's texts are
    never seen while its threshold is chosen (connected components of the texts, spread over k folds)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        parent[find(p.a)] = find(p.b)
    roots = sorted({find(p.a) for p in pairs}, key=lambda r: sum(1 for p in pairs if find(p.a) == r), reverse=True)
    load = [0] * k
    fold_of: dict[str, int] = {}
    for r in roots:  # biggest components first, each to the lightest fold
        size = sum(1 for p in pairs if find(p.a) == r)
        f = load.index(min(load))
        fold_of[r] = f
        load[f] += size
    return np.array([fold_of[find(p.a)] for p in pairs])


def _choose(
    sims: np.ndarray, verified: np.ndarray, same: np.ndarray, cats: np.ndarray, fallback: float
) -> dict[str, float]:
    """Per category the threshold propose_threshold gives on these pairs; a category without one keeps fallback."""
    chosen = {}
    for c in sorted(set(cats.tolist())):
        m = cats == c
        t = propose_threshold(sims[m], verified[m], same[m]) if same[m].any() else None
        chosen[c] = t if t is not None else fallback
    return chosen


def cross_validate(
    pairs: list[Pair],
    sims: np.ndarray,
    verified: np.ndarray,
    *,
    k: int = 5,
    per_category: bool = True,
    fallback: float = 0.9,
) -> dict[str, Any]:
    """Out-of-fold figures: each fold's thresholds are chosen on the other folds only, then applied to it."""
    same = np.array([p.same for p in pairs])
    cats = np.array([p.category if per_category else "all" for p in pairs])
    folds = _groups(pairs, k)
    hits = np.zeros(len(pairs), dtype=bool)
    chosen_per_fold = []
    for f in range(k):
        train, test = folds != f, folds == f
        chosen = _choose(sims[train], verified[train], same[train], cats[train], fallback)
        chosen_per_fold.append(chosen)
        t = np.array([chosen.get(c, fallback) for c in cats[test]])
        hits[test] = (sims[test] >= t) & verified[test]
    return {"hits": hits, "thresholds_per_fold": chosen_per_fold}


def _table(pairs: list[Pair], hits: np.ndarray, key: Any) -> dict[str, dict[str, Any]]:
    same = np.array([p.same for p in pairs])
    out = {}
    for name in sorted({key(p) for p in pairs}):
        m = np.array([key(p) == name for p in pairs])
        h, s = hits[m], same[m]
        out[name] = _scores(int((h & s).sum()), int((h & ~s).sum()), int((~h & s).sum()), int((~h & ~s).sum()))
    return out


def _overall(pairs: list[Pair], hits: np.ndarray) -> dict[str, Any]:
    return _table(pairs, hits, lambda p: "overall")["overall"]


def evaluate(
    pairs: list[Pair], embedder: Embedder, policy: CachePolicy, *, verify: bool = True, folds: int = 5
) -> dict[str, Any]:
    """Ask a real cache (its own temporary SQLite database) about every pair with the configured policy, and
    cross-validate thresholds: out-of-fold precision and recall per category and against one global threshold
    (the in-sample figures only beside them)."""
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
    cats = np.array([p.category for p in pairs])
    k = max(2, min(folds, len({p.a for p in pairs})))
    oof = cross_validate(pairs, sims, verified, k=k, per_category=True)
    oof_global = cross_validate(pairs, sims, verified, k=k, per_category=False)
    in_sample = _choose(sims, verified, same, cats, policy.default.threshold)
    in_hits = sims >= np.array([in_sample[c] for c in cats])
    in_hits &= verified
    oof_table = _table(pairs, oof["hits"], lambda p: p.category)
    in_table = _table(pairs, in_hits, lambda p: p.category)
    configured = _table(pairs, hits, lambda p: p.category)
    report: dict[str, Any] = {"categories": {}}
    for category in sorted({p.category for p in pairs}):
        m = cats == category
        report["categories"][category] = {
            **oof_table[category],
            "in_sample": {k2: in_table[category][k2] for k2 in ("precision", "recall")},
            "configured": configured[category],
            "threshold": policy.for_category(category).threshold,
            "proposed_threshold": propose_threshold(sims[m], verified[m], same[m]) if same[m].any() else None,
            "lookup_ms_p50": round(float(np.median(np.array(latency)[m])), 3),
        }
    report["overall"] = {
        **_overall(pairs, oof["hits"]),
        "in_sample": {k2: _overall(pairs, in_hits)[k2] for k2 in ("precision", "recall")},
        "configured": _overall(pairs, hits),
        "pairs": len(pairs),
        "folds": k,
        "verifier": verify,
        "lookup_ms_p50": round(float(np.median(latency)), 3),
        "lookup_ms_p99": round(float(np.percentile(latency, 99)), 3),
    }
    report["global_threshold"] = {
        **_overall(pairs, oof_global["hits"]),
        "thresholds_per_fold": [t["all"] for t in oof_global["thresholds_per_fold"]],
    }
    report["by_kind"] = _table(pairs, oof["hits"], lambda p: p.kind)
    report["thresholds_per_fold"] = oof["thresholds_per_fold"]
    return report
