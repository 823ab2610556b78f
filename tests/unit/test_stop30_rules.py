"""Stop 30: rules from the dev35 batch (identity, storage and deploy pipelines), each a mechanism rather than a
stack: a Kubernetes quota refusal printed by whatever ran the deploy, a unique index the rows already in a table
break, an NFS server its clients report not responding (and the worker pool that fills up waiting on it), a
saturated disk whose commands the kernel reports failing, and a program's lines relayed at INFO by another (Airflow
relaying spark-submit). Each test asserts the negative case too where a rule could over-fire."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import _level_in
from diagnosis.investigate import investigate
from diagnosis.model import Category

# ---------------------------------------------------------------- a quota refusal, as a CI job printed it

_CI_LOG = """\
2025-02-26T15:02:08.4107730Z ##[group]Run helm upgrade report-worker ./charts/report-worker --install --namespace reporting --set image.tag=2.4.0 --wait --timeout 10m --atomic
2025-02-26T15:02:11.9822014Z Release "report-worker" has been upgraded. Happy Helming!
2025-02-26T15:12:12.0417725Z Error: UPGRADE FAILED: release report-worker failed, and has been rolled back due to atomic being set: context deadline exceeded
2025-02-26T15:12:12.0511093Z ##[error]Process completed with exit code 1.
2025-02-26T15:12:12.1403390Z ##[group]Run kubectl -n reporting get events --sort-by=.lastTimestamp | tail -5
2025-02-26T15:12:13.0021457Z LAST SEEN   TYPE      REASON         OBJECT                               MESSAGE
2025-02-26T15:12:13.0022108Z 2m1s        Warning   FailedCreate   replicaset/report-worker-58d6c9f7b4   Error creating: pods "report-worker-58d6c9f7b4-8xv2n" is forbidden: exceeded quota: compute-quota, requested: limits.memory=4Gi, used: limits.memory=30Gi, limited: limits.memory=32Gi
2025-02-26T15:12:13.0022650Z 77s         Warning   FailedCreate   replicaset/report-worker-58d6c9f7b4   Error creating: pods "report-worker-58d6c9f7b4-p4c9m" is forbidden: exceeded quota: compute-quota, requested: limits.memory=4Gi, used: limits.memory=30Gi, limited: limits.memory=32Gi
"""  # noqa: E501 (log lines as the runner prints them)

_HELM = """\
$ helm history report-worker -n reporting --max 3
REVISION\tUPDATED                 \tSTATUS    \tCHART               \tAPP VERSION\tDESCRIPTION
31      \tTue Feb 18 10:44:02 2025\tsuperseded\treport-worker-1.12.0\t2.3.1      \tUpgrade complete
32      \tWed Feb 26 15:02:09 2025\tfailed    \treport-worker-1.13.0\t2.4.0      \tUpgrade "report-worker" failed: context deadline exceeded
33      \tWed Feb 26 15:12:12 2025\tdeployed  \treport-worker-1.12.0\t2.3.1      \tRollback to 31
"""  # noqa: E501


def test_a_quota_refusal_printed_by_the_deploy_job_is_the_cause_not_the_release(tmp_path: Path) -> None:
    (tmp_path / "deploy-prod.log").write_text(_CI_LOG)
    (tmp_path / "helm.txt").write_text(_HELM)
    d = investigate(load_bundle(tmp_path), "why did the report-worker 2.4.0 deploy fail and roll back?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "compute-quota" in d.root_cause and "limits.memory" in d.root_cause


def test_without_the_refusal_the_failed_deploy_is_not_a_quota(tmp_path: Path) -> None:
    (tmp_path / "deploy-prod.log").write_text("\n".join(_CI_LOG.splitlines()[:5]) + "\n")
    (tmp_path / "helm.txt").write_text(_HELM)
    d = investigate(load_bundle(tmp_path), "why did the report-worker 2.4.0 deploy fail and roll back?")
    assert d.category != Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "quota" not in d.root_cause.lower()


# ---------------------------------------------------------------- a unique index the existing rows break

_FLYWAY = """\
2024-10-23T09:14:02.118Z Migrating schema "public" to version "58 - unique merchant external id"
2024-10-23T09:14:02.907Z ERROR: Migration of schema "public" to version "58 - unique merchant external id" failed! Changes successfully rolled back.
2024-10-23T09:14:02.908Z ERROR: Migration V58__unique_merchant_external_id.sql failed
2024-10-23T09:14:02.909Z Message    : ERROR: could not create unique index "ux_merchants_external_id"  Detail: Key (external_id)=(ACQ-0048812) is duplicated.
2024-10-23T09:14:02.910Z Caused by: org.postgresql.util.PSQLException: ERROR: could not create unique index "ux_merchants_external_id"
"""  # noqa: E501


def test_a_unique_index_that_existing_rows_break_is_bad_data_not_a_bug(tmp_path: Path) -> None:
    (tmp_path / "job-db-migrate.log").write_text(_FLYWAY)
    d = investigate(load_bundle(tmp_path), "why does the merchant-api deploy keep failing at db:migrate?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "ACQ-0048812" in d.root_cause


# ---------------------------------------------------------------- an NFS server that stopped answering

_KERNEL = """\
Feb 11 09:21:38 rptapp03 kernel: nfs: server filer01.corp.internal not responding, still trying
Feb 11 09:21:41 rptapp03 kernel: nfs: server filer01.corp.internal not responding, still trying
Feb 11 09:22:02 rptapp03 kernel: nfs: server filer01.corp.internal OK
Feb 11 09:24:17 rptapp03 kernel: nfs: server filer01.corp.internal not responding, still trying
Feb 11 09:29:45 rptapp03 kernel: INFO: task gunicorn:41877 blocked for more than 122 seconds.
Feb 11 09:38:02 rptapp03 kernel: nfs: server filer01.corp.internal not responding, still trying
"""
_GUNICORN = "".join(
    f"[2025-02-11 09:{m:02d}:3{s} +0000] [41850] [CRITICAL] WORKER TIMEOUT (pid:418{70 + s})\n"
    for m in range(21, 41, 2)
    for s in range(3)
)


def test_a_file_server_not_responding_is_the_cause_of_the_full_worker_pool(tmp_path: Path) -> None:
    (tmp_path / "journal-kernel.txt").write_text(_KERNEL)
    (tmp_path / "renderer.log").write_text(_GUNICORN)
    d = investigate(load_bundle(tmp_path), "report renderer is timing out, do we need a bigger VM?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "filer01.corp.internal" in d.root_cause and "NFS" in d.root_cause


def test_a_file_server_that_answered_again_long_ago_is_over(tmp_path: Path) -> None:
    kernel = "\n".join(_KERNEL.splitlines()[:3]) + "\n"  # not responding twice, then OK at 09:22
    (tmp_path / "journal-kernel.txt").write_text(kernel)
    (tmp_path / "app.log").write_text("".join(f"2025-02-11T10:{m:02d}:00Z INFO request ok\n" for m in range(0, 50, 5)))
    d = investigate(load_bundle(tmp_path))
    assert d.category == Category.HEALTHY, d.root_cause


def test_without_the_file_server_the_full_worker_pool_is_capacity(tmp_path: Path) -> None:
    (tmp_path / "renderer.log").write_text(_GUNICORN)
    d = investigate(load_bundle(tmp_path), "report renderer is timing out, do we need a bigger VM?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


# ---------------------------------------------------------------- a saturated disk that is failing

_IOSTAT = """\
root@cp-2:~# iostat -x -d sda 5 2 | tail -3
Device            r/s     rkB/s   rrqm/s  %rrqm r_await rareq-sz     w/s     wkB/s   wrqm/s  %wrqm w_await wareq-sz     d/s     dkB/s   drqm/s  %drqm d_await dareq-sz     f/s f_await  aqu-sz  %util
sda              3.20     51.20     0.00   0.00   38.44    16.00   61.80   1093.60    12.40  16.71  612.87    17.70    0.00      0.00     0.00   0.00    0.00     0.00   29.40 1884.21   93.12  99.84

