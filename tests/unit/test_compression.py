from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.compression import approx_tokens, compress_lines, compress_output, merge_findings, summarize_series

CORPUS = sorted((Path(__file__).parent.parent / "data" / "tool_outputs").glob("*.json"))


def test_log_lines_become_templates_with_counts_and_their_values() -> None:
    lines = [
        f"2026-11-22 14:00:{i:02d} ERROR upstream timed out after {3000 + i} ms to 10.0.0.5:5432" for i in range(30)
    ]
    lines += [f"2026-11-22 14:01:{i:02d} INFO GET /cart 200 {i}ms" for i in range(50)]
    out = compress_lines(lines)
    assert out[0].startswith("30x ERROR upstream timed out after {") and "10.0.0.5:5432" in out[0]
    assert "range 3000..3029" in out[0] and "[14:00:00..14:00:29]" in out[0]  # severe first, with its span
    assert out[1].startswith("50x INFO GET /cart 200")


def test_series_summaries_keep_the_spikes() -> None:
    text = summarize_series([10.0, 11.0, 9.0, 10.5] * 20 + [97.5] + [10.0] * 10, "cpu")
    assert "n=91" in text and "max=97.5" in text and "#80=97.5" in text


def test_repeated_findings_merge() -> None:
    merged = merge_findings(
        [{"severity": "warn", "message": "disk /var 91% full"}] * 7 + [{"severity": "critical", "message": "db down"}]
    )
    assert merged == ["[critical] db down", "[warn] disk /var 91% full (x7)"]


@pytest.mark.parametrize("case_file", CORPUS, ids=lambda p: p.stem)
def test_the_shipped_outputs_keep_their_critical_facts_within_budget(case_file: Path) -> None:
    case = json.loads(case_file.read_text())
    out = compress_output(case["result"], budget_tokens=600)
    assert approx_tokens(out) <= 600
    assert [f for f in case["critical_facts"] if f not in out] == []
    assert len(out) < len(json.dumps(case["result"]))
