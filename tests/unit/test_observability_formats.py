"""Log stores, traces and paging services as operators export them: Loki and Elasticsearch query results,
Jaeger, OTLP/JSON and Zipkin traces, Grafana-managed alerts, PagerDuty incidents, ECS service events. Recognised
by content (the files are renamed here), read into the items the analyzers already know (`log`, `alert`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

DATA = Path(__file__).resolve().parent.parent / "data" / "observability"


def bundle_of(tmp_path: Path, *names: str) -> Path:
    for i, name in enumerate(names):
        shutil.copy(DATA / name, tmp_path / f"export-{i}.json")
    return tmp_path


def logs_by_object(tmp_path: Path, name: str) -> dict[str, list[dict]]:
    ev = load_bundle(bundle_of(tmp_path, name))
    assert not ev.ignored and not ev.errors
    return {item.object: item.data["records"] for item in ev.kind("log")}


def test_loki_streams_become_pod_and_file_logs(tmp_path: Path) -> None:
    logs = logs_by_object(tmp_path, "loki-query-range.json")
    pod = logs["Pod/shop/orders-api-7d9f8b6c5d-x2k4j/api"]
    assert [r["ts"] for r in pod] == sorted(r["ts"] for r in pod)  # Loki answers newest first
    assert pod[0]["ts"] == 1763999940.0 and pod[0]["level"] == "error"
    assert "loki/edge-01/var/log/nginx/error.log" in logs


def test_loki_timeouts_name_the_upstream(tmp_path: Path) -> None:
    diagnosis = investigate(load_bundle(bundle_of(tmp_path, "loki-query-range.json")), "why is orders slow?")
    assert diagnosis.category == Category.DEPENDENCY_FAILURE
    assert "payments-api" in diagnosis.root_cause


def test_elasticsearch_hits_nested_and_dotted_ecs_fields(tmp_path: Path) -> None:
    logs = logs_by_object(tmp_path, "es-search.json")
    (first,) = logs["es/order-indexer"]
    assert first["level"] == "error" and "JsonParseException" in first["msg"]  # error.* appended to the message
    (flat,) = logs["Pod/data/order-indexer-5c6d7-abcde/indexer"]
    assert "DateTimeParseException" in flat["msg"]  # ECS flattened: "error.type" as one key


@pytest.mark.parametrize("name", ["otlp-traces.json", "jaeger-traces.json", "zipkin-trace.json"])
def test_traces_failed_spans_are_error_records(tmp_path: Path, name: str) -> None:
    logs = logs_by_object(tmp_path, name)
    records = [r for recs in logs.values() for r in recs]
    errors = [r for r in records if r["level"] == "error"]
    assert errors and all(r["msg"].startswith("span ") and " failed" in r["msg"] for r in errors)
    assert all(r["ts"] is not None for r in records)


def test_otlp_span_names_peer_status_and_exception(tmp_path: Path) -> None:
    (records,) = logs_by_object(tmp_path, "otlp-traces.json").values()
    assert records[0]["msg"] == (
        "span POST to payments-api.payments.svc failed after 5003 ms (status 504): upstream request timeout"
    )
    assert "httpx.ReadTimeout: timed out" in records[1]["msg"]
    assert records[2]["level"] == "info"


def test_jaeger_span_logs_say_why(tmp_path: Path) -> None:
    (records,) = logs_by_object(tmp_path, "jaeger-traces.json").values()
    assert any("to rates-db failed" in r["msg"] and "statement timeout" in r["msg"] for r in records)


def test_grafana_managed_alert_is_an_alert(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "grafana-alert.json"))
    (alert,) = ev.kind("alert")
    assert alert.object == "alert/HighErrorRate" and alert.data["status"] == "firing"
    assert alert.data["labels"]["service"] == "checkout"


def test_pagerduty_incidents_and_webhooks(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "pagerduty-incidents.json", "pagerduty-webhooks.json"))
    alerts = {a.object: a.data for a in ev.kind("alert")}
    assert alerts["alert/Checkout p99 latency above 2s"]["status"] == "resolved"
    assert alerts["alert/Checkout p99 latency above 2s"]["ends_at"] is not None
    assert alerts["alert/Disk usage on db-02"]["status"] == "firing"
    # the resolved webhook of an incident closes the one its trigger opened
    queue = alerts["alert/Queue depth high on billing-events"]
    assert queue["status"] == "resolved" and queue["labels"]["service"] == "billing-worker"


def test_ecs_service_that_cannot_start_tasks_names_the_missing_parameter(tmp_path: Path) -> None:
    """`aws ecs describe-services`: tasks that fail to start on a secret that does not exist in SSM."""
    ev = load_bundle(bundle_of(tmp_path, "ecs-describe-services.json"))
    (log,) = ev.kind("log")
    assert log.object == "ecs/quotes-api" and any("14 failed tasks" in r["msg"] for r in log.data["records"])
    diagnosis = investigate(ev, "quotes-api cannot scale out")
    assert diagnosis.category == Category.CONFIGURATION_ERROR
    assert "/prod/quotes-api/partner_api_token" in diagnosis.root_cause
