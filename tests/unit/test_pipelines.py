"""dbt run results and dated CSV exports whose time column has a name of its own."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category


def _result(uid: str, status: str, done: str, failures: int | None = None, message: str | None = None) -> dict:
    return {"unique_id": uid, "status": status, "failures": failures, "message": message,
            "timing": [{"name": "execute", "started_at": done, "completed_at": done}]}  # fmt: skip


def test_a_failing_data_test_in_run_results_is_bad_data_that_does_not_stop(tmp_path: Path) -> None:
    doc = {
        "metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/run-results/v6.json",
                     "generated_at": "2026-03-05T06:36:36Z", "env": {"AIRFLOW_CTX_DAG_ID": "carbon_daily"}},
        "results": [
            _result("model.carbon.fct_site_emissions", "success", "2026-03-05T06:33:00Z", message="SUCCESS 36812"),
            _result("test.carbon.unique_fct_site_emissions_emission_id.76fc55d941", "warn", "2026-03-05T06:34:11Z",
                    18406, "Got 18406 results, configured to warn if != 0"),
        ],
    }  # fmt: skip
    (tmp_path / "run_results.json").write_text(json.dumps(doc))
    # evidence from hours later: the run's finding still stands
    (tmp_path / "later.csv").write_text("start_utc,summary\n2026-03-05T11:00:00Z,dashboard checked by finance\n")
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    d = investigate(ev, "why did emissions double for March 4?")
    assert d.category is Category.DATA_QUALITY and "unique test failed" in d.root_cause, d.root_cause


def test_cloud_monitoring_series_and_cloud_run_request_logs(tmp_path: Path) -> None:
    series = {"timeSeries": [{
        "metric": {"type": "run.googleapis.com/request_latencies", "labels": {"response_code_class": "2xx"}},
        "resource": {"type": "cloud_run_revision", "labels": {"service_name": "quotes", "project_id": "p"}},
        "points": [{"interval": {"endTime": f"2026-02-03T14:{m:02d}:00Z"}, "value": {"doubleValue": 100.0 + m}}
                   for m in range(10, 0, -1)],
    }]}  # fmt: skip
    requests = [
        {"httpRequest": {"requestMethod": "GET", "requestUrl": "https://quotes.a.run.app/v1/quote", "status": 504,
                         "latency": "10.001s", "protocol": "HTTP/1.1"},
         "logName": "projects/p/logs/run.googleapis.com%2Frequests", "severity": "ERROR",
         "timestamp": f"2026-02-03T14:0{i}:00Z",
         "resource": {"type": "cloud_run_revision", "labels": {"service_name": "quotes"}}}
        for i in range(3)
    ]  # fmt: skip
    (tmp_path / "latency.json").write_text(json.dumps(series))
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    [m] = ev.kind("metric")
    assert m.data["name"] == "request_latencies" and m.data["labels"]["service_name"] == "quotes"
    assert [p[1] for p in m.data["points"]][:2] == [101.0, 102.0]  # oldest first
    [log] = ev.kind("log")
    assert log.object == "gcp/cloud_run_revision/quotes" and '" 504 ' in log.data["records"][0]["msg"]