"""  # noqa: E501
_DMESG = """\
root@cp-2:~# dmesg -T | tail -6
[Tue Mar  4 10:49:58 2025] ata1.00: failed command: WRITE FPDMA QUEUED
[Tue Mar  4 10:49:58 2025] ata1: hard resetting link
[Tue Mar  4 10:58:41 2025] ata1.00: failed command: WRITE FPDMA QUEUED
[Tue Mar  4 10:58:47 2025] blk_update_request: I/O error, dev sda, sector 455121424 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0
[Tue Mar  4 11:09:13 2025] ata1.00: failed command: FLUSH CACHE EXT
[Tue Mar  4 11:09:19 2025] ata1: EH complete
"""  # noqa: E501


def test_a_saturated_disk_whose_commands_fail_is_failing_hardware(tmp_path: Path) -> None:
    (tmp_path / "cp-2-shell.txt").write_text(_IOSTAT + _DMESG)
    d = investigate(load_bundle(tmp_path), "kubectl is crawling - is etcd out of space?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "sda" in d.root_cause and "cp-2" in d.root_cause


def test_a_saturated_disk_with_a_clean_kernel_log_is_saturation(tmp_path: Path) -> None:
    quiet = "root@cp-2:~# dmesg -T | tail -1\n[Tue Mar  4 10:49:58 2025] e1000e 0000:00:1f.6 eno1: NIC Link is Up\n"
    (tmp_path / "cp-2-shell.txt").write_text(_IOSTAT + quiet)
    d = investigate(load_bundle(tmp_path), "kubectl is crawling - is etcd out of space?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


# ---------------------------------------------------------------- a program's lines relayed at INFO


def test_a_relayed_programs_own_level_wins() -> None:
    assert _level_in("{spark_submit.py:634} INFO - 24/08/14 02:11:24 ERROR TaskSetManager: Task 17 failed") == "error"
    assert _level_in("{spark_submit.py:634} INFO - 24/08/14 02:11:09 WARN TaskSetManager: Lost task") == "warn"
    assert _level_in("{spark_submit.py:634} INFO - 24/08/14 02:10:41 INFO ClaimsEtl: reading") == "info"
    assert _level_in("{taskinstance.py:2867} INFO - Starting attempt 3 of 3") == "info"


_AIRFLOW = """\
[2024-08-14, 02:11:09 UTC] {spark_submit.py:634} INFO - 24/08/14 02:11:09 WARN TaskSetManager: Lost task 17.0 in stage 1.0 (TID 42): org.apache.spark.sql.execution.QueryExecutionException: Encountered error while reading file s3a://claims-landing/partner=northwind/dt=2024-08-13/part-00000.snappy.parquet
[2024-08-14, 02:11:09 UTC] {spark_submit.py:634} INFO - \tat org.apache.spark.sql.execution.datasources.FileScanRDD$$anon$1.nextIterator(FileScanRDD.scala:294)
[2024-08-14, 02:11:09 UTC] {spark_submit.py:634} INFO - Caused by: org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException: column: [amount], physicalType: BINARY, logicalType: decimal(12,2)
[2024-08-14, 02:11:24 UTC] {spark_submit.py:634} INFO - 24/08/14 02:11:24 ERROR FileFormatWriter: Aborting job 6c2a0d14.
[2024-08-14, 02:11:24 UTC] {spark_submit.py:634} INFO - org.apache.spark.SparkException: Job aborted due to stage failure: Task 17 in stage 1.0 failed 4 times: org.apache.spark.sql.execution.QueryExecutionException: Parquet column cannot be converted in file s3a://claims-landing/partner=northwind/dt=2024-08-13/part-00000.snappy.parquet. Column: [amount], Expected: decimal(12,2), Found: BINARY
[2024-08-14, 02:11:32 UTC] {taskinstance.py:3313} ERROR - Task failed with exception
"""  # noqa: E501


def test_a_stack_trace_relayed_line_by_line_stays_one_record(tmp_path: Path) -> None:
    (tmp_path / "airflow-task.log").write_text(_AIRFLOW)
    ev = load_bundle(tmp_path)
    records = next(iter(ev.kind("log"))).data["records"]
    # the trace's lines and the exception under the ERROR line belong to the records above them
    assert [r["level"] for r in records] == ["warn", "error", "error"]
    assert "SchemaColumnConvertNotSupportedException" in records[0]["msg"]
    assert "Parquet column cannot be converted" in records[1]["msg"]
    d = investigate(ev, "load_partner_claims failed all 3 attempts - is MinIO acting up?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "northwind" in d.root_cause


# ---------------------------------------------------------------- state loaded at start-up, stale since a change


def _pod(name: str, started: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": "orders-api"}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry/orders-api:2.14.0"}]},
            "status": {"phase": "Running", "startTime": started,
                       "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0,
                                              "state": {"running": {"startedAt": started}}}]}}  # fmt: skip


def _pino(ts_ms: int, level: int, msg: str) -> str:
    return json.dumps({"level": level, "time": ts_ms, "pid": 1, "msg": msg})


def _stale_bundle(tmp_path: Path, fresh_fails: bool) -> Path:
    t0 = 1739264400_000  # 2025-02-11 09:00:00Z, in ms
    pods = [_pod("orders-api-6d5f8b9c7-4xkzq", "2025-02-10T08:00:00Z", "node-a"),
            _pod("orders-api-6d5f8b9c7-n8wvd", "2025-02-10T08:01:00Z", "node-b"),
            _pod("orders-api-6d5f8b9c7-tq7mh", "2025-02-11T10:29:48Z", "node-c")]  # fmt: skip
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    logs = tmp_path / "logs" / "shop"
    logs.mkdir(parents=True)
    reject = "bearer token rejected: JWKSNoMatchingKey: no applicable key found in the JSON Web Key Set"
    for name in ("orders-api-6d5f8b9c7-4xkzq", "orders-api-6d5f8b9c7-n8wvd"):
        lines = [_pino(t0 + i * 60_000, 30, "request completed") for i in range(60)]
        lines += [_pino(t0 + 3600_000 + i * 60_000, 40, reject) for i in range(40)]  # from 10:00 to 10:39
        (logs / f"{name}.log").write_text("\n".join(lines) + "\n")
    fresh_start = 1739269788_000  # 10:29:48
    fresh = [_pino(fresh_start + i * 30_000, 40 if fresh_fails else 30, reject if fresh_fails else "request completed")
             for i in range(20)]  # fmt: skip
    (logs / "orders-api-6d5f8b9c7-tq7mh.log").write_text("\n".join(fresh) + "\n")
    return tmp_path


def test_replicas_started_before_a_change_fail_while_a_newer_one_works(tmp_path: Path) -> None:
    d = investigate(load_bundle(_stale_bundle(tmp_path, False)), "why is orders-api rejecting logins with 401?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "orders-api-6d5f8b9c7-tq7mh" in d.root_cause and "start-up" in d.root_cause


def test_when_the_newer_replica_fails_too_it_is_no_stale_state(tmp_path: Path) -> None:
    d = investigate(load_bundle(_stale_bundle(tmp_path, True)), "why is orders-api rejecting logins with 401?")
    assert not any(f.code == "stale_startup_state" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- a scheduled run is over when it completed


def _cron_job(start: str, end: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "hr-ldap-sync-29078700", "namespace": "batch",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "hr-ldap-sync"}]},
            "status": {"startTime": start, "completionTime": end, "succeeded": 1,
                       "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": end}]}}  # fmt: skip


def _webhook(starts: str) -> dict:
    alert = {"status": "firing", "labels": {"alertname": "KeycloakLoginErrorsHigh", "namespace": "identity",
                                            "severity": "page"},
             "annotations": {"summary": "login error ratio 71%"}, "startsAt": starts,
             "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "9c8b7a6d5e4f3a2b"}  # fmt: skip
    return {"receiver": "pager", "status": "firing", "alerts": [alert], "groupLabels": {}, "commonLabels": {},
            "commonAnnotations": {}, "externalURL": "http://am:9093", "version": "4", "groupKey": "{}:{}",
            "truncatedAlerts": 0}  # fmt: skip


def test_an_alert_that_began_an_hour_after_a_scheduled_run_completed_is_not_its_load(tmp_path: Path) -> None:
    (tmp_path / "jobs.json").write_text(json.dumps(_cron_job("2025-04-14T05:00:00Z", "2025-04-14T05:06:33Z")))
    (tmp_path / "alert.json").write_text(json.dumps(_webhook("2025-04-14T06:12:40Z")))
    d = investigate(load_bundle(tmp_path), "is Keycloak broken?")
    assert d.category != Category.HEALTHY, d.root_cause


def test_an_alert_that_began_while_a_scheduled_run_ran_is_its_load(tmp_path: Path) -> None:
    (tmp_path / "jobs.json").write_text(json.dumps(_cron_job("2025-04-14T05:00:00Z", "2025-04-14T05:06:33Z")))
    (tmp_path / "alert.json").write_text(json.dumps(_webhook("2025-04-14T05:03:10Z")))
    d = investigate(load_bundle(tmp_path), "is Keycloak broken?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- paths served before that answer 404 now


def _access(minute: int, path: str, status: int, ip: str = "81.227.14.9") -> str:
    return (f'{ip} - - [04/Feb/2025:13:{minute:02d}:12 +0000] "GET {path} HTTP/2.0" {status} 1187 "-" '
            '"Mozilla/5.0 (Windows NT 10.0; Win64; x64)"')  # fmt: skip


def test_paths_served_before_that_answer_404_now_are_a_routing_change(tmp_path: Path) -> None:
    lines = [_access(m, p, 200) for m, p in ((1, "/api/v2/cart"), (2, "/api/v2/products"), (3, "/api/v2/login"))]
    lines += [_access(10 + m, p, 404) for m, p in enumerate(["/api/v2/cart", "/api/v2/products", "/api/v2/login"] * 3)]
    lines += [_access(30, "/static/app.js", 200)]
    (tmp_path / "access.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "every API call on the shop returns 404 since 13:10 - why?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "/api/v2" in d.root_cause and "404" in d.root_cause


def test_a_scanners_404s_for_paths_nobody_served_are_no_routing_change(tmp_path: Path) -> None:
    lines = [_access(m, p, 200) for m, p in ((1, "/api/v2/cart"), (2, "/api/v2/products"), (3, "/api/v2/login"))]
    probes = ["/wp-admin/setup.php", "/.env", "/phpmyadmin/index.php", "/cgi-bin/luci", "/owa/auth/logon.aspx",
              "/.git/config", "/actuator/env", "/solr/admin/info"]  # fmt: skip
    lines += [_access(10 + m, p, 404, "45.148.10.7") for m, p in enumerate(probes)]
    (tmp_path / "access.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path))
    assert not any(f.code == "routes_not_found" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- a consumer's batch raised past its poll interval

_GIT_LOG = """\
$ git -C deploy-config log -1 -p -- apps/finance/reconciler/
commit 9d41c7e2b08a5f3c6e1d7b92a4f0c8e5d3b1a706
Author: Lena Ostrowski <lena.ostrowski@example.com>
Date:   Thu Aug 29 16:57:12 2024 +0200

    reconciler: fewer fetch round trips during month-end

