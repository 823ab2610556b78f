"""Data pipeline run results: dbt's `run_results.json` (target/run_results.json after `dbt run|test|build`), read as
the log of the run: one record per node, at the time it finished. A model that errored is an error; a data test
that failed or warned with failing rows says the data is wrong ("unique test failed on fct_x.id: 18406 rows"), in the
words the logs analyzer reads as bad data.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

# generic dbt tests: <kind>_<model>_<column>[.<hash>]
_GENERIC_TEST = re.compile(r"^(not_null|unique|accepted_values|relationships)_(.+?)(?:\.[0-9a-f]{6,})?$")


def _is_run_results(v: Any) -> bool:
    meta = v.get("metadata") if isinstance(v, dict) else None
    return (
        isinstance(meta, dict)
        and "run-results" in str(meta.get("dbt_schema_version", ""))
        and isinstance(v.get("results"), list)
    )


def _finished(result: dict[str, Any]) -> float | None:
    stamps = [parse_ts(t.get("completed_at")) for t in result.get("timing") or () if isinstance(t, dict)]
    return max((s for s in stamps if s is not None), default=None)


@FORMATS.format("dbt-run-results", shapes={"json"}, detect=lambda d: _is_run_results(d.value), order=30)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    generated = parse_ts(v["metadata"].get("generated_at"))
    records: list[dict[str, Any]] = []
    for n, r in enumerate(v["results"], 1):
        if not isinstance(r, dict):
            continue
        uid, status = str(r.get("unique_id") or "?"), str(r.get("status") or "").lower()
        name = uid.split(".", 2)[-1]
        failures = r.get("failures")
        message = str(r.get("message") or "").strip()
        if uid.startswith("test.") and status in ("fail", "warn", "error") and (failures or status == "error"):
            generic = _GENERIC_TEST.match(name)
            what = f"{generic.group(1)} test failed on {generic.group(2)}" if generic else f"data test {name} failed"
            msg = f"dbt {what}: {failures} failing rows (status {status}{'; ' + message if message else ''})"
            level = "error"
        elif status in ("error", "fail"):
            msg, level = f"dbt {uid.split('.', 1)[0]} {name} {status}: {message or 'no message'}", "error"
        else:
            msg, level = f"dbt {uid.split('.', 1)[0]} {name} {status}: {message}".rstrip(": "), "info"
        records.append({"ts": _finished(r) or generated, "level": level, "msg": msg, "line": n})
    records.sort(key=lambda x: (x["ts"] is None, x["ts"] or 0.0))
    env = v["metadata"].get("env") if isinstance(v["metadata"].get("env"), dict) else {}
    who = env.get("AIRFLOW_CTX_DAG_ID") or doc.stem
    # a run's report: what it found stays true after the run ends (the rows are still wrong), so its errors do
    # not "stop"
    source = {"path": doc.path, "format": "dbt run results", "snapshot": True}
    data = {"records": records, "source": source, "truncated": False}
    stamps = [x["ts"] for x in records if x["ts"] is not None]
    yield ctx.item(doc.path, "log", f"dbt/{who}", data, max(stamps) if stamps else generated)
