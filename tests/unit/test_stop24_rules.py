"""Stop 24: an operator's quoted error that the logs show is a failure, not faint noise; a Lambda function's
unnamed log streams take the function's name from its metrics; a release seen only in logs (a function's new
version) is a cause candidate like a rollout, and the errors that began with it are not background."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from diagnosis.timeline import fmt_ts
from tests.unit._evidence_builders import T0


def _airflow_task(tmp_path: Path) -> None:
    lines = []
    for attempt, t in enumerate((T0, T0 + 300, T0 + 600), 1):
        stamp = fmt_ts(t).replace("Z", "")
        lines += [
            f"[{stamp} UTC] {{taskinstance.py:2306}} INFO - Starting attempt {attempt} of 3",
            f"[{stamp} UTC] {{taskinstance.py:2905}} ERROR - Task failed with exception",
            "google.api_core.exceptions.NotFound: 404 Not found: Table acme:raw.responses_20260112 was not found",
        ]
    (tmp_path / "reconcile.log").write_text("\n".join(lines) + "\n")


def test_a_quoted_error_the_logs_show_is_not_a_healthy_bundle(tmp_path: Path) -> None:
    _airflow_task(tmp_path)
    ev = load_bundle(tmp_path)
    asked = investigate(ev, "the reconcile task fails with 'Not found: Table raw.responses_20260112', why?")
    assert asked.category != Category.HEALTHY
    # the same lines, asked about without quoting them, are a handful of errors: faint
    assert investigate(load_bundle(tmp_path), "is the reconcile task ok?").category == Category.HEALTHY
    # a quote that no line shows (an apostrophe opens no quote: the team's ... it's) makes no faint line a failure;
    # the failure it reports, seen nowhere, leaves the answer unknown (stop 28), not healthy
    other = investigate(load_bundle(tmp_path), "the team's job fails with 'permission denied on bucket exports'")
    assert other.category == Category.UNKNOWN and "shows nowhere in the evidence read" in other.root_cause


def _lambda_bundle(tmp_path: Path, new_version_at: int | None) -> None:
    events = []
    for i in range(40):
        t = T0 + 120 * i
        version = 23 if new_version_at is not None and i >= new_version_at else 22
        stream = f"2024/09/18/[{version}]83f8f653321227ef946876d612de98{version}"
        rid = f"5c83d672-3ab8-4b9d-80e3-6aa555b1{i:04d}"
        ms = int(t * 1000)
        events.append(
            {"logStreamName": stream, "timestamp": ms, "message": f"START RequestId: {rid} Version: {version}"}
        )
        if version == 23 or i % 13 == 0:  # the old version fails now and then; the new one on every call
            error = f"[ERROR]\t{fmt_ts(t)}\t{rid}\tKeyError: 'Records'\nTraceback (most recent call last):\n"
            events.append({"logStreamName": stream, "timestamp": ms + 5, "message": error})
        events.append({"logStreamName": stream, "timestamp": ms + 9, "message": f"END RequestId: {rid}\n"})
    (tmp_path / "filter-log-events.json").write_text(json.dumps({"events": events, "searchedLogStreams": []}))
    errors = [[T0 + 600 * k, 0.0 if new_version_at is None or k < new_version_at // 5 else 5.0] for k in range(8)]
    (tmp_path / "metrics.json").write_text(
        json.dumps(
            {
                "MetricDataResults": [
                    {
                        "Id": "errors",
                        "Label": "Errors",
                        "Timestamps": [fmt_ts(t) for t, _ in reversed(errors)],
                        "Values": [v for _, v in reversed(errors)],
                        "StatusCode": "Complete",
                    }
                ]
            }
        )
    )
    (tmp_path / "request.json").write_text(
        json.dumps(
            {
                "MetricDataQueries": [
                    {
                        "Id": "errors",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": "AWS/Lambda",
                                "MetricName": "Errors",
                                "Dimensions": [{"Name": "FunctionName", "Value": "thumbnailer"}],
                            },
                            "Period": 600,
                            "Stat": "Sum",
                        },
                    }
                ]
            }
        )
    )


def test_unnamed_lambda_streams_take_the_name_of_the_function_the_metrics_are_about(tmp_path: Path) -> None:
    _lambda_bundle(tmp_path, None)
    ev = load_bundle(tmp_path)
    assert [i.object for i in ev.kind("log")] == ["lambda/thumbnailer"]


def test_a_new_function_version_before_its_errors_is_the_release_that_brought_them(tmp_path: Path) -> None:
    _lambda_bundle(tmp_path, 20)
    d = investigate(load_bundle(tmp_path), "why are thumbnails failing?")
    assert d.category == Category.CODE_DEFECT
    assert "thumbnailer" in d.root_cause and "version 23" in d.root_cause


def _gcp_incident(begin: float, end: float | None, impact: str = "SERVICE_DISRUPTION") -> dict:
    inc = {
        "id": "7rX2kVq9bLmN3sTcY1wA",
        "begin": fmt_ts(begin),
        "external_desc": "Cloud Pub/Sub customers in europe-west1 are experiencing elevated error rates",
        "status_impact": impact,
        "severity": "medium",
        "service_name": "Cloud Pub/Sub",
        "affected_products": [{"title": "Cloud Pub/Sub", "id": "dFjdLh2v6zuES6t9ADCB"}],
        "currently_affected_locations": [{"title": "Belgium (europe-west1)", "id": "europe-west1"}],
    }
    if end is not None:
        inc["end"] = fmt_ts(end)
    return inc


def test_google_cloud_status_incidents_name_the_product_and_region_that_fail(tmp_path: Path) -> None:
    old = _gcp_incident(T0 - 86400, T0 - 80000) | {"service_name": "Cloud Build", "affected_products": []}
    (tmp_path / "incidents.json").write_text(json.dumps([_gcp_incident(T0, None), old]))
    [page] = load_bundle(tmp_path).kind("external/status")
    assert page.data["degraded"] and page.data["failing"] == ["Cloud Pub/Sub europe-west1"]
    (tmp_path / "incidents.json").write_text(json.dumps([_gcp_incident(T0, T0 + 3600)]))
    [page] = load_bundle(tmp_path).kind("external/status")
    assert not page.data["degraded"]  # over


def test_publishes_to_a_topic_failing_during_a_pubsub_incident_are_its_dependency_failure(tmp_path: Path) -> None:
    (tmp_path / "incidents.json").write_text(json.dumps([_gcp_incident(T0, None)]))
    lines = [
        f"{fmt_ts(T0 + 60 * i)} ERROR [grpc-default-executor-4] c.r.audit.EventPublisher - publish to "
        "projects/relay-prod/topics/audit-events failed: io.grpc.StatusRuntimeException: DEADLINE_EXCEEDED: "
        "deadline exceeded after 59.9s"
        for i in range(1, 30)
    ]
    (tmp_path / "audit-writer.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why is audit-writer failing?")
    assert d.category == Category.DEPENDENCY_FAILURE
    assert "pubsub.googleapis.com" in d.root_cause and "europe-west1" in d.root_cause


def _pod(name: str, created: float, image: str, cpu: str = "300m", memory: str = "450Mi") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": fmt_ts(created)},
        "spec": {"containers": [{"name": "server", "image": image, "resources": {"limits": {"cpu": cpu,
                                                                                           "memory": memory}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def test_per_service_columns_are_that_services_series_and_a_cpu_column_at_its_pods_limit_caps_it(
    tmp_path: Path,
) -> None:
    rows = ["time,front-end_latency-90,carts_cpu,node_load1"]
    for i in range(30):
        hog = i >= 15
        rows.append(f"{T0 + 30 * i:.0f},{2000 if hog else 50},{0.298 if hog else 0.09},{0.5}")
    (tmp_path / "sockshop_metrics.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "pods.json").write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [_pod("carts-5f9c7b8d6d-qh4lx", T0 - 86400, "weaveworksdemos/carts:0.4.8")],
            }
        )
    )
    ev = load_bundle(tmp_path)
    labels = {i.data["name"]: i.data["labels"] for i in ev.kind("metric")}
    assert labels == {"front-end_latency-90": {"service": "front-end"}, "carts_cpu": {"service": "carts"},
                      "node_load1": {}}  # fmt: skip
    d = investigate(ev, "why is the shop slow?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "carts" in d.root_cause and "300m" in d.root_cause


def test_a_source_files_line_in_a_stack_is_not_a_call_target() -> None:
    from diagnosis.analyzers.network.extraction import _target

    assert _target("at Socket.emitRequestTimeout (_http_client.js:661:40)") is None
    assert _target("connect ETIMEDOUT carts:8080") == "carts:8080"
    # HAProxy names the server after its backend
    check = "lb-1 haproxy[1187]: Health check for server pay_gw/pay-gw-03 failed, reason: Layer7 timeout"
    assert _target(check) == "pay-gw-03"


def _memory_matrix(values: list[tuple[float, float]]) -> dict:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"container": "recommendationservice"}, "values": [[t, str(v)] for t, v in values]}],
        },
    }


def test_memory_that_grows_from_the_start_of_new_pods_after_a_flat_stretch_is_their_versions_leak(
    tmp_path: Path,
) -> None:
    started = T0 + 3 * 3600
    mib = 2**20
    values = [(T0 + 300 * i, (70 + (i % 2)) * mib) for i in range(36)]  # flat for three hours
    values += [(started + 300 * i, (70 + 12 * i) * mib) for i in range(1, 30)]  # then it climbs
    (tmp_path / "memory.json").write_text(json.dumps(_memory_matrix(values)))
    pod = _pod("recommendationservice-7d5f8c9b6-k2j7q", started, "registry/boutique/recommendationservice:v0.10.3")
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    d = investigate(load_bundle(tmp_path), "why does the frontend fail now and then?")
    assert d.category == Category.CODE_DEFECT and "v0.10.3" in d.root_cause
    # the pods were there all along: nothing marks a version that brought the growth
    pod["metadata"]["creationTimestamp"] = fmt_ts(T0 - 86400)
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    assert investigate(load_bundle(tmp_path), "why does the frontend fail now and then?").category != (
        Category.CODE_DEFECT
    )


def test_image_garbage_collection_failing_without_an_eviction_threshold_is_a_weak_node_cause() -> None:
    from diagnosis.analyzers.kubernetes import kubernetes_nodes
    from tests.unit._evidence_builders import Builder, by_code

    b = Builder()
    b.event("Node", "", "k3s-agent-3", "ImageGCFailed", "failed to garbage collect required amount of images", T0)
    [weak] = by_code(kubernetes_nodes(b.set()), "node_disk_pressure")
    b.event("Node", "", "k3s-agent-3", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage", T0 + 60)
    [strong] = by_code(kubernetes_nodes(b.set()), "node_disk_pressure")
    assert weak.score < 0.5 <= strong.score


_IOSTAT = """ops@db-2:~$ iostat -xz 5 2
Linux 6.1.0-21-cloud-amd64 (db-2) \t07/09/25 \t_x86_64_\t(8 CPU)

