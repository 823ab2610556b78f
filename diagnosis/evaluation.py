"""diagnose-eval: run every scenario of an incident corpus and score the diagnoses.

A scenario is a folder with `answer.yaml` (category, must_contain, must_not, difficulty, domains, question?,
summary) and its evidence bundle: the folder's `bundle/` (a folder, bundle.tar.gz or bundle.zip) when there is
one, else the folder itself (answer.yaml is then not evidence and never shown to the investigation as such).

Scores:
- a scenario passes when the category is the expected one (accuracy = passed / scenarios);
- keyword recall: must_contain words found, case-insensitively, in root_cause + causal_chain, over all words;
- forbidden: the category given is one the scenario's must_not lists (should be 0);
- time per investigation, p50 and p95 (in-process, loading the bundle included);
- analyzer failures: scenarios where an analyzer raised (the investigation goes on without its findings, so a
  rule's bug would otherwise read as "the rule did not apply"; should be 0).
Grouped overall, per expected category, per difficulty, and per split (the first folder under DIR when DIR holds
dev/ and test/, or DIR's own name when it is one of them).

Pure: the investigation is a callable given by the caller; this module reads only the answer files.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from diagnosis.model import Category, Diagnosis

ANSWER_FILE = "answer.yaml"
SPLITS = ("dev", "test")
# investigate(bundle, question, exclude=paths inside the bundle that are not evidence)
Investigate = Callable[..., Diagnosis]


class CorpusError(ValueError):
    """The corpus folder or an answer file cannot be used."""


@dataclass
class Expected:
    category: Category
    must_contain: list[str] = field(default_factory=list)
    must_not: list[Category] = field(default_factory=list)
    difficulty: str = "unknown"
    domains: list[str] = field(default_factory=list)
    question: str | None = None
    summary: str = ""


@dataclass
class Scenario:
    name: str  # the path under DIR: "test/pg-idle-in-transaction"
    split: str  # dev | test | "" (a corpus without splits)
    path: Path  # the scenario folder
    bundle: Path  # what load_bundle reads
    expected: Expected
    exclude: tuple[str, ...] = ()  # the answer file, when the bundle is the scenario folder itself


@dataclass
class ScenarioResult:
    name: str
    split: str
    difficulty: str
    expected: str
    got: str | None
    passed: bool
    forbidden: bool
    keywords_found: list[str]
    keywords_missing: list[str]
    seconds: float
    root_cause: str = ""
    error: str | None = None
    analyzer_failures: list[str] = field(default_factory=list)  # "<analyzer>: <exception>", each a rule's bug


def load_expected(path: Path) -> Expected:
    try:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CorpusError(f"{path}: cannot read ({exc})") from None
    if not isinstance(body, dict) or "category" not in body:
        raise CorpusError(f"{path}: an answer file needs at least `category`")
    try:
        return Expected(
            category=Category(body["category"]),
            must_contain=[str(w) for w in body.get("must_contain") or []],
            must_not=[Category(c) for c in body.get("must_not") or []],
            difficulty=str(body.get("difficulty") or "unknown"),
            domains=[str(d) for d in body.get("domains") or []],
            question=body.get("question"),
            summary=str(body.get("summary") or ""),
        )
    except ValueError as exc:
        raise CorpusError(f"{path}: {exc}") from None


def _bundle_of(folder: Path) -> Path:
    for name in ("bundle", "bundle.tar.gz", "bundle.tgz", "bundle.zip"):
        if (folder / name).exists():
            return folder / name
    return folder


def discover(root: Path) -> list[Scenario]:
    """Every folder under `root` with an answer file, in name order."""
    if not root.is_dir():
        raise CorpusError(f"no such folder: {root}")
    scenarios = []
    for answer in sorted(root.rglob(ANSWER_FILE)):
        folder = answer.parent
        rel = folder.relative_to(root)
        first = rel.parts[0] if rel.parts else ""
        split = first if first in SPLITS and len(rel.parts) > 1 else (root.name if root.name in SPLITS else "")
        bundle = _bundle_of(folder)
        exclude = (ANSWER_FILE,) if bundle == folder else ()  # the answer is never evidence
        scenarios.append(Scenario(str(rel), split, folder, bundle, load_expected(answer), exclude))
    if not scenarios:
        raise CorpusError(f"no scenarios under {root} (folders with {ANSWER_FILE})")
    return scenarios


def score(scenario: Scenario, diagnosis: Diagnosis | None, seconds: float, error: str | None = None) -> ScenarioResult:
    exp = scenario.expected
    text = " ".join([diagnosis.root_cause, *diagnosis.causal_chain]).lower() if diagnosis else ""
    found = [w for w in exp.must_contain if w.lower() in text]
    got = diagnosis.category if diagnosis else None
    return ScenarioResult(
        name=scenario.name,
        split=scenario.split,
        difficulty=exp.difficulty,
        expected=exp.category.value,
        got=got.value if got else None,
        passed=got == exp.category,
        forbidden=got in exp.must_not if got else False,
        keywords_found=found,
        keywords_missing=[w for w in exp.must_contain if w not in found],
        seconds=seconds,
        root_cause=diagnosis.root_cause if diagnosis else "",
        error=error,
        analyzer_failures=[
            f"{e['path'].removeprefix('analyzer:')}: {e['error']}"
            for e in (diagnosis.errors if diagnosis else [])
            if e.get("path", "").startswith("analyzer:")
        ],
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(results: list[ScenarioResult]) -> dict[str, Any]:
    n = len(results)
    words = sum(len(r.keywords_found) + len(r.keywords_missing) for r in results)
    times = [r.seconds for r in results]
    return {
        "scenarios": n,
        "passed": sum(r.passed for r in results),
        "accuracy": round(sum(r.passed for r in results) / n, 4) if n else None,
        "keyword_recall": round(sum(len(r.keywords_found) for r in results) / words, 4) if words else None,
        "forbidden": sum(r.forbidden for r in results),
        "errors": sum(r.error is not None for r in results),
        "analyzer_failures": sum(bool(r.analyzer_failures) for r in results),
        "seconds_p50": round(_percentile(times, 0.5), 4),
        "seconds_p95": round(_percentile(times, 0.95), 4),
    }


def _grouped(results: list[ScenarioResult], key: Callable[[ScenarioResult], str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[ScenarioResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return {k: summarize(v) for k, v in sorted(groups.items())}


def report(results: list[ScenarioResult]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "overall": summarize(results),
        "per_category": _grouped(results, lambda r: r.expected),
        "per_difficulty": _grouped(results, lambda r: r.difficulty),
        "results": [asdict(r) for r in results],
    }
    if any(r.split for r in results):
        body["per_split"] = _grouped(results, lambda r: r.split or "-")
    return body


def _run(investigate: Investigate, scenario: Scenario) -> ScenarioResult:
    started = time.perf_counter()
    try:
        diagnosis = investigate(scenario.bundle, scenario.expected.question, exclude=scenario.exclude)
        error = None
    except Exception as exc:
        diagnosis, error = None, f"{type(exc).__name__}: {exc}"
    return score(scenario, diagnosis, time.perf_counter() - started, error)


def evaluate(root: Path, investigate: Investigate, workers: int = 1) -> dict[str, Any]:
    """Runs `investigate(bundle, question)` on every scenario under `root` and scores it; an investigation that
    raises is a failed scenario with its error, never the end of the run.

    `workers` > 1 spreads the scenarios over that many processes (spawned, so `investigate` must be a module-level
    function); the results keep the corpus's order. Times per investigation are then measured under that load:
    use one worker where the times are the figure (bench/investigations.py)."""
    scenarios = discover(root)
    if workers <= 1 or len(scenarios) < 2:
        return report([_run(investigate, s) for s in scenarios])
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        results = list(pool.map(partial(_run, investigate), scenarios, chunksize=4))
    return report(results)
