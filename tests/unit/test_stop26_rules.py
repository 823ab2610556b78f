"""Stop 26: cloud load balancers' request logs (GCP, Azure Front Door) name the backend that timed out; Confluent's
server error codes; Datadog metrics queries; IAM roles removed before access was denied; storage classes that
cannot grow a volume; a server that moved to another port; a collected heap's floor and its class histogram; a
cache that stopped hitting after a release; a failed Job with nothing from its pods; planned work that moved a
series."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diagnosis.analyzers._common import Rec, group_templates
from diagnosis.analyzers.logs._shared import EXCEPTION
from diagnosis.analyzers.logs.errors import _quiet_verdict
from diagnosis.analyzers.network.extraction import _call_failure
from diagnosis.analyzers.regressions import release_regressions, releases
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from diagnosis.timeline import fmt_ts
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes, series

H = 3600.0
MIB = 2**20


# ---------------------------------------------------------------- cloud load balancers' request logs


def _gcp_lb_entry(t: float, status: int, details: str, url: str = "https://shop.example/api/search?q=x") -> dict:
    return {
        "insertId": f"i{int(t)}",
        "jsonPayload": {
            "@type": "type.googleapis.com/google.cloud.loadbalancing.type.LoadBalancerLogEntry",
            "statusDetails": details,
        },
        "httpRequest": {"requestMethod": "GET", "requestUrl": url, "status": status, "latency": "30.0s"},
        "resource": {
            "type": "http_load_balancer",
            "labels": {"backend_service_name": "search-bes", "forwarding_rule_name": "shop-fr", "url_map_name": "m"},
        },
        "timestamp": fmt_ts(t),
        "severity": "WARNING" if status >= 500 else "INFO",
        "logName": "projects/p/logs/requests",
    }


def test_a_gcp_load_balancer_timing_out_on_its_own_backend_is_missing_evidence(tmp_path: Path) -> None:
    entries = [
        _gcp_lb_entry(T0 + 20 * i, 502, "backend_timeout") if i % 3 == 0 else _gcp_lb_entry(T0 + 20 * i, 200, "")
        for i in range(60)
    ]
    (tmp_path / "lb.json").write_text(json.dumps(entries))
    d = investigate(load_bundle(tmp_path), "search is timing out behind the load balancer, why?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "search-bes" in d.root_cause and "shop.example" not in d.root_cause.split(" is ")[0]


def _afd_line(t: float, status: int, error: str) -> str:
    props = {
        "httpMethod": "GET",
        "httpVersion": "2.0.0",
        "requestUri": "https://www.shop.example:443/cart",
        "httpStatusCode": str(status),
        "timeTaken": "30.0" if error == "OriginTimeout" else "0.2",
        "errorInfo": error,
        "originName": "app-storefront.azurewebsites.net:443",
    }
    return json.dumps({"time": fmt_ts(t), "category": "FrontDoorAccessLog", "properties": props})


def test_front_door_access_logs_read_as_requests_and_nothing_from_the_origin_is_unknown(tmp_path: Path) -> None:
    lines = [
        _afd_line(T0 + 15 * i, 503, "OriginTimeout") if i % 3 == 0 else _afd_line(T0 + 15 * i, 200, "NoError")
        for i in range(80)
    ]
    (tmp_path / "afd.jsonl").write_text("\n".join(lines) + "\n")
    ev = load_bundle(tmp_path)
    [log] = ev.kind("log")
    first = log.data["records"][0]["msg"]
    assert first.startswith('"GET https://www.shop.example:443/cart HTTP/2') and "upstream=app-storefront" in first
    assert "NoError" not in " ".join(r["msg"] for r in log.data["records"])  # no error, nothing said
    d = investigate(ev, "storefront is throwing 503s, why?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "app-storefront" in d.root_cause


def test_no_error_is_no_exception_and_a_php_call_to_an_undefined_method_is() -> None:
    assert EXCEPTION.search('{"errorInfo":"NoError"}') is None
    assert EXCEPTION.search("production.ERROR: Call to undefined method App\\Services\\Cart::applyCoupon() {}")


# ---------------------------------------------------------------- Confluent's server errors


def test_a_schema_registry_server_error_code_is_a_5xx_answer() -> None:
    msg = (
        "Error while sending request to http://schema-registry.data.svc:8081/schemas/ids/4127, retrying (1/3): "
        "Unexpected error code; error code: 50005"
    )
    assert _call_failure(msg) == "http_5xx"
    assert _call_failure("RestClientException: Schema not found; error code: 40403") is None


# ---------------------------------------------------------------- Datadog metrics queries


def test_datadog_v1_and_v2_metric_queries_become_series_in_base_units(tmp_path: Path) -> None:
    ns = [{"family": "time", "scale_factor": 1e-9, "name": "nanosecond"}, None]
    v1 = {
        "status": "ok",
        "res_type": "time_series",
        "query": "max:runtime.node.event_loop.delay.max{service:api} by {host}",
        "from_date": int(T0 * 1000),
        "series": [
            {
                "metric": "runtime.node.event_loop.delay.max",
                "scope": "host:api-01,service:api",
                "unit": ns,
                "pointlist": [[int((T0 + 60 * i) * 1000), 2e7 if i < 5 else 3e9] for i in range(10)],
            }
        ],
    }
    v2 = {
        "data": {
            "type": "timeseries_response",
            "attributes": {
                "series": [{"group_tags": ["host:api-02"], "query_index": 0, "unit": None}],
                "times": [int((T0 + 60 * i) * 1000) for i in range(5)],
                "values": [[1.0, 2.0, None, 4.0, 5.0]],
            },
        },
        "meta": {"queries": [{"query": "avg:system.load.1{service:api} by {host}", "name": "a"}]},
    }
    (tmp_path / "q1.json").write_text(json.dumps(v1))
    (tmp_path / "q2.json").write_text(json.dumps(v2))
    ev = load_bundle(tmp_path)
    by_name = {m.data["name"]: m for m in ev.kind("metric")}
    delay = by_name["runtime.node.event_loop.delay.max"]
    assert delay.data["labels"] == {"host": "api-01", "service": "api"} and delay.data["unit"] == "seconds"
    assert delay.data["points"][-1] == [T0 + 540, 3.0]
    load = by_name["system.load.1"]
    assert load.data["labels"] == {"host": "api-02"} and [p[1] for p in load.data["points"]] == [1.0, 2.0, 4.0, 5.0]
    assert not ev.ignored


# ---------------------------------------------------------------- access denied after an IAM change


def test_a_role_removed_from_the_caller_just_before_it_was_denied_is_named(tmp_path: Path) -> None:
    audit = [
        {
            "protoPayload": {
                "methodName": "google.iam.v1.IAMPolicy.SetIamPolicy",
                "resourceName": "projects/p/datasets/events_raw",
                "authenticationInfo": {"principalEmail": "serviceAccount:tf@ci.iam.gserviceaccount.com"},
                "metadata": {
                    "datasetChange": {
                        "bindingDeltas": [
                            {
                                "action": "REMOVE",
                                "role": "roles/bigquery.dataEditor",
                                "member": "serviceAccount:events-loader@p.iam.gserviceaccount.com",
                            }
                        ]
                    }
                },
            },
            "resource": {"type": "bigquery_dataset", "labels": {"dataset_id": "events_raw"}},
            "timestamp": fmt_ts(T0),
            "severity": "NOTICE",
            "logName": "projects/p/logs/cloudaudit.googleapis.com%2Factivity",
        }
    ]
    (tmp_path / "audit.json").write_text(json.dumps(audit))
    denied = (
        "google.api_core.exceptions.Forbidden: 403 POST https://bigquery.googleapis.com/bigquery/v2/projects/p/jobs: "
        "Access Denied: Table p:events_raw.page_events: Permission bigquery.tables.updateData denied"
    )
    lines = [f"{fmt_ts(T0 + 120 + 300 * i)} ERROR events_loader.main: batch failed: {denied}" for i in range(6)]
    (tmp_path / "events-loader.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are the event loads failing?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "roles/bigquery.dataEditor" in d.root_cause and "events-loader" in d.root_cause


# ---------------------------------------------------------------- a volume its storage class cannot grow


def test_a_volume_expansion_its_storage_class_refuses_is_a_configuration_error(tmp_path: Path) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "logging.1", "namespace": "logging"},
        "involvedObject": {"kind": "Elasticsearch", "name": "logging", "namespace": "logging"},
        "type": "Warning",
        "reason": "ReconciliationError",
        "message": "Failed to apply spec change: handle volume expansion: claim logging-es-data/data "
        "(storage class gp2-retain) does not support volume expansion",
        "firstTimestamp": fmt_ts(T0),
        "lastTimestamp": fmt_ts(T0 + 3000),
        "count": 9,
    }
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [event]}))
    d = investigate(load_bundle(tmp_path), "why is the elasticsearch resize stuck?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "gp2-retain" in d.root_cause and "volume expansion" in d.root_cause


def test_three_errors_over_hours_are_not_a_steady_background() -> None:
    b = Builder()
    recs = [(T0 + i * 500, "info", "reconcile ok") for i in range(20)]
    recs += [(T0 + 900 + i * 4000, "error", "Reconciler error: cannot grow volume") for i in range(3)]
    b.log("operator.log", sorted(recs))
    [item] = b.set().kind("log")
    errors = [r for r in item.data["records"] if r["level"] == "error"]
    [tpl] = group_templates([_rec(item, r) for r in errors])
    assert _quiet_verdict(tpl, T0, T0 + 9500, T0 + 9500, len(item.data["records"])) is None


def _rec(item: Any, r: dict) -> Rec:
    return Rec(item, r["ts"], r["msg"], r["line"], r["level"])


# ---------------------------------------------------------------- a server that moved to another port


def test_refusals_on_the_old_port_of_a_server_that_now_listens_elsewhere_are_a_configuration_error(
    tmp_path: Path,
) -> None:
    journal = [
        'Jul 08 09:12:39 geo-01 geocoder[28817]: level=INFO msg="http server closed" addr=127.0.0.1:8080',
        'Jul 08 09:12:39 geo-01 geocoder[61402]: level=INFO msg="config loaded" LISTEN_ADDR=0.0.0.0:8081',
        'Jul 08 09:12:41 geo-01 geocoder[61402]: level=INFO msg="http server listening" addr=0.0.0.0:8081',
    ]
    (tmp_path / "journal.txt").write_text("\n".join(journal) + "\n")
    nginx = [
        f"2025/07/08 09:{13 + i // 6:02d}:{(i % 6) * 10:02d} [error] 1023#1023: *{558800 + i} connect() failed "
        "(111: Connection refused) while connecting to upstream, client: 10.1.1.9, server: geo, "
        'request: "GET /v1/geocode HTTP/1.1", upstream: "http://127.0.0.1:8080/v1/geocode", host: "geo"'
        for i in range(30)
    ]
    (tmp_path / "error.log").write_text("\n".join(nginx) + "\n")
    d = investigate(load_bundle(tmp_path), "geocoder is down, did it crash?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "8081" in d.root_cause and "127.0.0.1:8080" in d.root_cause and "LISTEN_ADDR" in d.root_cause


# ---------------------------------------------------------------- a collected heap's floor and what it keeps


def _heap_bundle(tmp_path: Path) -> Builder:
    b = Builder()
    before = [(450 + (i % 3) * 150) * MIB for i in range(24)]  # a sawtooth between ~450 and ~750 MiB, level
    after = []
    for i in range(48):  # from the release: the floor climbs ~30 MiB/h under the same sawtooth
        after.append((450 + 30 * 2 * i + (i % 3) * 150) * MIB)
    b.metric("jvm_memory_used_bytes", series(T0, 2 * H, before + after), {"area": "heap", "job": "quotes"})
    traffic = [100.0 + (i % 4) for i in range(72)]
    b.metric("http_requests_per_second", series(T0, 2 * H, traffic), {"job": "quotes"})
    b.log("deploys.txt", [(T0 + 48 * H, None, "quotes 2.6.1 -> 2.7.0 qt-app-01,qt-app-02 by ci (pipeline 9) ok")])
    histogram = [
        "quotes@qt-app-01:~$ jcmd 4242 GC.class_histogram | head",
        " num     #instances         #bytes  class name (module)",
        "-------------------------------------------------------",
        "   1:       2261835      325704240  com.acme.quotes.QuoteAuditEntry",
        "   2:       4611204      184448160  java.lang.String (java.base@21.0.4)",
        "   3:       2283511      154079016  [B (java.base@21.0.4)",
    ]
    (tmp_path / "histo.txt").write_text("\n".join(histogram) + "\n")
    for item in load_bundle(tmp_path).kind("runtime/heap_histogram"):
        b._add(item.kind, item.object, item.data)
    return b


def test_a_collected_heap_whose_floor_climbs_after_a_release_leaks_and_names_the_class_it_keeps(
    tmp_path: Path,
) -> None:
    b = _heap_bundle(tmp_path)
    assert [r.version for r in releases(b.set())] == ["2.7.0"]
    found = release_regressions(b.set())
    [leak] = causes(found)
    assert leak.code == "memory_leak" and leak.category == Category.CODE_DEFECT
    assert "2.7.0" in leak.mechanism and "com.acme.quotes.QuoteAuditEntry" in leak.mechanism
    assert_refs_real(b.set(), found)


# ---------------------------------------------------------------- a cache that stopped hitting after a release


def test_a_cache_hit_ratio_that_collapsed_after_a_release_at_flat_traffic_is_a_code_defect() -> None:
    b = Builder()
    ratio = [0.94 + (i % 3) * 0.003 for i in range(30)] + [0.003 + (i % 2) * 0.001 for i in range(30)]
    b.metric("cache_hit_ratio", series(T0, 120, ratio), {"job": "product-api"})
    b.metric("http_requests_per_second", series(T0, 120, [440.0 + (i % 5) for i in range(60)]), {"job": "product-api"})
    journal = [
        (T0 + 100, "info", 'product-api[2211]: ts=x level=info msg="request stats" version=3.13.2 rps=442'),
        (T0 + 30 * 120 - 60, "info", 'product-api[8841]: ts=x level=info msg="starting" version=3.14.0 go=1.23'),
    ]
    b.log("unit/product-api", journal)
    found = release_regressions(b.set())
    [miss] = [f for f in causes(found) if f.code == "cache_miss_regression"]
    assert miss.category == Category.CODE_DEFECT and "3.14.0" in miss.mechanism and "cache key" in miss.mechanism
    assert_refs_real(b.set(), found)


def test_a_cache_hit_ratio_that_recovered_is_no_regression() -> None:
    b = Builder()
    ratio = [0.94] * 30 + [0.3] * 10 + [0.93] * 20  # a cold cache after the restart, warm again
    b.metric("cache_hit_ratio", series(T0, 120, ratio), {"job": "product-api"})
    b.log("deploys.txt", [(T0 + 30 * 120 - 60, None, "product-api 3.13.2 -> 3.14.0 app-01 by ci ok")])
    assert not [f for f in release_regressions(b.set()) if f.code == "cache_miss_regression"]


# ---------------------------------------------------------------- a failed Job with nothing from its pods


def test_a_failed_job_whose_pods_and_logs_are_gone_is_unknown(tmp_path: Path) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ledger-export-29112600", "namespace": "finance", "creationTimestamp": fmt_ts(T0)},
        "spec": {"backoffLimit": 2},
        "status": {
            "failed": 3,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": fmt_ts(T0 + 600),
                }
            ],
        },
    }
    (tmp_path / "job.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}))
    d = investigate(load_bundle(tmp_path), "why did the ledger export fail?")
    assert d.category == Category.UNKNOWN, d.root_cause


# ---------------------------------------------------------------- a new pod unready while it started


def _event(kind: str, name: str, reason: str, t: float, msg: str, etype: str = "Normal", count: int = 1) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{int(t)}", "namespace": "finance"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "finance"},
        "type": etype,
        "reason": reason,
        "message": msg,
        "firstTimestamp": fmt_ts(t),
        "lastTimestamp": fmt_ts(t),
        "count": count,
    }


def _rollout_bundle(tmp_path: Path, retired: bool) -> None:
    pod = "ap-portal-84d7f6c9b5-m2q9c"
    events = [
        _event("Deployment", "ap-portal", "ScalingReplicaSet", T0, "Scaled up replica set ap-portal-84d7f6c9b5 to 1"),
        _event("Pod", pod, "Started", T0 + 5, "Started container ap-portal"),
        _event(
            "Pod",
            pod,
            "Unhealthy",
            T0 + 11,
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            "Warning",
            3,
        ),
    ]
    if retired:
        msg = "Scaled down replica set ap-portal-7b5c9d8e61 to 0 from 1"
        events.append(_event("Deployment", "ap-portal", "ScalingReplicaSet", T0 + 30, msg))
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))


def test_readiness_failures_while_a_new_pod_started_and_the_rollout_completed_are_its_start(tmp_path: Path) -> None:
    _rollout_bundle(tmp_path, retired=True)
    d = investigate(load_bundle(tmp_path), "is ap-portal ok after the deploy?")
    assert d.category == Category.HEALTHY, d.root_cause


def test_readiness_failures_of_a_new_pod_whose_rollout_stalled_are_not_its_start(tmp_path: Path) -> None:
    _rollout_bundle(tmp_path, retired=False)
    d = investigate(load_bundle(tmp_path), "is ap-portal ok after the deploy?")
    assert d.category != Category.HEALTHY, d.root_cause


# ---------------------------------------------------------------- CPU profiles


_NODE_PROFILE = """$ node --prof-process /tmp/isolate-0x1-4121-v8.log | head -40
Statistical profiling result from /tmp/isolate-0x1-4121-v8.log, (30917 ticks, 58 unaccounted, 0 excluded).

 [Shared libraries]:
   ticks  total  nonlib   name
    611    2.0%          /usr/bin/node

 [JavaScript]:
   ticks  total  nonlib   name
  28071   90.8%   93.1%  RegExp: ^([a-z0-9_.+-]+)*@([a-z0-9-]+\\.)+[a-z]{2,}$
    212    0.7%    0.7%  JS: *serialize /srv/accounts-api/node_modules/fast-json-stringify/index.js:219:22

 [C++]:
   ticks  total  nonlib   name
    801    2.6%    2.7%  epoll_pwait

 [Bottom up (heavy) profile]:
   ticks parent  name
  28071   90.8%  RegExp: ^([a-z0-9_.+-]+)*@([a-z0-9-]+\\.)+[a-z]{2,}$
  28071  100.0%    JS: *validateEmail /srv/accounts-api/dist/signup/validate.js:14:23
  28071  100.0%      JS: ^signupHandler /srv/accounts-api/dist/signup/routes.js:41:31
