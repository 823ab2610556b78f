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
