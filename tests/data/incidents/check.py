"""Checks the incident corpus: every JSON parses (unless listed as deliberately malformed), every answer.yaml
has the fields with valid values, and the counts per split. Run: python tests/data/incidents/check.py"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent
CATEGORIES = {
    "healthy",
    "resource_exhaustion",
    "configuration_error",
    "code_defect",
    "dependency_failure",
    "infrastructure",
    "data_quality",
    "unknown",
}
DIFFICULTIES = {"easy", "medium", "hard"}
# files that are deliberately malformed (truncated exports): the investigation must report them and go on
EXPECTED_MALFORMED = {
    "dev/unknown-quote-api-latency-unrelated-bundle/quote-api-traces.json",
    "dev/k8s-hpa-at-max-pricing-latency/prom/hpa-describe.json",
    "dev/dev3-32-loyalty/pods-loyalty.json",
    "test/db-orders-replica-slot-wal-full/cw-export-2.json",
    "test/k8s-coredns-oomkilled-dns-timeouts/kubectl-get-events-kube-system.json",
}


def read_text(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def check_scenario(folder: Path) -> list[str]:
    problems: list[str] = []
    answer_path = folder / "answer.yaml"
    if not answer_path.is_file():
        return [f"{folder}: no answer.yaml"]
    answer = yaml.safe_load(answer_path.read_text())
    for key in ("category", "must_contain", "must_not", "difficulty", "domains", "summary"):
        if key not in answer:
            problems.append(f"{folder.name}: answer.yaml lacks {key}")
    if answer.get("category") not in CATEGORIES:
        problems.append(f"{folder.name}: bad category {answer.get('category')!r}")
    if answer.get("difficulty") not in DIFFICULTIES:
        problems.append(f"{folder.name}: bad difficulty {answer.get('difficulty')!r}")
    for bad in answer.get("must_not", []):
        if bad not in CATEGORIES or bad == answer.get("category"):
            problems.append(f"{folder.name}: bad must_not {bad!r}")
    if not 1 <= len(answer.get("must_contain", [])) <= 4:
        problems.append(f"{folder.name}: must_contain needs 1-4 words")
    evidence = [p for p in folder.rglob("*") if p.is_file() and p.name != "answer.yaml"]
    if not evidence:
        problems.append(f"{folder.name}: no evidence files")
    corpus = "\n".join(read_text(p) for p in evidence).lower()
    for word in answer.get("must_contain", []):
        # an unknown answer names what is missing, which by definition is not in the evidence
        if word.lower() not in corpus and answer.get("category") != "unknown":
            problems.append(f"{folder.name}: must_contain word {word!r} appears in no evidence file")
    for path in evidence:
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix == ".json":
            try:
                json.loads(path.read_text())
                if rel in EXPECTED_MALFORMED:
                    problems.append(f"{rel}: meant to be malformed but parses")
            except ValueError as exc:
                if rel not in EXPECTED_MALFORMED:
                    problems.append(f"{rel}: {exc}")
    return problems


def main() -> int:
    problems: list[str] = []
    table: dict[str, Counter[str]] = {}
    for split in ("dev", "test"):
        counts: Counter[str] = Counter()
        for folder in sorted((ROOT / split).iterdir()) if (ROOT / split).is_dir() else []:
            problems += check_scenario(folder)
            answer = yaml.safe_load((folder / "answer.yaml").read_text()) if (folder / "answer.yaml").is_file() else {}
            counts["scenarios"] += 1
            counts[answer.get("category", "?")] += 1
            counts[answer.get("difficulty", "?")] += 1
        table[split] = counts
    for split, counts in table.items():
        print(split, dict(sorted(counts.items())))
    for p in problems:
        print("PROBLEM", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
