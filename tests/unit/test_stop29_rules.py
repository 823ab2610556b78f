"""Stop 29: rules from the dev31 batch, each a mechanism rather than a stack: a client deadline shorter than its
callee's usual latency (seen in traces), a degraded provider that our own error lines name, an in-cluster Service
that only times out (also through its callers' error-ratio series), a partner file that breaks a CSV quote under a
Python traceback, spans detached from the request, memory series named after their file. Each test asserts the
negative case too where a rule could over-fire."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers._common import claimed_elsewhere
from diagnosis.analyzers.metrics import _kind
from diagnosis.analyzers.regressions import _MEMORY
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

T0 = 1737537000  # 2025-01-22 09:10:00Z

# ---------------------------------------------------------------- a deadline shorter than the callee needs


def _jaeger(server_ms: float, client_ms: float = 150.0, n: int = 3) -> dict:
    traces = []
    for i in range(n):
        tid = f"{i:032x}"
        start = (T0 + 300 + 60 * i) * 1_000_000
        spans = [
            {"traceID": tid, "spanID": f"a{i:015x}", "operationName": "POST /checkout", "references": [],
             "startTime": start, "duration": int((client_ms + 10) * 1000), "processID": "p1",
             "tags": [{"key": "error", "type": "bool", "value": True}, {"key": "span.kind", "value": "server"}]},
            {"traceID": tid, "spanID": f"b{i:015x}", "operationName": "fraud.v1.Scorer/Score",
             "references": [{"refType": "CHILD_OF", "traceID": tid, "spanID": f"a{i:015x}"}],
             "startTime": start + 1000, "duration": int(client_ms * 1000), "processID": "p1",
             "tags": [{"key": "error", "type": "bool", "value": True}, {"key": "span.kind", "value": "client"},
                      {"key": "rpc.grpc.status_code", "value": 4}]},
            {"traceID": tid, "spanID": f"c{i:015x}", "operationName": "fraud.v1.Scorer/Score",
             "references": [{"refType": "CHILD_OF", "traceID": tid, "spanID": f"b{i:015x}"}],
             "startTime": start + 2000, "duration": int(server_ms * 1000), "processID": "p2",
             "tags": [{"key": "error", "type": "bool", "value": True}, {"key": "span.kind", "value": "server"}]},
        ]  # fmt: skip
        traces.append(
            {
                "traceID": tid,
                "spans": spans,
                "processes": {
                    "p1": {"serviceName": "checkout", "tags": []},
                    "p2": {"serviceName": "fraud-scorer", "tags": []},
                },
            }
        )
    return {"data": traces, "total": 0, "limit": 0, "offset": 0, "errors": None}


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "checkout-config", "namespace": "checkout"},
             "data": {"FRAUD_SCORER_ADDR": "fraud-scorer.fraud.svc.cluster.local:50051",
                      "FRAUD_SCORER_DEADLINE": "150ms", "PAYMENTS_DEADLINE": "4s"}}  # fmt: skip


def _p50(values: list[float]) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": [{
        "metric": {"__name__": "grpc_server_handling_seconds", "job": "fraud-scorer", "quantile": "0.5"},
        "values": [[T0 + 60 * i, str(v)] for i, v in enumerate(values)]}]}}  # fmt: skip


def _deadline_bundle(tmp_path: Path, p50: list[float], server_ms: float) -> Path:
    (tmp_path / "trace.json").write_text(json.dumps(_jaeger(server_ms)))
    (tmp_path / "cm.json").write_text(json.dumps(CONFIGMAP))
    (tmp_path / "fraud-latency.json").write_text(json.dumps(_p50(p50)))
    return tmp_path


def test_a_deadline_under_the_callees_usual_latency_is_the_setting_that_sets_it(tmp_path: Path) -> None:
    d = investigate(load_bundle(_deadline_bundle(tmp_path, [0.18] * 12, 210.0)), "is fraud-scorer down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "FRAUD_SCORER_DEADLINE=150ms" in d.root_cause and "fraud-scorer" in d.root_cause


def test_a_callee_that_slowed_down_past_the_deadline_is_not_a_deadline_set_too_short(tmp_path: Path) -> None:
    # fraud-scorer answered in 30 ms until it slowed to 900 ms: the callee changed, not the deadline
    d = investigate(load_bundle(_deadline_bundle(tmp_path, [0.03] * 6 + [0.9] * 6, 900.0)), "is fraud-scorer down?")
    assert not any(f.code == "deadline_too_short" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- a degraded provider our errors name

STATUS = {"page": {"id": "x", "name": "Algolia", "url": "https://status.algolia.com"},
          "components": [{"name": "Search API - DE", "status": "major_outage"}],
          "incidents": [{"name": "Timeouts in the DE cluster", "status": "identified", "impact": "major",
                         "created_at": "2025-05-20T13:14:22Z", "started_at": "2025-05-20T13:01:00Z",
                         "incident_updates": []}],
          "status": {"indicator": "major", "description": "Partial System Outage"}}  # fmt: skip


def _search_log(message: str, n: int = 20) -> str:
    start = 1747746000  # 2025-05-20 13:00:00Z
    return "".join(
        json.dumps({"level": 50, "time": (start + 60 + 30 * i) * 1000, "hostname": "search-api-6c9d7f5b8-4lq2x",
                    "msg": "search failed", "err": {"type": "RetryError", "message": message}}) + "\n"
        for i in range(n)
    )  # fmt: skip


def test_a_degraded_provider_that_our_errors_name_is_the_failing_dependency(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text(json.dumps(STATUS))
    (tmp_path / "search-api.log").write_text(
        _search_log("Unreachable hosts - your application id may be incorrect, reach out to the Algolia Support team")
    )
    d = investigate(load_bundle(tmp_path), "search-api is returning 502s, what broke?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "Algolia" in d.root_cause and "search-api" in d.root_cause
    # "Unreachable hosts" is a client that reached none of its servers, not a bug in ours
    assert not any(f.code == "exception" for f in d.findings)


def test_a_degraded_provider_our_errors_do_not_name_stays_a_weak_candidate(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text(json.dumps(STATUS))
    (tmp_path / "search-api.log").write_text(_search_log("KeyError: 'facets'"))
    d = investigate(load_bundle(tmp_path), "search-api is returning 502s, what broke?")
    provider = [f for f in d.findings if f.code == "provider_degraded"]
    assert provider and all(f.score < 0.5 for f in provider)


# ---------------------------------------------------------------- an in-cluster Service that only times out

GW_LOG = "".join(
    f'{{"level":"error","ts":"2025-08-14T19:{31 + i // 6:02d}:{(i * 10) % 60:02d}Z","msg":"ledger hold failed: '
    f'Post \\"http://ledger.payments.svc.cluster.local:8080/v1/holds\\": dial tcp 10.52.14.9:8080: i/o timeout"}}\n'
    for i in range(30)
)


def _ratio() -> dict:
    start = 1755199800  # 2025-08-14 19:30:00Z
    result = [{"metric": {"upstream": up}, "values": [[start - 600 + 60 * i, str(0.33 if up == "ledger" and i > 10
               else 0.0003)] for i in range(25)]} for up in ("ledger", "tax")]  # fmt: skip
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_timeouts_and_an_error_ratio_against_an_in_cluster_service_leave_its_cause_unknown(tmp_path: Path) -> None:
    (tmp_path / "checkout-gw.log").write_text(GW_LOG)
    (tmp_path / "upstream-error-ratio.json").write_text(json.dumps(_ratio()))
    alert = {"version": "4", "status": "firing", "receiver": "pager", "groupKey": "g", "groupLabels": {},
             "commonLabels": {}, "commonAnnotations": {}, "externalURL": "", "truncatedAlerts": 0,
             "alerts": [{"status": "firing", "labels": {"alertname": "CheckoutUpstreamErrorRatio",
                                                         "service": "checkout-gw", "upstream": "ledger"},
                         "annotations": {}, "startsAt": "2025-08-14T19:34:27Z", "endsAt": "0001-01-01T00:00:00Z",
                         "generatorURL": "", "fingerprint": "f1"}]}  # fmt: skip
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    d = investigate(load_bundle(tmp_path), "a third of checkouts fail since 19:31, what's the root cause?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert any("ledger" in m for m in d.missing), d.missing


# ---------------------------------------------------------------- a partner file that breaks a CSV quote

IMPORT_LOG = """2025-06-09 03:08:14,602 INFO  catalog_import.main: catalog-import 1.9.4 starting partner=brightline
2025-06-09 03:08:17,993 INFO  catalog_import.sftp: downloaded brightline_catalog_20250609.csv (18433021 bytes)
2025-06-09 03:08:18,457 INFO  catalog_import.db: COPY staging_catalog FROM STDIN WITH (FORMAT csv, HEADER true)
2025-06-09 03:08:31,772 ERROR catalog_import.main: import failed, staging left empty
Traceback (most recent call last):
  File "/app/catalog_import/main.py", line 88, in run
    db.copy_csv(path, table="staging_catalog")
  File "/usr/local/lib/python3.12/site-packages/psycopg/connection.py", line 969, in wait
    return waiting.wait(gen, self.pgconn.socket, timeout=timeout)
