"""Stop 28: readers for evidence operators paste from CLIs (MySQL processlists grouped by user, `kubectl describe`
cut by sed, `gcloud logging read` YAML, `gcloud functions logs read` tables, Logs Insights CSV, SQL Server's
ERRORLOG, Cloud Monitoring incidents), and the rules they fed (a registry answering 5xx, webhooks refused on their
signature, quota monitors, proxy-made 503s, failures that end their log). Each test asserts the negative case too
where a rule could over-fire."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers.network.extraction import _target
from diagnosis.analyzers.network.loss import packet_loss
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

# ---------------------------------------------------------------- MySQL connections held by one user

GROUPED = """deploy@db-01:~$ sudo mysql -t -e "SELECT user, command, COUNT(*) AS n, MAX(time) AS max_s FROM information_schema.processlist GROUP BY 1,2 ORDER BY n DESC"
+------------+---------+-----+-------+
| user       | command | n   | max_s |
+------------+---------+-----+-------+
| rpt_export | Sleep   | 540 | 1500  |
| shop       | Sleep   | 40  | 3     |
| shop       | Query   | 3   | 0     |
+------------+---------+-----+-------+
deploy@db-01:~$ sudo mysqladmin processlist | head -6
+----+------------+----------------+-----------+---------+------+-------+------+
| Id | User       | Host           | db        | Command | Time | State | Info |
+----+------------+----------------+-----------+---------+------+-------+------+
| 11 | rpt_export | rpt-01:5512    | reporting | Sleep   | 1002 |       |      |
| 12 | rpt_export | rpt-01:5513    | reporting | Sleep   | 990  |       |      |
"""  # noqa: E501
VARIABLES = """deploy@db-01:~$ sudo mysql -e "SHOW GLOBAL VARIABLES LIKE 'max_connections'"
+-----------------+-------+
| Variable_name   | Value |
+-----------------+-------+
| max_connections | 600   |
+-----------------+-------+
"""


def _app_log(n: int, msg: str, start: str = "2025-03-18T14:0") -> str:
    return "".join(f"{start}{i % 10}:{i % 60:02d}Z ERROR {msg}\n" for i in range(n))


def test_connections_held_by_one_user_are_read_from_a_processlist_grouped_by_user(tmp_path: Path) -> None:
    (tmp_path / "processlist.txt").write_text(GROUPED)
    (tmp_path / "vars.txt").write_text(VARIABLES)
    (tmp_path / "shop.log").write_text(_app_log(40, "SQLSTATE[HY000] [1040] Too many connections"))
    d = investigate(load_bundle(tmp_path), "the shop throws 500s with database errors, why?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    # the grouped view (583 threads) wins over the list cut by `head`; the limit comes from SHOW VARIABLES
    assert "rpt_export holds 540" in d.root_cause and "max_connections 600" in d.root_cause
    assert d.root_cause.startswith("mysql"), d.root_cause  # no PostgreSQL name for a MySQL server


# ---------------------------------------------------------------- image pulls, from describe output cut by sed

PULLS = """$ kubectl get pods -n messaging
NAME                        READY   STATUS             RESTARTS   AGE
notifier-7bd9f46c58-6hx9w   0/1     ImagePullBackOff   0          39m
$ kubectl -n messaging describe pod notifier-7bd9f46c58-6hx9w | sed -n '/^Events:/,$p'
Events:
  Type     Reason     Age                From     Message
  ----     ------     ----               ----     -------
  Normal   Pulling    36m (x5 over 39m)  kubelet  Pulling image "quay.io/acme/notifier:1.19.3"
  Warning  Failed     36m (x5 over 39m)  kubelet  Failed to pull image "quay.io/acme/notifier:1.19.3": failed to resolve reference "quay.io/acme/notifier:1.19.3": unexpected status from HEAD request to https://quay.io/v2/acme/notifier/manifests/1.19.3: {status}
  Warning  Failed     36m (x5 over 39m)  kubelet  Error: ErrImagePull
