"""Data pipeline run results: dbt's `run_results.json` (target/run_results.json after `dbt run|test|build`), read as
the log of the run: one record per node, at the time it finished. A model that errored is an error; a data test
that failed or warned with failing rows says the data is wrong ("unique test failed on fct_x.id: 18406 rows"), in the
words the logs analyzer reads as bad data. Great Expectations validation results are read the same way: a failed
expectation is a failed data check on its asset and column. Kafka Connect's REST status reads as the log of each
connector: a FAILED task is an error carrying its trace's causes.
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


# --- Great Expectations validation results ------------------------------------------------------------------


def _is_ge_validation(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and isinstance(v.get("results"), list)
        and "success" in v
        and any(isinstance(r, dict) and isinstance(r.get("expectation_config"), dict) for r in v["results"])
    )


def _ge_observed(result: dict[str, Any]) -> str:
    found = result.get("result")
    r: dict[str, Any] = found if isinstance(found, dict) else {}
    parts = []
    if "observed_value" in r:
        parts.append(f"observed {r['observed_value']}")
    if r.get("unexpected_count") is not None:
        pct = r.get("unexpected_percent")
        parts.append(f"{r['unexpected_count']} unexpected" + (f" ({float(pct):.3g}%)" if pct is not None else ""))
    return ", ".join(parts)


def _ge_validations(v: Any) -> list[dict[str, Any]] | None:
    """The validations a document holds: itself (a validation result), or each `validation_result` of a
    checkpoint's result (`run_results`, keyed by validation result identifiers)."""
    if _is_ge_validation(v):
        return [v]
    runs = v.get("run_results") if isinstance(v, dict) else None
    if isinstance(runs, dict):
        found = [r["validation_result"] for r in runs.values() if isinstance(r, dict) and isinstance(
            r.get("validation_result"), dict)]  # fmt: skip
        if found and all(_is_ge_validation(f) for f in found):
            run = v.get("run_id") if isinstance(v.get("run_id"), dict) else {}
            return [f if (f.get("meta") or {}).get("run_id") else {**f, "meta": {**(f.get("meta") or {}),
                    "run_id": run}} for f in found]  # fmt: skip
    return None


@FORMATS.format("great-expectations", shapes={"json"}, detect=lambda d: _ge_validations(d.value) is not None, order=30)
def parse_ge(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A Great Expectations validation (`validation_result.json`) or a checkpoint's result (each of its
    validation results): one record per expectation, a failed one at error level in the words of a failed data
    check ("expectation expect_column_values_to_be_unique failed on conversion_id: 48211 unexpected (50%)")."""
    for v in _ge_validations(doc.value) or []:
        yield from _ge_validation(doc, ctx, v)


def _ge_validation(doc: Document, ctx: ParseContext, v: dict[str, Any]) -> Iterator[EvidenceItem]:
    meta: dict[str, Any] = v["meta"] if isinstance(v.get("meta"), dict) else {}
    run: dict[str, Any] = meta["run_id"] if isinstance(meta.get("run_id"), dict) else {}
    when = parse_ts(run.get("run_time")) or parse_ts(meta.get("validation_time"))
    found = meta.get("active_batch_definition") or meta.get("batch_spec")
    batch: dict[str, Any] = found if isinstance(found, dict) else {}
    asset = str(batch.get("data_asset_name") or meta.get("expectation_suite_name") or doc.stem)
    ids = batch.get("batch_identifiers") if isinstance(batch.get("batch_identifiers"), dict) else {}
    where = f"{asset}" + (f" ({', '.join(f'{k}={v}' for k, v in ids.items())})" if ids else "")
    records: list[dict[str, Any]] = []
    for n, r in enumerate(v["results"], 1):
        if not isinstance(r, dict) or not isinstance(r.get("expectation_config"), dict):
            continue
        cfg = r["expectation_config"]
        kind = str(cfg.get("expectation_type") or cfg.get("type") or "expectation")
        args = cfg.get("kwargs")
        kwargs: dict[str, Any] = args if isinstance(args, dict) else {}
        column = kwargs.get("column") or ", ".join(map(str, kwargs.get("column_list") or ()))
        on = f" on {where}" + (f" column {column}" if column else "")
        seen = _ge_observed(r)
        if r.get("success") is False:
            msg, level = f"expectation failed: {kind}{on}" + (f": {seen}" if seen else ""), "error"
        else:
            msg, level = f"expectation passed: {kind}{on}" + (f": {seen}" if seen else ""), "info"
        records.append({"ts": when, "level": level, "msg": msg, "line": n})
    source = {"path": doc.path, "format": "great expectations", "snapshot": True, "service": asset}
    data = {"records": records, "source": source, "truncated": False}
    yield ctx.item(doc.path, "log", f"great_expectations/{asset}", data, when)


# --- Kafka Connect's REST status (`GET /connectors/<name>/status`, or `/connectors?expand=status`) ----------------


def _connect_statuses(v: Any) -> list[dict[str, Any]] | None:
    def one(x: Any) -> bool:
        return isinstance(x, dict) and isinstance(x.get("connector"), dict) and isinstance(x.get("tasks"), list)

    if one(v):
        return [v]
    if isinstance(v, list) and v and all(one(x) for x in v):
        return v
    if isinstance(v, dict) and v and all(isinstance(x, dict) and one(x.get("status")) for x in v.values()):
        return [x["status"] for x in v.values()]
    return None


def _cause_lines(trace: str) -> str:
    """A Java trace as its first line and its `Caused by:` lines (where the reason is), without the frames."""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    causes = [ln for ln in lines[1:] if ln.startswith("Caused by:")]
    return " | ".join([*lines[:1], *causes])[:1500]


@FORMATS.format(
    "kafka-connect-status", shapes={"json"}, detect=lambda d: _connect_statuses(d.value) is not None, order=30
)
def parse_connect_status(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One record per connector and task: a FAILED one is an error that carries its trace's causes (the reason a
    sink refused a record is in them); RUNNING ones say that they run. The status has no time of its own."""
    for status in _connect_statuses(doc.value) or []:
        name = str(status.get("name") or doc.stem)
        records: list[dict[str, Any]] = []
        conn = status["connector"]
        items = [("connector", conn), *((f"task {t.get('id')}", t) for t in status["tasks"] if isinstance(t, dict))]
        for n, (what, s) in enumerate(items, 1):
            state = str(s.get("state") or "?")
            failed = state == "FAILED"
            text = f"connector {name} {what} {state} on {s.get('worker_id', '?')}"
            if failed and s.get("trace"):
                text += f": {_cause_lines(str(s['trace']))}"
            records.append({"ts": None, "level": "error" if failed else "info", "msg": text, "line": n})
        data = {"records": records, "source": {"path": doc.path, "format": "kafka connect status"}, "truncated": False}
        yield ctx.item(doc.path, "log", f"kafka-connect/{name}", data, None)