psycopg.errors.BadCopyFileFormat: unterminated CSV quoted field
CONTEXT:  COPY staging_catalog, line 48214: "88310457,BL-PS-12,"Cast iron pizza stone 12" round",34.99"
2025-06-09 03:08:31,775 INFO  catalog_import.main: exit 1
"""


def test_a_csv_quote_broken_in_a_partner_file_is_bad_data_under_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "catalog-import.log").write_text(IMPORT_LOG)
    d = investigate(load_bundle(tmp_path), "the 03:08 catalog-import job failed; what happened?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "brightline_catalog_20250609.csv" in d.root_cause and "quoted field" in d.root_cause
    # the traceback was printed with the ERROR line above it
    tb = next(r for r in load_bundle(tmp_path).kind("log")[0].data["records"] if r["msg"].startswith("Traceback"))
    assert tb["ts"] is not None


def test_a_stack_frames_source_code_is_not_read_as_the_error() -> None:
    frames = (
        'Traceback (most recent call last):\n  File "/x/psycopg/connection.py", line 969, in wait\n'
        "    return waiting.wait(gen, timeout=timeout)\nValueError: bad row"
    )
    assert not claimed_elsewhere(frames)
    assert claimed_elsewhere(frames.replace("ValueError: bad row", "TimeoutError: timed out"))


# ---------------------------------------------------------------- spans detached from the request


def test_a_span_that_follows_from_the_request_is_off_its_path_and_no_hotspot(tmp_path: Path) -> None:
    traces = []
    for i in range(4):
        tid, start = f"{i + 1:032x}", (T0 + 60 * i) * 1_000_000
        spans = [
            {"traceID": tid, "spanID": f"a{i:015x}", "operationName": "GET /product", "references": [],
             "startTime": start, "duration": 40_000, "processID": "p1", "tags": []},
            {"traceID": tid, "spanID": f"b{i:015x}", "operationName": "GET /v1/item",
             "references": [{"refType": "CHILD_OF", "traceID": tid, "spanID": f"a{i:015x}"}],
             "startTime": start + 1000, "duration": 30_000, "processID": "p2", "tags": []},
            {"traceID": tid, "spanID": f"c{i:015x}", "operationName": "prefetch recommendations",
             "references": [{"refType": "FOLLOWS_FROM", "traceID": tid, "spanID": f"a{i:015x}"}],
             "startTime": start + 41_000, "duration": 1_300_000, "processID": "p3", "tags": []},
        ]  # fmt: skip
        traces.append({"traceID": tid, "spans": spans, "processes": {
            "p1": {"serviceName": "storefront-bff"}, "p2": {"serviceName": "catalog-api"},
            "p3": {"serviceName": "recs-prefetcher"}}})  # fmt: skip
    (tmp_path / "traces.json").write_text(json.dumps({"data": traces}))
    d = investigate(load_bundle(tmp_path), "is the product page slow?")
    assert not any("recs-prefetcher" in f.title and f.role != "benign" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- series named after their file, gRPC codes


def test_a_memory_series_named_after_its_file_is_memory_and_a_failed_grpc_code_counts_errors() -> None:
    assert _MEMORY.search("prom-working-set") and _kind("prom-working-set", {}) == "memory"
    assert _kind("prom-checkout-grpc-client", {"grpc_code": "DeadlineExceeded"}) == "errors"
    assert _kind("prom-checkout-grpc-client", {"grpc_code": "OK"}) != "errors"


# ---------------------------------------------------------------- dev32: warehouses, heaps, hardware, dead letters

DAGSTER = """2024-04-03 02:06:42 +0000 - dagster - DEBUG - ledger_nightly - 8c1f2e07 - load_gl_entries - STEP_START
2024-04-03 02:06:42 +0000 - dagster - INFO - ledger_nightly - 8c1f2e07 - load_gl_entries - COPY stg.gl_entries FROM s3
2024-04-03 02:31:58 +0000 - dagster - ERROR - ledger_nightly - 8c1f2e07 - load_gl_entries - STEP_FAILURE - step failed.

dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op "load_gl_entries"::

psycopg2.errors.InternalError_: Disk Full
DETAIL:
  error:  Disk Full
  code:      1016

2024-04-03 02:31:59 +0000 - dagster - ERROR - ledger_nightly - 8c1f2e07 - RUN_FAILURE - Execution of run failed.
"""


def test_a_warehouse_saying_disk_full_is_out_of_storage_not_a_bug(tmp_path: Path) -> None:
    (tmp_path / "dagster-run.log").write_text(DAGSTER)
    d = investigate(load_bundle(tmp_path), "why did load_gl_entries fail?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "storage" in d.root_cause


def test_a_parquet_column_of_another_type_is_bad_data() -> None:
    from diagnosis.analyzers.logs._shared import BAD_DATA

    msg = (
        "org.apache.spark.sql.execution.QueryExecutionException: Parquet column cannot be converted in file "
        "s3://in/payouts.parquet. Column: [amount], Expected: decimal(18,2), Found: DOUBLE"
    )
    assert BAD_DATA.search(msg)


REPORTGEN = """2025-02-11 10:30:02,004 INFO  [reportgen.scheduler] run 20250211-1030 started: 42 tenants
2025-02-11 10:31:54,512 ERROR [reportgen.upload] upload failed for tenant t-1042: AccessDenied: not authorized to perform: s3:PutObject
2025-02-11 10:31:58,630 ERROR [reportgen.upload] upload failed for tenant t-1043: AccessDenied: not authorized to perform: s3:PutObject
2025-02-11 10:32:04,630 ERROR [reportgen.upload] upload failed for tenant t-1044: AccessDenied: not authorized to perform: s3:PutObject
2025-02-11 10:58:40,212 INFO  [reportgen.scheduler] run 20250211-1030 finished: {ok} ok, {failed} failed
"""  # noqa: E501


def test_errors_of_a_run_that_finished_failed_are_not_over(tmp_path: Path) -> None:
    (tmp_path / "reportgen.log").write_text(REPORTGEN.format(ok=0, failed=42))
    d = investigate(load_bundle(tmp_path), "reportgen failed every tenant, why?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    # the same errors followed by a run that finished clean are over
    (tmp_path / "reportgen.log").write_text(REPORTGEN.format(ok=42, failed=0))
    d = investigate(load_bundle(tmp_path), "reportgen failed every tenant, why?")
    assert d.category != Category.CONFIGURATION_ERROR, d.root_cause


def test_a_curl_5xx_names_the_url_it_fetched(tmp_path: Path) -> None:
    (tmp_path / "session.txt").write_text(
        "$ curl -si https://schema-registry.internal/schemas/ids/1187\nHTTP/2 503\nserver: awselb/2.0\n"
    )
    records = [r for i in load_bundle(tmp_path).kind("log") for r in i.data["records"]]
    assert any("HTTP/2 503 from https://schema-registry.internal/schemas/ids/1187" in r["msg"] for r in records)


def _series(name: str, pod: str, values: list[float], area: str | None = None) -> dict:
    labels = {"__name__": name, "pod": pod, "namespace": "ledger"} | ({"area": area} if area else {})
    return {"metric": labels, "values": [[T0 + 60 * i, str(v)] for i, v in enumerate(values)]}


def _heap_bundle(tmp_path: Path, live: list[float]) -> Path:
    mib = 1 << 20
    heap = [(400 + (i % 6) * 200) * mib for i in range(36)]  # fills to 1.4G, collected back to 400M, again and again
    prom = {"status": "success", "data": {"resultType": "matrix", "result": [
        _series("jvm_memory_used_bytes", "statements-7b4d8f6c59-f2wnm", heap, "heap"),
        _series("jvm_gc_live_data_size_bytes", "statements-7b4d8f6c59-f2wnm", [v * mib for v in live])]}}  # fmt: skip
    (tmp_path / "prom.json").write_text(json.dumps(prom))
    alert = {"version": "4", "status": "firing", "receiver": "r", "groupKey": "g", "groupLabels": {},
             "commonLabels": {}, "commonAnnotations": {}, "externalURL": "", "truncatedAlerts": 0,
             "alerts": [{"status": "firing", "labels": {"alertname": "JvmHeapUsageHigh", "namespace": "ledger",
                                                         "pod": "statements-7b4d8f6c59-f2wnm"},
                         "annotations": {}, "startsAt": "2025-01-22T09:40:00Z", "endsAt": "0001-01-01T00:00:00Z",
                         "generatorURL": "", "fingerprint": "f"}]}  # fmt: skip
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    return tmp_path


def test_a_heap_alert_on_a_collected_heap_with_a_flat_live_set_is_a_false_alarm(tmp_path: Path) -> None:
    d = investigate(load_bundle(_heap_bundle(tmp_path, [390.0] * 36)), "is statements leaking?")
    assert d.category == Category.HEALTHY, d.root_cause
    assert any(f.code == "heap_collected" for f in d.findings)


def test_a_live_set_that_grows_is_no_false_alarm(tmp_path: Path) -> None:
    d = investigate(load_bundle(_heap_bundle(tmp_path, [390.0 + 20 * i for i in range(36)])), "is statements leaking?")
    assert not any(f.code == "heap_collected" for f in d.findings)


STATUS_EVENTS = """$ aws ec2 describe-instance-status --instance-ids i-0c7e3f9a21b4d5e68
{
    "InstanceStatuses": [
        {
            "AvailabilityZone": "eu-central-1c",
            "InstanceId": "i-0c7e3f9a21b4d5e68",
            "InstanceState": {"Code": 16, "Name": "running"},
            "Events": [{"Code": "instance-stop", "Description": "%s", "NotBefore": "2025-02-05T11:00:00.000Z"}],
            "InstanceStatus": {"Details": [{"Name": "reachability", "Status": "passed"}], "Status": "ok"},
            "SystemStatus": {"Details": [{"Name": "reachability", "Status": "passed"}], "Status": "ok"}
        }
    ]
}
"""


def test_an_instance_scheduled_off_degraded_hardware_is_failing_though_its_checks_pass(tmp_path: Path) -> None:
    (tmp_path / "status.txt").write_text(STATUS_EVENTS % "The instance is running on degraded hardware")
    d = investigate(load_bundle(tmp_path), "quotes p99 is high on one host, why?")
    assert d.category == Category.INFRASTRUCTURE and "i-0c7e3f9a21b4d5e68" in d.root_cause, d.root_cause
    (tmp_path / "status.txt").write_text(STATUS_EVENTS % "Scheduled reboot for maintenance")
    d = investigate(load_bundle(tmp_path), "quotes p99 is high on one host, why?")
    assert d.category != Category.INFRASTRUCTURE, d.root_cause


def test_a_dead_lettered_outcome_counts_as_failures() -> None:
    assert _kind("prom-stockpile-outcomes", {"outcome": "dead_lettered"}) == "errors"
    assert _kind("prom-stockpile-outcomes", {"outcome": "upserted"}) != "errors"


# ---------------------------------------------------------------- ECS tasks, and hot code under a traffic surge


def _task(task_id: str, reason: str, code: int | None) -> dict:
    container = {"name": "renderer", "image": "ecr/renderer:v2.31.0", "lastStatus": "STOPPED", "reason": reason,
                 "memory": "512"} | ({"exitCode": code} if code is not None else {})  # fmt: skip
    return {"taskArn": f"arn:aws:ecs:eu-west-1:1:task/web-prod/{task_id}", "group": "service:renderer",
            "lastStatus": "STOPPED", "memory": "512", "startedAt": "2025-06-20T10:14:49Z",
            "stoppedAt": "2025-06-20T17:15:09Z", "stoppedReason": "Essential container in task exited",
            "containers": [container]}  # fmt: skip


def test_ecs_tasks_stopped_for_memory_are_oom_kills_of_their_service(tmp_path: Path) -> None:
    oom = "OutOfMemoryError: Container killed due to memory usage"
    tasks = {"tasks": [_task("3e8a1c6f5d9b", oom, 137), _task("8b1e5f3d2c1a", oom, 137)], "failures": []}
    (tmp_path / "stopped-tasks.json").write_text(json.dumps(tasks))
    d = investigate(load_bundle(tmp_path), "renderer tasks keep getting killed, why?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "512MiB" in d.root_cause and "the same on 1 more" in d.root_cause and not d.other_causes
    # a task that could not pull its image is a start error, not a memory kill
    (tmp_path / "stopped-tasks.json").write_text(
        json.dumps({"tasks": [_task("3e8a1c6f5d9b", "CannotPullContainerError: pull access denied", None)]})
    )
    states = load_bundle(tmp_path).kind("container/state")
    assert states and not states[0].data["oom_killed"] and "CannotPull" in states[0].data["error"]


PPROF = """$ go tool pprof -top -nodecount=5 renderer.cpu.pprof
Type: cpu
Time: Jun 20, 2025 at 5:13pm (UTC)
Duration: 30s, Total samples = 28.50s (95.00%)
Showing nodes accounting for 26.1s, 91.58% of 28.50s total
      flat  flat%   sum%        cum   cum%
    17.40s 61.05% 61.05%     17.40s 61.05%  image.NewRGBA
     4.10s 14.39% 75.44%      4.10s 14.39%  image/png.(*encoder).writeImage
     2.30s  8.07% 83.51%      2.30s  8.07%  runtime.memmove