$ date -u
Tue Jan 21 10:04:52 UTC 2025
"""  # noqa: E501


def test_events_of_a_describe_cut_by_sed_belong_to_the_pod_the_command_names(tmp_path: Path) -> None:
    (tmp_path / "pods.txt").write_text(PULLS.format(status="502 Bad Gateway"))
    ev = load_bundle(tmp_path)
    events = ev.kind("k8s/Event")
    assert events and all(e.object == "Pod/messaging/notifier-7bd9f46c58-6hx9w" for e in events)
    d = investigate(ev, "notifier pods won't start, did the 1.19.3 release break it?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "the registry quay.io answers 502 Bad Gateway" in d.root_cause


def test_a_tag_the_registry_does_not_know_stays_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "pods.txt").write_text(PULLS.format(status="404 Not Found: manifest unknown"))
    d = investigate(load_bundle(tmp_path), "notifier pods won't start, did the 1.19.3 release break it?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


# ---------------------------------------------------------------- 503s the caller's mesh proxy made


def _istio(flags: str) -> str:
    start = 1720510800
    values = [[start + 60 * i, "0" if i < 5 else "20.4"] for i in range(12)]
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {
                        "metric": {
                            "__name__": "istio_requests_rate",
                            "destination_service": "quote-svc.pricing.svc.cluster.local",
                            "response_code": "503",
                            "response_flags": flags,
                            "source_workload": "pricing-gateway",
                            "reporter": "source",
                        },
                        "values": values,
                    }
                ],
            },
        }
    )


def test_503s_an_envoy_made_for_an_in_cluster_service_that_never_answered_are_missing_evidence(tmp_path: Path) -> None:
    (tmp_path / "istio.json").write_text(_istio("UF,URX"))
    d = investigate(load_bundle(tmp_path), "pricing-gateway throws 503s, what is the root cause?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "quote-svc" in d.root_cause


def test_503s_the_in_cluster_service_answered_itself_are_its_failure(tmp_path: Path) -> None:
    (tmp_path / "istio.json").write_text(_istio("-"))
    d = investigate(load_bundle(tmp_path), "pricing-gateway throws 503s, what is the root cause?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


# ---------------------------------------------------------------- ping


PING = """[ops@web-01 ~]$ ping -c {n} tc-node3.corp.example
--- tc-node3.corp.example ping statistics ---
{n} packets transmitted, {got} received, {pct}% packet loss, time 4005ms
rtt min/avg/max/mdev = 0.311/0.402/0.522/0.071 ms
"""


def test_one_packet_lost_of_five_is_noise_and_three_of_ten_a_lossy_path(tmp_path: Path) -> None:
    (tmp_path / "ping.txt").write_text(PING.format(n=5, got=4, pct=20))
    assert packet_loss(load_bundle(tmp_path)) == []
    (tmp_path / "ping.txt").write_text(PING.format(n=10, got=7, pct=30))
    assert [f.code for f in packet_loss(load_bundle(tmp_path))] == ["packet_loss"]


# ---------------------------------------------------------------- Cloud Monitoring incidents, gcloud logging YAML


def _incident(state: str) -> dict[str, object]:
    return {
        "version": "1.2",
        "incident": {
            "incident_id": "0.abc",
            "started_at": 1741702020,
            "ended_at": 1741703460 if state == "closed" else None,
            "state": state,
            "summary": "Request latency p99 for invoice-render returned to normal.",
            "resource": {"type": "cloud_run_revision", "labels": {"service_name": "invoice-render"}},
            "metric": {"type": "run.googleapis.com/request_latencies"},
            "policy_name": "invoice-render p99 latency > 2s for 5m",
        },
    }


def test_a_cloud_monitoring_incident_is_an_alert_resolved_when_closed(tmp_path: Path) -> None:
    (tmp_path / "closed.json").write_text(json.dumps(_incident("closed")))
    (tmp_path / "open.json").write_text(json.dumps(_incident("open")))
    alerts = {a.source: a.data for a in load_bundle(tmp_path).kind("alert")}
    assert alerts["closed.json"]["status"] == "resolved" and alerts["open.json"]["status"] == "firing"
    assert alerts["open.json"]["labels"]["service"] == "invoice-render"
    assert alerts["open.json"]["labels"]["alertname"] == "invoice-render p99 latency > 2s for 5m"


GCLOUD_YAML = """sam@mbp ~ % gcloud logging read 'resource.type="cloud_run_revision"' --limit=10
---
insertId: a1
jsonPayload:
  event: twilio verify call failed
  exception: "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='verify.twilio.com', port=443): Read timed out."
  level: error