# --- a job run's result with its error: Databricks `runs get-output` (error, error_trace, metadata), Step Functions
# `describe-execution` (status FAILED, error, cause), Glue `get-job-run` (JobRun.ErrorMessage) -------------------


def _run_error(v: Any) -> tuple[str, str, float | None, str] | None:
    """(job, error text, when it ended, run state) of a failed job run's result, or None."""
    if not isinstance(v, dict):
        return None
    if isinstance(v.get("JobRun"), dict):  # Glue
        run = v["JobRun"]
        if run.get("ErrorMessage"):
            ended = parse_ts(run.get("CompletedOn")) or parse_ts(run.get("LastModifiedOn"))
            return str(run.get("JobName") or "glue job"), str(run["ErrorMessage"]), ended, str(run.get("JobRunState"))
        return None
    error = v.get("error")
    if not isinstance(error, str) or not error.strip():
        return None
    meta = v.get("metadata") if isinstance(v.get("metadata"), dict) else {}
    if meta and ("run_id" in meta or "job_id" in meta):  # Databricks
        state: dict[str, Any] = meta["state"] if isinstance(meta.get("state"), dict) else {}
        trace = str(v.get("error_trace") or "")
        text = error.strip() + (f"\n{_cause_lines(trace)}" if trace else "")
        name = str(meta.get("run_name") or meta.get("task_key") or f"job {meta.get('job_id')}")
        return name, text, parse_ts(meta.get("end_time")), str(state.get("result_state") or "")
    if str(v.get("status") or "").upper() in ("FAILED", "TIMED_OUT", "ABORTED") and "executionArn" in v:
        cause = str(v.get("cause") or "")
        return str(v.get("name") or "execution"), f"{error}: {cause}".strip(": "), parse_ts(v.get("stopDate")), "FAILED"
    return None


@FORMATS.format("job-run-error", shapes={"json"}, detect=lambda d: _run_error(d.value) is not None, order=31)
def parse_run_error(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """The run's error as one error record of its job's log: a run's report, so what it says does not stop."""
    found = _run_error(doc.value)
    assert found is not None
    job, text, ended, state = found
    record = {"ts": ended, "level": "error", "msg": f"run {state.lower() or 'failed'}: {text}"[:4000], "line": 1}
    source = {"path": doc.path, "format": "job run result", "snapshot": True}
    yield ctx.item(doc.path, "log", f"job/{job}", {"records": [record], "source": source, "truncated": False}, ended)
