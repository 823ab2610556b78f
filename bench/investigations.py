"""Investigation figures: accuracy on the incident corpus (dev and the held-out test split), keyword recall,
forbidden categories, time per investigation in-process, and `opsgraph investigate` wall time with start-up.

Run: make bench  (or .venv/bin/python -m bench.investigations). Prints and writes bench/results/investigations.json.
The test split is only ever measured here: no rule is tuned on it (tests/data/incidents/README.md).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from diagnosis.evaluation import evaluate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CORPUS = ROOT / "tests" / "data" / "incidents"


def cli_wall_times(bundle: Path, runs: int = 5) -> list[float]:
    """`opsgraph investigate BUNDLE --json` from a fresh interpreter: start-up included."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "services.cli", "investigate", str(bundle), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"opsgraph investigate failed: {done.stderr.strip()[:300]}")
    return times


def main() -> None:
    from services.cli import _investigate_bundle  # the CLI's own path, so the figures are what a user gets

    splits: dict[str, Any] = {}
    for split in ("dev", "test"):
        report = evaluate(CORPUS / split, _investigate_bundle)
        overall = report["overall"]
        splits[split] = {
            "overall": overall,
            "per_category": report["per_category"],
            "per_difficulty": report["per_difficulty"],
            "failed": [r["name"] for r in report["results"] if not r["passed"]],
        }
    sample = next(p.parent for p in sorted((CORPUS / "dev").glob("*/answer.yaml")))
    wall = cli_wall_times(sample)
    result = {
        "splits": splits,
        "cli_wall_s": {"runs": len(wall), "p50": round(statistics.median(wall), 3), "max": round(max(wall), 3)},
        "cli_bundle": sample.name,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "investigations.json").write_text(json.dumps(result, indent=2, default=str))
    for split, r in splits.items():
        o = r["overall"]
        print(
            f"{split}: {o['passed']}/{o['scenarios']} right ({o['accuracy']}), keyword recall "
            f"{o['keyword_recall']}, forbidden {o['forbidden']}, per investigation p50 {o['seconds_p50']} s "
            f"p95 {o['seconds_p95']} s, analyzer failures {o['analyzer_failures']}"
        )
    print(f"opsgraph investigate, wall time with start-up: p50 {result['cli_wall_s']['p50']} s over {len(wall)} runs")
    print(f"written to {RESULTS / 'investigations.json'}")


if __name__ == "__main__":
    main()