"""


def _requests(values: list[float]) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": [{
        "metric": {"__name__": "http_requests_total_rate", "job": "renderer"},
        "values": [[T0 + 60 * i, str(v)] for i, v in enumerate(values)]}]}}  # fmt: skip


def test_a_hot_function_under_a_tripled_load_is_no_longer_a_strong_defect(tmp_path: Path) -> None:
    (tmp_path / "pprof.txt").write_text(PPROF)
    (tmp_path / "requests.json").write_text(json.dumps(_requests([100.0] * 6)))
    steady = [f for f in investigate(load_bundle(tmp_path)).findings if f.code == "cpu_hotspot"]
    (tmp_path / "requests.json").write_text(json.dumps(_requests([100.0] * 3 + [300.0] * 3)))
    surged = [f for f in investigate(load_bundle(tmp_path)).findings if f.code == "cpu_hotspot"]
    assert steady and surged and steady[0].score >= 0.8 > surged[0].score
    assert "traffic rose 3.0x" in surged[0].mechanism


# ---------------------------------------------------------------- dev33: diffs, versions, providers, binds

GIT_SHOW = """$ git -C deploy show 5e02b1f
commit 5e02b1f6d0a9c4b7e3f28a11c95d0e6b4f7a2c81
Author: r.o <r.o@example.internal>
Date:   Tue May 21 14:06:17 2024 +0000

    trim JVM and pool settings for the ts-order-service configmap

