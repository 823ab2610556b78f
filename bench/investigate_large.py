"""Large evidence bundle: time and peak memory of `load_bundle` (and of the investigation, where
diagnosis.investigate exists) at 10%, 25%, 50% and 100% of 5,000 pods / 50,000 events / 500,000 log lines,
to show how they grow; at full scale also from a .tar.gz. Each measurement runs in a fresh process, so its peak
RSS (resource.getrusage) is its own. Goal: linear growth, under 60 s and 1 GiB for loading plus analysis.

Run: .venv/bin/python -m bench.investigate_large [--scales 0.1,0.25,0.5,1] [--keep DIR]
Prints and writes bench/results/large_bundle.json.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.bundles import tar_bundle, write_bundle

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def measure(path: Path) -> dict[str, Any]:
    """In this process: load (and investigate) one bundle; the figures of this process alone."""
    from diagnosis.bundle import load_bundle

    gc.collect()
    base = rss_mib()
    t, cpu = time.perf_counter(), time.process_time()
    evidence = load_bundle(path)
    load_s = time.perf_counter() - t
    out: dict[str, Any] = {
        "load_s": round(load_s, 2),
        # CPU seconds too: on a shared machine the wall time includes waiting for a core
        "load_cpu_s": round(time.process_time() - cpu, 2),
        "rss_before_mib": round(base, 1),
        "peak_rss_after_load_mib": round(rss_mib(), 1),
        "items": len(evidence),
        "kinds": dict(Counter(i.kind for i in evidence)),
        "log_records": sum(len(i.data["records"]) for i in evidence.kind("log")),
        "errors": len(evidence.errors),
        "ignored": len(evidence.ignored),
    }
    if importlib.util.find_spec("diagnosis.investigate") is not None:
        from diagnosis.investigate import investigate  # type: ignore[import-not-found,unused-ignore]

        t = time.perf_counter()
        diagnosis = investigate(evidence)
        out["investigate_s"] = round(time.perf_counter() - t, 2)
        out["category"] = str(getattr(diagnosis, "category", ""))
        out["root_cause"] = str(getattr(diagnosis, "root_cause", ""))[:200]
    else:
        out["investigate_s"] = None
        out["note"] = "diagnosis.investigate is not on this branch yet: loading only"
    out["total_s"] = round(out["load_s"] + (out["investigate_s"] or 0), 2)
    out["peak_rss_mib"] = round(rss_mib(), 1)
    return out


def measure_in_child(path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.investigate_large", "--measure", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scales", default="0.1,0.25,0.5,1")
    parser.add_argument("--keep", type=Path, help="write the bundles here and keep them")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    scales = [float(s) for s in args.scales.split(",")]
    with tempfile.TemporaryDirectory(prefix="opsgraph-bundle-") as tmp:
        base = args.keep or Path(tmp)
        runs: list[dict[str, Any]] = []
        for scale in scales:
            folder = base / f"bundle-{scale:g}"
            t = time.perf_counter()
            counts = write_bundle(folder, scale)
            gen_s = time.perf_counter() - t
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            run: dict[str, Any] = {
                "scale": scale,
                "form": "folder",
                **counts,
                "bytes": size,
                "generate_s": round(gen_s, 1),
            }
            run |= measure_in_child(folder)
            runs.append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "kinds"}), flush=True)
            if scale == max(scales):
                archive = tar_bundle(folder, base / f"bundle-{scale:g}.tar.gz")
                run_tar: dict[str, Any] = {"scale": scale, "form": "tar.gz", **counts, "bytes": archive.stat().st_size}
                run_tar |= measure_in_child(archive)
                runs.append(run_tar)
                print(json.dumps({k: v for k, v in run_tar.items() if k != "kinds"}), flush=True)
    folders = [r for r in runs if r["form"] == "folder"]
    small, big = folders[0], folders[-1]
    ratio = big["scale"] / small["scale"]
    summary = {
        "time_growth_vs_size_growth": round((big["load_s"] / max(small["load_s"], 1e-9)) / ratio, 2),
        "cpu_time_growth_vs_size_growth": round((big["load_cpu_s"] / max(small["load_cpu_s"], 1e-9)) / ratio, 2),
        "memory_growth_vs_size_growth": round(
            ((big["peak_rss_mib"] - big["rss_before_mib"]) / max(small["peak_rss_mib"] - small["rss_before_mib"], 1e-9))
            / ratio,
            2,
        ),
        "goal": "linear growth (ratios near 1), total under 60 s and peak under 1024 MiB at full scale",
        "full_scale_total_s": big["total_s"],
        "full_scale_peak_rss_mib": big["peak_rss_mib"],
    }
    result = {
        "runs": runs,
        "summary": summary,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "large_bundle.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
