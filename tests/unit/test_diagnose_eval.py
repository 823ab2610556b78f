"""diagnose-eval: scenario discovery, scoring (category, keywords, forbidden categories), grouping; the CLI prints it.

The investigation is injected (the real one needs the analyzers of another part of issue 13), so these tests
check the scoring, not the analyzers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import services.cli as cli
from diagnosis.evaluation import CorpusError, discover, evaluate
from diagnosis.model import Category, Diagnosis


def scenario(root: Path, name: str, body: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "answer.yaml").write_text(body)
    (folder / "pods.json").write_text('{"kind": "List", "items": []}')


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "incidents"
    scenario(
        root,
        "dev/oom",
        "category: resource_exhaustion\nmust_contain: [OOMKilled, checkout]\nmust_not: [code_defect]\n"
        "difficulty: easy\ndomains: [kubernetes]\nsummary: oom\n",
    )
    scenario(root, "dev/quiet", "category: healthy\nmust_contain: [nothing]\ndifficulty: hard\n")
    scenario(
        root,
        "test/locks",
        "category: resource_exhaustion\nmust_contain: [idle in transaction, pid 4700]\nmust_not: [healthy]\n"
        "difficulty: medium\nquestion: why are queries hanging?\n",
    )
    scenario(root, "test/broken", "category: dependency_failure\ndifficulty: medium\n")
    return root


def fake_investigate(bundle: Path, question: str | None, exclude: tuple[str, ...] = ()) -> Diagnosis:
    assert exclude == ("answer.yaml",)  # the scenario folder is the bundle: its answer is never evidence
    name = bundle.name
    if name == "oom":  # right category, both keywords (case-insensitive, inside a longer word too)
        return Diagnosis(
            category=Category.RESOURCE_EXHAUSTION,
            root_cause="container app of checkout-7d9f was oomkilled",
            confidence=0.9,
        )
    if name == "quiet":  # wrong category, and an analyzer raised (a malformed file is not an analyzer's failure)
        return Diagnosis(
            category=Category.UNKNOWN,
            root_cause="no evidence",
            confidence=0.1,
            errors=[
                {"path": "analyzer:kube_pods", "error": "NameError: name 'pod' is not defined"},
                {"path": "pods.json", "error": "not JSON"},
            ],
        )
    if name == "locks":  # forbidden category, keyword found in the chain
        assert question == "why are queries hanging?"
        return Diagnosis(category=Category.HEALTHY, root_cause="all fine", confidence=0.5, causal_chain=["PID 4700"])
    raise ValueError("bundle refused: entry escapes the folder")


def test_scores_accuracy_keywords_forbidden_and_groups(corpus: Path) -> None:
    report = evaluate(corpus, fake_investigate)
    overall = report["overall"]
    assert overall["scenarios"] == 4 and overall["passed"] == 1 and overall["accuracy"] == 0.25
    assert overall["keyword_recall"] == pytest.approx(3 / 5)  # OOMKilled, checkout, pid 4700
    assert overall["forbidden"] == 1 and overall["errors"] == 1 and overall["analyzer_failures"] == 1
    assert report["per_split"]["dev"]["accuracy"] == 0.5 and report["per_split"]["test"]["accuracy"] == 0.0
    assert report["per_difficulty"]["easy"]["passed"] == 1
    assert report["per_category"]["resource_exhaustion"]["scenarios"] == 2
    by_name = {r["name"]: r for r in report["results"]}
    assert by_name["dev/oom"]["keywords_missing"] == [] and by_name["dev/quiet"]["keywords_missing"] == ["nothing"]
    assert by_name["test/locks"]["keywords_missing"] == ["idle in transaction"]
    assert by_name["test/broken"]["error"].startswith("ValueError: bundle refused")
    assert by_name["dev/quiet"]["analyzer_failures"] == ["kube_pods: NameError: name 'pod' is not defined"]
    assert by_name["dev/oom"]["analyzer_failures"] == []
    assert overall["seconds_p95"] >= overall["seconds_p50"] >= 0


def test_a_split_folder_is_its_own_split_and_an_empty_folder_is_refused(corpus: Path, tmp_path: Path) -> None:
    assert {s.split for s in discover(corpus / "test")} == {"test"}
    with pytest.raises(CorpusError):
        discover(tmp_path / "nothing-here")
    bad = tmp_path / "bad"
    scenario(bad, "x", "category: on_fire\n")
    with pytest.raises(CorpusError, match="on_fire"):
        discover(bad)


def test_cli_prints_results_and_json(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_investigate_bundle", fake_investigate)
    runner = CliRunner()
    text = runner.invoke(cli.app, ["diagnose-eval", str(corpus)])
    assert text.exit_code == 0, text.output
    assert "pass dev/oom" in text.output and "FAIL test/locks" in text.output and "FORBIDDEN" in text.output
    assert "split test" in text.output and "difficulty easy" in text.output
    assert "analyzer failed: kube_pods: NameError" in text.output and "1 scenario(s) lost an analyzer" in text.output
    as_json = runner.invoke(cli.app, ["diagnose-eval", str(corpus), "--json"])
    assert json.loads(as_json.output)["overall"]["passed"] == 1
    missing = runner.invoke(cli.app, ["diagnose-eval", str(corpus / "nope")])
    assert missing.exit_code == 2


def test_investigate_cli_refuses_a_missing_path_with_one_line() -> None:
    result = CliRunner().invoke(cli.app, ["investigate", "/no/such/bundle.tar.gz"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "no such bundle" in result.output


def test_investigate_cli_prints_the_diagnosis_as_text_or_one_json_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Path, str | None]] = []

    def fake(bundle: Path, question: str | None) -> Diagnosis:
        seen.append((bundle, question))
        return Diagnosis(
            category=Category.HEALTHY, root_cause="nothing is failing", confidence=0.9, text="**healthy**: fine"
        )

    monkeypatch.setattr(cli, "_load_bundle", lambda path: path)
    monkeypatch.setattr(cli, "_diagnose", fake)
    runner = CliRunner()
    text = runner.invoke(cli.app, ["investigate", str(tmp_path), "--question", "is it ok?"])
    assert text.exit_code == 0 and text.output.strip() == "**healthy**: fine"
    assert seen == [(tmp_path, "is it ok?")]
    body = json.loads(runner.invoke(cli.app, ["investigate", str(tmp_path), "--json"]).output)
    assert {"category", "root_cause", "confidence", "causal_chain", "evidence", "ruled_out", "actions", "text"} <= set(
        body
    )
    assert "findings" not in body and body["category"] == "healthy"


def test_investigate_cli_refuses_a_bad_bundle_with_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BundleRefused(Exception):  # whatever load_bundle raises
        pass

    def refuse(bundle: Path) -> None:
        raise BundleRefused("entry ../../etc/passwd escapes the bundle\nmore detail")

    monkeypatch.setattr(cli, "_load_bundle", refuse)
    result = CliRunner().invoke(cli.app, ["investigate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == "error: bundle refused: entry ../../etc/passwd escapes the bundle"


def test_investigate_without_an_llm_runs_the_rules_without_importing_langgraph(tmp_path: Path) -> None:
    """No LLM configured: the CLI calls diagnosis.investigate.investigate directly (the same analyzers and
    reasoning as the graph); LangGraph, most of the start-up, is not imported."""
    import os
    import subprocess
    import sys

    (tmp_path / "logs" / "shop").mkdir(parents=True)
    line = "2026-01-01T00:{:02d}:00Z ERROR panic: runtime error: invalid memory address or nil pointer dereference"
    (tmp_path / "logs" / "shop" / "cart-7c8d9f5b6a-x2k4p.log").write_text("\n".join(line.format(m) for m in range(9)))
    script = (
        "import sys\n"
        "from services import cli\n"
        "d = cli._diagnose(cli._load_bundle(sys.argv[1]), None)\n"
        "print(d.category.value, 'langgraph' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSGRAPH_")}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["code_defect", "False"]


def test_investigate_with_an_llm_configured_runs_the_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agents.investigation as investigation

    calls: list[object] = []

    class Result:
        diagnosis = Diagnosis(category=Category.HEALTHY, root_cause="graph", confidence=0.9)

    def run(evidence: object, **kw: object) -> Result:
        calls.append(kw.get("refiner"))
        return Result()

    monkeypatch.setattr(cli, "get_settings", lambda: type("S", (), {"llm_base_url": "http://127.0.0.1:9/v1"})())
    monkeypatch.setattr(investigation.DiagnosisRefiner, "from_settings", classmethod(lambda cls, s: "refiner"))
    monkeypatch.setattr(investigation, "run_investigation", run)
    assert cli._diagnose(object(), None).root_cause == "graph" and calls == ["refiner"]


def test_investigate_cli_reads_evidence_piped_on_standard_input() -> None:
    describe = (Path(__file__).resolve().parent.parent / "data" / "kubetext" / "describe-oom.txt").read_bytes()
    runner = CliRunner()
    result = runner.invoke(cli.app, ["investigate", "-", "--json"], input=describe)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["category"] == "resource_exhaustion" and "OOMKilled" in body["root_cause"]
    empty = runner.invoke(cli.app, ["investigate", "-"], input=b"  \n")
    assert empty.exit_code == 2 and "nothing on standard input" in empty.output