logName: projects/p/logs/run.googleapis.com%2Fstdout
resource:
  labels:
    service_name: otp-sender
  type: cloud_run_revision
severity: ERROR
timestamp: '2025-09-23T13:50:58.057129Z'
---
insertId: a2
logName: projects/p/logs/run.googleapis.com%2Fstdout
resource:
  labels:
    service_name: otp-sender
  type: cloud_run_revision
severity: INFO
textPayload: request finished
timestamp: '2025-09-23T13:50:59.000000Z'
sam@mbp ~ % date -u
Tue Sep 23 14:20:01 UTC 2025
"""


def test_gcloud_logging_read_yaml_is_read_as_log_entries_up_to_the_next_command(tmp_path: Path) -> None:
    (tmp_path / "gcloud.txt").write_text(GCLOUD_YAML)
    ev = load_bundle(tmp_path)
    assert not ev.errors
    logs = ev.kind("log")
    assert len(logs) == 1 and "otp-sender" in logs[0].object
    msgs = [r["msg"] for r in logs[0].data["records"]]
    # structlog's message is `event`; its exception rides along
    assert any(m.startswith("twilio verify call failed") and "verify.twilio.com" in m for m in msgs), msgs


# ---------------------------------------------------------------- failures that end their log


def _calls(minutes: int, clean_after: int) -> str:
    lines = [
        f"2025-09-23T13:{m:02d}:00Z ERROR payment failed: ReadTimeout: HTTPSConnectionPool(host='api.payco.example', "
        "port=443): Read timed out. (read timeout=10)"
        for m in range(minutes)
    ]
    lines += [f"2025-09-23T13:{minutes + m:02d}:30Z INFO request finished status=200" for m in range(clean_after)]
    return "\n".join(lines) + "\n"


def test_timeouts_that_are_the_last_thing_their_log_says_are_not_over(tmp_path: Path) -> None:
    (tmp_path / "checkout.log").write_text(_calls(10, 0))
    (tmp_path / "later.log").write_text("2025-09-23T13:40:00Z INFO healthcheck ok\n")  # now: 30 min after them
    d = investigate(load_bundle(tmp_path), "checkout is failing, why?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "api.payco.example" in d.root_cause


def test_timeouts_their_log_went_on_without_are_over(tmp_path: Path) -> None:
    (tmp_path / "checkout.log").write_text(_calls(10, 25))
    (tmp_path / "later.log").write_text("2025-09-23T13:40:00Z INFO healthcheck ok\n")
    d = investigate(load_bundle(tmp_path), "is checkout ok now?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- quotas, capacity columns


DBT = "".join(
    f"[2025-04-29, 04:20:{i:02d} UTC] {{subprocess.py:93}} INFO - 04:20:{i:02d}    000606 (57P03): Warehouse "
    f"'TRANSFORM_WH' cannot be resumed because resource monitor 'RM_TRANSFORM_MONTHLY' has exceeded its quota.\n"
    for i in range(12)
)


def test_a_quota_a_monitor_enforces_is_exhaustion_named_by_the_monitor(tmp_path: Path) -> None:
    (tmp_path / "dbt_build.log").write_text(DBT)
    d = investigate(load_bundle(tmp_path), "dbt nightly failed, what broke?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "RM_TRANSFORM_MONTHLY" in d.root_cause


MONITORS = """SQL> SELECT usage_date, monitor, remaining_credits FROM ops.monitor_daily ORDER BY 2, 1;
+------------+--------------+-------------------+
| usage_date | monitor      | remaining_credits |
+------------+--------------+-------------------+
| 2025-04-01 | RM_BI        |            212.40 |
| 2025-04-02 | RM_BI        |            210.90 |
| 2025-04-03 | RM_BI        |            208.30 |
| 2025-04-04 | RM_BI        |            206.00 |
| 2025-04-05 | RM_BI        |            203.30 |
| 2025-04-01 | RM_TRANSFORM |            190.20 |
| 2025-04-02 | RM_TRANSFORM |            188.70 |
| 2025-04-03 | RM_TRANSFORM |            187.90 |
| 2025-04-04 | RM_TRANSFORM |            186.10 |
| 2025-04-05 | RM_TRANSFORM |              0.00 |
+------------+--------------+-------------------+
"""


def test_remaining_credits_at_zero_is_no_data_fault(tmp_path: Path) -> None:
    (tmp_path / "monitors.txt").write_text(MONITORS)
    d = investigate(load_bundle(tmp_path), "dbt nightly failed, what broke?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


# ---------------------------------------------------------------- webhooks refused on their signature

INSIGHTS_HEADER = "@timestamp,@logStream,@message\n"


def _delivery(ts: str, ok: bool) -> str:
    body = (
        {"level": "INFO", "message": "stripe event verified", "service": "billing-webhooks"}
        if ok
        else {
            "level": "WARN",
            "message": "signature verification failed",
            "service": "billing-webhooks",
            "error": {"name": "StripeSignatureVerificationError", "message": "No signatures found matching the "
                      "expected signature for payload."},
        }
    )  # fmt: skip
    return f'{ts},2025/06/17/[47]e91e,"{json.dumps(body).replace(chr(34), chr(34) * 2)}"\n'


def _deliveries(good_before: int, bad: int, good_after: int) -> str:
    rows = [_delivery(f"2025-06-17 07:{i:02d}:00.000", True) for i in range(good_before)]
    rows += [_delivery(f"2025-06-17 07:{good_before + i:02d}:10.000", False) for i in range(bad)]
    rows += [_delivery(f"2025-06-17 07:{good_before + i:02d}:20.000", True) for i in range(good_after)]
    return INSIGHTS_HEADER + "".join(sorted(rows))


def test_logs_insights_csv_reads_the_json_message_its_level_and_service(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text(_deliveries(3, 2, 0))
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "billing-webhooks"
    assert [r["level"] for r in log.data["records"]] == ["info", "info", "info", "warn", "warn"]
    assert log.data["records"][-1]["msg"].startswith("signature verification failed: ")


def test_every_delivery_refused_on_its_signature_is_a_signing_secret_the_receiver_lacks(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text(_deliveries(5, 20, 0))
    d = investigate(load_bundle(tmp_path), "paying customers aren't upgraded - is Stripe down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "billing-webhooks" in d.root_cause and "signing secret" in d.root_cause


def test_a_few_refused_signatures_among_verified_deliveries_are_no_fault(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text(_deliveries(5, 10, 40))
    d = investigate(load_bundle(tmp_path), "paying customers aren't upgraded - is Stripe down?")
    assert d.category != Category.CONFIGURATION_ERROR, d.root_cause


# ---------------------------------------------------------------- CLI log tables, SQL Server's ERRORLOG

FUNCTION_LOGS = """$ gcloud functions logs read catalog-ingest --gen2 --limit=200
LEVEL    NAME            EXECUTION_ID  TIME_UTC                 LOG
I        catalog-ingest  fbt1y7wimr2a  2025-11-20 05:06:57.869  received gs://drop/inbound/products_20251120.ndjson
E        catalog-ingest  hp4c0frmxjfl  2025-11-20 05:07:09.108  Traceback (most recent call last):
E        catalog-ingest  hp4c0frmxjfl  2025-11-20 05:07:09.108    File "/workspace/main.py", line 88, in on_finalize
E        catalog-ingest  hp4c0frmxjfl  2025-11-20 05:07:09.108  google.api_core.exceptions.BadRequest: 400 JSON table encountered too many errors, giving up.
W        catalog-ingest  hp4c0frmxjfl  2025-11-20 05:07:10.000  retrying in 60s
"""  # noqa: E501


def test_a_log_printed_as_a_table_is_read_row_by_row_with_its_traceback_whole(tmp_path: Path) -> None:
    (tmp_path / "function-logs.txt").write_text(FUNCTION_LOGS)
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "catalog-ingest"
    records = log.data["records"]
    assert [r["level"] for r in records] == ["info", "error", "warn"]
    assert records[1]["msg"].startswith("Traceback") and records[1]["msg"].endswith("giving up.")


ERRORLOG = """2025-03-12 02:30:02.91 Backup      Database backed up. Database: FinanceDW. This is an informational message only.
2025-03-12 05:30:41.77 spid71      Error: 4864, Severity: 16, State: 1.
2025-03-12 05:30:41.77 spid71      Bulk load data conversion error (type mismatch or invalid character for the specified codepage) for row 3117, column 9 (InvoiceAmount).
2025-03-12 05:31:00.10 spid80      Error: 5701, Severity: 10, State: 1.
2025-03-12 05:31:00.10 spid80      Changed database context to 'master'.
"""  # noqa: E501


def test_sql_server_errors_are_errors_by_their_severity_with_their_message(tmp_path: Path) -> None:
    (tmp_path / "ERRORLOG.txt").write_text(ERRORLOG)
    (log,) = load_bundle(tmp_path).kind("log")
    records = log.data["records"]
    assert len(records) == 3
    assert records[1]["level"] == "error" and "Bulk load data conversion error" in records[1]["msg"]
    assert records[2]["level"] is None and "Changed database context" in records[2]["msg"]  # severity 10: info


def test_a_documentation_link_after_an_error_is_no_upstream() -> None:
    msg = (
        "request failed: sqlalchemy.exc.TimeoutError: QueuePool limit of size 10 overflow 5 reached, connection "
        "timed out, timeout 30.00 (Background on this error at: https://sqlalche.me/e/20/3o7r)"
    )
    assert _target(msg) is None
    assert _target("GET https://api.payco.example/v1/charge timed out") == "api.payco.example"


# ---------------------------------------------------------------- a server refusing its clients' credentials


def _nexus(rotated: bool, refused_share: float = 1.0) -> tuple[str, str]:
    def put(ts: str, path: str, status: int) -> str:
        return f'10.20.4.31 - - [14/Nov/2023:{ts} +0000] "PUT {path} HTTP/1.1" {status} - 0 8 "Apache-Maven/3.9.5"'

    lines = [put(f"08:{i:02d}:09", f"/repository/snapshots/a/{i}.jar", 201) for i in range(10)]  # accepted before
    for i in range(30):
        status = 401 if i < 30 * refused_share else 201
        lines.append(put(f"09:{i:02d}:36", f"/repository/snapshots/b/{i}.jar", status))
    log = "\n".join(sorted(lines, key=lambda x: x.split("[")[1])) + "\n"
    note = "2023-11-14 08:59:30,239+0000 INFO  [qtp-118] admin SecuritySystemImpl - User ci-deploy password changed\n"
    return log, (note if rotated else "2023-11-14 08:59:30,239+0000 INFO  [qtp-118] SecuritySystemImpl - started\n")


def test_writes_refused_401_since_a_credential_changed_are_its_clients_old_credential(tmp_path: Path) -> None:
    access, server = _nexus(rotated=True)
    (tmp_path / "request.log").write_text(access)
    (tmp_path / "nexus.log").write_text(server)
    d = investigate(load_bundle(tmp_path), "main builds fail at mvn deploy with 401 from nexus, is nexus broken?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "ci-deploy" in d.root_cause and "401" in d.root_cause


def test_a_few_401s_among_accepted_writes_are_no_broken_credential(tmp_path: Path) -> None:
    access, server = _nexus(rotated=False, refused_share=0.4)
    (tmp_path / "request.log").write_text(access)
    (tmp_path / "nexus.log").write_text(server)
    d = investigate(load_bundle(tmp_path), "is nexus ok?")
    assert not any(f.code == "credentials_refused" for f in d.findings), d.root_cause


def test_a_google_api_refusing_our_sender_is_our_configuration(tmp_path: Path) -> None:
    (tmp_path / "dispatcher.log").write_text(
        _app_log(30, "batch send failed: googleapi: Error 403: SenderId mismatch, senderIdMismatch")
    )
    d = investigate(load_bundle(tmp_path), "Android users stopped getting push notifications, what broke?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "the API it calls refuses" in d.root_cause


# ---------------------------------------------------------------- a reported failure nothing read shows

QUIET = "".join(f"2025-02-14T09:{i:02d}:00Z INFO GET /health 200\n" for i in range(30))


def test_a_failure_taken_as_given_is_unknown_when_nothing_read_shows_it(tmp_path: Path) -> None:
    (tmp_path / "api.log").write_text(QUIET)
    d = investigate(load_bundle(tmp_path), "why are card payments failing with 502 since 07:50 UTC?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "shows nowhere in the evidence read" in d.root_cause
    d = investigate(load_bundle(tmp_path), "customers can't redeem gift cards, the app says invalid code. why?")
    assert d.category == Category.UNKNOWN, d.root_cause
    d = investigate(load_bundle(tmp_path), "tix-api threw 500s for five minutes this morning, root cause?")
    assert d.category == Category.UNKNOWN, d.root_cause  # reported, and not even a benign trace of it
    d = investigate(load_bundle(tmp_path), "invoice search is missing overnight invoices - what's broken?")
    assert d.category == Category.UNKNOWN, d.root_cause


def test_a_question_that_asks_whether_anything_is_wrong_is_still_answered_healthy(tmp_path: Path) -> None:
    (tmp_path / "api.log").write_text(QUIET)
    d = investigate(load_bundle(tmp_path), "is anything wrong with the payments api right now?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- Log Analytics CSV, 32-bit ids, status checks

LOG_ANALYTICS = (
    "TimeGenerated [UTC],ContainerAppName_s,Log_s\n"
    + "".join(
        f'"5/28/2024, 3:{i:02d}:12.000 AM",ca-tracker,2024-05-28T03:{i:02d}:12.000Z ERROR 1 --- [worker-{i}] '
        "c.c.Ingest : insert failed; Bad value for type int : 2147483876\n"
        for i in range(12)
    )
    + '"5/28/2024, 3:12:30.000 AM",ca-tracker,2024-05-28T03:12:30.000Z  INFO 1 --- [main] c.c.Ingest : consumer up\n'
)


def test_a_log_analytics_export_is_read_with_its_app_and_levels(tmp_path: Path) -> None:
    (tmp_path / "query_data.csv").write_text(LOG_ANALYTICS)
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "ca-tracker"
    assert [r["level"] for r in log.data["records"]][-2:] == ["error", "info"]


def test_an_id_past_the_32_bit_limit_is_code_holding_it_in_32_bits(tmp_path: Path) -> None:
    (tmp_path / "query_data.csv").write_text(LOG_ANALYTICS)
    d = investigate(load_bundle(tmp_path), "carrier scans stopped being stored at 3am, did the maintenance break it?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "2147483876" in d.root_cause and "32-bit" in d.root_cause


def test_an_ordinary_number_refused_for_an_int_type_is_no_overflow(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(_app_log(12, "insert failed; Bad value for type int : 12ab"))
    d = investigate(load_bundle(tmp_path), "why are inserts failing?")
    assert not any(f.code == "int32_overflow" for f in d.findings)


def test_status_check_series_labelled_with_the_instance_are_read_as_status_checks(tmp_path: Path) -> None:
    start = "2025-10-14T02:40:00Z"
    (tmp_path / "cw.json").write_text(
        json.dumps(
            {
                "MetricDataResults": [
                    {
                        "Id": "sys",
                        "Label": "StatusCheckFailed_System i-0a7c3e91f2b45d608",
                        "Timestamps": [f"2025-10-14T02:{m:02d}:00Z" for m in range(55, 39, -1)],
                        "Values": [1.0] * 8 + [0.0] * 8,
                        "StatusCode": "Complete",
                    }
                ],
                "Messages": [],
            }
        )
    )
    d = investigate(load_bundle(tmp_path), f"the attribution batch failed after {start}, are we OOMing?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "i-0a7c3e91f2b45d608" in d.root_cause


def test_json_printed_under_its_command_with_a_note_after_it_is_read_as_that_json(tmp_path: Path) -> None:
    (tmp_path / "ec2.txt").write_text(
        "[hadoop@ip-10-31-4-10 ~]$ aws ec2 describe-instance-status --instance-ids i-0a7c3e91f2b45d608\n"
        + json.dumps({"InstanceStatuses": [{"InstanceId": "i-0a7c3e91f2b45d608", "InstanceState": {"Name": "running"},
                      "SystemStatus": {"Status": "impaired"}, "InstanceStatus": {"Status": "impaired"}}]}, indent=2)
        + "\n# (captured at 02:56 by the failure callback)\n"
    )  # fmt: skip
    ev = load_bundle(tmp_path)
    assert not ev.errors and not ev.ignored


# ---------------------------------------------------------------- hosts and links


def test_calls_with_no_route_to_host_are_a_machine_that_is_gone(tmp_path: Path) -> None:
    (tmp_path / "checkout.log").write_text(
        _app_log(20, "upstream request failed: dial tcp 10.50.7.15:27114: connect: no route to host upstream=cart-svc")
    )
    d = investigate(load_bundle(tmp_path), "checkout errors, do we need more nodes?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "no route to host" in d.root_cause


DMESG = """root@worker-07:~# dmesg -T | grep ens1f0
{downs}
root@worker-07:~# ethtool -S ens1f0 | grep -E 'rx_crc_errors_phy|link_down_events_phy'
NIC statistics:
     rx_crc_errors_phy: 18211
     link_down_events_phy: 27