diff --git a/apps/finance/reconciler/values-prod.yaml b/apps/finance/reconciler/values-prod.yaml
index 51c2a09..7be04d3 100644
--- a/apps/finance/reconciler/values-prod.yaml
+++ b/apps/finance/reconciler/values-prod.yaml
@@ -21,7 +21,7 @@ kafka:
   consumer:
-    max.poll.records: {old}
+    max.poll.records: {new}
     max.poll.interval.ms: 300000
"""


def _reconciler_log() -> str:
    lines = ["2024-08-29T15:00:01.000Z INFO [main] o.a.k.c.c.ConsumerConfig - ConsumerConfig values: "
             "max.poll.interval.ms = 300000 max.poll.records = 2000"]  # fmt: skip
    lines += [
        f"2024-08-29T15:{m:02d}:30.000Z ERROR [reconciler-poll] c.e.f.LedgerConsumer - offset commit failed, batch "
        "will be redelivered org.apache.kafka.clients.consumer.CommitFailedException: Offset commit cannot be "
        "completed since the consumer is not part of an active group"
        for m in range(10, 50, 5)
    ]
    return "\n".join(lines) + "\n"


def test_a_commit_that_raised_a_consumers_batch_before_it_outlasted_its_poll_interval(tmp_path: Path) -> None:
    (tmp_path / "gitops-log.txt").write_text(_GIT_LOG.format(old=200, new=2000))
    (tmp_path / "reconciler.log").write_text(_reconciler_log())
    d = investigate(load_bundle(tmp_path), "reconciler has been churning since 15:00, what's wrong?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "max.poll.records" in d.root_cause and "2000" in d.root_cause


def test_a_commit_that_lowered_the_batch_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "gitops-log.txt").write_text(_GIT_LOG.format(old=2000, new=200))
    (tmp_path / "reconciler.log").write_text(_reconciler_log())
    d = investigate(load_bundle(tmp_path), "reconciler has been churning since 15:00, what's wrong?")
    assert "max.poll.records" not in d.root_cause, d.root_cause


# ---------------------------------------------------------------- work that stopped at a release

_HELM_INGEST = """\
$ helm -n iot history telemetry-ingest --max 2
REVISION\tUPDATED                 \tSTATUS    \tCHART                  \tAPP VERSION\tDESCRIPTION
39      \tThu Nov 28 16:03:12 2024\tsuperseded\ttelemetry-ingest-0.9.4 \t3.7.2      \tUpgrade complete
40      \tTue Dec  3 10:02:31 2024\tdeployed  \ttelemetry-ingest-0.10.0\t3.8.0      \tUpgrade complete
"""


def _matrix(acked_after: float) -> dict:
    t0 = 1733218800  # 2024-12-03 09:40:00Z
    labels = {"topic": "persistent://iot/telemetry/readings", "job": "pulsar-broker"}
    rate_in = [[t0 + 60 * i, "8400"] for i in range(50)]
    acked = [[t0 + 60 * i, "8350" if t0 + 60 * i < 1733220180 else str(acked_after)] for i in range(50)]
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "pulsar_rate_in", **labels}, "values": rate_in},
        {"metric": {"__name__": "pulsar_subscription_msg_ack_rate", "subscription": "ingest", **labels},
         "values": acked}]}}  # fmt: skip


def test_acknowledgements_that_stopped_at_a_release_at_flat_input_are_its_defect(tmp_path: Path) -> None:
    (tmp_path / "helm-history.txt").write_text(_HELM_INGEST)
    (tmp_path / "prom.json").write_text(json.dumps(_matrix(0)))
    d = investigate(load_bundle(tmp_path), "why has the ingest subscription stopped draining?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "3.8.0" in d.root_cause and "ack" in d.root_cause


def test_acknowledgements_that_went_on_after_the_release_say_nothing(tmp_path: Path) -> None:
    (tmp_path / "helm-history.txt").write_text(_HELM_INGEST)
    (tmp_path / "prom.json").write_text(json.dumps(_matrix(8300)))
    d = investigate(load_bundle(tmp_path), "why has the ingest subscription stopped draining?")
    assert not any(f.code == "work_stopped_at_release" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- a client's 5xx from the server it names


def test_a_clients_logfmt_line_names_the_server_that_answered_5xx(tmp_path: Path) -> None:
    line = ('level=error ts=2024-11-12T02:{m:02d}:15.117Z caller=client.go:430 component=client '
            'host=loki-gateway.logging-platform.svc.cluster.local:80 msg="final error sending batch" status=500 '
            'error="server returned HTTP status 500 Internal Server Error (500): 2 live replicas"')  # fmt: skip
    logs = tmp_path / "logs" / "monitoring"
    logs.mkdir(parents=True)
    (logs / "promtail-8kz6q.log").write_text("\n".join(line.format(m=m) for m in range(14, 54, 2)) + "\n")
    d = investigate(load_bundle(tmp_path), "payments logs vanished from Grafana - is payments down?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "loki-gateway" in d.root_cause
    assert not any(f.code == "http_5xx" and f.title.startswith("promtail") for f in d.findings)


# ---------------------------------------------------------------- 429s that began with a release


def test_429s_counted_from_a_release_on_are_its_defect_though_its_log_is_clean(tmp_path: Path) -> None:
    t0 = 1758014400  # 2025-09-16 09:20:00Z; the release at 10:09:48
    result = [
        {"metric": {"service": "search-api", "code": "all"}, "values": [[t0 + 60 * i, "2000"] for i in range(80)]},
        {"metric": {"service": "search-api", "code": "429"},
         "values": [[t0 + 60 * i, "0" if t0 + 60 * i < 1758017400 else "1520"] for i in range(80)]},
    ]  # fmt: skip
    (tmp_path / "prom.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                                                  "result": result}}))  # fmt: skip
    (tmp_path / "helm-history.txt").write_text(
        "$ helm -n search history search-api --max 2\n"
        "REVISION\tUPDATED                 \tSTATUS    \tCHART            \tAPP VERSION\tDESCRIPTION\n"
        "41      \tFri Sep 12 16:44:12 2025\tsuperseded\tsearch-api-3.8.0 \t3.8.0      \tUpgrade complete\n"
        "42      \tTue Sep 16 10:09:48 2025\tdeployed  \tsearch-api-3.9.0 \t3.9.0      \tUpgrade complete\n"
    )
    served = [json.dumps({"level": "info", "ts": f"2025-09-16T10:{m:02d}:00Z", "msg": "search served"})
              for m in range(10, 60)]  # fmt: skip
    (tmp_path / "search-api.log").write_text("\n".join(served) + "\n")
    d = investigate(load_bundle(tmp_path), "shoppers get 429 from search since 10:10, is it a bot attack?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "3.9.0" in d.root_cause


# ---------------------------------------------------------------- a hit ratio that fell and stayed down


def test_a_hit_ratio_that_fell_and_stayed_down_is_a_step_not_a_recovered_spike(tmp_path: Path) -> None:
    t0 = 1741674000  # 2025-03-11 06:20:00Z
    values = [[t0 + 300 * i, "0.93" if i < 12 else "0.40"] for i in range(40)]
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "catalog_cache_hit_ratio", "job": "catalog-api"}, "values": values}]}}  # fmt: skip
    (tmp_path / "prom.json").write_text(json.dumps(body))
    d = investigate(load_bundle(tmp_path))
    codes = {f.code for f in d.findings}
    assert "spike_recovered" not in codes, codes
    assert any("0.93" in f.title and "0.4" in f.title for f in d.findings), [f.title for f in d.findings]


# ---------------------------------------------------------------- a provider's quota; an SMTP relay's refusal


def test_a_providers_daily_quota_spent_is_our_quota_not_its_outage(tmp_path: Path) -> None:
    line = ('2024-09-18 05:{m:02d}:16.371   WARN 1 --- [http-nio-8080-exec-16] c.a.dispatch.geo.GeocodingClient : '
            'Geocoding failed addressId=76333{m:02d} httpStatus=200 body={{"error_message":"You have exceeded your '
            'daily request quota for this API.","results":[],"status":"OVER_QUERY_LIMIT"}}')  # fmt: skip
    (tmp_path / "dispatch-api.log").write_text("\n".join(line.format(m=m) for m in range(38, 58)) + "\n")
    d = investigate(load_bundle(tmp_path), "why can't dispatch create deliveries? google geocoding is failing")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


def test_an_smtp_relay_refusing_to_relay_is_our_configuration(tmp_path: Path) -> None:
    line = ("[2024-11-07 13:{m:02d}:12,312: WARNING/ForkPoolWorker-5] Task notifications.tasks.send_receipt[51b3] "
            "retry: Retry in 300s: SMTPRecipientsRefused({{'a{m}@example.com': (554, b'5.7.1 <a{m}@example.com>: "
            "Relay access denied')}})")  # fmt: skip
    (tmp_path / "celery-notifications.log").write_text("\n".join(line.format(m=m) for m in range(3, 40)) + "\n")
    d = investigate(load_bundle(tmp_path), "order confirmation emails stopped going out around 13:00, why?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


# ---------------------------------------------------------------- connections left in CLOSE-WAIT

_SS = """\
ops@inv01:~$ sudo ss -tanp | grep 'pid=41877,' | awk '{{print $1}}' | sort | uniq -c | sort -rn
   {close_wait} CLOSE-WAIT
     61 ESTAB
     14 LISTEN