avg-cpu:  %user   %nice %system %iowait  %steal   %idle
          11.24    0.00    6.31   {boot_wait}    0.11   69.47

Device            r/s     rkB/s  r_await     w/s     wkB/s  w_await  aqu-sz  %util
nvme0n1         31.07    812.44     1.12  188.31  24711.92     9.87    1.90   17.64

avg-cpu:  %user   %nice %system %iowait  %steal   %idle
          17.90    0.00   21.64   51.37    0.05    9.04

Device            r/s     rkB/s  r_await     w/s     wkB/s  w_await  aqu-sz  %util
nvme0n1        118.40   3411.20   {await} 3288.60 431904.80   {await}  {queue} {util}

ops@db-2:~$ sudo pidstat -d 5 1
Linux 6.1.0-21-cloud-amd64 (db-2) \t07/09/25 \t_x86_64_\t(8 CPU)

10:39:21      UID       PID   kB_rd/s   kB_wr/s kB_ccwr/s iodelay  Command
10:39:26      999    204417    944.00   1873.60      0.00     498  mongod
10:39:26        0   2318841      0.00 107520.00 104448.00     201  stress-ng-hdd
10:39:26        0   2318842      0.00 109772.80 106905.60     197  stress-ng-hdd
ops@db-2:~$ uptime
 10:38:52 up 41 days,  3:12,  1 user,  load average: 14.82, 13.97, 8.41
