"""Stop 32: rules from the dev47-dev50 batches, each a mechanism rather than a stack: production sent to a sandbox,
staging or test endpoint; a log shipper's store failing (Vector's sink answered 503); a Job failing because what it
calls times out; Prometheus's remote-write queue is no disk. Each test asserts the negative case beside the rule."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import NONPROD_URL
from diagnosis.investigate import investigate
from diagnosis.model import Category


def _configmap(ns: str, name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}],
    }


def _push_log(endpoint: str) -> str:
    lines = [
        {"level": "info", "ts": "2025-07-08T14:04:31Z", "msg": "apns client initialised", "endpoint": endpoint},
    ]
    for i in range(40):
        lines.append(
            {
                "level": "warn",
                "ts": f"2025-07-08T14:{5 + i // 4:02d}:{(i % 4) * 15:02d}Z",
                "msg": "apns push rejected",
                "status": 400,
                "reason": "BadDeviceToken",
            }
        )
    return "\n".join(json.dumps(x) for x in lines) + "\n"


def test_production_sent_to_a_sandbox_endpoint_is_a_configuration_error_named_by_its_switch(tmp_path: Path) -> None:
    (tmp_path / "courier-7d9c6b5f8-kx2pq.log").write_text(_push_log("https://api.sandbox.push.apple.com:443"))
    cm = _configmap("notifications", "courier-env", {"APNS_PRODUCTION": "false", "APNS_TOPIC": "com.example.app"})
    (tmp_path / "cm.json").write_text(json.dumps(cm))
    d = investigate(load_bundle(tmp_path), "why did iOS pushes stop?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "api.sandbox.push.apple.com" in d.root_cause and "APNS_PRODUCTION=false" in d.root_cause
    assert "courier" in d.root_cause


def test_a_production_endpoint_or_a_staging_service_is_not_sent_to_the_wrong_environment(tmp_path: Path) -> None:
    prod = tmp_path / "prod"
    prod.mkdir()
    (prod / "courier-7d9c6b5f8-kx2pq.log").write_text(_push_log("https://api.push.apple.com:443"))
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "courier-staging-7d9c6b5f8-kx2pq.log").write_text(_push_log("https://api.sandbox.push.apple.com:443"))
    for bundle in (prod, staging):
        d = investigate(load_bundle(bundle), "why did iOS pushes stop?")
        assert not any(f.code == "nonproduction_endpoint" for f in d.findings), d.root_cause
    # addresses the rule reads: services called, not a pipeline's staging bucket nor production's own staging area
    assert NONPROD_URL.search("endpoint=https://payments-staging.example.net/v1")
    assert NONPROD_URL.search("dsUrl=https://ds-mtf.identitycheck.example-scheme.net/ds/v2/areq")
    assert not NONPROD_URL.search("gs://acme-dw-staging/tmp/x.parquet")
    assert not NONPROD_URL.search("https://api.stripe.com/v1/charges")


_VECTOR = (
    '{ts}  WARN sink{{component_kind="sink" component_id=loki_out component_type=loki}}:request{{request_id={n}}}: '
    "vector::sinks::util::retries: Retrying after response. reason=503 Service Unavailable internal_log_rate_limit=true"
)
_VECTOR_DROP = (
    '{ts} ERROR sink{{component_kind="sink" component_id=loki_out component_type=loki}}:request{{request_id={n}}}: '
    "vector_common::internal_event::service: Service call failed. No retries or retries exhausted. "
    'error=Some(ServerError {{ code: 503 }}) request_id={n} error_type="request_failed" stage="sending"'
)
_VECTOR_PARSE = (
    '{ts}  WARN transform{{component_kind="transform" component_id=parse_json component_type=remap}}: '
    'vector::internal_events::remap: Mapping failed with event. error="function call error for \\"parse_json\\" '
    'at (4:28): unable to parse json: expected value at line 1 column 1"'
)


def test_a_log_shippers_store_answering_503_is_that_stores_failure_not_bad_data(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "logging"
    logs.mkdir(parents=True)
    lines = [_VECTOR_PARSE.format(ts=f"2025-02-24T13:{10 + i:02d}:00.000000Z") for i in range(5)]
    for i in range(30):
        ts = f"2025-02-24T13:{53 + i // 10:02d}:{(i % 10) * 5:02d}.000000Z"
        lines.append((_VECTOR_DROP if i % 3 == 0 else _VECTOR).format(ts=ts, n=48000 + i))
    (logs / "vector-agent-7mxqp.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are there no logs in Grafana since 13:50?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "loki" in d.root_cause and "503" in d.root_cause
    assert not any(f.code == "bad_data" for f in d.findings)  # a give-up on a server error is not the content's


def _job_bundle(tmp_path: Path, log_lines: list[str]) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sepa-payout-29419440", "namespace": "payouts"},
        "status": {
            "failed": 4,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": "2025-12-08T05:30:10Z",
                }
            ],
        },
    }
    (tmp_path / "jobs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}))
    logs = tmp_path / "logs" / "payouts"
    logs.mkdir(parents=True)
    (logs / "sepa-payout-29419440-6rvxz.log").write_text("\n".join(log_lines) + "\n")


def test_a_job_whose_logs_show_its_calls_timing_out_is_their_symptom(tmp_path: Path) -> None:
    lines = [  # every 100 s from 04:11 until the run gave up
        f"2025-12-08T{4 + (660 + 100 * i) // 3600:02d}:{(660 + 100 * i) % 3600 // 60:02d}:{(100 * i) % 60:02d}.000Z"
        "  WARN payout_batch::funds: balance check failed error=operation timed out "
        "url=http://ledger-balance.ledger.svc.cluster.local:8443/v2/balances"
        for i in range(30)
    ]
    lines += [
        f"2025-12-08T05:{i:02d}:00.000Z ERROR payout_batch::funds: chunk failed after 6 attempts" for i in range(5)
    ]
    _job_bundle(tmp_path, lines)
    d = investigate(load_bundle(tmp_path), "why did the payout run fail?")
    assert d.category == Category.UNKNOWN, d.root_cause  # an in-cluster Service seen only from its caller
    assert "ledger-balance" in d.root_cause
    job = next(f for f in d.findings if f.code == "job_failed")
    assert (job.role, job.category) == ("symptom", Category.UNKNOWN)  # not a cause of its own that outranks them


def test_a_job_whose_logs_show_a_crash_stays_the_jobs_own_failure(tmp_path: Path) -> None:
    lines = ["2025-12-08T05:00:00Z INFO payout_batch: starting run"] + [
        f"2025-12-08T05:0{i}:00Z ERROR payout_batch: panicked at 'index out of bounds: the len is 0', src/funds.rs:88"
        for i in range(4)
    ]
    _job_bundle(tmp_path, lines)
    d = investigate(load_bundle(tmp_path), "why did the payout run fail?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert next(f for f in d.findings if f.code == "job_failed").role == "cause"


def _matrix(name: str, pod: str, values: list[float], start: int = 1765292400) -> dict:
    return {
        "metric": {"__name__": name, "pod": pod},
        "values": [[start + 60 * i, str(v)] for i, v in enumerate(values)],
    }


def test_prometheus_remote_write_shards_at_their_maximum_are_no_full_disk(tmp_path: Path) -> None:
    shards = [_matrix("prometheus_remote_storage_shards", "prometheus-k8s-0", [4.0] * 10 + [50.0] * 20)]
    shards.append(_matrix("prometheus_remote_storage_shards_max", "prometheus-k8s-0", [50.0] * 30))
    body = {"status": "success", "data": {"resultType": "matrix", "result": shards}}
    (tmp_path / "shards.json").write_text(json.dumps(body))
    d = investigate(load_bundle(tmp_path), "why are the dashboards behind?")
    assert not any(f.code == "disk_full" for f in d.findings), [f.title for f in d.findings]


def test_a_readiness_probe_timing_out_on_a_cpu_throttled_pod_is_no_probe_setting(tmp_path: Path) -> None:
    from diagnosis.analyzers.kubernetes import kubernetes_pods

    name = "pdf-renderer-6b8f9c7d5-kx2lp"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "billing"},
           "spec": {"containers": [{"name": "pdf-renderer", "image": "pdf:1",
                                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                                       "timeoutSeconds": 1}}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False",
                                                          "lastTransitionTime": "2024-10-17T14:40:00Z"}],
                      "containerStatuses": [{"name": "pdf-renderer", "ready": False, "restartCount": 0,
                                             "state": {"running": {"startedAt": "2024-10-17T09:00"}}}]}}  # fmt: skip
    event = {"apiVersion": "v1", "kind": "Event", "reason": "Unhealthy", "type": "Warning", "count": 9,
             "message": 'Readiness probe failed: Get "http://10.1.2.3:8080/healthz": context deadline exceeded',
             "firstTimestamp": "2024-10-17T14:31:00Z", "lastTimestamp": "2024-10-17T14:49:00Z",
             "metadata": {"name": "pdf.1", "namespace": "billing"},
             "involvedObject": {"kind": "Pod", "name": name, "namespace": "billing"}}  # fmt: skip
    (tmp_path / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, event]}))
    assert [(f.code, f.role) for f in kubernetes_pods(load_bundle(tmp_path)) if "probe" in f.code] == [
        ("probe_timeout", "cause")
    ]
    alert = {"version": "4", "status": "firing", "receiver": "r", "groupLabels": {}, "commonLabels": {},
             "commonAnnotations": {}, "externalURL": "http://am", "groupKey": "{}:{}", "truncatedAlerts": 0,
             "alerts": [{"status": "firing", "labels": {"alertname": "CPUThrottlingHigh", "namespace": "billing",
                                                        "pod": "pdf-renderer-6b8f9c7d5-kx2lp", "severity": "info"},
                         "annotations": {}, "startsAt": "2024-10-17T14:18:00Z", "endsAt": "0001-01-01T00:00:00Z",
                         "generatorURL": "", "fingerprint": "1"}]}  # fmt: skip
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    probes = [(f.code, f.role) for f in kubernetes_pods(load_bundle(tmp_path)) if "probe" in f.code]
    assert probes and all(role != "cause" for _, role in probes), probes  # waiting on a starved CPU


_DMESG = """\
root@crdb-2:~# dmesg -T | grep -iE 'clocksource|tsc'
[Fri Jul  7 21:40:12 2023] tsc: Detected 2095.078 MHz TSC
[Fri Jul  7 21:40:13 2023] clocksource: Switched to clocksource tsc
{extra}"""
_UNSTABLE_LINES = """\
[Fri Jul 14 03:12:09 2023] clocksource: timekeeping watchdog on CPU17: Marking clocksource 'tsc' as unstable because the skew is too large:
[Fri Jul 14 03:12:09 2023] clocksource: Switched to clocksource hpet
"""  # noqa: E501 (the kernel's line as it prints it)
_COCKROACH = """\
I230714 03:10:00.000001 1 server/server.go:900 ⋮ [T1,n2] 88000  node is live
W230714 03:12:09.803417 1042 rpc/clock_offset.go:255 ⋮ [T1,n2] 88214  remote clock offset from n1 is 611.874ms, exceeds 80% of max-offset 500ms
F230714 03:12:10.118244 631 server/server.go:1174 ⋮ [T1,n2] 88217  clock synchronization error: this node is more than 500ms away from at least half of the known nodes (0 of 2 are within the offset)
"""  # noqa: E501


def test_a_clocksource_the_kernel_marked_unstable_is_the_hosts_hardware_clock(tmp_path: Path) -> None:
    (tmp_path / "cockroach-crdb-2.log").write_text(_COCKROACH)
    (tmp_path / "dmesg-crdb-2.txt").write_text(_DMESG.format(extra=""))
    ev = load_bundle(tmp_path)
    [log] = [i for i in ev.kind("log") if "cockroach" in i.object]
    assert log.data["records"][1]["ts"] == 1689304329.803417  # CockroachDB's year-first stamp, read as 2023
    assert not any(f.code == "clocksource_unstable" for f in investigate(ev, "why did crdb-2 die?").findings)
    (tmp_path / "dmesg-crdb-2.txt").write_text(_DMESG.format(extra=_UNSTABLE_LINES))
    d = investigate(load_bundle(tmp_path), "why did crdb-2 die?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "crdb-2" in d.root_cause and "tsc" in d.root_cause and "hpet" in d.root_cause


def test_kubectl_logs_prefix_lines_are_read_as_the_pods_log(tmp_path: Path) -> None:
    line = (
        '[pod/partner-api-7c9d5b8f6-2xkqp/partner-api] {"level":"warn","ts":"2024-09-25T08:34:22.300Z",'
        '"msg":"jwt rejected","err":"token has invalid claims: token used before issued","status":401}'
    )
    (tmp_path / "auth.log").write_text("$ kubectl logs -n partner -l app=partner-api --prefix\n" + line + "\n")
    [log] = load_bundle(tmp_path).kind("log")
    rec = next(r for r in log.data["records"] if "jwt" in r["msg"])
    assert rec["level"] == "warn" and rec["ts"] == 1727253262.3 and "token used before issued" in rec["msg"]


def test_mongods_wiredtiger_error_says_what_failed_from_its_attr_message(tmp_path: Path) -> None:
    rec = {"t": {"$date": "2024-10-03T08:31:58.604+00:00"}, "s": "E", "c": "STORAGE", "id": 22435, "ctx": "conn1",
           "msg": "WiredTiger error",
           "attr": {"error": 28, "message": "pwrite: failed to write: No space left on device"}}  # fmt: skip
    (tmp_path / "mongod.log").write_text(json.dumps(rec) + "\n")
    [log] = load_bundle(tmp_path).kind("log")
    assert "No space left on device" in log.data["records"][0]["msg"]


def _catalog_log(level: str) -> str:
    msg = 'failed to parse the catalog JSON: proto: (line 139:18): invalid value for int64 type: \\"24.99\\"'
    return "".join(
        f'{{"message":"{msg}","severity":"{level}","timestamp":"2025-03-04T06:{2 + i:02d}:40Z"}}\n' for i in range(12)
    )


def test_a_service_failing_to_parse_the_data_it_loads_is_bad_data_even_when_it_only_warns(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "shop"
    logs.mkdir(parents=True)
    (logs / "productcatalogservice-6b7d9c5f48-rx4lz.log").write_text(_catalog_log("warning"))
    d = investigate(load_bundle(tmp_path), "why do product pages fail?")
    assert d.category == Category.DATA_QUALITY, d.root_cause  # a value for a type is data, not a setting
    assert "productcatalogservice" in d.root_cause
    (logs / "productcatalogservice-6b7d9c5f48-rx4lz.log").write_text(
        "".join(
            f'{{"message":"cache refresh slow","severity":"warning","timestamp":"2025-03-04T06:{2 + i:02d}:40Z"}}\n'
            for i in range(12)
        )
    )
    d = investigate(load_bundle(tmp_path), "why do product pages fail?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


def _seat_bundle(tmp_path: Path, with_pod: bool) -> None:
    logs = tmp_path / "logs" / "train-ticket"
    logs.mkdir(parents=True, exist_ok=True)
    lines = [
        f"2025-04-15 11:{5 + i // 3:02d}:{(i % 3) * 20:02d}.000 ERROR 1 --- [exec-{i}] c.t.TravelService : "
        "seat query failed: Read timed out calling http://ts-seat-service:18898/api/v1/seatservice/seats"
        for i in range(30)
    ]
    (logs / "ts-travel-service-7c8d9b6f5-6wqkz.log").write_text("\n".join(lines) + "\n")
    if with_pod:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ts-seat-service-5d9f8c7b6-abcde",
               "namespace": "train-ticket"}, "spec": {"containers": [{"name": "seat", "image": "seat:1"}]},
               "status": {"phase": "Running"}}  # fmt: skip
        (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))


def test_a_cluster_workload_called_by_its_short_name_and_seen_only_from_its_caller_leaves_it_unknown(
    tmp_path: Path,
) -> None:
    _seat_bundle(tmp_path / "a", with_pod=True)
    d = investigate(load_bundle(tmp_path / "a"), "why are trip searches timing out?")
    assert d.category == Category.UNKNOWN and "ts-seat-service" in d.root_cause, d.root_cause
    _seat_bundle(tmp_path / "b", with_pod=False)  # nothing says it is ours: the callers' view names it failing
    d = investigate(load_bundle(tmp_path / "b"), "why are trip searches timing out?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


def test_schema_migrations_that_conflict_are_the_releases_code_defect(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "billing"
    logs.mkdir(parents=True)
    (logs / "invoicing-db-migrate-6tqlp.log").write_text(
        "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.\n"
        "ERROR [alembic.util.messaging] Multiple head revisions are present for given argument 'head'; please "
        "specify a specific target revision, '<branchname>@head' to narrow to a specific head, or 'heads' for all\n"
    )
    d = investigate(load_bundle(tmp_path), "why did the invoicing deploy fail?")
    assert d.category == Category.CODE_DEFECT and "migration" in d.root_cause, d.root_cause


_FLYWAY = """\
Started by user Ana Sousa
Migrating schema "public" to version "88 - unique customer email"
ERROR: Migration V88__unique_customer_email.sql failed
------------------------------------------------------
SQL State  : 23505
Message    : ERROR: could not create unique index "uq_customers_email_lower"
  Detail: Key (lower(email::text))=(m.okafor@outlook.com) is duplicated.
