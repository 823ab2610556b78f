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
    assert (health["tp"], health["fp"], health["fn"], health["tn"]) == (1, 0, 0, 2)
    assert set(health) >= {"tp", "fp", "fn", "tn", "precision", "recall", "threshold"}
    assert report["categories"]["diagnose"]["tn"] == 1  # 0.98 similar, but another time: the verifier says no
    assert report["overall"]["pairs"] == 4 and report["overall"]["precision"] == 1.0


def test_cache_eval_errors_are_one_line(tmp_path: Path) -> None:
    r = run(str(tmp_path / "missing.jsonl"))
    assert r.returncode == 1 and r.stderr.strip() == f"error: {tmp_path / 'missing.jsonl'}: no such file"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "x"}\n')
    r = run(str(bad))
    assert r.returncode == 1 and r.stderr.startswith(f"error: {bad}:1: expected") and len(r.stderr.splitlines()) == 1
