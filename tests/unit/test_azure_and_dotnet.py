"""Azure Monitor exports and .NET's own wording: the common alert schema, metrics and Application Insights query
results are read; a disk full, a JSON value that does not convert and a starved thread pool are named as such; an
error whose task gave up for good has not recovered."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers.logs import log_errors
from diagnosis.analyzers.runtime import runtime_starvation
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.unit._evidence_builders import T0, Builder, by_code, causes


def _alert(condition: str, **props: object) -> dict:
    return {
        "schemaId": "azureMonitorCommonAlertSchema",
        "data": {
            "essentials": {
                "alertRule": "claims-http5xx",
                "severity": "Sev2",
                "monitorCondition": condition,
                "alertTargetIDs": ["/subscriptions/x/resourcegroups/rg/providers/microsoft.web/sites/claims"],
                "configurationItems": ["claims"],
                "originAlertId": "a1",
                "firedDateTime": "2025-08-19T04:22:13Z",
                "resolvedDateTime": "2025-08-19T04:32:10Z" if condition == "Resolved" else None,
                "description": "More than 10 HTTP 5xx in 5 minutes",
            },
            "alertContext": {"properties": props or None},
        },
    }


def test_common_alert_schema_becomes_an_alert_and_maintenance_planned_work(tmp_path: Path) -> None:
    (tmp_path / "fired.json").write_text(json.dumps(_alert("Fired")))
    (tmp_path / "resolved.json").write_text(json.dumps(_alert("Resolved")))
    notice = _alert("Fired", incidentType="Maintenance", stage="Complete", trackingId="7T2M", service="App Service",
                    title="Planned Maintenance: App Service - West Europe", impactStartTime="2025-08-19T04:00:00Z",
                    impactMitigationTime="2025-08-19T05:00:00Z")  # fmt: skip
    notice["data"]["essentials"].update(alertRule="svchealth", originAlertId="b2")
    (tmp_path / "health.json").write_text(json.dumps(notice))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    states = sorted((a.data["labels"]["alertname"], a.data["status"]) for a in ev.kind("alert"))
    assert states == [("claims-http5xx", "firing"), ("claims-http5xx", "resolved"), ("svchealth", "resolved")]
    d = investigate(ev, "is claims ok after the night?")
    assert d.category is Category.HEALTHY and "planned" in d.root_cause, d.root_cause


def test_metrics_and_application_insights_results_become_series(tmp_path: Path) -> None:
    rid = "/subscriptions/x/providers/Microsoft.ServiceBus/namespaces/sb-prod"
    metrics = {
        "cost": 0,
        "interval": "PT5M",
        "value": [
            {
                "id": f"{rid}/providers/Microsoft.Insights/metrics/DeadletteredMessages",
                "name": {"value": "DeadletteredMessages"},
                "unit": "Count",
                "timeseries": [
                    {
                        "metadatavalues": [{"name": {"value": "entityname"}, "value": "receipts"}],
                        "data": [
                            {"timeStamp": "2026-03-17T07:00:00Z", "average": 3},
                            {"timeStamp": "2026-03-17T07:05:00Z", "average": 9},
                        ],
                    }
                ],
            }
        ],
    }
    query = {
        "tables": [
            {
                "name": "PrimaryResult",
                "columns": [
                    {"name": "timestamp", "type": "datetime"},
                    {"name": "version", "type": "string"},
                    {"name": "p95_ms", "type": "real"},
                ],
                "rows": [["2026-04-28T10:00:00Z", "2.14.0", 85.0], ["2026-04-28T10:15:00Z", "2.14.0", 9800.0]],
            }
        ]
    }
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    (tmp_path / "q.json").write_text(json.dumps(query))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    series = {(m.data["name"], tuple(sorted(m.data["labels"].items()))): m.data["points"] for m in ev.kind("metric")}
    assert series[("DeadletteredMessages", (("entityname", "receipts"), ("resource", "sb-prod")))][-1][1] == 9.0
    assert series[("p95_ms", (("version", "2.14.0"),))][-1][1] == 9800.0


def _app_log(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "app.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_windows_disk_full_and_a_json_value_that_does_not_convert(tmp_path: Path) -> None:
    lines = [f"2026-02-09T15:{10 + i:02d}:00Z [ERR] Upload failed: System.IO.IOException: There is not enough space "
             "on the disk. : 'C:\\Windows\\TEMP\\ASPNETCORE_x.tmp'" for i in range(5)]  # fmt: skip
    d = investigate(load_bundle(_app_log(tmp_path, lines)), "why do uploads fail?")
    assert d.category is Category.RESOURCE_EXHAUSTION, d.root_cause
    lines = [f"2026-03-17T09:{40 + i:02d}:00Z [ERR] Failed to process message from till-gateway: "
             "System.Text.Json.JsonException: The JSON value could not be converted to System.Decimal. "
             "Path: $.lines[1].unitPrice" for i in range(5)]  # fmt: skip
    d = investigate(load_bundle(_app_log(tmp_path, lines)), "why are receipts dead-lettered?")
    assert d.category is Category.DATA_QUALITY, d.root_cause


def test_the_exception_under_an_error_line_belongs_to_it(tmp_path: Path) -> None:
    lines = [
        "2025-08-19T04:16:40.351Z [04:16:40 ERR] ErrorHandlingMiddleware: Unhandled exception for POST /api/claims",
        "System.Threading.Tasks.TaskCanceledException: A task was canceled.",
        "   at Microsoft.Data.SqlClient.SqlCommand.ExecuteReaderAsync()",
        "2025-08-19T04:17:21.446Z [04:17:21 INF] Application started.",
    ]
    (log,) = load_bundle(_app_log(tmp_path, lines)).kind("log")
    assert len(log.data["records"]) == 2 and "TaskCanceledException" in log.data["records"][0]["msg"]


def test_a_starved_thread_pool_is_the_callers_own_defect() -> None:
    b = Builder()
    msg = ("StackExchange.Redis.RedisTimeoutException: Timeout awaiting response (5519ms elapsed, timeout is 5000ms), "
           "serverEndpoint: redis-prod.redis.cache.windows.net:6380, IOCP: (Busy=0,Free=1000,Min=1,Max=1000), "
           "WORKER: (Busy=56,Free=32711,Min=2,Max=32767), POOL: (Threads=60,QueuedItems=403)")  # fmt: skip
    b.log("Pod/shop/pricing-6c9f-4mzkq", [(T0 + i, "error", msg) for i in range(5)])
    [f] = runtime_starvation(b.set())
    assert f.category is Category.CODE_DEFECT and "56" in f.title and "403" in f.title
    calm = msg.replace("Busy=56", "Busy=1")
    b = Builder()
    b.log("Pod/shop/pricing-6c9f-4mzkq", [(T0 + i, "error", calm) for i in range(5)])
    assert not runtime_starvation(b.set())


def test_errors_that_end_because_the_task_gave_up_have_not_recovered() -> None:
    b = Builder()
    lines = [(T0 + i, "error", "Error encountered in task sink-0: SerializationException: Unknown magic byte!")
             for i in range(3)]  # fmt: skip
    lines.append((T0 + 4, "error", "Task threw an uncaught and unrecoverable exception. Task is being killed and "
                  "will not recover until manually restarted"))  # fmt: skip
    lines += [(T0 + 3600 + i * 60, "info", "Completed write operation for 500 records") for i in range(10)]
    b.log("connect-worker", lines)
    found = log_errors(b.set())
    assert [f.code for f in causes(found)] == ["bad_data"] and not by_code(found, "errors_stopped")


def test_application_insights_tables_with_messages_are_logs(tmp_path: Path) -> None:
    cols = [("timestamp", "datetime"), ("type", "string"), ("outerMessage", "string"), ("cloud_RoleName", "string")]
    doc = {"tables": [{"name": "PrimaryResult", "columns": [{"name": n, "type": t} for n, t in cols],
                       "rows": [["2025-06-23T12:03:14Z", "QuoteValidationException", "Weight 0 kg is below the "
                                 "minimum", "parcel-rates"]]}]}  # fmt: skip
    (tmp_path / "exceptions.json").write_text(json.dumps(doc))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.kind("metric")
    [log] = ev.kind("log")
    [rec] = log.data["records"]
    assert rec["level"] == "error" and rec["msg"].startswith("Weight 0 kg") and rec["ts"] is not None