ops@inv01:~$ sudo ss -tanp state close-wait | grep 'pid=41877,' | awk '{{print $4}}' | sort | uniq -c | sort -rn
   {close_wait} 10.50.2.40:443
"""
_FDS = "".join(
    f'Oct 01 22:{m:02d}:11 inv01 invoicing[41877]: {{"level":"ERROR","msg":"write spool file failed","error":"open '
    f'/var/lib/invoicing/spool/x: too many open files"}}\n'
    for m in range(30, 59)
)


def test_thousands_of_close_wait_sockets_are_a_connection_leak_behind_the_fd_limit(tmp_path: Path) -> None:
    (tmp_path / "inv01-shell.txt").write_text(_SS.format(close_wait=8071))
    (tmp_path / "journal.txt").write_text(_FDS)
    d = investigate(load_bundle(tmp_path), "invoicing is down with too many open files, should we raise LimitNOFILE?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "CLOSE-WAIT" in d.root_cause and "10.50.2.40:443" in d.root_cause and "invoicing" in d.root_cause


def test_a_few_close_wait_sockets_leave_the_fd_limit_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "inv01-shell.txt").write_text(_SS.format(close_wait=12))
    (tmp_path / "journal.txt").write_text(_FDS)
    d = investigate(load_bundle(tmp_path), "invoicing is down with too many open files, should we raise LimitNOFILE?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


# ---------------------------------------------------------------- an in-cluster Service seen only by its callers


def _client_series(status: str, value: str) -> dict:
    return {"metric": {"__name__": "http_client_requests_seconds_count", "job": "billing",
                       "client_name": "rates.pricing.svc.cluster.local", "status": status},
            "values": [[1747911000 + 60 * i, value] for i in range(30)]}  # fmt: skip


def _billing_bundle(tmp_path: Path, answered: str) -> Path:
    line = (
        "2025-05-22 10:{m:02d}:06.123 ERROR 1 --- [http-nio-8080-exec-14] c.e.billing.rating.RatesClient : rating "
        "failed for invoice INV-{m}: I/O error on POST request for 'http://rates.pricing.svc.cluster.local:8080/"
        "v2/quote': Read timed out"
    )
    (tmp_path / "billing.log").write_text("\n".join(line.format(m=m) for m in range(52, 60)) + "\n")
    series = [_client_series("200", "40"), _client_series(answered, "3" if answered != "200" else "40")]
    (tmp_path / "prom.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                                                  "result": series}}))  # fmt: skip
    return tmp_path


def test_a_callers_series_naming_the_service_is_not_the_service_itself(tmp_path: Path) -> None:
    d = investigate(load_bundle(_billing_bundle(tmp_path, "200")), "billing started failing around 10:52, why?")
    assert d.category == Category.UNKNOWN, d.root_cause


def test_a_service_that_answered_5xx_was_reached_and_is_the_dependency(tmp_path: Path) -> None:
    d = investigate(load_bundle(_billing_bundle(tmp_path, "503")), "billing started failing around 10:52, why?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


# ---------------------------------------------------------------- bad data behind a consumer's spent retries


def test_messages_dead_lettered_after_failing_every_try_on_their_content_are_bad_data(tmp_path: Path) -> None:
    lines = []
    for i in range(6):
        for n in range(1, 4):
            lines.append(
                f"2024-09-17 08:{10 + i:02d}:{10 * n:02d}.000 +00:00 [WRN] Message m{i} on partner-orders failed "
                f"(DeliveryCount {n}, Supplier HVL, PurchaseOrder HVL-24{i}); abandoning: "
                "System.Text.Json.JsonException: The JSON value could not be converted to System.Decimal. "
                "Path: $.lines[0].unitPrice"
            )
        lines.append(
            f"2024-09-17 08:{10 + i:02d}:45.000 +00:00 [ERR] Message m{i} reached MaxDeliveryCount 3 and was moved to "
            "the dead-letter queue (DeadLetterReason MaxDeliveryCountExceeded)"
        )
    (tmp_path / "orderfeed-worker.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are partner-orders messages piling up in the dead-letter queue?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "unitPrice" in d.root_cause and "HVL" in d.root_cause


# ---------------------------------------------------------------- a standalone Redis client on a Redis Cluster


def test_moved_redirects_are_a_client_in_the_wrong_cluster_mode(tmp_path: Path) -> None:
    line = ('{{"level":"error","ts":17477499{m:02d}.8,"caller":"store/redis.go:88","msg":"session store operation '
            'failed","op":"GET","key":"sess:{{cb{m}}}","error":"MOVED 1{m}17 10.42.5.9:6379"}}')  # fmt: skip
    (tmp_path / "session-api.log").write_text("\n".join(line.format(m=m) for m in range(10, 60)) + "\n")
    d = investigate(load_bundle(tmp_path), "why are users being logged out since the afternoon?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "Redis Cluster" in d.root_cause


# ---------------------------------------------------------------- Azure's Activity Log


def _activity(ts: str, level: str, category: str, op: str, status: str, props: dict) -> dict:
    rid = "/subscriptions/5d8e/resourceGroups/RG-CLAIMS/providers/Microsoft.Compute/virtualMachines/vm-claims-web02"
    return {"caller": "Microsoft.Resourcehealth/healthevent", "eventTimestamp": ts, "level": level,
            "category": {"value": category, "localizedValue": category},
            "operationName": {"value": op, "localizedValue": op}, "status": {"value": status}, "resourceId": rid,
            "properties": props}  # fmt: skip


def test_resource_health_naming_a_host_failure_is_the_vms_infrastructure(tmp_path: Path) -> None:
    entries = [
        _activity("2024-11-14T03:47:33Z", "Critical", "ResourceHealth", "Health Event Activated", "Active",
                  {"title": "Virtual machine unavailable", "cause": "PlatformInitiated", "type": "Downtime"}),
        _activity("2024-11-14T03:52:10Z", "Critical", "ResourceHealth", "Health Event Updated", "Updated",
                  {"title": "Rebooting your virtual machine", "details": "We're sorry, your virtual machine isn't "
                   "available because an unexpected failure on the host server. Azure has begun the auto-recovery "
                   "process.", "cause": "PlatformInitiated", "type": "Downtime"}),
    ]  # fmt: skip
    (tmp_path / "activitylog.json").write_text(json.dumps({"value": entries}))
    ev = load_bundle(tmp_path)
    assert [i.kind for i in ev] == ["log"] and not ev.ignored
    d = investigate(ev, "why did web02 drop out of the backend pool at 03:47?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "vm-claims-web02" in d.root_cause


# ---------------------------------------------------------------- an image pull that failed, then worked


POD = "payments-api-6d9f8c7b5-qx7lm"


def _pull_events(pulled: bool) -> dict:
    def ev(ts: str, typ: str, reason: str, msg: str) -> dict:
        return {"apiVersion": "v1", "kind": "Event", "type": typ, "reason": reason, "message": msg,
                "lastTimestamp": ts, "firstTimestamp": ts, "count": 1,
                "metadata": {"name": f"e-{reason}-{ts}", "namespace": "payments"},
                "involvedObject": {"kind": "Pod", "namespace": "payments", "name": POD}}  # fmt: skip

    image = "registry.acme.internal/payments/payments-api:2024.10.02-4f1c9ab"
    items = [
        ev("2024-10-02T22:13:02Z", "Warning", "Failed", f'Failed to pull image "{image}": rpc error: code = Unknown '
           "desc = failed to resolve reference: unexpected status from HEAD request: 503 Service Unavailable"),
        ev("2024-10-02T22:15:24Z", "Warning", "Failed", "Error: ImagePullBackOff"),
    ]  # fmt: skip
    if pulled:
        items += [
            ev("2024-10-02T22:15:42Z", "Normal", "Pulled", f'Successfully pulled image "{image}" in 2.1s'),
            ev("2024-10-02T22:15:43Z", "Normal", "Started", "Started container payments-api"),
        ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_an_image_pull_that_worked_on_retry_is_over(tmp_path: Path) -> None:
    (tmp_path / "events.json").write_text(json.dumps(_pull_events(True)))
    d = investigate(load_bundle(tmp_path), "the deploy was stuck in ImagePullBackOff last night, anything to do?")
    assert not any(f.code == "image_registry_unreachable" for f in d.findings), d.root_cause


def test_an_image_pull_still_failing_is_the_registry(tmp_path: Path) -> None:
    (tmp_path / "events.json").write_text(json.dumps(_pull_events(False)))
    d = investigate(load_bundle(tmp_path), "the deploy is stuck in ImagePullBackOff, why?")
    assert any(f.code == "image_registry_unreachable" for f in d.findings), d.root_cause


# ---------------------------------------------------------------- an operator's resource refused by a quota


def test_a_quota_refusing_an_operators_job_pods_is_the_cause(tmp_path: Path) -> None:
    msg = ('Error creating: pods "llama-ft-0827-master-0" is forbidden: exceeded quota: gpu-quota, requested: '
           "limits.nvidia.com/gpu=4, used: limits.nvidia.com/gpu=16, limited: limits.nvidia.com/gpu=16")  # fmt: skip
    ev = {"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "FailedCreatePod", "message": msg,
          "lastTimestamp": "2024-08-27T09:39:47Z", "count": 41, "metadata": {"name": "e1", "namespace": "ml"},
          "involvedObject": {"kind": "PyTorchJob", "namespace": "ml", "name": "llama-ft-0827"}}  # fmt: skip
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [ev]}))
    d = investigate(load_bundle(tmp_path), "my PyTorchJob has been sitting in Created for 45 minutes - why?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "gpu-quota" in d.root_cause


# ---------------------------------------------------------------- a GPU fallen off the bus


def test_a_gpu_fallen_off_the_bus_is_failing_hardware(tmp_path: Path) -> None:
    (tmp_path / "dmesg-gpu-node-07.txt").write_text(
        "[Tue May 21 11:02:14 2024] NVRM: Xid (PCI:0000:b7:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
        "off the bus.\n[Tue May 21 11:02:14 2024] NVRM: GPU 0000:b7:00.0: GPU has fallen off the bus.\n"
        "[Tue May 21 11:02:15 2024] NVRM: Xid (PCI:0000:b7:00): 79, pid=4121, name=tritonserver, GPU has fallen off "
        "the bus.\n"
    )
    d = investigate(load_bundle(tmp_path), "the GPU node's model server crashloops on CUDA errors, why?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "GPU" in d.root_cause or "Xid" in d.root_cause


# ---------------------------------------------------------------- a page that resolved, asked about


def test_a_rollout_does_not_stand_on_a_reported_page_that_resolved(tmp_path: Path) -> None:
    alert = {"status": "resolved", "labels": {"alertname": "WSReconnectRateHigh", "namespace": "realtime",
                                              "service": "ws-gateway", "severity": "page"},
             "annotations": {"summary": "reconnect rate high"}, "startsAt": "2025-02-18T10:17:10Z",
             "endsAt": "2025-02-18T10:21:40Z", "fingerprint": "ab12"}  # fmt: skip
    hook = {"receiver": "pager", "status": "resolved", "alerts": [alert], "groupLabels": {}, "commonLabels": {},
            "commonAnnotations": {}, "externalURL": "http://am:9093", "version": "4", "groupKey": "{}:{}",
            "truncatedAlerts": 0}  # fmt: skip
    (tmp_path / "alert.json").write_text(json.dumps(hook))
    (tmp_path / "helm.txt").write_text(
        "$ helm -n realtime history ws-gateway --max 2\n"
        "REVISION\tUPDATED                 \tSTATUS    \tCHART            \tAPP VERSION\tDESCRIPTION\n"
        "11      \tMon Feb 10 09:00:00 2025\tsuperseded\tws-gateway-2.30.0\t2.30.0     \tUpgrade complete\n"
        "12      \tTue Feb 18 10:15:14 2025\tdeployed  \tws-gateway-2.31.0\t2.31.0     \tUpgrade complete\n"
    )
    d = investigate(load_bundle(tmp_path), "WSReconnectRateHigh paged for ws-gateway, is something broken?")
    assert d.category == Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- a start-up dependency answering 5xx


def test_an_init_container_crashing_on_its_registrys_500_is_that_dependency(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "risk" / "fraud-scorer-84c6d7f9b5-7tq2m"
    logs.mkdir(parents=True)
    (logs / "model-fetch.log").write_text(
        "2024-10-15T09:21:03Z INFO fetching model fraud-xgb@production from http://model-registry.ml-platform:5000\n"
        "2024-10-15T09:21:33Z ERROR mlflow.exceptions.MlflowException: API request to endpoint "
        "/api/2.0/mlflow/registered-models/get-latest-versions failed with error code 500 != 200. Response body: "
        "'Internal Server Error'\n"
    )
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "fraud-scorer-84c6d7f9b5-7tq2m", "namespace": "risk"},
           "spec": {"initContainers": [{"name": "model-fetch", "image": "fetch:1"}],
                    "containers": [{"name": "scorer", "image": "scorer:3"}]},
           "status": {"phase": "Pending", "initContainerStatuses": [{
               "name": "model-fetch", "ready": False, "restartCount": 4,
               "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                            "finishedAt": "2024-10-15T09:21:33Z"}}}]}}  # fmt: skip
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    d = investigate(load_bundle(tmp_path), "fraud-scorer's new pods never get ready - why?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


# ---------------------------------------------------------------- an OCSP responder down


def test_tls_failing_on_revocation_checks_is_the_ocsp_responder(tmp_path: Path) -> None:
    line = ("2024-07-08T16:{m:02d}:02Z ERROR [payout-worker] c.l.payout.Client - payout failed: "
            "javax.net.ssl.SSLHandshakeException: PKIX path validation failed: "
            "java.security.cert.CertPathValidatorException: Unable to determine revocation status due to network "
            "error")  # fmt: skip
    (tmp_path / "billing-payout.log").write_text("\n".join(line.format(m=m) for m in range(17, 31)) + "\n")
    (tmp_path / "revocation-check.log").write_text(
        "2024-07-08T16:18:12Z WARN [ocsp] OCSP request to http://ocsp.certalis.net/ timed out after 10000 ms\n"
    )
    d = investigate(load_bundle(tmp_path), "why are payouts failing since about 16:16?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "ocsp.certalis.net" in d.root_cause


# ---------------------------------------------------------------- the evidence as of a moment


def test_an_alert_that_resolved_later_reads_firing_as_of_an_earlier_moment() -> None:
    from diagnosis.evidence import EvidenceSet
    from diagnosis.model import EvidenceItem

    alert = EvidenceItem(id="a#1", kind="alert", source="a.json", object="alert/X", ts=1000.0,
                         data={"status": "resolved", "starts_at": 1000.0, "ends_at": 2000.0})  # fmt: skip
    ev = EvidenceSet([alert])

    def status(s: EvidenceSet) -> str:
        item = s.get("a#1")
        assert item is not None
        return str(item.data["status"])

    assert status(ev.at(1500.0)) == "firing"
    assert status(ev.at(2500.0)) == "resolved"
    assert status(ev) == "resolved"  # the set itself is not changed