diff --git a/overlays/prod/ts-order-service/configmap.yaml b/overlays/prod/ts-order-service/configmap.yaml
index 3f1a2c9..b84e0d7 100644
--- a/overlays/prod/ts-order-service/configmap.yaml
+++ b/overlays/prod/ts-order-service/configmap.yaml
@@ -8,4 +8,4 @@ data:
     spring.datasource.username: ts
-    spring.datasource.hikari.maximum-pool-size: "{old}"
+    spring.datasource.hikari.maximum-pool-size: "{new}"
     server.tomcat.threads.max: "200"
"""
POOL_LOG = "".join(
    f"2024-05-21T14:{12 + i:02d}:06Z ERROR [ts-order-service] HikariPool-1 - Connection is not available, "
    "request timed out after 30000ms.\n"
    for i in range(8)
)


def test_a_commit_that_cut_the_pool_size_before_the_pool_ran_dry_is_the_cause(tmp_path: Path) -> None:
    (tmp_path / "deploy-repo.txt").write_text(GIT_SHOW.format(old=20, new=2))
    (tmp_path / "ts-order-service.log").write_text(POOL_LOG)
    diffs = load_bundle(tmp_path).kind("change/diff")
    assert diffs and diffs[0].data["files"][0]["settings"] == [
        {"key": "spring.datasource.hikari.maximum-pool-size", "old": "20", "new": "2"}
    ]
    d = investigate(load_bundle(tmp_path), "bookings time out since 14:11, which service is the root cause?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "maximum-pool-size" in d.root_cause and "from 20 to 2" in d.root_cause
    # a commit that raised the pool is no cause of a pool running dry
    (tmp_path / "deploy-repo.txt").write_text(GIT_SHOW.format(old=20, new=40))
    d = investigate(load_bundle(tmp_path), "bookings time out since 14:11, which service is the root cause?")
    assert not any(f.code == "setting_cut" for f in d.findings)


def _exceptions(rows: list[tuple[str, str, int]]) -> dict:
    """A Log Analytics query result: exceptions counted by version and type."""
    cols = [{"name": "timestamp", "type": "datetime"}, {"name": "application_Version", "type": "string"},
            {"name": "type", "type": "string"}, {"name": "method", "type": "string"},
            {"name": "count_", "type": "long"}]  # fmt: skip
    data = [[f"2024-11-05T{9 + i % 3:02d}:00:00Z", v, t, "Pricing.TierResolver.Resolve", n] for i, (v, t, n) in
            enumerate(rows)]  # fmt: skip
    return {"tables": [{"name": "PrimaryResult", "columns": cols, "rows": data}]}


def test_an_exception_only_the_new_version_throws_is_its_defect(tmp_path: Path) -> None:
    bad = "System.InvalidOperationException"
    new_only = [("3.3.2", "System.TimeoutException", 4), ("3.4.0", "System.TimeoutException", 5),
                ("3.4.0", bad, 900), ("3.4.0", bad, 800)]  # fmt: skip
    (tmp_path / "exceptions.json").write_text(json.dumps(_exceptions(new_only)))
    found = [f for f in investigate(load_bundle(tmp_path)).findings if f.code == "new_exception"]
    assert len(found) == 1 and "3.4.0" in found[0].title and "InvalidOperationException" in found[0].title
    # thrown by the old version as well: not new
    both = [*new_only, ("3.3.2", "System.InvalidOperationException", 700)]
    (tmp_path / "exceptions.json").write_text(json.dumps(_exceptions(both)))
    assert not any(f.code == "new_exception" for f in investigate(load_bundle(tmp_path)).findings)


def test_a_cloud_health_issue_with_the_functions_we_run_on_is_infrastructure(tmp_path: Path) -> None:
    events = [{"arn": "arn:aws:health:eu-west-1::event/LAMBDA/X", "service": "LAMBDA",
               "eventTypeCode": "AWS_LAMBDA_OPERATIONAL_ISSUE", "eventTypeCategory": "issue", "region": "eu-west-1",
               "startTime": "2024-10-08T10:38:00+00:00", "statusCode": "open"}]  # fmt: skip
    (tmp_path / "health.txt").write_text("$ aws health describe-events --query 'events[0:2]'\n" + json.dumps(events))
    d = investigate(load_bundle(tmp_path), "our step functions fail with Lambda errors, is it our change?")
    assert d.category == Category.INFRASTRUCTURE and "LAMBDA" in d.root_cause, d.root_cause


ZK = "".join(
    f"2024-09-17 02:{11 + i:02d}:49,101 [myid:3] - ERROR [ListenerHandler-zk03.prod/10.20.4.13:3888:"
    "QuorumCnxManager$Listener$ListenerHandler@1099] - Exception while listening to address "
    "zk03.prod/10.20.4.13:3888\njava.net.BindException: Cannot assign requested address\n"
    for i in range(6)
)


def test_a_server_that_cannot_bind_its_configured_address_is_misconfigured(tmp_path: Path) -> None:
    (tmp_path / "zookeeper-zk02.log").write_text(ZK)
    d = investigate(load_bundle(tmp_path), "the ensemble has no quorum, network problem?")
    assert d.category == Category.CONFIGURATION_ERROR and "cannot bind" in d.root_cause, d.root_cause
    assert not any(f.code == "ephemeral_ports_exhausted" for f in d.findings)


def test_a_thread_the_jvm_cannot_create_is_the_thread_limit_not_memory() -> None:
    from diagnosis.analyzers.logs._shared import APP_OOM

    assert not APP_OOM.search("java.lang.OutOfMemoryError: unable to create native thread: possibly out of memory")
    assert APP_OOM.search("java.lang.OutOfMemoryError: Java heap space")


# ---------------------------------------------------------------- dev34: CSV under its command, cut pastes

BLOCKING = """$ psql -X --csv -h pg-billing-01 -U postgres billing -f blocking.sql
pid,usename,application_name,state,wait_event_type,mode,granted,relation,blocked_by,xact_age,query
48213,billing_reconciler,billing-reconciler 2.7.0,idle in transaction,Client,RowShareLock,t,invoices,{},00:47:55.00,"SELECT id FROM invoices WHERE batch_id = $1 FOR UPDATE"
51022,flyway,Flyway by Redgate,active,Lock,AccessExclusiveLock,f,invoices,{48213},00:35:00.03,ALTER TABLE invoices ADD COLUMN dunning_level smallint
51041,billing_api,billing-api,active,Lock,AccessShareLock,f,invoices,{51022},00:34:58.21,"SELECT count(*) FROM invoices WHERE customer_id = $1"
[... 180 more billing-api rows, all blocked_by {51022}, trimmed when pasting ...]
51057,billing_api,billing-api,active,Lock,AccessShareLock,f,invoices,{51022},00:34:48.15,"SELECT number FROM invoices WHERE id = $1"
$ date -u
Thu Oct  2 16:41:00 UTC 2025
"""  # noqa: E501


def test_csv_printed_under_its_command_and_cut_in_the_paste_is_read(tmp_path: Path) -> None:
    (tmp_path / "blocking.txt").write_text(BLOCKING)
    ev = load_bundle(tmp_path)
    sessions = {s.data["pid"]: s.data for s in ev.kind("pg/session")}
    assert not ev.errors and set(sessions) == {48213, 51022, 51041, 51057}
    assert sessions[51022]["blocked_by"] == [48213]
    d = investigate(ev, "billing-api has been timing out since 16:05, roll back the deploy?")
    assert d.category == Category.CODE_DEFECT and "48213" in d.root_cause and "idle in transaction" in d.root_cause