"""


def test_a_node_profile_whose_ticks_sit_in_one_regex_is_a_code_defect_of_the_release(tmp_path: Path) -> None:
    (tmp_path / "profile.txt").write_text(_NODE_PROFILE)
    (tmp_path / "deploys.txt").write_text(
        "$ cat /srv/accounts-api/DEPLOYS\n2025-05-22T14:03:55Z 4.7.3 deployed by ci ok\n"
        "2025-05-27T10:12:40Z 4.8.0 deployed by ci ok\n"
    )
    d = investigate(load_bundle(tmp_path), "why is accounts-api slow?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "validateEmail" in d.root_cause and "4.8.0" in d.root_cause and "accounts-api" in d.root_cause


def test_a_go_profile_spent_in_the_garbage_collector_is_memory_pressure(tmp_path: Path) -> None:
    (tmp_path / "top.txt").write_text(
        "Showing nodes accounting for 28.41s, 94.70% of 30s total\n"
        "      flat  flat%   sum%        cum   cum%\n"
        "    16.20s 54.00% 54.00%     17.10s 57.00%  runtime.scanobject\n"
        "     4.10s 13.67% 67.67%      9.80s 32.67%  runtime.mallocgc\n"
        "     1.20s  4.00% 71.67%      1.20s  4.00%  main.(*Cache).Get\n"
    )
    ev = load_bundle(tmp_path)
    [profile] = ev.kind("runtime/cpu_profile")
    assert profile.data["frames"][0]["name"] == "runtime.scanobject" and profile.data["frames"][0]["share"] == 0.54
    d = investigate(ev, "why is the API burning CPU?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


def test_a_perf_report_spread_over_many_frames_names_no_hotspot(tmp_path: Path) -> None:
    rows = "\n".join(f"    {9 - i}.00%  java  libjvm.so  [.] Frame{i}" for i in range(8))
    (tmp_path / "perf.txt").write_text(
        f"# Samples: 40K of event 'cpu-clock'\n#\n# Overhead  Command  Shared Object  Symbol\n{rows}\n"
    )
    ev = load_bundle(tmp_path)
    [profile] = ev.kind("runtime/cpu_profile")
    assert len(profile.data["frames"]) == 8
    assert investigate(ev, "is the JVM ok?").category != Category.CODE_DEFECT


# ---------------------------------------------------------------- CloudTrail: the policy change before the refusals


def test_refusals_after_a_cloudtrail_policy_change_on_that_queue_name_the_change(tmp_path: Path) -> None:
    trail = {
        "Events": [
            {
                "EventName": "SetQueueAttributes",
                "EventTime": fmt_ts(T0 - 60),
                "EventSource": "sqs.amazonaws.com",
                "Username": "GitHubActions-88213",
                "ReadOnly": "false",
                "Resources": [{"ResourceName": "https://sqs.eu-west-1.amazonaws.com/4182/fulfilment-intake"}],
                "CloudTrailEvent": json.dumps({"requestParameters": {"attributes": {"Policy": "{...}"}}}),
            },
            {
                "EventName": "GetQueueAttributes",
                "EventTime": fmt_ts(T0),
                "EventSource": "sqs.amazonaws.com",
                "ReadOnly": "true",
            },
        ]
    }
    (tmp_path / "trail.json").write_text(json.dumps(trail))
    failures = {
        "events": [
            {
                "logStreamName": "s1",
                "timestamp": int((T0 + 10 * i) * 1000),
                "message": json.dumps(
                    {
                        "delivery": {
                            "destination": "arn:aws:sqs:eu-west-1:4182:fulfilment-intake",
                            "providerResponse": '{"ErrorCode":"AccessDenied","ErrorMessage":"Access to the resource '
                            'https://sqs.eu-west-1.amazonaws.com/4182/fulfilment-intake is denied."}',
                            "statusCode": 403,
                        },
                        "status": "FAILURE",
                    }
                ),
            }
            for i in range(10)
        ]
    }
    (tmp_path / "sns-failures.json").write_text(json.dumps(failures))
    # the delivery-failure series goes on long after the exported failures: they did not stop
    failed = [[T0 + 300 * i, "5"] for i in range(12)]
    prom = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "sns_notifications_failed", "topic": "order-events"}, "values": failed}]}}  # fmt: skip
    (tmp_path / "failed.json").write_text(json.dumps(prom))
    ev = load_bundle(tmp_path)
    [trail_log] = [i for i in ev.kind("log") if i.object == "cloudtrail/sqs.amazonaws.com"]
    assert [r["msg"].split()[0] for r in trail_log.data["records"]] == ["SetQueueAttributes"]  # reads left out
    d = investigate(ev, "why are order events not reaching fulfilment?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "SetQueueAttributes on fulfilment-intake by GitHubActions-88213" in d.root_cause


# ---------------------------------------------------------------- an input whose header changed


def test_a_loader_whose_newest_input_has_another_header_got_a_new_layout(tmp_path: Path) -> None:
    lines = []
    for day, header in ((0, "region_code,rate,valid_from"), (1, "region_code,rate,valid_from"),
                        (2, "region_code,rate_pct,valid_from,source_ref")):  # fmt: skip
        t = T0 + day * 86400
        lines.append(f"{fmt_ts(t)} import_tax_rates: reading tax_rates_{day}.csv")
        lines.append(f"{fmt_ts(t + 2)} import_tax_rates: header: {header}")
        lines.append(f"{fmt_ts(t + 5)} import_tax_rates: loaded 412 rows")
    (tmp_path / "taxsync.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are the tax amounts wrong since this morning?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "rate_pct" in d.root_cause and "source_ref" in d.root_cause


def test_a_loader_reading_the_same_header_every_day_is_no_layout_change(tmp_path: Path) -> None:
    lines = [f"{fmt_ts(T0 + day * 86400)} import_tax_rates: header: region_code,rate,valid_from" for day in range(4)]
    (tmp_path / "taxsync.log").write_text("\n".join(lines) + "\n")
    assert investigate(load_bundle(tmp_path), "are the tax imports ok?").category == Category.HEALTHY


# ---------------------------------------------------------------- machines, secrets and protocols


def test_a_bmc_event_log_that_lost_the_power_supplies_is_an_infrastructure_cause(tmp_path: Path) -> None:
    (tmp_path / "sel.txt").write_text(
        "ops@jump:~$ ipmitool -I lanplus -H db-b2-ipmi.dc2.internal -U admin -E sel elist | tail\n"
        " 1a6 | 05/19/2024 | 22:03:15 | Temperature #0x30 | Upper Non-critical going high | Asserted\n"
        " 1a8 | 09/14/2024 | 03:10:09 | Power Supply #0x63 | Failure detected () | Asserted\n"
        " 1ab | 09/14/2024 | 03:11:47 | Power Supply #0x62 | Power Supply AC lost | Asserted\n"
        " 1ad | 09/14/2024 | 03:11:47 | System ACPI Power State #0x81 | S4/S5: soft-off | Asserted\n"
    )
    ev = load_bundle(tmp_path)
    [sel] = ev.kind("log")
    assert sel.object == "ipmi/db-b2" and [r["level"] for r in sel.data["records"]] == [
        "info",
        "error",
        "error",
        "info",
    ]
    d = investigate(ev, "why did the database go away?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "db-b2" in d.root_cause and "power supply" in d.root_cause


def test_webhooks_whose_signature_does_not_verify_are_a_signing_secret_configuration_error(tmp_path: Path) -> None:
    lines = [
        f'{{"time":"{fmt_ts(T0 + 30 * i)}","level":"error","msg":"webhook signature verification failed: '
        'StripeSignatureVerificationError: No signatures found matching the expected signature for payload"}'
        for i in range(20)
    ]
    (tmp_path / "billing-hooks.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are stripe webhooks failing?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "signing secret" in d.root_cause


def test_grpc_calls_to_an_http1_port_are_a_protocol_mismatch(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + 60 * i)}\twarn\tgrpc@v1.72.0/clientconn.go:1409\t[core] grpc: addrConn.createTransport failed "
        'to connect to {Addr: "tempo-distributor.tracing.svc:4318", ServerName: "tempo-distributor.tracing.svc:4318",'
        ' }. Err: connection error: desc = "error reading server preface: http2: frame too large"'
        for i in range(12)
    ]
    (tmp_path / "otel-gateway.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "is tempo down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "tempo-distributor.tracing.svc:4318" in d.root_cause


def test_sparse_read_only_refusals_every_half_hour_are_still_going_on(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + 1800 * i)} ERROR [ledger.api] POST /v1/entries failed: psycopg2.errors.ReadOnlySqlTransaction: "
        "cannot execute INSERT in a read-only transaction"
        for i in range(8)
    ]
    lines.append(f"{fmt_ts(T0 + 1800 * 7 + 2400)} INFO [ledger.api] GET /v1/entries 200")
    (tmp_path / "ledger-api.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why do ledger writes fail?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


# ---------------------------------------------------------------- Windows events, dead letters, rejected files


def test_get_winevent_tables_and_lists_are_read_and_a_disk_near_capacity_is_full(tmp_path: Path) -> None:
    (tmp_path / "events.txt").write_text(
        "PS C:\\> Get-WinEvent -FilterHashtable @{LogName='System'} | Format-Table TimeCreated,Id,ProviderName,"
        "LevelDisplayName,Message -AutoSize -Wrap\n\n"
        "TimeCreated         Id   ProviderName LevelDisplayName Message\n"
        "-----------         --   ------------ ---------------- -------\n"
        "16.11.2026 08:12:40 2013 srv          Warning          The C: disk is at or near capacity.  You may need "
        "to delete some files.\n"
        "16.11.2026 07:12:39 2013 srv          Warning          The C: disk is at or near capacity.  You may need "
        "to delete some files.\n"
        "16.11.2026 06:12:39 2013 srv          Warning          The C: disk is at or near capacity.  You may need "
        "to delete some files.\n\n"
        "PS C:\\> Get-WinEvent -FilterHashtable @{LogName='Application'; Id=1309} -MaxEvents 1 | Format-List\n\n"
        "TimeCreated      : 16.11.2026 08:30:58\n"
        "Id               : 1309\n"
        "LevelDisplayName : Warning\n"
        "Message          : Event code: 3005\n"
        "                   Exception message: There is not enough space on the disk.\n"
    )
    ev = load_bundle(tmp_path)
    stamps = sorted(r["ts"] for i in ev.kind("log") for r in i.data["records"])
    assert fmt_ts(stamps[0]) == "2026-11-16 06:12:39Z" and len(stamps) == 4
    d = investigate(ev, "why does the portal fail?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


def test_messages_dead_lettered_after_their_delivery_count_are_no_bad_data() -> None:
    from diagnosis.analyzers.logs._shared import BAD_DATA

    assert not BAD_DATA.search("Message for ORD-1 reached MaxDeliveryCount (10) and will be moved to the dead-letter")
    assert BAD_DATA.search("record 42 sent to DLQ: invalid schema")
    assert BAD_DATA.search("IncorrectTokenCountException: Incorrect number of tokens found in record: expected 13")
    assert BAD_DATA.search("400 Error while reading data, error message: CSV table encountered too many errors")


# ---------------------------------------------------------------- the autoscaler's and the scheduler's own work


def _pod_event(pod: str, reason: str, t: float, msg: str, etype: str = "Normal") -> dict:
    ev = _event("Pod", pod, reason, t, msg, etype)
    ev["metadata"]["namespace"] = ev["involvedObject"]["namespace"] = "search"
    return ev


def test_failed_scheduling_on_nodes_being_consolidated_then_scheduled_is_the_autoscalers_work(tmp_path: Path) -> None:
    pod = "search-api-6b8c9d7f5d-h4m2c"
    msg = "0/4 nodes are available: 3 node(s) had untolerated taint {karpenter.sh/disrupted: }. preemption: 0/4 nodes"
    events = [
        _pod_event(pod, "FailedScheduling", T0, msg, "Warning"),
        _pod_event(pod, "Scheduled", T0 + 40, f"Successfully assigned search/{pod} to ip-10-0-1-9"),
    ]
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))
    assert investigate(load_bundle(tmp_path), "is search ok?").category == Category.HEALTHY


def test_failed_scheduling_on_a_disruption_taint_never_scheduled_is_still_a_finding(tmp_path: Path) -> None:
    pod = "search-api-6b8c9d7f5d-h4m2c"
    msg = "0/4 nodes are available: 3 node(s) had untolerated taint {karpenter.sh/disrupted: }. preemption: 0/4 nodes"
    events = [_pod_event(pod, "FailedScheduling", T0, msg, "Warning")]
    (tmp_path / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))
    assert investigate(load_bundle(tmp_path), "is search ok?").category != Category.HEALTHY


def _sweep_bundle(tmp_path: Path, with_job: bool) -> None:
    sends = [[T0 + 60 * i, "5" if i < 60 else "120"] for i in range(130)]
    prom = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "push_send_errors:rate5m", "campaign": "all"}, "values": sends}]}}  # fmt: skip
    (tmp_path / "rejected.json").write_text(json.dumps(prom))
    alert = {
        "version": "4",
        "status": "resolved",
        "receiver": "oncall",
        "groupKey": "{}:{alertname=PushRejectionsHigh}",
        "alerts": [
            {
                "status": "resolved",
                "labels": {"alertname": "PushRejectionsHigh", "severity": "page"},
                "annotations": {"summary": "push rejections above 50/s"},
                "startsAt": fmt_ts(T0 + 3900),
                "endsAt": fmt_ts(T0 + 6300),
            }
        ],
    }
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    if with_job:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "token-sweep-28816020",
                "namespace": "mobile",
                "ownerReferences": [{"kind": "CronJob", "name": "token-sweep"}],
            },
            "status": {
                "startTime": fmt_ts(T0 + 3590),
                "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": fmt_ts(T0 + 6100)}],
            },
        }
        (tmp_path / "jobs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}))


def test_a_series_that_moved_while_a_scheduled_job_ran_and_whose_alert_resolved_is_planned_work(
    tmp_path: Path,
) -> None:
    _sweep_bundle(tmp_path, with_job=True)
    assert investigate(load_bundle(tmp_path), "did APNs break?").category == Category.HEALTHY


def test_the_same_series_and_alert_without_a_scheduled_run_is_not_called_healthy(tmp_path: Path) -> None:
    _sweep_bundle(tmp_path, with_job=False)
    assert investigate(load_bundle(tmp_path), "did APNs break?").category != Category.HEALTHY


# ---------------------------------------------------------------- threads looping in a corrupted map; business ratios


def test_runnable_threads_spinning_in_a_hashmap_are_an_infinite_loop(tmp_path: Path) -> None:
    block = (
        '"http-nio-8080-exec-{n}" #4{n} daemon prio=5 os_prio=0 cpu=812345.12ms elapsed=9000.1s tid=0x00007f{n:04d} '
        "nid=0x{n:x} runnable  [0x00007f]\n"
        "   java.lang.Thread.State: RUNNABLE\n"
        "\tat java.util.HashMap$TreeNode.find(java.base@17.0.12/HashMap.java:1967)\n"
        "\tat java.util.HashMap$TreeNode.getTreeNode(java.base@17.0.12/HashMap.java:1979)\n"
        "\tat java.util.HashMap.getNode(java.base@17.0.12/HashMap.java:572)\n"
        "\tat com.acme.quote.pricing.RateCardCache.get(RateCardCache.java:61)\n\n"
    )
    dump = "2026-09-08 15:18:02\nFull thread dump OpenJDK 64-Bit Server VM (17.0.12+7 mixed mode):\n\n" + "".join(
        block.format(n=n) for n in range(5)
    )
    (tmp_path / "jstack.txt").write_text(dump)
    d = investigate(load_bundle(tmp_path), "why is quote-engine pinned at 100% CPU?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "HashMap" in d.root_cause and "RateCardCache" in d.root_cause


def test_an_approval_ratio_near_one_is_no_saturated_resource() -> None:
    b = Builder()
    b.metric("approve_ratio", series(T0, 300, [0.90 + 0.001 * i for i in range(60)]), {"service": "fraud"})
    from diagnosis.analyzers.metrics import metric_series

    assert not [f for f in metric_series(b.set()) if f.code in ("saturation", "trend_to_exhaustion")]


# ---------------------------------------------------------------- certificates cert-manager cannot renew; tombstones


def _cert_bundle(tmp_path: Path, challenge_reason: str | None) -> None:
    cert = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "shop-tls", "namespace": "storefront"},
        "spec": {"secretName": "shop-tls"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Expired",
                    "message": "Certificate expired on Sat, 14 Mar 2026 07:12:09 UTC",
                    "lastTransitionTime": fmt_ts(T0),
                }
            ],
            "failedIssuanceAttempts": 6 if challenge_reason else None,
        },
    }
    items: list[dict] = [cert]
    if challenge_reason:
        items.append(
            {
                "apiVersion": "acme.cert-manager.io/v1",
                "kind": "Challenge",
                "metadata": {"name": "shop-tls-7-310546", "namespace": "storefront"},
                "status": {"presented": False, "processing": True, "reason": challenge_reason, "state": "pending"},
            }
        )
    (tmp_path / "certs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def test_an_expired_certificate_whose_dns01_challenge_fails_is_a_solver_configuration_error(tmp_path: Path) -> None:
    _cert_bundle(tmp_path, "Error presenting challenge: Found no Zones for domain _acme-challenge.shop.example.io.")
    d = investigate(load_bundle(tmp_path), "why is the shop certificate expired?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "storefront/shop-tls" in d.root_cause and "Found no Zones" in d.root_cause


def test_a_certificate_not_ready_with_no_failing_challenge_nor_attempts_is_no_renewal_failure(tmp_path: Path) -> None:
    _cert_bundle(tmp_path, None)
    from diagnosis.analyzers.certmanager import certificate_not_renewed

    assert certificate_not_renewed(load_bundle(tmp_path)) == []


def test_reads_aborted_on_tombstones_of_one_table_are_a_data_model_defect(tmp_path: Path) -> None:
    lines = [
        f"ERROR [ReadStage-{i}] {fmt_ts(T0 + 60 * i)[:19].replace('T', ' ')},540 ReadCommand.java:557 - Scanned over "
        f"100001 tombstones during query 'SELECT * FROM timeline.feed_by_user WHERE user_id = u{i} LIMIT 500' "
        "(last scanned row token was 1); query aborted"
        for i in range(5)
    ]
    (tmp_path / "system.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why do feed reads fail, do we need bigger cassandra nodes?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "timeline.feed_by_user" in d.root_cause and "tombstone" in d.root_cause


# ---------------------------------------------------------------- ignored columns, full transaction logs, sole releases


def test_columns_a_loader_ignored_and_the_field_then_null_downstream_are_a_layout_change(tmp_path: Path) -> None:
    (tmp_path / "importer.log").write_text(
        f"{fmt_ts(T0)} WARNING catalog_importer.schema: nordhaus: unexpected columns ignored: "
        "['unit_price', 'vat_rate']\n"
        f"{fmt_ts(T0 + 5)} INFO catalog_importer.load: nordhaus: 4873 rows read, 4873 upserted, 0 rejected\n"
    )
    lines = [
        f"{fmt_ts(T0 + 60 * (i + 1))} ERROR strawberry.execution: Cannot return null for non-nullable field "
        "Product.price."
        for i in range(6)
    ]
    (tmp_path / "catalog-subgraph.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why does the catalog return errors for some products?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "nordhaus" in d.root_cause and "unit_price" in d.root_cause


def test_a_full_sql_server_transaction_log_is_resource_exhaustion_naming_the_database(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + 60 * i)} ERROR ErpService: System.Data.SqlClient.SqlException (0x80131904): The transaction "
        "log for database 'ERP_Prod' is full due to 'LOG_BACKUP'."
        for i in range(4)
    ]
    (tmp_path / "app.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why do goods receipts fail?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    assert "ERP_Prod" in d.root_cause and "LOG_BACKUP" in d.root_cause


def test_a_heap_leak_under_a_jmx_job_takes_the_bundles_only_versioned_start() -> None:
    b = Builder()
    before = [(1300 + (i % 3) * 40) * MIB for i in range(24)]
    after = [(1300 + 90 * i + (i % 3) * 40) * MIB for i in range(30)]
    b.metric("jvm_memory_used_bytes", series(T0, H, before + after), {"area": "heap", "job": "tomcat-jmx"})
    b.metric("req_rate", series(T0, H, [50.0 + (i % 4) for i in range(54)]), {"job": "tomcat-jmx"})
    b.log(
        "catalina.out", [(T0 + 24 * H - 30, "info", "StartupListener quoting 4.2.0 (build x, commit 3c9e1d4) started")]
    )
    [leak] = [f for f in causes(release_regressions(b.set())) if f.code == "memory_leak"]
    assert "quoting 4.2.0" in leak.mechanism and "service:catalina" in leak.tags


# ---------------------------------------------------------------- mesh routes, Vault roles, Rust tracing targets


def test_envoy_503_nc_is_a_route_to_a_cluster_that_does_not_exist(tmp_path: Path) -> None:
    lines = [
        f'[{fmt_ts(T0 + 9 * i).replace(" ", "T")}] "GET /v1/prices HTTP/1.1" 503 NC cluster_not_found - "-" 0 0 0 - '
        f'"-" "frontend/5.12.0" "0cc61f87-{i:04d}" "pricing.shop.svc.cluster.local:8080" "-" - - 10.96.48.211:8080 '
        "10.64.5.19:53578 - -"
        for i in range(6)
    ]
    (tmp_path / "istio-proxy.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "did pricing 2.8.0 break?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "pricing.shop.svc.cluster.local:8080" in d.root_cause and "DestinationRule" in d.root_cause


def test_vault_refusing_a_service_account_its_role_is_not_bound_to_is_a_configuration_error(tmp_path: Path) -> None:
    lines = [
        f'{fmt_ts(T0 + 30 * i)} [ERROR] agent.auth.handler: error authenticating: error="Error making API request. '
        "URL: PUT https://vault.vault.svc:8200/v1/auth/kubernetes/login Code: 403. Errors: * service account name "
        'not authorized" backoff=30s'
        for i in range(8)
    ]
    (tmp_path / "vault-agent-init.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "is vault sealed again?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


def test_a_rust_tracing_target_is_not_the_host_a_call_went_to() -> None:
    from diagnosis.analyzers.network.extraction import _target

    msg = (
        "Fetch error: HTTP fetch failed from 'inventory': request timed out target=apollo_router::query_planner::fetch "
        "http.url=http://inventory.commerce.svc.cluster.local:4001/graphql"
    )
    assert _target(msg) == "inventory.commerce.svc.cluster.local:4001"


# ---------------------------------------------------------------- a failure that is over, asked about


def _recovered_bundle(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + 20 * i)[:19].replace('-', '/').replace('T', ' ')} [error] 1204#1204: *89{i:04d} upstream timed "
        "out (110: Connection timed out) while reading response header from upstream, client: 10.1.1.9, server: "
        'members, request: "GET / HTTP/1.1", upstream: "http://unix:/run/gunicorn/members.sock:/", host: "members"'
        for i in range(40)
    ]
    later = fmt_ts(T0 + 4 * 3600)[:19].replace("-", "/").replace("T", " ")
    lines.append(f'{later} [error] 1203#1203: *9017 open() "/srv/members/static/favicon.png" failed (2: No such file)')
    (tmp_path / "nginx-error.log").write_text("\n".join(lines) + "\n")


def test_asked_what_caused_a_failure_that_is_over_the_bundle_is_read_as_of_its_end(tmp_path: Path) -> None:
    _recovered_bundle(tmp_path)
    ev = load_bundle(tmp_path)
    assert investigate(ev, "is the members site ok now?").category == Category.HEALTHY
    d = investigate(ev, "what caused the members 504s at 3am? it recovered by itself")
    assert d.category != Category.HEALTHY, d.root_cause
    assert "read as of its end" in d.root_cause


def test_evidence_read_as_of_a_time_cuts_what_came_later() -> None:
    b = Builder()
    b.log("app.log", [(T0, "error", "boom"), (T0 + 600, "info", "fine")])
    b.metric("x", series(T0, 60, [1.0] * 20))
    cut = b.set().at(T0 + 300)
    assert [r["ts"] for r in cut.kind("log")[0].data["records"]] == [T0]
    assert len(cut.kind("metric")[0].data["points"]) == 6
    from diagnosis.timeline import evidence_now

    assert evidence_now(cut) == T0 + 300 and evidence_now(b.set()) == T0 + 1140


def test_goroutines_of_new_pods_that_grow_take_the_pods_start_as_their_release() -> None:
    b = Builder()
    pod = {
        "metadata": {"name": "order-events-7c4f9d8b6-5jqxm", "namespace": "orders"},
        "spec": {"containers": [{"name": "order-events", "image": "ghcr.io/acme/order-events:v2.14.0"}]},
        "status": {"startTime": fmt_ts(T0 - 1800)},
    }
    b.raw("k8s/Pod", "Pod/orders/order-events-7c4f9d8b6-5jqxm", pod)
    values = [200 + 60 * k for k in range(12)] * 3  # grows, is killed, grows again
    b.metric("go_goroutines", series(T0, 600, values), {"pod": "order-events-7c4f9d8b6-5jqxm", "job": "order-events"})
    [leak] = [f for f in causes(release_regressions(b.set())) if f.code == "goroutine_leak"]
    assert "v2.14.0" in leak.mechanism


# ---------------------------------------------------------------- files rejected with every delivery


def test_a_partners_files_rejected_at_each_delivery_are_bad_data_still_going_on(tmp_path: Path) -> None:
    lines = []
    for h in (6, 8, 10, 12):
        t = T0 + h * 3600
        lines.append(
            f"{fmt_ts(t)[:19].replace('T', ' ')},343 ERROR [x12-worker-1] c.n.edi.x12.InterchangeReader - Interchange "
            f"rejected: /srv/edi/inbound/kestrel/KESTREL_810_{h:02d}05.edi: invalid interchange header, segment tag "
            "'\u00ef\u00bb\u00bfISA' is not ISA/UNA/UNB"
        )
        lines.append(
            f"{fmt_ts(t + 600)[:19].replace('T', ' ')},100 INFO  [x12-worker-2] ISA control 0001 sender ORMOND"
        )
    (tmp_path / "translator.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are kestrel invoices not coming through?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "KESTREL_810_" in d.root_cause


def test_an_offset_into_a_file_is_no_consumers_stuck_position() -> None:
    from diagnosis.analyzers.logs.data import _stuck_offset

    b = Builder()
    b.log("t.log", [(T0 + i, "error", "X12ParseException: Unrecognised envelope at offset 0") for i in range(5)])
    assert _stuck_offset(b.set().kind("log")[0]) == ""


# ---------------------------------------------------------------- wrong ports for a Service, errors' urls, chaos delays


def test_refusals_on_a_port_the_service_does_not_expose_are_the_callers_port_setting(tmp_path: Path) -> None:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "teastore-db", "namespace": "teastore"},
        "spec": {"clusterIP": "10.0.148.203", "selector": {"app": "teastore-db"}, "ports": [{"port": 3306}]},
    }
    (tmp_path / "svc.json").write_text(json.dumps(svc))
    lines = [
        f"{fmt_ts(T0 + 20 * i)} WARNING Database not reachable (Connection refused: teastore-db:5432)" for i in range(5)
    ]
    (tmp_path / "persistence.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "is the DB down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "5432" in d.root_cause and "3306" in d.root_cause


def test_a_pino_error_objects_url_names_the_upstream_that_answered_5xx(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {
                "level": 50,
                "time": int((T0 + 30 * i) * 1000),
                "err": {
                    "type": "FraudApiUnavailableError",
                    "message": "fraud-api answered 503 Service Unavailable",
                    "url": "https://fraud-api.risk.svc.example.internal/v2/score",
                },
                "msg": "fraud screening failed, rejecting checkout",
            }
        )
        for i in range(12)
    ]
    (tmp_path / "checkout.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why are checkouts failing?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause
    assert "fraud-api" in d.root_cause


def test_a_delay_a_network_chaos_injects_is_the_experiment_not_a_network_fault() -> None:
    from diagnosis.analyzers.spans import _injected_delay

    b = Builder()
    chaos = {
        "metadata": {"name": "shipping-quote-latency-150ms", "namespace": "shop"},
        "spec": {"action": "delay", "selector": {"labelSelectors": {"app": "shipping-quote"}}},
        "status": {"conditions": [{"type": "AllRecovered", "status": "False"}]},
    }
    b.raw("k8s/NetworkChaos", "NetworkChaos/shop/shipping-quote-latency-150ms", chaos)
    assert _injected_delay(b.set(), "shipping-quote") is not None
    assert _injected_delay(b.set(), "cart") is None


def test_a_metric_spike_that_recovered_asked_about_for_the_incident_doc_is_read_as_of_its_end() -> None:
    from diagnosis.investigate import _PAST_FAILURE, _spike_end

    q = "p95 went to 4s between 14:05 and 14:45, then it fixed itself. was that the flag? need it for the incident doc"
    assert _PAST_FAILURE.search(q)
    assert not _PAST_FAILURE.search("is checkout ok now?")
    points = [[T0 + 60 * i, 0.1] for i in range(30)] + [[T0 + 1800 + 60 * i, 0.9] for i in range(10)]
    points += [[T0 + 2400 + 60 * i, 0.1] for i in range(10)]
    assert _spike_end(points) == T0 + 2340


def test_many_records_rejected_for_their_content_from_one_source_are_bad_data(tmp_path: Path) -> None:
    lines = [
        f"{fmt_ts(T0 + i)[:19].replace('T', ' ')}.204 WARN  [batch-7] c.b.payhub.mt.Mt103Validator - Record "
        f"{16400 + i} (src=LNS, e2e=LNS{i}) rejected: field :59: line 2 contains characters outside SWIFT X "
        "character set: '&'"
        for i in range(14)
    ]
    lines += [f"{fmt_ts(T0 + 20 + i)[:19].replace('T', ' ')}.100 INFO  [batch-7] payout {i} sent" for i in range(30)]
    (tmp_path / "payhub.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why did 200 payouts not go out?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "LNS" in d.root_cause


def test_a_few_rejected_records_are_no_bad_batch() -> None:
    from diagnosis.analyzers.logs.drift import rejected_records

    b = Builder()
    b.log("p.log", [(T0 + i, "warn", f"Record {i} (src=LNS) rejected: invalid amount") for i in range(3)])
    assert rejected_records(b.set()) == []


# ---------------------------------------------------------------- a cron job that stopped running


def _cron_log(tmp_path: Path, days_run: int) -> None:
    lines = []
    for day in range(5):
        t = T0 + day * 86400
        if day < days_run:
            lines.append(f"{fmt_ts(t)} batch01 CRON[{100 + day}]: (settlement) CMD (/opt/settlement/bin/run-export.sh)")
        lines.append(
            f"{fmt_ts(t + 2700)} batch01 CRON[{200 + day}]: (root) CMD (command -v debian-sa1 && debian-sa1 1 1)"
        )
        if day == days_run - 1:
            lines.append(f"{fmt_ts(t + 40000)} batch01 cron[612]: (*system*settlement_export) DELETE "
                         "(/etc/cron.d/settlement_export)")  # fmt: skip
    (tmp_path / "cron.txt").write_text("\n".join(lines) + "\n")


def test_a_daily_cron_job_that_stopped_while_cron_went_on_lost_its_schedule(tmp_path: Path) -> None:
    _cron_log(tmp_path, days_run=3)
    d = investigate(load_bundle(tmp_path), "why did the clearing get no settlement files since the 18th?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "/etc/cron.d/settlement_export" in d.root_cause


def test_a_daily_cron_job_that_still_runs_is_no_lost_schedule(tmp_path: Path) -> None:
    _cron_log(tmp_path, days_run=5)
    from diagnosis.analyzers.schedules import schedule_stopped

    assert schedule_stopped(load_bundle(tmp_path)) == []


# ---------------------------------------------------------------- checkpoints, units, calendars, firewalls, HAProxy


def test_a_great_expectations_checkpoint_result_is_read_as_its_validations(tmp_path: Path) -> None:
    result = {
        "run_id": {"run_name": "catalog_ingest", "run_time": fmt_ts(T0)},
        "run_results": {
            "ValidationResultIdentifier::x": {
                "validation_result": {
                    "success": False,
                    "results": [
                        {
                            "success": False,
                            "expectation_config": {
                                "expectation_type": "expect_column_values_to_match_regex",
                                "kwargs": {"column": "gtin", "regex": "^[0-9]{13}$"},
                            },
                            "result": {"unexpected_count": 47960, "unexpected_percent": 99.5},
                        }
                    ],
                    "meta": {"active_batch_definition": {"data_asset_name": "brightline_products"}},
                }
            }
        },
    }
    (tmp_path / "gx.json").write_text(json.dumps(result))
    d = investigate(load_bundle(tmp_path), "why did the brightline load stop?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "gtin" in d.root_cause


def test_a_unit_systemd_cannot_start_on_its_settings_is_why_its_local_port_refuses(tmp_path: Path) -> None:
    journal = [
        f"May 07 14:0{i}:12 pdf-01 systemd[1]: invoice-renderer.service: Failed to load environment files: No such "
        "file or directory"
        for i in range(3)
    ]
    (tmp_path / "journal.txt").write_text("\n".join(journal) + "\n")
    nginx = [
        f"2024/05/07 14:0{i // 6}:{(i % 6) * 10:02d} [error] 811#811: *9{i:04d} connect() failed (111: Connection "
        'refused) while connecting to upstream, client: 10.60.2.31, server: pdf, request: "POST /render HTTP/1.1", '
        'upstream: "http://127.0.0.1:8087/render", host: "pdf"'
        for i in range(18)
    ]
    (tmp_path / "error.log").write_text("\n".join(nginx) + "\n")
    d = investigate(load_bundle(tmp_path), "is nginx broken?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "invoice-renderer" in d.root_cause


def test_a_change_calendars_scheduled_work_does_not_move_now() -> None:
    from diagnosis.timeline import evidence_now

    b = Builder()
    b.log("app.log", [(T0, "info", "ok"), (T0 + 600, "error", "boom")])
    b.log("calendar.csv", [(T0 - 86400, None, "db upgrade (status=completed)"),
                           (T0 + 7 * 86400, None, "haproxy upgrade (status=scheduled)")])  # fmt: skip
    assert evidence_now(b.set()) == T0 + 600


def test_a_framework_firewall_refusing_a_request_is_no_code_defect() -> None:
    from diagnosis.analyzers.logs.errors import _FIREWALLED

    assert _FIREWALLED.search("org.springframework.security.web.firewall.RequestRejectedException: The request was")


def test_haproxy_http_log_lines_carry_their_status() -> None:
    from diagnosis.analyzers.network.extraction import _ACCESS_STATUS

    line = (
        "lb01 haproxy[1822]: 203.0.113.47:42876 [14/Jan/2025:10:04:06.173] fe_https~ be_search_api/search-01 "
        '0/191/1/-1/5192 504 198 - - sH-- 441/403/127/39/0 0/13 "GET /api/search?q=x HTTP/1.1"'
    )
    m = _ACCESS_STATUS.search(line)
    assert m is not None and next(g for g in m.groups() if g) == "504"


def test_tokens_whose_key_id_is_missing_from_the_fetched_key_set_are_a_jwks_configuration_error(
    tmp_path: Path,
) -> None:
    lines = [
        json.dumps(
            {
                "level": "warn",
                "ts": fmt_ts(T0 + 30 * i),
                "logger": "auth",
                "msg": "jwt verification failed",
                "error": 'kid "prod-2025-02" not found in key set fetched from '
                "https://auth.staging.example.io/.well-known/jwks.json",
            }
        )
        for i in range(10)
    ]
    (tmp_path / "tenant-api.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "is the identity provider down? everyone gets 401")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "auth.staging.example.io" in d.root_cause and "prod-2025-02" in d.root_cause


def test_a_partner_refusing_our_origin_address_is_an_allowlist_configuration_error(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {
                "event": "partner rejected payout",
                "level": "error",
                "timestamp": fmt_ts(T0 + 60 * i),
                "http_status": 403,
                "response_body": {
                    "error": "forbidden",
                    "code": "IP_NOT_ALLOWED",
                    "message": "Request origin 3.121.87.214 is not on the allowlist",
                },
            }
        )
        for i in range(8)
    ]
    (tmp_path / "payout-worker.jsonl").write_text("\n".join(lines) + "\n")
    ev = load_bundle(tmp_path)
    assert "status=403" in ev.kind("log")[0].data["records"][0]["msg"]
    d = investigate(ev, "is northbank down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "3.121.87.214" in d.root_cause and "allowlist" in d.root_cause


# ---------------------------------------------------------------- NetworkPolicy across namespaces


_NS_GATEWAY = {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}


def _netpol_bundle(tmp_path: Path, gateway_labels: dict[str, str]) -> None:
    policies = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "default-deny-ingress", "namespace": "ledger"},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "allow-from-gateway", "namespace": "ledger"},
         "spec": {"podSelector": {"matchLabels": {"app": "ledger"}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"namespaceSelector": _NS_GATEWAY,
                                         "podSelector": {"matchLabels": {"app": "api-gateway"}}}]}]}},
    ]  # fmt: skip
    pods = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "api-gateway-6d9f7c8b54-q7wxz", "namespace": "gateway", "labels": gateway_labels},
         "status": {"phase": "Running"}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "ledger-7f5b9d6c48-hx2tn", "namespace": "ledger", "labels": {"app": "ledger"}},
         "status": {"phase": "Running"}},
    ]  # fmt: skip
    (tmp_path / "netpol.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": policies}))
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    logs = tmp_path / "logs" / "gateway"
    logs.mkdir(parents=True)
    lines = [
        f'{fmt_ts(T0 + 30 * i)} level=error msg="upstream request failed" '
        'upstream=ledger.ledger.svc.cluster.local:8080 error="dial tcp 10.96.4.7:8080: i/o timeout"'
        for i in range(10)
    ]
    (logs / "api-gateway-6d9f7c8b54-q7wxz.log").write_text("\n".join(lines) + "\n")


def test_an_ingress_policy_that_no_longer_selects_the_callers_relabelled_pods_drops_them(tmp_path: Path) -> None:
    _netpol_bundle(tmp_path, {"app.kubernetes.io/name": "api-gateway"})
    d = investigate(load_bundle(tmp_path), "is ledger down?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "allow-from-gateway" in d.root_cause


def test_an_ingress_policy_that_admits_the_callers_pods_is_not_blamed() -> None:
    from diagnosis.analyzers.network.policy import _admits

    spec = {"ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}},
                                   "podSelector": {"matchLabels": {"app": "api-gateway"}}}]}]}  # fmt: skip
    assert _admits(spec, {"app": "api-gateway"}, "gateway", "ledger") is True
    assert _admits(spec, {"app.kubernetes.io/name": "api-gateway"}, "gateway", "ledger") is False
    assert _admits(spec, {"app": "api-gateway"}, "other", "ledger") is False


def test_an_old_memory_error_on_a_worker_whose_job_failed_after_it_is_still_the_cause(tmp_path: Path) -> None:
    kernel = [
        f"{fmt_ts(T0 + 5400 + 60 * i)} hdp-wrk-23 kernel: EDAC MC1: 1 UE memory read error on CPU_SrcID#1_DIMM_B2"
        for i in range(3)
    ]
    (tmp_path / "console.txt").write_text("\n".join(kernel) + "\n")
    job = [
        f"{fmt_ts(T0 + 2 * 3600)} ERROR - airflow.exceptions.AirflowException: Cannot execute: spark-submit --master "
        "yarn /opt/jobs/claims.py. Error code is: 1.",
    ]
    (tmp_path / "airflow.log").write_text("\n".join(job) + "\n")
    rm = [f"{fmt_ts(T0 + 3 * 3600 + 60 * i)} INFO resourcemanager: node hdp-wrk-09 heartbeat" for i in range(3)]
    (tmp_path / "rm.log").write_text("\n".join(rm) + "\n")
    d = investigate(load_bundle(tmp_path), "why did daily_claims_agg fail last night?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause


def test_a_bundle_mostly_unread_that_shows_nothing_failing_is_not_called_healthy(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(f"{fmt_ts(T0)} INFO batch CLMB200 started\n{fmt_ts(T0 + 60)} INFO step done\n")
    for name in ("runs.txt", "db2diag-excerpt.txt", "handover.txt"):
        (tmp_path / name).write_text("CLMB200 took 4h07 instead of 1h10\nsee attached\n")
    d = investigate(load_bundle(tmp_path), "why did CLMB200 run so long last night?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "no format read here" in d.root_cause


def test_a_bundle_read_whole_that_shows_nothing_failing_stays_healthy(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(f"{fmt_ts(T0)} INFO batch started\n{fmt_ts(T0 + 60)} INFO step done\n")
    (tmp_path / "notes.md").write_text("all good\n")
    assert investigate(load_bundle(tmp_path), "is the batch ok?").category == Category.HEALTHY