"""


def test_a_disk_iostat_shows_busy_with_long_waits_is_saturated_and_pidstat_names_who_floods_it(tmp_path: Path) -> None:
    from diagnosis.analyzers.disk_io import disk_io_saturation

    (tmp_path / "db-2-shell.txt").write_text(
        _IOSTAT.format(boot_wait="12.87", util="100.00", queue="644.11", **{"await": "187.95"})
    )
    ev = load_bundle(tmp_path)
    [f] = disk_io_saturation(ev)
    assert f.category == Category.RESOURCE_EXHAUSTION and "db-2" in f.object and "stress-ng-hdd" in f.mechanism
    assert all(ev.check(r) for r in f.evidence)
    # the first report is the average since boot: only the last one counts; a busy disk answering fast is fine
    (tmp_path / "db-2-shell.txt").write_text(
        _IOSTAT.format(boot_wait="12.87", util="99.00", queue="0.90", **{"await": "0.40"})
    )
    assert disk_io_saturation(load_bundle(tmp_path)) == []


def _caller_log(tmp_path: Path, target: str, name: str = "checkout.log") -> None:
    lines = [
        f"{fmt_ts(T0 + 30 * i)} ERROR checkout failed to get quote: dial tcp {target}: i/o timeout" for i in range(40)
    ]
    (tmp_path / name).write_text("\n".join(lines) + "\n")


def test_calls_failing_to_one_of_our_services_that_the_bundle_holds_nothing_of_are_unknown(tmp_path: Path) -> None:
    _caller_log(tmp_path, "10.60.7.214:50051")
    d = investigate(load_bundle(tmp_path), "why does checkout fail?")
    assert d.category == Category.UNKNOWN and any("10.60.7.214" in m for m in d.missing)
    # a third party's API timing out is its dependency failure
    _caller_log(tmp_path, "api.paygrid.io:443")
    assert investigate(load_bundle(tmp_path), "why does checkout fail?").category == Category.DEPENDENCY_FAILURE
    # and so is a datastore's address
    _caller_log(tmp_path, "10.60.7.9:5432")
    assert investigate(load_bundle(tmp_path), "why does checkout fail?").category == Category.DEPENDENCY_FAILURE


def test_calls_refused_by_a_services_cluster_ip_whose_target_port_differs_are_that_target_port(tmp_path: Path) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "rate", "namespace": "hotel"},
           "spec": {"clusterIP": "10.96.212.45", "selector": {"app": "rate"},
                    "ports": [{"port": 8084, "targetPort": 8048, "protocol": "TCP"}]}}  # fmt: skip
    eps = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "rate", "namespace": "hotel"},
           "subsets": [{"addresses": [{"ip": "10.244.2.27"}], "ports": [{"port": 8048}]}]}  # fmt: skip
    (tmp_path / "svc.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [svc, eps]}))
    lines = [
        f'{fmt_ts(T0 + 20 * i)} ERR search.Nearby error="dial tcp 10.96.212.45:8084: connect: connection refused"'
        for i in range(30)
    ]
    (tmp_path / "frontend.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why does hotel search fail?")
    assert d.category == Category.CONFIGURATION_ERROR and "targetPort 8048" in d.root_cause
    svc["spec"]["ports"][0]["targetPort"] = 8084  # the same port: nothing says the Service is wrong
    (tmp_path / "svc.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [svc, eps]}))
    assert investigate(load_bundle(tmp_path), "why does hotel search fail?").category != Category.CONFIGURATION_ERROR


def _labelled_pod(name: str, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "hotel",
            "labels": {"app": app}}, "spec": {"containers": [{"name": app, "image": f"hotel/{app}:1.0"}]},
            "status": {"phase": "Running"}}  # fmt: skip


def test_a_network_policy_allowlist_that_leaves_a_failing_client_out_is_the_cause(tmp_path: Path) -> None:
    from diagnosis.analyzers.network.policy import policy_excludes_client

    pods = [_labelled_pod("reservation-7d9c6b8f4-w2xkz", "reservation"),
            _labelled_pod("mongodb-reservation-5879gvm2w-gfh97", "mongodb-reservation")]  # fmt: skip
    allow = ["geo", "rate"]
    peers = {"key": "app", "operator": "In", "values": allow}
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "mongodb-ingress-allowlist", "namespace": "hotel"},
              "spec": {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                             "values": ["mongodb-reservation"]}]},
                       "policyTypes": ["Ingress"],
                       "ingress": [{"from": [{"podSelector": {"matchExpressions": [peers]}}],
                                    "ports": [{"port": 27017}]}]}}  # fmt: skip
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*pods, policy]}))
    (tmp_path / "reservation-7d9c6b8f4-w2xkz.log").write_text(
        f'{{"level":"info","time":"{fmt_ts(T0)}","message":"Read database URL: mongodb-reservation:27017"}}\n'
        f'{{"level":"panic","time":"{fmt_ts(T0 + 10)}","message":"no reachable servers"}}\n'
    )
    ev = load_bundle(tmp_path)
    [f] = policy_excludes_client(ev)
    assert f.object == "NetworkPolicy hotel/mongodb-ingress-allowlist" and "reservation" in f.title
    assert all(ev.check(r) for r in f.evidence)
    allow.append("reservation")  # admitted: the policy is not why it fails
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*pods, policy]}))
    assert policy_excludes_client(load_bundle(tmp_path)) == []


def test_a_pod_seen_only_in_old_events_whose_workloads_pods_all_run_now_is_gone(tmp_path: Path) -> None:
    from diagnosis.analyzers.kubernetes import kubernetes_pods

    ready = {"phase": "Running", "containerStatuses": [{"name": "catalogue", "ready": True, "restartCount": 0,
                                                         "state": {"running": {}}}]}  # fmt: skip
    pod = _labelled_pod("catalogue-5f7c9d8b64-4tq8m", "catalogue") | {"status": ready}
    event = {"apiVersion": "v1", "kind": "Event", "reason": "Failed", "type": "Warning", "count": 6,
             "message": 'Error: couldn\'t find key DB_DSN in ConfigMap hotel/catalogue-config',
             "firstTimestamp": fmt_ts(T0), "lastTimestamp": fmt_ts(T0 + 600),
             "metadata": {"name": "c.1", "namespace": "hotel"},
             "involvedObject": {"kind": "Pod", "name": "catalogue-6d9f8c7b5-p8wzn", "namespace": "hotel"}}  # fmt: skip
    later = {"apiVersion": "v1", "kind": "Event", "reason": "Started", "type": "Normal", "count": 1,
             "message": "Started container catalogue", "firstTimestamp": fmt_ts(T0 + 3600),
             "lastTimestamp": fmt_ts(T0 + 3600), "metadata": {"name": "c.2", "namespace": "hotel"},
             "involvedObject": {"kind": "Pod", "name": "catalogue-5f7c9d8b64-4tq8m", "namespace": "hotel"}}  # fmt: skip

    def config_findings(*items: dict) -> list:
        (tmp_path / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))
        return [f for f in kubernetes_pods(load_bundle(tmp_path)) if f.code == "container_config_error"]

    [gone] = config_findings(pod, event, later)
    assert gone.role == "benign" and "gone" in gone.mechanism
    [live] = config_findings(event, later)  # no pod of the workload exported: nothing says it was replaced
    assert live.role == "cause"


def test_a_container_back_at_its_limit_minutes_after_each_restart_needs_more_memory_it_does_not_leak(
    tmp_path: Path,
) -> None:
    mib, started = 2**20, T0 + 3 * 3600
    values = [(T0 + 300 * i, (70 + (i % 2)) * mib) for i in range(36)]
    for k in range(6):  # every ten minutes: 0 -> 128 MiB, killed, again
        values += [(started + 600 * k + 120 * j, (20 + 27 * j) * mib) for j in range(5)]
    (tmp_path / "memory.json").write_text(json.dumps(_memory_matrix(values)))
    pod = _pod("recommendationservice-7d5f8c9b6-k2j7q", started, "registry/boutique/recommendationservice:v0.10.3")
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    from diagnosis.analyzers.regressions import release_regressions

    assert [f for f in release_regressions(load_bundle(tmp_path)) if f.code == "memory_leak"] == []


def test_a_database_naming_its_clients_addresses_is_no_dns_failure(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + 60 * i)} 12 [Warning] [MY-010055] [Server] IP address '10.1.27.{i}' could not be resolved: "
        "Name or service not known"
        for i in range(20)
    ]
    (tmp_path / "mysql-error.log").write_text("\n".join(lines) + "\n")
    assert investigate(load_bundle(tmp_path), "is the catalogue database ok?").category == Category.HEALTHY


def test_month_first_dates_in_a_log_line_are_its_time() -> None:
    from diagnosis.formats.logs import LineParser

    ts, level, msg = LineParser().parse("3/9/2024 22:21:18   fas-prod-01      ERROR   cf.fsm.partnerDown: partner down")
    assert ts == 1710022878.0 and msg.startswith("fas-prod-01") and level == "error"
    ts, _, _ = LineParser().parse("11/27/2024, 2:28:19 PM  job failed")
    assert fmt_ts(ts).startswith("2024-11-27 14:28:19")
    ts, _, _ = LineParser().parse("27/11/2024 14:28:19 job failed")  # a first number over 12 is the day
    assert fmt_ts(ts).startswith("2024-11-27 14:28:19")


def test_a_quoted_error_during_planned_work_is_still_the_works_noise(tmp_path: Path) -> None:
    (tmp_path / "change.txt").write_text(f"{fmt_ts(T0)} planned maintenance CHG0041877 started: filer upgrade\n")
    (tmp_path / "dmesg.log").write_text(
        f"{fmt_ts(T0 + 600)} ERROR nfs: server nas-render not responding, still trying\n"
        f"{fmt_ts(T0 + 700)} INFO nfs: server nas-render OK\n"
    )
    d = investigate(load_bundle(tmp_path), "dmesg is full of 'nas-render not responding' - is the filer dying?")
    assert d.category == Category.HEALTHY


def test_requests_refused_as_skewed_after_the_clock_was_stepped_are_the_clock_and_its_source(tmp_path: Path) -> None:
    (tmp_path / "rclone.log").write_text(
        "".join(
            f"{fmt_ts(T0 + 3600 + i)} ERROR : pg/base.tar.zst: Failed to copy: RequestTimeTooSkewed: The difference "
            "between the request time and the current time is too large. status code: 403\n"
            for i in range(5)
        )
    )
    (tmp_path / "chronyd.txt").write_text(
        "Sep 16 22:58:41 bkp-02 chronyd[812]: Selected source 10.10.0.5 (ntp-gw01.corp.example)\n"
        "Sep 16 22:58:41 bkp-02 chronyd[812]: System clock was stepped by -1102.418306 seconds\n"
    )
    d = investigate(load_bundle(tmp_path), "the offsite backup failed with 403s - is the new access key wrong?")
    assert d.category == Category.INFRASTRUCTURE
    assert "ntp-gw01.corp.example" in d.root_cause and "bkp-02" in d.root_cause


def test_boost_log_lines_carry_their_time_and_level() -> None:
    from diagnosis.formats.logs import LineParser

    ts, level, msg = LineParser().parse("[2024-May-21 13:58:37.351930] <error>: (Handler.h:551:Compose) Failed")
    assert fmt_ts(ts).startswith("2024-05-21 13:58:37") and level == "error" and msg.startswith("(Handler.h")


def test_a_database_refusing_a_users_commands_is_a_missing_role(tmp_path: Path) -> None:
    lines = [
        f"[{fmt_ts(T0 + 20 * i).replace('Z', '')}] <error>: (PostStorageHandler.h:121:StorePost) Failed to insert "
        'post to MongoDB: not authorized on post to execute command { insert: "post" }'
        for i in range(20)
    ]
    (tmp_path / "post-storage-service.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why can't users post?")
    assert d.category == Category.CONFIGURATION_ERROR and "role or grant" in d.root_cause


def test_errors_that_began_with_a_chaos_experiment_whose_alert_resolved_are_its_noise() -> None:
    from diagnosis.model import EvidenceRef, Finding
    from diagnosis.reasoning import reason
    from tests.unit._evidence_builders import Builder

    b = Builder()
    log = b.log("compose-review.log", [(T0 + 10, "error", "Failed to connect user-review-service: timed out")])
    alert = b.raw("alert", "alert/LatencyHigh", {"status": "resolved"}, ts=T0)
    chaos = b.raw("k8s/NetworkChaos", "NetworkChaos/chaos/loss", {"spec": {}}, ts=T0)
    ev = b.set()
    errors = Finding(analyzer="log_errors", domain="logs", role="symptom", code="errors", category=Category.UNKNOWN,
                     title="compose-review: 157 errors", mechanism="errors", object="compose-review", score=0.9,
                     ts=T0 + 10, tags=["service:compose-review"], evidence=[EvidenceRef(item=log, line=1)])  # fmt: skip
    resolved = Finding(analyzer="alerts", domain="alerts", role="benign", code="alert:LatencyHigh",
                       category=Category.HEALTHY, title="alert LatencyHigh resolved", mechanism="resolved",
                       object="namespace media", score=0.5, ts=T0 + 60,
                       evidence=[EvidenceRef(item=alert, field="status", value="resolved")])  # fmt: skip
    planned = Finding(analyzer="changes", domain="changes", role="benign", code="planned_work",
                      category=Category.HEALTHY, title="chaos experiment", mechanism="planned work: chaos experiment",
                      object="NetworkChaos/chaos/loss", score=0.2, ts=T0,
                      evidence=[EvidenceRef(item=chaos, field="spec", value={})])  # fmt: skip
    assert reason([errors, resolved, planned], ev).category == Category.HEALTHY
    assert reason([errors, planned], ev).category == Category.UNKNOWN  # nothing says the effect is over


def test_an_orchestrators_exception_reporting_its_jobs_failure_is_not_its_own_defect(tmp_path: Path) -> None:
    stamp = fmt_ts(T0).replace("Z", "")
    (tmp_path / "airflow-settle.log").write_text(
        f"[{stamp} UTC] {{taskinstance.py:2905}} ERROR - Task failed with exception\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/airflow/dataproc.py", line 12, in execute\n'
        "airflow.exceptions.AirflowException: Batch job settle-20240513 failed with error: Job failed with message "
        "[SparkUpgradeException: Fail to parse '13/5/2024 0:12:09' in the new parser]\n"
    )
    (tmp_path / "batch.log").write_text(
        f"{fmt_ts(T0 - 60)} ERROR org.apache.spark.SparkUpgradeException: Fail to parse '13/5/2024 0:12:09' in the "
        "new parser. Caused by: java.time.format.DateTimeParseException: Text '13/5/2024 0:12:09' could not be parsed\n"
    )
    d = investigate(load_bundle(tmp_path), "why did the settlement load fail?")
    assert d.category == Category.DATA_QUALITY


def test_a_steady_quantity_that_jumps_by_a_units_factor_while_its_count_stays_is_a_unit_change(
    tmp_path: Path,
) -> None:
    from diagnosis.analyzers.units import unit_change

    def write(name: str, last: float) -> None:
        rows = [f'"Time","{name}","meters reporting","estimate run"']
        for i in range(14):
            rows.append(f"{fmt_ts(T0 + 86400 * i)[:19]},{380 + (i % 5) * 7},41900,published")
        rows.append(f"{fmt_ts(T0 + 86400 * 14)[:19]},{last},41911,published")
        (tmp_path / "daily.csv").write_text("\n".join(rows) + "\n")

    write("sum(daily_kwh) / 1000 (MWh)", 376380.0)
    ev = load_bundle(tmp_path)
    assert {i.data["name"] for i in ev.kind("metric")} == {"sum(daily_kwh) / 1000 (MWh)", "meters reporting"}
    [f] = unit_change(ev)
    assert f.category == Category.DATA_QUALITY and "x1000" in f.title and "meters reporting" in f.mechanism
    write("sum(daily_kwh) / 1000 (MWh)", 2000.0)  # five times as much: no unit's factor
    assert unit_change(load_bundle(tmp_path)) == []
    write("error ratio", 38000.0)  # what breaks jumps by orders of magnitude: not read for a unit
    assert unit_change(load_bundle(tmp_path)) == []


def test_iotop_names_who_floods_a_disk_that_iostat_shows_queued_on_the_host_of_the_prompt(tmp_path: Path) -> None:
    from diagnosis.analyzers.disk_io import disk_io_saturation

    (tmp_path / "session.txt").write_text(
        "ops@tt-worker-2:~$ iostat -xz nvme0n1 5 2 | tail -n 4\n"
        "Device            r/s     rkB/s  r_await     w/s     wkB/s  w_await  aqu-sz  %util\n"
        "nvme0n1         12.40    310.20     3.91 1480.60 187392.00    18.44   27.41 100.00\n"
        "\n"
        "ops@tt-worker-2:~$ sudo iotop -boP -n 1 | head -n 5\n"
        "Total DISK READ:       312.57 K/s | Total DISK WRITE:     183.02 M/s\n"
        "    PID  PRIO  USER     DISK READ  DISK WRITE  SWAPIN      IO    COMMAND\n"
        "2291847 be/4 root        0.00 B/s   91.23 M/s  ?unavailable?  stress-ng-hdd [run]\n"
        "1984390 be/4 1000        0.00 B/s  412.00 K/s  ?unavailable?  java -jar /app/ts-order-service-1.0.jar\n"
        "ops@tt-worker-2:~$ logout\n"
    )
    [f] = disk_io_saturation(load_bundle(tmp_path))
    assert f.object == "disk nvme0n1 on tt-worker-2" and "stress-ng-hdd" in f.mechanism


def _latency_csv(tmp_path: Path, root_cpu_hog: bool, with_resources: bool = True) -> None:
    services = ["nginx-thrift", "compose-post-service", "post-storage-service"]
    head = ["time"]
    for s in services:
        head += [f"{s}_latency-90"] + ([f"{s}_cpu", f"{s}_mem"] if with_resources else [])
    rows = [",".join(head)]
    for i in range(30):
        late = i >= 15
        row = [fmt_ts(T0 + 30 * i)]
        for s, base in zip(services, (24.0, 12.0, 3.0), strict=True):
            lat = base + (210.0 if late else 0.0)  # the root's delay adds to every caller's
            row.append(f"{lat:.1f}")
            if with_resources:
                hog = root_cpu_hog and late and s == "post-storage-service"
                row += ["0.9" if hog else "0.1", "80"]
        rows.append(",".join(row))
    (tmp_path / "socialnet_metrics.csv").write_text("\n".join(rows) + "\n")


def test_a_slowdown_that_spread_began_where_latency_grew_most_and_its_own_resources_say_why(tmp_path: Path) -> None:
    from diagnosis.analyzers.metrics import _kind
    from diagnosis.analyzers.propagation import latency_origin

    assert _kind("post-storage-service_latency-90", {"service": "post-storage-service"}) == "latency"
    _latency_csv(tmp_path, root_cpu_hog=False)
    [f] = latency_origin(load_bundle(tmp_path))
    assert f.object == "service post-storage-service" and f.category == Category.INFRASTRUCTURE
    _latency_csv(tmp_path, root_cpu_hog=True)
    [f] = latency_origin(load_bundle(tmp_path))
    assert f.category == Category.RESOURCE_EXHAUSTION and "cpu" in f.mechanism
    _latency_csv(tmp_path, root_cpu_hog=False, with_resources=False)  # nothing says how the root is doing
    [f] = latency_origin(load_bundle(tmp_path))
    assert f.role == "symptom" and f.category == Category.UNKNOWN


def _fds_matrix(values: list[tuple[float, float]]) -> dict:
    labels = {"instance": "inv-app01:9404", "job": "invoicing"}
    open_fds = {"metric": {"__name__": "process_open_fds", **labels}, "values": [[t, str(v)] for t, v in values]}
    max_fds = {"metric": {"__name__": "process_max_fds", **labels}, "values": [[t, "4096"] for t, _ in values]}
    return {"status": "success", "data": {"resultType": "matrix", "result": [open_fds, max_fds]}}


def test_descriptors_that_grow_from_a_recorded_artifact_deploy_at_flat_traffic_are_its_leak(tmp_path: Path) -> None:
    released = T0 + 6 * 3600
    values = [(T0 + 900 * i, 180.0 + (i % 3)) for i in range(24)]
    values += [(released + 900 * i, 180.0 + 35.0 * i) for i in range(1, 40)]
    (tmp_path / "prom-fds.json").write_text(json.dumps(_fds_matrix(values)))
    (tmp_path / "deployed.txt").write_text(
        f"{fmt_ts(released)} invoicing-2.19.0.war sha256=4f0c2b9e by deploy-bot (pipeline #5512)\n"
        f"{fmt_ts(T0 - 86400 * 20)} invoicing-2.18.3.war sha256=a1d9e08c by deploy-bot (pipeline #5388)\n"
    )
    (tmp_path / "catalina.out").write_text(
        "".join(
            f"{fmt_ts(released + 34000 + 60 * i)} ERROR java.io.IOException: Too many open files\n" for i in range(5)
        )
    )
    d = investigate(load_bundle(tmp_path), "why does invoicing fail?")
    assert d.category == Category.CODE_DEFECT and "2.19.0" in d.root_cause and "file descriptors" in d.root_cause


def test_an_expired_certificate_our_acme_client_renewed_is_a_server_never_reloaded(tmp_path: Path) -> None:
    (tmp_path / "billing-sync.log").write_text(
        "".join(
            f"{fmt_ts(T0 + 60 * i)} ERROR sync failed: x509: certificate has expired or is not yet valid: "
            "https://portal.example.org/api\n"
            for i in range(6)
        )
    )
    d = investigate(load_bundle(tmp_path), "why does billing sync fail?")
    assert d.category == Category.DEPENDENCY_FAILURE  # nothing says whose certificate it is: the provider's
    (tmp_path / "letsencrypt.log").write_text(
        f"{fmt_ts(T0 - 86400 * 30)[:19]},351:DEBUG:certbot._internal.display.obj:Notifying user: "
        "/etc/letsencrypt/live/portal.example.org/fullchain.pem (success)\n"
    )
    d = investigate(load_bundle(tmp_path), "why does billing sync fail?")
    assert d.category == Category.CONFIGURATION_ERROR and "not reloaded" in d.root_cause


def test_an_autoscaler_that_scaled_out_with_room_left_is_working(tmp_path: Path) -> None:
    from diagnosis.analyzers.metrics import metric_series

    labels = {"namespace": "shop", "horizontalpodautoscaler": "frontend"}
    current = [[T0 + 30 * i, "3" if i < 10 else "8"] for i in range(20)]
    maximum = [[T0 + 30 * i, "10"] for i in range(20)]
    (tmp_path / "hpa.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "kube_horizontalpodautoscaler_status_current_replicas", **labels}, "values": current},
        {"metric": {"__name__": "kube_horizontalpodautoscaler_spec_max_replicas", **labels}, "values": maximum},
    ]}}))  # fmt: skip
    assert all(f.role == "benign" for f in metric_series(load_bundle(tmp_path)))


def test_an_aws_health_scheduled_change_that_began_is_planned_work(tmp_path: Path) -> None:
    from diagnosis.analyzers.changes import planned_work

    def event(code: str, status: str, start: float) -> dict:
        return {"service": code.split("_")[1], "eventTypeCode": code, "eventTypeCategory": "scheduledChange",
                "region": "us-west-2", "statusCode": status, "startTime": fmt_ts(start)}  # fmt: skip

    events = [event("AWS_ECS_TASK_PATCHING_RETIREMENT", "open", T0),
              event("AWS_RDS_MAINTENANCE_SCHEDULED", "upcoming", T0 + 86400 * 7)]  # fmt: skip
    (tmp_path / "health.json").write_text(json.dumps({"events": events}))
    (tmp_path / "app.log").write_text(f"{fmt_ts(T0 + 600)} INFO started\n")
    [f] = planned_work(load_bundle(tmp_path))
    assert "AWS_ECS_TASK_PATCHING_RETIREMENT" in f.title


def test_a_stern_stream_is_one_log_per_pod_and_container_in_the_pods_namespace(tmp_path: Path) -> None:
    lines = [
        'checkoutservice-7c9d5f6b84-mw4tz server {"message":"payment went through","severity":"info",'
        f'"timestamp":"{fmt_ts(T0)}"}}',
        'checkoutservice-7c9d5f6b84-mw4tz server {"message":"panic: one of the specified money values is invalid",'
        f'"severity":"error","timestamp":"{fmt_ts(T0 + 5)}"}}',
        f"checkoutservice-5f8b9c6d7-2hq8v istio-proxy {fmt_ts(T0 + 6)} warning envoy upstream reset",
    ]
    (tmp_path / "stern-checkout.txt").write_text("\n".join(lines) + "\n")
    pod = _labelled_pod("checkoutservice-7c9d5f6b84-mw4tz", "checkoutservice")
    pod["metadata"]["namespace"] = "boutique"
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    logs = {i.object: i.data["records"] for i in load_bundle(tmp_path).kind("log")}
    assert set(logs) == {"Pod/boutique/checkoutservice-7c9d5f6b84-mw4tz/server",
                         "Pod/default/checkoutservice-5f8b9c6d7-2hq8v/istio-proxy"}  # fmt: skip
    assert logs["Pod/boutique/checkoutservice-7c9d5f6b84-mw4tz/server"][1]["level"] == "error"


def test_one_functions_burst_filling_the_accounts_lambda_concurrency_throttles_the_others() -> None:
    from diagnosis.analyzers.serverless import lambda_concurrency
    from tests.unit._evidence_builders import Builder

    def bundle(peak: float) -> list:
        b = Builder()
        b.metric("ConcurrentExecutions", [(T0 + 60 * i, 50.0 if i < 10 else peak) for i in range(20)],
                 {"namespace": "AWS/Lambda"})  # fmt: skip
        b.metric("ConcurrentExecutions", [(T0 + 60 * i, 0.0 if i < 10 else peak - 40) for i in range(20)],
                 {"namespace": "AWS/Lambda", "FunctionName": "points-backfill"})  # fmt: skip
        b.metric("Throttles", [(T0 + 60 * i, 0.0 if i < 10 else 900.0) for i in range(20)],
                 {"namespace": "AWS/Lambda", "FunctionName": "rewards-balance"})  # fmt: skip
        return lambda_concurrency(b.set())

    [f] = bundle(912.0)
    assert f.category == Category.RESOURCE_EXHAUSTION and "points-backfill" in f.object
    assert "rewards-balance" in f.mechanism
    assert bundle(400.0) == []  # throttled with the pool far from full: a reserved limit, not the account's


def test_a_request_killed_for_running_past_its_time_limit_is_slowness_not_a_bug(tmp_path: Path) -> None:
    (tmp_path / "laravel.log").write_text(
        "".join(
            f"[{fmt_ts(T0 + 60 * i).replace('Z', '')}] production.ERROR: Maximum execution time of 30 seconds exceeded "
            '{"exception":"[object] (Symfony\\\\Component\\\\ErrorHandler\\\\Error\\\\FatalError(code: 0)"}\n'
            for i in range(6)
        )
    )
    assert investigate(load_bundle(tmp_path), "why is the catalog slow?").category != Category.CODE_DEFECT


def test_a_server_of_our_load_balancers_pool_that_fails_its_checks_with_nothing_from_it_is_unknown(
    tmp_path: Path,
) -> None:
    (tmp_path / "haproxy.log").write_text(
        "".join(
            f"{fmt_ts(T0 + 60 * i)} lb-pay-01 haproxy[1187]: Health check for server pay_gw/pay-gw-03 failed, "
            "reason: Layer7 timeout, check duration: 2001ms, status: 2/3 UP.\n"
            for i in range(10)
        )
    )
    d = investigate(load_bundle(tmp_path), "why do payments fail now and then?")
    assert d.category == Category.UNKNOWN and any("pay-gw-03" in m for m in d.missing)