root@worker-07:~# sleep 60; ethtool -S ens1f0 | grep -E 'rx_crc_errors_phy|link_down_events_phy'
NIC statistics:
     rx_crc_errors_phy: {crc_after}
     link_down_events_phy: 27
"""


def _dmesg(n_downs: int, crc_after: int) -> str:
    downs = "\n".join(
        f"[Thu Oct  3 13:{10 + 4 * i:02d}:02 2024] mlx5_core 0000:3b:00.0 ens1f0: Link down\n"
        f"[Thu Oct  3 13:{10 + 4 * i:02d}:09 2024] mlx5_core 0000:3b:00.0 ens1f0: Link up"
        for i in range(n_downs)
    )
    return DMESG.format(downs=downs, crc_after=crc_after)


def test_a_link_that_keeps_going_down_is_the_hosts_network_failing(tmp_path: Path) -> None:
    (tmp_path / "worker-07.txt").write_text(_dmesg(5, 18211))
    d = investigate(load_bundle(tmp_path), "catalog pods answer 503 through the gateway, why?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "ens1f0 on worker-07" in d.root_cause and "went down 5 times" in d.root_cause


def test_crc_errors_climbing_between_two_readings_fail_the_link_and_one_down_does_not(tmp_path: Path) -> None:
    (tmp_path / "worker-07.txt").write_text(_dmesg(1, 18977))
    d = investigate(load_bundle(tmp_path), "catalog pods answer 503 through the gateway, why?")
    assert "rx_crc_errors_phy counter climbed from 18211 to 18977" in d.root_cause, d.root_cause
    (tmp_path / "worker-07.txt").write_text(_dmesg(1, 18211))
    assert not any(f.code == "link_failing" for f in investigate(load_bundle(tmp_path)).findings)


def test_a_node_stopping_while_pods_mount_their_token_is_no_volume_fault(tmp_path: Path) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "EventList",
        "items": [
            {
                "kind": "Event",
                "type": "Warning",
                "reason": "FailedMount",
                "message": 'MountVolume.SetUp failed for volume "kube-api-access-8w2zl" : object "kube-system"/'
                '"kube-root-ca.crt" not registered',
                "involvedObject": {"kind": "Pod", "namespace": "kube-system", "name": "aws-node-t2xkq"},
                "count": 3,
                "lastTimestamp": "2025-02-11T02:05:00Z",
                "metadata": {"name": "aws-node-t2xkq.1", "namespace": "kube-system"},
            }
        ],
    }
    (tmp_path / "events.json").write_text(json.dumps(event))
    d = investigate(load_bundle(tmp_path), "we lost a node at 2am, was that a hardware failure?")
    assert not any(f.code == "volume_mount_failed" for f in d.findings), d.root_cause


def test_a_failed_job_runs_error_is_read_and_a_merge_of_duplicate_keys_is_bad_data(tmp_path: Path) -> None:
    run = {
        "metadata": {
            "job_id": 77,
            "run_id": 918273645501122,
            "run_name": "returns_merge",
            "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"},
            "end_time": 1718242913000,
        },
        "error": "[DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE] Cannot perform Merge as multiple source "
        "rows matched and attempted to modify the same target row in the Delta table.",
        "error_trace": "org.apache.spark.sql.delta.DeltaUnsupportedOperationException: ...",
    }
    (tmp_path / "runs-get-output.json").write_text(json.dumps(run))
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "job/returns_merge" and log.data["records"][0]["level"] == "error"
    d = investigate(load_bundle(tmp_path), "the returns_merge job failed overnight, was it the runtime upgrade?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
