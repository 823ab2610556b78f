from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness import ROOT


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "cache-eval", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cache_eval_reports_per_category_counts_and_thresholds(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        {"a": "is redis ok", "b": "is redis healthy?", "category": "health", "same": True},
        {"a": "is redis ok", "b": "is postgres ok", "category": "health", "same": False},
        {"a": "check nginx on 10.0.0.5", "b": "check nginx on 10.0.0.6", "category": "health", "same": False},
        {"a": "why is orders-db slow since 08:00", "b": "why is orders-db slow since 09:00",
         "category": "diagnose", "same": False},
    ]  # fmt: skip
    pairs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = run(str(pairs), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    health = report["categories"]["health"]
    conf = health["configured"]  # what the configured policy does with these pairs
    assert (conf["tp"], conf["fp"], conf["fn"], conf["tn"]) == (1, 0, 0, 2)
    # out of fold: the one paraphrase's threshold comes from folds without a health paraphrase (the default)
    assert set(health) >= {"tp", "fp", "fn", "tn", "precision", "recall", "threshold", "in_sample", "configured"}
    assert health["fp"] == 0 and report["global_threshold"]["fp"] == 0
    assert report["categories"]["diagnose"]["tn"] == 1  # 0.98 similar, but another time: the verifier says no
    assert report["overall"]["pairs"] == 4 and report["overall"]["configured"]["precision"] == 1.0


def test_cache_eval_errors_are_one_line(tmp_path: Path) -> None:
    r = run(str(tmp_path / "missing.jsonl"))
    assert r.returncode == 1 and r.stderr.strip() == f"error: {tmp_path / 'missing.jsonl'}: no such file"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "x"}\n')
    r = run(str(bad))
    assert r.returncode == 1 and r.stderr.startswith(f"error: {bad}:1: expected") and len(r.stderr.splitlines()) == 1


def test_cross_validation_never_chooses_a_threshold_with_its_test_folds_pairs() -> None:
    import numpy as np

    from memory.evaluation import Pair, _choose, _groups, cross_validate

    pairs, sims = [], []
    for i in range(40):  # 40 families: a paraphrase at 0.80 + i/1000 and a near miss just below it
        pairs.append(Pair(f"request {i}", f"request {i} again", "health", True))
        sims.append(0.80 + i / 1000)
        pairs.append(Pair(f"request {i}", f"other request {i}", "health", False))
        sims.append(0.79 + i / 1000)
    sims[1] = 0.832  # one near miss that looks like a paraphrase: it sets the threshold of every fold it trains
    sims_a = np.array(sims)
    verified = np.ones(len(pairs), dtype=bool)
    same = np.array([p.same for p in pairs])
    cats = np.array([p.category for p in pairs])
    folds = _groups(pairs, 5)
    for f in range(5):  # a request text never sits in two folds
        inside = {t for p, g in zip(pairs, folds, strict=True) if g == f for t in (p.a, p.b)}
        outside = {t for p, g in zip(pairs, folds, strict=True) if g != f for t in (p.a, p.b)}
        assert not inside & outside
    result = cross_validate(pairs, sims_a, verified, k=5)
    for f, chosen in enumerate(result["thresholds_per_fold"]):
        train = folds != f
        assert chosen == _choose(sims_a[train], verified[train], same[train], cats[train], 0.9)
        if f == folds[1]:  # its own fold never sees it
            assert chosen["health"] <= 0.832
        else:
            assert chosen["health"] > 0.832