Statement  : CREATE UNIQUE INDEX uq_customers_email_lower ON customers (lower(email))

Finished: FAILURE
"""


def test_flyways_detail_block_belongs_to_its_error(tmp_path: Path) -> None:
    (tmp_path / "jenkins-release-412.txt").write_text(_FLYWAY)
    [log] = load_bundle(tmp_path).kind("log")
    [rec] = [r for r in log.data["records"] if "V88" in r["msg"]]
    assert "could not create unique index" in rec["msg"] and "is duplicated" in rec["msg"]
    d = investigate(load_bundle(tmp_path), "why did the release fail at db-migrate?")
    assert d.category == Category.DATA_QUALITY, d.root_cause


def _envoy(i: int, code: str, flags: str, dur: int) -> str:
    detail = "response_timeout" if flags == "UT" else "via_upstream"
    return (
        f'[2025-01-23T15:{25 + i // 6:02d}:{(i % 6) * 10:02d}.000Z] "POST /v1/authorize HTTP/1.1" {code} {flags} '
        f'{detail} - "-" 670 24 {dur} {dur - 1 if flags == "-" else "-"} "-" "ReactorNetty/1.1.22" "req-{i}" '
        '"payments-authz.payments.svc.cluster.local:8080" "10.70.7.92:8080" '
        "outbound|8080||payments-authz.payments.svc.cluster.local 10.70.3.51:38 10.70.7.92:8080 10.70.3.51:40 - default"
    )


def test_a_route_timeout_its_answered_calls_leave_plenty_of_room_is_not_too_tight(tmp_path: Path) -> None:
    from diagnosis.analyzers.routing import route_timeouts

    vs = {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
          "metadata": {"name": "payments-authz", "namespace": "checkout"},
          "spec": {"hosts": ["payments-authz.payments.svc.cluster.local"],
                   "http": [{"timeout": "2.5s", "route": [{"destination": {
                       "host": "payments-authz.payments.svc.cluster.local"}}]}]}}  # fmt: skip
    (tmp_path / "vs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [vs]}))
    logs = tmp_path / "logs" / "checkout"
    logs.mkdir(parents=True)

    def write(ok_ms: int) -> list:
        lines = [_envoy(i, "504", "UT", 2502) if i % 3 == 0 else _envoy(i, "200", "-", ok_ms) for i in range(36)]
        (logs / "checkout-7d9f8b6c5-x2k4p.log").write_text("\n".join(lines) + "\n")
        return route_timeouts(load_bundle(tmp_path))

    assert [f.code for f in write(2300)] == ["route_timeout_too_short"]  # the work takes nearly all of it
    assert write(160) == []  # answers in 160 ms: the timeout is roomy, the failing calls are slow ones


def test_dotnets_json_console_logs_and_logs_insights_aggregates_are_read(tmp_path: Path) -> None:
    exc = "System.Net.Http.HttpRequestException: 503 (Service Unavailable)"
    rec = {"Timestamp": "2024-09-04T13:11:21.489Z", "EventId": 0, "LogLevel": "Error", "Category": "Shipping.Quotes",
           "Message": "Rating call failed", "Exception": exc, "State": {}}  # fmt: skip
    (tmp_path / "shipping-api.log").write_text(json.dumps(rec) + "\n")

    def row(producer: str, avg: str) -> list:
        return [{"field": "producer", "value": producer}, {"field": "avg_minor", "value": avg}]

    stats = {"status": "Complete", "statistics": {"recordsMatched": 3.0},
             "results": [row("order-service/5.2.0", "61.2"), row("order-service/5.1.4", "6091.4")]}  # fmt: skip
    (tmp_path / "insights-by-producer.json").write_text(json.dumps(stats))
    ev = load_bundle(tmp_path)
    assert not ev.ignored, ev.ignored
    [log] = ev.kind("log")
    [r] = log.data["records"]
    assert r["level"] == "error" and r["ts"] == 1725455481.489 and "503 (Service Unavailable)" in r["msg"]
    [table] = ev.kind("table")
    assert table.data["columns"] == ["producer", "avg_minor"] and table.data["rows"][0]["avg_minor"] == "61.2"


def test_pods_kept_off_the_instance_metadata_service_are_a_policy_at_work(tmp_path: Path) -> None:
    from diagnosis.analyzers.network.policy import policy_drops

    def flows(dst: str) -> str:
        return "".join(
            f"Sep 17 07:{10 + i:02d}:13.000: sandbox/netshoot-debug:43120 (ID:1234) -> {dst}:80 (world) "
            "policy-verdict:none EGRESS DENIED (TCP Flags: SYN)\n"
            f"Sep 17 07:{10 + i:02d}:13.001: sandbox/netshoot-debug:43120 (ID:1234) <> {dst}:80 (world) "
            "Policy denied DROPPED (TCP Flags: SYN)\n"
            for i in range(6)
        )

    (tmp_path / "hubble-observe.txt").write_text("$ hubble observe --verdict DROPPED\n" + flows("10.20.4.7"))
    assert [f.code for f in policy_drops(load_bundle(tmp_path))] == ["network_policy_drops"]
    (tmp_path / "hubble-observe.txt").write_text("$ hubble observe --verdict DROPPED\n" + flows("169.254.169.254"))
    assert policy_drops(load_bundle(tmp_path)) == []


def test_libpqs_connection_to_server_at_names_the_server_not_at() -> None:
    from diagnosis.analyzers.network.extraction import _target

    msg = (
        'psycopg2.OperationalError: connection to server at "basket-prod.cq1xk7bz3f0a.us-east-1.rds.amazonaws.com" '
        "(10.0.3.4), port 5432 failed: FATAL:  remaining connection slots are reserved"
    )
    assert _target(msg) != "at"
