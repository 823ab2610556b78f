"""Stop 21's second batch: what a pasted shell session, a Go panic, an Airflow UI log, a `| head` cut, a .NET named
client, a host CPU share and a growing lag say, and how the analyzers read them."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers.logs import log_errors
from diagnosis.analyzers.metrics import metric_series
from diagnosis.analyzers.network import network_failures
from diagnosis.analyzers.network.extraction import _call_failure, _target
from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import LineParser
from tests.unit._evidence_builders import T0, Builder, by_code, series

GO_PANIC = """2026/12/08 11:03:00 http: panic serving 172.18.0.5:38872: runtime error: invalid memory address or nil pointer dereference
goroutine 48234 [running]:
net/http.(*conn).serve.func1()
\t/usr/local/go/src/net/http/server.go:1947 +0xbe
panic({0x91c2a0?, 0xdb7e30?})
\t/usr/local/go/src/runtime/panic.go:785 +0x132
github.com/acme-ins/quote-svc/internal/quote.applyPromo(0xc000412f00, 0x0)
\t/src/internal/quote/discount.go:41 +0x1
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3360 +0x485
"""  # noqa: E501 (a log line as Go prints it)


def test_json_lines_and_go_panics_under_docker_logs_are_the_container_s_log(tmp_path: Path) -> None:
    lines = [json.dumps({"time": f"2026-12-08T11:0{i}:00.159Z", "level": "INFO", "msg": "request"}) for i in range(2)]
    (tmp_path / "host.txt").write_text(
        "ops@h:~$ docker ps\nNAMES IMAGE STATUS\nquote-svc-1 ghcr.io/acme/quote-svc:v2.14.0 Up 33 minutes\n"
        "ops@h:~$ docker logs --since 2026-12-08T11:00:00Z quote-svc-1 2>&1 | head -n 400\n"
        + "\n".join(lines)
        + "\n"
        + GO_PANIC * 3
    )
    ev = load_bundle(tmp_path)
    [log] = [i for i in ev.kind("log") if i.object == "container/quote-svc-1"]
    records = log.data["records"]
    assert len(records) == 5 and log.data["source"]["cut"] is True  # 2 JSON lines, 3 panics with their frames
    [f] = by_code(log_errors(ev), "exception")
    assert "nil pointer dereference at quote.applyPromo" in f.mechanism


def test_airflow_ui_timestamps_are_read_and_a_successful_retry_ends_the_errors() -> None:
    ts, level, _ = LineParser().parse("[2024-09-03, 05:09:40 UTC] {taskinstance.py:3107} ERROR - Task failed")
    assert ts == 1725340180.0 and level == "error"
    b = Builder()
    b.log(
        "extract.log",
        [(T0, "error", "Task failed with exception: google.api_core.exceptions.InternalServerError: 500 backendError"),
         (T0 + 1, "info", "Marking task as UP_FOR_RETRY"),
         (T0 + 300, "info", "Starting attempt 2 of 3"),
         (T0 + 400, "info", "Marking task as SUCCESS. dag_id=partner_export_daily")],
    )  # fmt: skip
    findings = log_errors(b.set())
    assert not [f for f in findings if f.role in ("cause", "symptom")]
    assert any("later attempt of the task then succeeded" in f.mechanism for f in findings)


def test_errors_in_a_log_cut_by_head_have_not_stopped() -> None:
    b = Builder()
    msg = 'java.lang.NullPointerException: Cannot invoke "Price.getCompareAtPrice()"\n\tat com.acme.PriceFormatter.savingsBadge(PriceFormatter.java:47)'  # noqa: E501
    b.log("catalog-api.log", [(T0 + i, "error", msg) for i in range(5)], cut=True)
    b.log("other.log", [(T0 + 7200, "info", "later evidence")])
    [f] = by_code(log_errors(b.set()), "exception")
    assert f.role == "cause" and "at PriceFormatter.savingsBadge (PriceFormatter.java:47)" in f.mechanism


def test_a_net_named_client_and_its_pipeline_name_the_upstream_and_an_own_deadline_is_no_call() -> None:
    polly = "Execution attempt. Source: 'ShipRight-standard//Standard-Retry', Result: 'The operation didn't complete within the allowed timeout of '00:00:10'"  # noqa: E501
    assert _target(polly) == "ShipRight"
    assert _call_failure("Rack::Timeout::RequestTimeoutException (Request ran for longer than 15000ms )") is None
    b = Builder()
    b.log("container/label-worker-1", [(T0 + i * 5, "warn", polly) for i in range(6)])
    [f] = [x for x in network_failures(b.set()) if x.role == "cause"]
    assert f.category == "dependency_failure" and "ShipRight" in f.title


def test_a_host_cpu_share_saturates_at_one_and_a_growing_lag_is_a_live_symptom() -> None:
    b = Builder()
    b.metric("cpu_busy", series(T0, 60, [0.25] * 10 + [0.97] * 10), labels={"instance": "web-1:9100", "job": "node"})
    b.metric("system_lag", series(T0, 300, [5, 6, 5, 7] + [300.0 * i for i in range(1, 12)]), labels={"job": "etl"})
    found = metric_series(b.set())
    assert by_code(found, "cpu_high") and "saturated" in by_code(found, "cpu_high")[0].title
    [lag] = [f for f in found if "system_lag" in f.title and "growing since" in f.title]
    assert lag.role == "symptom"


def test_great_expectations_failures_are_bad_data(tmp_path: Path) -> None:
    ge = {
        "success": False,
        "meta": {"run_id": {"run_time": "2024-06-19T06:30:09+00:00"},
                 "active_batch_definition": {"data_asset_name": "adpartner.conversions",
                                             "batch_identifiers": {"dt": "2024-06-18"}}},
        "results": [
            {"success": False, "expectation_config": {"expectation_type": "expect_column_values_to_be_unique",
                                                      "kwargs": {"column": "conversion_id"}},
             "result": {"unexpected_count": 48211, "unexpected_percent": 50.0}},
            {"success": True, "expectation_config": {"expectation_type": "expect_column_to_exist",
                                                     "kwargs": {"column": "ts"}}, "result": {}},
        ],
    }  # fmt: skip
    (tmp_path / "validation.json").write_text(json.dumps(ge))
    ev = load_bundle(tmp_path)
    [log] = ev.kind("log")
    assert log.object == "great_expectations/adpartner.conversions"
    assert "expect_column_values_to_be_unique" in log.data["records"][0]["msg"]
    assert "48211 unexpected" in log.data["records"][0]["msg"]
    assert by_code(log_errors(ev), "bad_data")


def test_a_warning_that_rejects_a_bad_record_fails_it() -> None:
    b = Builder()
    b.log(
        "ledger-writer",
        [
            (T0 + i, "warn", f'rejecting message {i}: invalid amount "12,5{i}": expected decimal string')
            for i in range(5)
        ],
    )
    [f] = by_code(log_errors(b.set()), "bad_data")
    assert f.category == "data_quality"


def test_a_key_vault_reference_the_platform_cannot_resolve_is_a_configuration_error(tmp_path: Path) -> None:
    from diagnosis.analyzers.secrets import unresolved_secret_references

    rows = [
        {"id": f"/subscriptions/x/providers/Microsoft.Web/sites/bookings-api/config/configreferences/appsettings/{n}",
         "name": n, "type": "Microsoft.Web/sites/config/configreferences",
         "properties": {"reference": f"@Microsoft.KeyVault(VaultName={v};SecretName=s)", "status": st, "vaultName": v}}
        for n, v, st in (("ConnectionStrings__BookingsDb", "kv-bookings-stg", "AccessToKeyVaultDenied"),
                         ("Payments__ApiKey", "kv-bookings-prod", "Resolved"))
    ]  # fmt: skip
    (tmp_path / "refs.txt").write_text(
        "PS /home/ops> az rest --method get --url https://x\n" + json.dumps({"value": rows})
    )
    ev = load_bundle(tmp_path)
    assert len(ev.kind("config/reference")) == 2
    [f] = unresolved_secret_references(ev)
    assert f.category == "configuration_error" and "AccessToKeyVaultDenied" in f.title
    assert "kv-bookings-stg" in f.mechanism and f.object == "setting ConnectionStrings__BookingsDb"
