"""Signals a blind batch of scenarios showed the engine misread: a maintenance failover that completed, an alert
notified firing and then resolved, a replica a few milliseconds behind, many unrelated hosts failing at once
(the callers' way out, not each host), and CloudWatch Logs Insights results."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from diagnosis.analyzers.alerts import alertmanager_alerts
from diagnosis.analyzers.database import database
from diagnosis.analyzers.metrics import metric_series
from diagnosis.analyzers.network import network_failures
from diagnosis.bundle import load_bundle
from diagnosis.evidence import EvidenceSet
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.unit._evidence_builders import T0, Builder, by_code, causes, series
from tests.unit._k8s_evidence import NOW, alert


def test_a_maintenance_failover_that_completed_is_planned_not_a_host_failure() -> None:
    b = Builder()
    b.rds_event("basket-cache", "Failover to replica node basket-cache-002 initiated for service update during "
                "maintenance window", T0)  # fmt: skip
    b.rds_event("basket-cache", "Failover from primary node basket-cache-001 to replica node 002 completed", T0 + 20)
    found = database(b.set())
    assert by_code(found, "db_failover_planned") and not causes(found)
    b = Builder()
    b.rds_event("orders-db", "Multi-AZ instance failover started.", T0)
    b.rds_event("orders-db", "Multi-AZ instance failover completed.", T0 + 60)
    assert by_code(database(b.set()), "db_failover")  # no word of planned work: a host failure


def test_an_alert_notified_firing_then_resolved_is_resolved() -> None:
    firing = alert("BasketApiHighErrorRate", starts=NOW - 600, fingerprint="f1")
    resolved = alert("BasketApiHighErrorRate", status="resolved", starts=NOW - 600, ends=NOW - 300, fingerprint="f1")
    for order in ([firing, resolved], [resolved, firing]):
        [f] = alertmanager_alerts(EvidenceSet(order))
        assert f.role == "benign" and "resolved" in f.title


def test_a_replica_milliseconds_behind_is_in_sync() -> None:
    b = Builder()
    b.metric("ReplicationLag", series(T0, 60, [0.01] * 30 + [0.06, 0.05, 0.06, 0.05]), {"CacheClusterId": "c-001"})
    assert all(f.role == "benign" for f in metric_series(b.set()))
    b = Builder()
    b.metric("ReplicationLag", series(T0, 60, [0.5] * 30 + [40.0, 55.0, 70.0, 90.0]), {"CacheClusterId": "c-001"})
    assert [f.role for f in metric_series(b.set())] == ["symptom"]


HOSTS = ["hooks.acme-retail.example", "notify.redfern.example", "api.brightpath.example", "events.quill.example"]


def _timeouts(hosts: list[str]) -> EvidenceSet:
    b = Builder()
    lines = [
        (T0 + 60 * i + j, "error", f"delivery failed: ConnectTimeout: HTTPSConnectionPool(host='{h}', port=443): "
         "Max retries exceeded (connect timeout=5)")
        for i in range(5) for j, h in enumerate(hosts)
    ]  # fmt: skip
    b.log("lambda/webhook-dispatcher", lines)
    return b.set()


def test_many_unrelated_hosts_timing_out_at_once_point_at_the_callers_way_out() -> None:
    found = network_failures(_timeouts(HOSTS))
    [egress] = by_code(found, "egress_failing")
    assert egress.needs and "NAT" in egress.needs[0]
    assert not causes(found)  # no host is blamed
    d = investigate(_timeouts(HOSTS), "why are deliveries failing?")
    assert d.category is Category.UNKNOWN and "webhook-dispatcher" in d.root_cause


def test_one_host_timing_out_is_that_dependency() -> None:
    found = network_failures(_timeouts(HOSTS[:1]))
    assert not by_code(found, "egress_failing")
    assert [f.category for f in causes(found)] == [Category.DEPENDENCY_FAILURE]


def test_logs_insights_results_are_read_as_the_function_log(tmp_path: Path) -> None:
    ptr = base64.b64encode(b"\n\x7f\nF\nB123456789012:/aws/lambda/statement-ingest\x10\x04").decode()
    row = lambda ts, msg: [  # noqa: E731
        {"field": "@timestamp", "value": ts},
        {"field": "@logStream", "value": "2025/09/03/[$LATEST]2278b5a32377965c310705f463e965b6"},
        {"field": "@message", "value": msg},
        {"field": "@ptr", "value": ptr},
    ]
    doc = {
        "results": [
            row("2025-09-03 12:33:16.510", "[ERROR] InvalidOperation: [<class 'decimal.ConversionSyntax'>]"),
            row("2025-09-03 12:30:01.000", "START RequestId: 1e35 Version: $LATEST"),
        ],
        "statistics": {"recordsMatched": 2.0},
        "status": "Complete",
    }
    (tmp_path / "results.json").write_text(json.dumps(doc))
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    (log,) = ev.kind("log")
    assert log.object == "lambda/statement-ingest"
    assert [r["msg"][:5] for r in log.data["records"]] == ["START", "[ERRO"]  # oldest first


def test_a_bare_prompt_that_ends_a_pasted_session_is_not_part_of_the_json(tmp_path: Path) -> None:
    text = (
        "[cloudshell-user@ip-10-2-41-7 ~]$ aws logs get-query-results --query-id 1\n"
        + json.dumps({"results": [], "status": "Complete"}, indent=2)
        + "\n[cloudshell-user@ip-10-2-41-7 ~]$ aws ecs list-services\n"
        + json.dumps({"serviceArns": []})
        + "\n[cloudshell-user@ip-10-2-41-7 ~]$ \n"
    )
    (tmp_path / "session.txt").write_text(text)
    assert not load_bundle(tmp_path).errors


RESOLV = """ops@payouts-01:~$ cat /etc/resolv.conf
# Managed by Ansible
search payments.internal
nameserver 10.40.0.2
nameserver 10.40.8.53
options timeout:5 attempts:2
ops@payouts-01:~$ dig api.bank.example +tries=1
;; communications error to 10.40.0.2#53: timed out
;; Got answer:
;; SERVER: 10.40.8.53#53(10.40.8.53) (UDP)
"""


def test_a_silent_first_nameserver_in_resolv_conf_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "shell.txt").write_text(RESOLV)
    ev = load_bundle(tmp_path)
    [conf] = ev.kind("host/resolv")
    assert conf.data["nameservers"] == ["10.40.0.2", "10.40.8.53"] and conf.data["timeout_s"] == 5
    d = investigate(ev, "why are payouts slow?")
    assert d.category is Category.CONFIGURATION_ERROR, d.root_cause
    assert "10.40.0.2" in d.root_cause and "resolv.conf" in d.root_cause


def test_a_silent_second_nameserver_is_not_the_cause(tmp_path: Path) -> None:
    (tmp_path / "shell.txt").write_text(RESOLV.replace("to 10.40.0.2#53", "to 10.40.8.53#53"))
    assert not by_code(network_failures(load_bundle(tmp_path)), "dead_nameserver")


def _renderer_timeouts(tmp_path: Path) -> Path:
    access, errors = [], []
    for i in range(20):
        ip = f"10.244.{i % 3}.31"
        access.append(
            f'10.224.0.4 - - [14/Jan/2026:07:{30 + i}:28 +0000] "GET /invoices/INV-{i}/pdf HTTP/1.1" 504 160 "-" '
            f'"worker/4.3" 412 60.001 [billing-invoice-renderer-80] [] {ip}:8080 0 60.001 504 aa{i:04d}'
        )
        errors.append(
            f"2026/01/14 07:{30 + i}:28 [error] 33#29: *66709{i:02d} upstream timed out (110: Operation timed out) "
            "while reading response header from upstream, client: 10.224.0.4, server: billing.example.net, "
            f'request: "GET /invoices/INV-{i}/pdf HTTP/1.1", upstream: "http://{ip}:8080/invoices/INV-{i}/pdf"'
        )
    (tmp_path / "controller.log").write_text("\n".join(access + errors) + "\n")
    return tmp_path


def test_timeouts_of_the_service_asked_about_with_nothing_from_it_are_missing_evidence(tmp_path: Path) -> None:
    ev = load_bundle(_renderer_timeouts(tmp_path))
    d = investigate(ev, "what's wrong with invoice-renderer?")
    assert d.category is Category.UNKNOWN, d.root_cause
    assert any("invoice-renderer itself" in m for m in d.missing)
    # asked about its caller, the same timeouts are the caller's failing dependency
    d = investigate(ev, "why are invoice downloads failing?")
    assert d.category is Category.DEPENDENCY_FAILURE, d.root_cause
    assert "billing-invoice-renderer" in d.root_cause


def test_a_gateway_failure_line_is_tied_to_its_request_target(tmp_path: Path) -> None:
    lines = []
    for i in range(6):
        rid = f"bdfa2931-440a-44b2-a41c-ac2b267ab7{i:02d}"
        lines += [
            f"2025-07-08T13:4{i}:00.000000 ({rid}) Sending request to https://api.scribeline.example/v2/jobs",
            f"2025-07-08T13:4{i}:29.000000 ({rid}) Execution failed due to a timeout error",
            f"2025-07-08T13:4{i}:29.001000 ({rid}) Method completed with status: 504",
        ]
    (tmp_path / "execution.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why does transcription fail?")
    assert d.category is Category.DEPENDENCY_FAILURE and "api.scribeline.example" in d.root_cause, d.root_cause


def test_a_json_key_ending_in_error_is_not_an_exception(tmp_path: Path) -> None:
    rows = [
        {"requestTime": f"2025-07-08T13:{20 + i}:00Z", "httpMethod": "GET", "status": "200", "integrationError": "-"}
        for i in range(5)
    ]
    (tmp_path / "access.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    d = investigate(load_bundle(tmp_path), None)
    assert d.category is not Category.CODE_DEFECT, d.root_cause


def test_asking_about_the_caller_keeps_its_failing_dependency(tmp_path: Path) -> None:
    lines = [
        f"2026-01-14T07:{30 + i}:00Z ERROR orders-api upstream payments-api timed out after 5000ms" for i in range(20)
    ]
    (tmp_path / "app.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why is orders-api failing?")
    assert d.category is Category.DEPENDENCY_FAILURE and "payments-api" in d.root_cause, d.root_cause
