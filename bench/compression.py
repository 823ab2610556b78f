"""Working-memory compression on the shipped tool outputs: how much smaller, and how many critical facts kept.
Goal (AOI paper): over 72% smaller with over 93% of critical facts kept.

Run: make bench  (or .venv/bin/python -m bench.compression). Prints and writes bench/results/compression.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from memory.compression import compress_output

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "tool_outputs"


def main(budget_tokens: int = 600) -> None:
    cases, total_in, total_out, facts, kept = [], 0, 0, 0, 0
    for path in sorted(CORPUS.glob("*.json")):
        case = json.loads(path.read_text())
        original = json.dumps(case["result"])
        out = compress_output(case["result"], budget_tokens)
        present = [f for f in case["critical_facts"] if f in out]
        cases.append({
            "name": case["name"], "original_chars": len(original), "compressed_chars": len(out),
            "reduction": round(1 - len(out) / len(original), 4),
            "facts_kept": f"{len(present)}/{len(case['critical_facts'])}",
            "missing": [f for f in case["critical_facts"] if f not in present],
        })  # fmt: skip
        total_in, total_out = total_in + len(original), total_out + len(out)
        facts, kept = facts + len(case["critical_facts"]), kept + len(present)
    result = {
        "budget_tokens_per_output": budget_tokens,
        "reduction_overall": round(1 - total_out / total_in, 4),
        "reduction_worst_case": min(c["reduction"] for c in cases),
        "critical_facts_kept": round(kept / facts, 4),
        "cases": cases,
    }
    for c in cases:
        print(
            f"{c['name']:<24} {c['original_chars']:>7} -> {c['compressed_chars']:>5} chars "
            f"({c['reduction']:.1%} smaller), facts {c['facts_kept']}"
        )
    print(
        f"overall {result['reduction_overall']:.1%} smaller (worst case {result['reduction_worst_case']:.1%}), "
        f"{result['critical_facts_kept']:.1%} of critical facts kept"
    )
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "compression.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
