"""Stop 25: a burst of failures that ended while its log went on is over; a cluster Service that only times out,
with nothing from it, is missing evidence; a node's interface taking errors; egress policies that forgot DNS; Go
goroutine dumps; helm history; JSON error objects naming the host they called; Airflow tasks lost by the executor;
lock wait timeouts are not calls; per-service CSV columns and CPU throttling per service."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers._common import burst_ended
from diagnosis.analyzers._kube import LogVerdict, crash_target
from diagnosis.analyzers.changes import served_cleanly
from diagnosis.analyzers.network.extraction import _call_failure, _target
from diagnosis.analyzers.network.interface import interface_errors
from diagnosis.analyzers.network.policy import egress_blocks_dns
from diagnosis.analyzers.propagation import latency_origin
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category, EvidenceItem
from diagnosis.timeline import fmt_ts
from tests.unit._evidence_builders import T0


def _nginx_time(t: float) -> str:
    return fmt_ts(t).replace("-", "/").replace("T", " ").replace("Z", "")[:19]


# ---------------------------------------------------------------- a burst that ended


def test_burst_ended_needs_a_quiet_log_where_many_failures_were_due() -> None:
    assert burst_ended(19, T0, T0 + 39, T0 + 300)  # 19 in 39 s, then 261 s quiet: ~127 were due
    assert not burst_ended(19, T0, T0 + 39, T0 + 60)  # the log ends 21 s later: nothing says it stopped
    assert not burst_ended(4, T0, T0 + 4, T0 + 600)  # too few to call a burst
    assert not burst_ended(6, T0, T0 + 3000, T0 + 3300)  # a slow trickle: 5 min without one is normal


def _restart_bundle(tmp_path: Path, refusals_until: float) -> None:
    lines = []
    t = T0
    while t <= refusals_until:
        lines.append(
            f"{_nginx_time(t)} [error] 1187#1187: *8{int(t) % 10000} connect() to unix:/run/puma.sock failed "
            "(111: Connection refused) while connecting to upstream, client: 10.0.0.9, server: shop, "
            'request: "GET / HTTP/2.0", upstream: "http://unix:/run/puma.sock:/", host: "shop"'
        )
        t += 2
    lines.append(f"{_nginx_time(T0 + 400)} [warn] 1187#1187: *9 an upstream response is buffered to a temporary file")
    (tmp_path / "error.log").write_text("\n".join(lines) + "\n")


def test_refusals_of_a_restart_that_ended_are_over(tmp_path: Path) -> None:
    _restart_bundle(tmp_path, T0 + 40)
    d = investigate(load_bundle(tmp_path), "is something still broken?")
    assert d.category == Category.HEALTHY, d.root_cause


def test_refusals_that_go_on_to_the_end_of_the_log_are_a_failure(tmp_path: Path) -> None:
    _restart_bundle(tmp_path, T0 + 398)
    d = investigate(load_bundle(tmp_path), "is something still broken?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


# ---------------------------------------------------------------- a cluster Service seen only by its callers


def _callers_bundle(tmp_path: Path, failure: str, own_metrics: bool = False) -> None:
    lines = [
        f'ts={fmt_ts(T0 + 30 * i)} level=error caller=ledger/client.go:88 msg="ledger post failed" '
        f"target=ledger-writer.core.svc.cluster.local:9090 {failure}"
        for i in range(40)
    ]
    (tmp_path / "payments-api.log").write_text("\n".join(lines) + "\n")
    if own_metrics:
        result = [
            {
                "metric": {"__name__": "grpc_server_handling_seconds", "job": "ledger-writer", "quantile": "0.99"},
                "values": [[T0 + 60 * i, "0.02"] for i in range(20)],
            }
        ]
        (tmp_path / "ledger.json").write_text(
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
        )


def test_a_cluster_service_that_only_times_out_with_nothing_from_it_is_missing_evidence(tmp_path: Path) -> None:
    _callers_bundle(tmp_path, 'code=DeadlineExceeded err="context deadline exceeded"')
    d = investigate(load_bundle(tmp_path), "why do payments fail?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "ledger-writer" in d.root_cause


def test_a_cluster_service_that_answers_5xx_is_its_callers_dependency_failure(tmp_path: Path) -> None:
    _callers_bundle(tmp_path, 'err="upstream returned 503 Service Unavailable"')
    d = investigate(load_bundle(tmp_path), "why do payments fail?")
    assert d.category == Category.DEPENDENCY_FAILURE, d.root_cause


# ---------------------------------------------------------------- a crash's unreachable dependency


def test_the_host_a_crash_could_not_reach_is_named_from_the_lines_before_it() -> None:
    records = [
        {"ts": T0, "msg": "connecting to mosquitto.telemetry.svc.cluster.local:1883 (attempt 5/5)", "line": 1},
        {"ts": T0 + 1, "msg": "connect failed: [Errno 111] Connection refused", "line": 2},
    ]
    item = EvidenceItem(id="l#1", kind="log", source="l", object="Pod/t/ingest-x", data={"records": records})
    text = "connect failed: [Errno 111] Connection refused"
    verdict = LogVerdict("dependency_failure", "crash_dependency", "unreachable", item, records[1], text)
    assert crash_target(verdict) == "mosquitto.telemetry.svc.cluster.local"
    records[0]["msg"] = "starting ingest at 12:30 (config v2)"
    assert crash_target(verdict) is None  # a time of day is not a host and port


# ---------------------------------------------------------------- per-service CSV columns, CPU throttling


def _grafana_csv(tmp_path: Path, columns: dict[str, list[float | None]], name: str) -> None:
    header = ["Time", *columns]
    rows = [",".join(f'"{h}"' for h in header)]
    n = len(next(iter(columns.values())))
    for i in range(n):
        stamp = fmt_ts(T0 + 60 * i).replace("T", " ").replace("Z", "")
        rows.append(",".join([f'"{stamp}"', *(f'"{columns[c][i]}"' if columns[c][i] is not None else '""'
                                              for c in columns)]))  # fmt: skip
    (tmp_path / name).write_text("\n".join(rows) + "\n")


def test_a_service_throttled_at_its_cpu_limit_in_a_per_service_export(tmp_path: Path) -> None:
    calm: list[float | None] = [*([0.01] * 30)]
    hog: list[float | None] = [*([0.01] * 15), *([0.8] * 15)]
    _grafana_csv(
        tmp_path,
        {"frontend throttled periods / periods": calm, "recommendations throttled periods / periods": hog},
        "cpu-throttled-ratio.csv",
    )
    ev = load_bundle(tmp_path)
    labels = {str(m.data["labels"].get("service")) for m in ev.kind("metric")}
    assert labels == {"frontend", "recommendations"}
    d = investigate(ev, "the shop is slow")
    assert d.category == Category.RESOURCE_EXHAUSTION
    assert "recommendations" in d.root_cause


def test_no_slowdown_origin_is_named_when_a_service_went_dark(tmp_path: Path) -> None:
    slow: list[float | None] = [*([0.05] * 15), *([3.0] * 15)]
    _grafana_csv(
        tmp_path,
        {
            "frontend p90": slow,
            "checkout p90": slow,
            "frontend cpu": [0.1] * 30,
            "shipping p90": [0.004] * 14 + [None] * 16,  # its series stops where the slowdown begins
        },
        "services.csv",
    )
    assert latency_origin(load_bundle(tmp_path)) == []
    (tmp_path / "services.csv").unlink()
    _grafana_csv(tmp_path, {"frontend p90": slow, "checkout p90": slow, "frontend cpu": [0.1] * 30}, "s.csv")
    assert latency_origin(load_bundle(tmp_path)), "with every series to the end, the origin is named"


# ---------------------------------------------------------------- a node's interface taking errors


def _node_errors(tmp_path: Path, faulty: set[str]) -> None:
    result = []
    for node in ("wrk-a1", "wrk-a2", "wrk-a3"):
        values = [0.0] * 20 + ([200.0] * 20 if node in faulty else [0.0] * 20)
        result.append(
            {
                "metric": {"device": "ens5", "instance": f"{node}:9100", "job": "node-exporter", "nodename": node},
                "values": [[T0 + 60 * i, str(v)] for i, v in enumerate(values)],
            }
        )
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    (tmp_path / "node-network-receive-errs-rate.json").write_text(json.dumps(body))
    (tmp_path / "nic.txt").write_text(
        "admin@wrk-a3:~$ sudo ethtool -S ens5 | egrep -v ': 0$'\nNIC statistics:\n     rx_packets: 1204958117\n"
        "     rx_errors: 412877\n     rx_crc_errors: 412877\n"
    )


def test_one_nodes_interface_taking_errors_is_infrastructure(tmp_path: Path) -> None:
    _node_errors(tmp_path, {"wrk-a3"})
    ev = load_bundle(tmp_path)
    [nic] = ev.kind("host/nic")
    assert nic.data["counters"]["rx_crc_errors"] == 412877
    [f] = interface_errors(ev)
    assert f.category == Category.INFRASTRUCTURE and "wrk-a3" in f.object
    assert "rx_crc_errors 412877" in f.mechanism


def test_every_nodes_interface_at_once_is_not_one_hosts_fault(tmp_path: Path) -> None:
    _node_errors(tmp_path, {"wrk-a1", "wrk-a2", "wrk-a3"})
    assert interface_errors(load_bundle(tmp_path)) == []


# ---------------------------------------------------------------- egress policies that forgot DNS


def _policies(tmp_path: Path, dns_port: bool) -> None:
    allow = [{"ports": [{"port": 5432, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}]}]
    if dns_port:
        allow.append({"ports": [{"port": 53, "protocol": "UDP"}], "to": [{"namespaceSelector": {}}]})
    policies = [
        {"metadata": {"name": "default-deny-egress", "namespace": "billing", "creationTimestamp": fmt_ts(T0)},
         "spec": {"podSelector": {}, "policyTypes": ["Egress"]}},
        {"metadata": {"name": "allow-egress-db", "namespace": "billing", "creationTimestamp": fmt_ts(T0)},
         "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": allow}},
    ]  # fmt: skip
    items = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **p} for p in policies]
    (tmp_path / "netpol.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "billing-api-84c6f7d9b5-6gk2m", "namespace": "billing", "labels": {"app": "billing"}},
        "spec": {"containers": [{"name": "billing-api", "image": "billing:1"}]},
        "status": {"phase": "Running"},
    }
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    logs = tmp_path / "logs" / "billing"
    logs.mkdir(parents=True)
    (logs / "billing-api-84c6f7d9b5-6gk2m.log").write_text(
        "\n".join(
            f'time="{fmt_ts(T0 + 60 + 20 * i)}" level=error msg="request failed" error="dial tcp: lookup '
            f'billing-db.internal on 172.20.0.10:53: read udp 10.40.1.7:4111->172.20.0.10:53: i/o timeout"'
            for i in range(10)
        )
        + "\n"
    )


def test_egress_policies_that_allow_no_dns_are_the_configuration_error(tmp_path: Path) -> None:
    _policies(tmp_path, dns_port=False)
    [f] = egress_blocks_dns(load_bundle(tmp_path))
    assert f.category == Category.CONFIGURATION_ERROR and "default-deny-egress" in f.mechanism
    d = investigate(load_bundle(tmp_path), "is cluster DNS broken?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


def test_an_egress_rule_that_opens_port_53_is_not_blamed(tmp_path: Path) -> None:
    _policies(tmp_path, dns_port=True)
    assert egress_blocks_dns(load_bundle(tmp_path)) == []


# ---------------------------------------------------------------- call failures in JSON error objects; lock waits


def test_a_json_error_object_names_the_host_and_its_5xx() -> None:
    reset = '{"error":{"errorMessage":"socket hang up","code":"ECONNRESET","host":"api.sendgrid.com","path":"/v3"}}'
    unavailable = '{"errorMessage":"Service Unavailable","code":503,"host":"api.sendgrid.com","path":"/v3/mail/send"}'
    assert (_call_failure(reset), _target(reset)) == ("reset", "api.sendgrid.com")
    assert (_call_failure(unavailable), _target(unavailable)) == ("http_5xx", "api.sendgrid.com")
    # a dotless name in a JSON "host" field is not taken for a called host (a pod's own hostname)
    assert _target('{"level":"error","host":"stock-api-2","msg":"socket hang up"}') is None


def test_a_lock_wait_timeout_is_not_a_call_to_the_host_the_line_names() -> None:
    line = 'level=error host=stock-api-2 err="exec update inventory: Error 1205 (HY000): Lock wait timeout exceeded"'
    assert _call_failure(line) is None
    assert _call_failure('level=error host=stock-api-2 err="dial tcp 10.0.0.5:3306: i/o timeout"') == "timeout"


# ---------------------------------------------------------------- Airflow tasks lost by their executor


def test_a_task_lost_by_the_executor_is_missing_evidence_naming_the_task(tmp_path: Path) -> None:
    lines = []
    for k in range(3):
        stamp = fmt_ts(T0 + 600 * k).replace("Z", "+0000")
        lines.append(
            f"[{stamp}] {{scheduler_job_runner.py:782}} ERROR - Executor reports task instance <TaskInstance: "
            "finance_daily.daily_revenue_rollup scheduled__2026-12-28T02:00:00+00:00 [queued]> finished (failed) "
            "although the task says it's queued. (Info: None) Was the task killed externally?"
        )
        lines += [f"[{stamp}] {{scheduler_job_runner.py:421}} INFO - heartbeat {n}" for n in range(30)]
    (tmp_path / "airflow-scheduler.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why did daily_revenue_rollup fail?")
    assert d.category == Category.UNKNOWN, d.root_cause
    assert "finance_daily.daily_revenue_rollup" in d.root_cause and "worker" in d.root_cause


# ---------------------------------------------------------------- Go goroutine dumps


def _dump(holders: bool) -> str:
    frames_get = (
        "#\t0x46eaa4\tsync.runtime_SemacquireRWMutexR+0x24\t/usr/local/go/src/runtime/sema.go:82\n"
        "#\t0x481cfc\tsync.(*RWMutex).RLock+0x5c\t/usr/local/go/src/sync/rwmutex.go:71\n"
        "#\t0xb2f4a4\tgithub.com/acme/api/internal/pricing.(*Cache).Get+0x44\t/src/internal/pricing/cache.go:88\n"
        "#\t0xb41d92\tgithub.com/acme/api/internal/api.(*Handler).Quote+0x1b2\t/src/internal/api/quote.go:54\n"
    )
    text = "goroutine profile: total 420\n" + "400 @ 0x43f4ae 0x451445\n" + frames_get + "\n"
    text += "18 @ 0x43f4ae 0x437e97\n#\t0x46fd24\tinternal/poll.runtime_pollWait+0x84\t/x/netpoll.go:345\n\n"
    if holders:
        text += (
            "1 @ 0x43f4ae 0x451445\n"
            "#\t0x46ebc4\tsync.runtime_SemacquireMutex+0x24\t/usr/local/go/src/runtime/sema.go:77\n"
            "#\t0x4822e7\tsync.(*Mutex).lockSlow+0x167\t/usr/local/go/src/sync/mutex.go:171\n"
            "#\t0xb2fd5a\tgithub.com/acme/api/internal/pricing.(*Cache).applyFX+0x4a\t/src/pricing/cache.go:154\n"
            "#\t0xb2f8eb\tgithub.com/acme/api/internal/pricing.(*Cache).Refresh+0x2ab\t/src/pricing/cache.go:131\n\n"
            "1 @ 0x43f4ae 0x451445\n"
            "#\t0x46eaa4\tsync.runtime_SemacquireRWMutexR+0x24\t/usr/local/go/src/runtime/sema.go:82\n"
            "#\t0x481cfc\tsync.(*RWMutex).RLock+0x5c\t/usr/local/go/src/sync/rwmutex.go:71\n"
            "#\t0xb2f4a4\tgithub.com/acme/api/internal/pricing.(*Cache).Get+0x44\t/src/pricing/cache.go:88\n"
            "#\t0xb31e26\tgithub.com/acme/api/internal/pricing.(*FXUpdater).revalue+0x146\t/src/pricing/fx.go:79\n"
        )
    return text


def test_a_goroutine_dump_shows_a_lock_ordering_deadlock(tmp_path: Path) -> None:
    (tmp_path / "goroutines.txt").write_text(_dump(holders=True))
    [item] = load_bundle(tmp_path).kind("log")
    first = item.data["records"][0]["msg"]
    assert first.startswith("lock-ordering deadlock") and "(*Cache).Refresh" in first and "revalue" in first
    d = investigate(load_bundle(tmp_path), "why does the api hang?")
    assert d.category == Category.CODE_DEFECT


def test_a_goroutine_pile_up_without_lone_holders_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "goroutines.txt").write_text(_dump(holders=False))
    [item] = load_bundle(tmp_path).kind("log")
    assert item.data["records"][0]["msg"].startswith("goroutine pile-up on a lock")


def test_a_quiet_goroutine_dump_reports_counts_only(tmp_path: Path) -> None:
    quiet = "goroutine profile: total 18\n18 @ 0x43f4ae\n#\t0x46fd24\tinternal/poll.runtime_pollWait+0x84\t/x.go:1\n"
    (tmp_path / "goroutines.txt").write_text(quiet)
    [item] = load_bundle(tmp_path).kind("log")
    assert [r["level"] for r in item.data["records"]] == ["info"]


# ---------------------------------------------------------------- helm history; a release that served cleanly


def test_helm_history_is_read_as_the_releases_deploys(tmp_path: Path) -> None:
    (tmp_path / "helm.txt").write_text(
        "$ helm -n checkout history checkout-api --max 3\n"
        "REVISION\tUPDATED                 \tSTATUS    \tCHART             \tAPP VERSION\tDESCRIPTION\n"
        "86      \tWed May 28 14:20:09 2025\tsuperseded\tcheckout-api-3.9.1\tv2.30.4    \tUpgrade complete\n"
        "87      \tTue Jun  3 12:41:58 2025\tdeployed  \tcheckout-api-3.9.2\tv2.31.0    \tUpgrade complete\n"
        "88      \tTue Jun  3 13:05:00 2025\tfailed    \tcheckout-api-3.9.3\tv2.31.1    \tUpgrade failed\n"
    )
    [item] = load_bundle(tmp_path).kind("log")
    assert item.object == "helm/checkout-api"
    msgs = [r["msg"] for r in item.data["records"]]
    assert msgs[1].startswith("deployed checkout-api v2.31.0 (revision 87")
    assert msgs[2].startswith("failed to deploy checkout-api v2.31.1")
    assert [r["level"] for r in item.data["records"]] == ["info", "info", "warning"]


def test_a_release_that_ran_twenty_minutes_without_an_error_did_not_bring_later_errors(tmp_path: Path) -> None:
    def log(first_error_after: float) -> None:
        lines = [f"{fmt_ts(T0 + 60 * i)} INFO catalog-api served request {i}" for i in range(60)]
        lines += [f"{fmt_ts(T0 + first_error_after + i)} ERROR catalog-api search failed" for i in range(5)]
        (tmp_path / "catalog-api.log").write_text("\n".join(sorted(lines)) + "\n")

    log(first_error_after=2400)
    assert served_cleanly(load_bundle(tmp_path), "catalog-api", T0)
    log(first_error_after=120)
    assert not served_cleanly(load_bundle(tmp_path), "catalog-api", T0)


# ---------------------------------------------------------------- a column gone from one producer's input


def _import_journal(tmp_path: Path, suppressed: int) -> None:
    lines = []
    for k, (supplier, column) in enumerate((("nordlicht", "unit_price"), ("acme-supply", "price_net"))):
        t = T0 + 60 * k
        stamp = fmt_ts(t)
        lines += [
            f"{stamp} shop-worker-1 systemd[1]: Starting supplier-import@{supplier}.service - Nightly feed import...",
            f"{stamp} shop-worker-1 python[77]: INFO catalog.imports {supplier}: 4812 rows, columns=sku,{column}",
        ]
        if supplier == "acme-supply":
            lines += [
                f"{stamp} shop-worker-1 python[77]: WARNING catalog.imports {supplier} row {n} sku=AC-{n}: "
                "unit_price missing or empty, using Decimal('0.00')"
                for n in range(2, 7)
            ]
            lines.append(
                f"{stamp} shop-worker-1 python[77]: WARNING catalog.imports {supplier}: {suppressed} more "
                "'unit_price missing' warnings suppressed"
            )
        lines.append(f"{stamp} shop-worker-1 python[77]: INFO catalog.imports {supplier}: done, updated=4812")
    (tmp_path / "journal.txt").write_text("\n".join(lines) + "\n")


def test_a_column_loaded_with_a_default_on_every_row_is_bad_data_named_after_its_producer(tmp_path: Path) -> None:
    _import_journal(tmp_path, suppressed=4807)
    d = investigate(load_bundle(tmp_path), "why did conversion drop?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "acme-supply" in d.root_cause and "unit_price" in d.root_cause


def test_a_few_rows_loaded_with_a_default_are_gaps_not_a_lost_column(tmp_path: Path) -> None:
    _import_journal(tmp_path, suppressed=3)
    d = investigate(load_bundle(tmp_path), "why did conversion drop?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


# ---------------------------------------------------------------- requests to an address, an API refusing values


def test_requests_for_an_address_host_are_probes_not_an_allow_list_error(tmp_path: Path) -> None:
    def log(host: str) -> None:
        (tmp_path / "web.log").write_text(
            "\n".join(
                f"{fmt_ts(T0 + 600 * i)} WARNING [gunicorn-2] django.security.DisallowedHost: Invalid HTTP_HOST "
                f"header: '{host}'. You may need to add '{host}' to ALLOWED_HOSTS."
                for i in range(6)
            )
            + "\n"
        )

    log("10.0.3.7:8000")
    assert investigate(load_bundle(tmp_path), "is the shop ok?").category == Category.HEALTHY
    log("shop.example.com")
    assert investigate(load_bundle(tmp_path), "is the shop ok?").category == Category.CONFIGURATION_ERROR


def test_an_api_refusing_the_values_we_sent_is_not_by_itself_a_code_defect(tmp_path: Path) -> None:
    (tmp_path / "web.log").write_text(
        "\n".join(
            f"{fmt_ts(T0 + 30 * i)} ERROR checkout payment failed\nTraceback (most recent call last):\n"
            '  File "/srv/shop/payments.py", line 118, in create_intent\n'
            "stripe._error.InvalidRequestError: Request req_90rb: Amount must be at least €0.50 eur"
            for i in range(30)
        )
        + "\n"
    )
    d = investigate(load_bundle(tmp_path), "why does checkout fail?")
    assert d.category != Category.CODE_DEFECT, d.root_cause


# ---------------------------------------------------------------- the second half of stop 25


def test_a_chain_without_its_intermediate_is_our_servers_configuration(tmp_path: Path) -> None:
    (tmp_path / "s_client.txt").write_text(
        "ops@bastion:~$ openssl s_client -connect api.example.com:443 -servername api.example.com </dev/null\n"
        "CONNECTED(00000003)\ndepth=0 CN = api.example.com\n"
        "verify error:num=20:unable to get local issuer certificate\nverify return:1\n"
        "depth=0 CN = api.example.com\nverify error:num=21:unable to verify the first certificate\nverify return:1\n"
    )
    d = investigate(load_bundle(tmp_path), "partners say our API fails TLS")
    assert d.category == Category.CONFIGURATION_ERROR and "api.example.com" in d.root_cause
    (tmp_path / "s_client.txt").write_text(
        "ops@bastion:~$ openssl s_client -connect api.example.com:443 </dev/null\nCONNECTED(00000003)\n"
        "depth=1 C = US, O = Let's Encrypt, CN = R11\nverify return:1\ndepth=0 CN = api.example.com\nverify return:1\n"
    )
    assert investigate(load_bundle(tmp_path), "partners say our API fails TLS").category != Category.CONFIGURATION_ERROR


def _cloudwatch(tmp_path: Path, label: str, values: list[float]) -> None:
    stamps = [fmt_ts(T0 + 60 * i) for i in range(len(values))]
    body = {"MetricDataResults": [{"Id": "m1", "Label": label, "Timestamps": stamps[::-1], "Values": values[::-1],
                                   "StatusCode": "Complete"}]}  # fmt: skip
    (tmp_path / f"{label}.json").write_text(json.dumps(body))


def _timeouts_to(tmp_path: Path, host: str) -> None:
    (tmp_path / "worker.log").write_text(
        "\n".join(
            f"{fmt_ts(T0 + 60 + 20 * i)} ERROR upload failed: ConnectTimeoutError: connect to https://{host}/v2/docs "
            "timed out after 10s"
            for i in range(30)
        )
        + "\n"
    )


def test_a_nat_gateway_out_of_ports_is_the_cause_of_the_connect_timeouts(tmp_path: Path) -> None:
    _timeouts_to(tmp_path, "api.docvault.example")
    _cloudwatch(tmp_path, "ErrorPortAllocation", [0.0] * 10 + [900.0] * 20)
    d = investigate(load_bundle(tmp_path), "is docvault down?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause
    (tmp_path / "ErrorPortAllocation.json").unlink()
    _cloudwatch(tmp_path, "ErrorPortAllocation", [0.0] * 30)
    assert investigate(load_bundle(tmp_path), "is docvault down?").category != Category.RESOURCE_EXHAUSTION


def _flows(tmp_path: Path, rejected: bool) -> None:
    header = "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action "
    lines = [header + "log-status"]
    for i in range(10):
        t = int(T0) + 60 * i
        lines.append(f"2 7605 eni-0c3f8a12 10.20.9.201 10.20.12.55 4813{i} 5432 6 60 2337 {t} {t + 60} ACCEPT OK")
        action = "REJECT" if rejected else "ACCEPT"
        lines.append(f"2 7605 eni-0c3f8a12 10.20.67.14 10.20.12.55 3799{i} 5432 6 1 60 {t} {t + 60} {action} OK")
    (tmp_path / "flows.log").write_text("\n".join(lines) + "\n")
    rule = {"IpProtocol": "tcp", "FromPort": 5432, "ToPort": 5432, "IpRanges": [{"CidrIp": "10.20.0.0/19"}]}
    groups = {"SecurityGroups": [{"GroupName": "ledger-pg-sg", "GroupId": "sg-0e7d", "IpPermissions": [rule]}]}
    (tmp_path / "sg.json").write_text(json.dumps(groups))


def test_flows_a_security_group_rejects_from_new_sources_are_its_configuration_error(tmp_path: Path) -> None:
    _flows(tmp_path, rejected=True)
    d = investigate(load_bundle(tmp_path), "is the ledger database down?")
    assert d.category == Category.CONFIGURATION_ERROR and "ledger-pg-sg" in d.root_cause


def test_flows_that_are_all_accepted_blame_no_firewall(tmp_path: Path) -> None:
    _flows(tmp_path, rejected=False)
    assert investigate(load_bundle(tmp_path), "is the ledger database down?").category == Category.HEALTHY


def _unit(tmp_path: Path, read_write: str) -> None:
    (tmp_path / "unit.txt").write_text(
        "$ systemctl cat invoiced --no-pager\n# /etc/systemd/system/invoiced.service\n[Unit]\nDescription=Invoicing\n"
        "[Service]\nExecStart=/opt/invoiced/api\n\n# /etc/systemd/system/invoiced.service.d/10-hardening.conf\n"
        f"[Service]\nProtectSystem=strict\nReadWritePaths={read_write}\n"
    )
    (tmp_path / "invoiced.log").write_text(
        "\n".join(
            f"{fmt_ts(T0 + 60 * i)} inv-app-01 invoiced[4821{i}]: Unhandled exception. System.IO.IOException: "
            "Read-only file system : '/var/lib/invoiced/spool/.instance.lock'"
            for i in range(6)
        )
        + "\n"
    )


def test_a_sandbox_that_leaves_the_services_path_read_only_is_its_configuration_error(tmp_path: Path) -> None:
    _unit(tmp_path, "/var/log/invoiced")
    d = investigate(load_bundle(tmp_path), "why does invoiced not start?")
    assert d.category == Category.CONFIGURATION_ERROR and "ProtectSystem=strict" in d.root_cause


def test_a_read_only_error_on_a_path_the_sandbox_allows_is_not_the_sandbox(tmp_path: Path) -> None:
    _unit(tmp_path, "/var/log/invoiced /var/lib/invoiced")
    d = investigate(load_bundle(tmp_path), "why does invoiced not start?")
    assert d.category != Category.CONFIGURATION_ERROR and d.category != Category.CODE_DEFECT, d.root_cause


def test_a_warehouse_cast_error_in_a_run_report_is_bad_data(tmp_path: Path) -> None:
    results = {
        "metadata": {"generated_at": fmt_ts(T0), "dbt_schema_version": "https://schemas.getdbt.com/dbt/run-results/v5.json"},
        "results": [
            {"unique_id": "model.finance.stg_partner_rates", "status": "error", "execution_time": 1.2,
             "timing": [{"name": "execute", "completed_at": fmt_ts(T0)}],
             "message": "Database Error in model stg_partner_rates\n  100038 (22018): Numeric value '1.284,50' is "
                        "not recognized", "failures": None},
        ] + [
            {"unique_id": f"model.finance.m{i}", "status": "success", "execution_time": 1.0,
             "timing": [{"name": "execute", "completed_at": fmt_ts(T0 - 60)}], "message": "SUCCESS 1",
             "failures": None}
            for i in range(12)
        ],
    }  # fmt: skip
    (tmp_path / "run_results.json").write_text(json.dumps(results))
    d = investigate(load_bundle(tmp_path), "why did the partner rates build fail?")
    assert d.category == Category.DATA_QUALITY, d.root_cause


def _memory(tmp_path: Path, swap_taken: bool) -> None:
    gib = 1 << 30
    series = {
        "node_memory_MemFree_bytes": [14.0 * gib] * 10 + [0.9 * gib] * 10,
        "node_memory_MemAvailable_bytes": [26.0 * gib] * 20,
        "node_memory_SwapFree_bytes": [2.0 * gib] * 10 + ([0.5 * gib] * 10 if swap_taken else [2.0 * gib] * 10),
    }
    result = [
        {"metric": {"__name__": name, "instance": "rpt-app-02:9100", "job": "node"},
         "values": [[T0 + 300 * i, str(v)] for i, v in enumerate(values)]}
        for name, values in series.items()
    ]  # fmt: skip
    (tmp_path / "mem.json").write_text(
        json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
    )
    alert = {
        "version": "4", "status": "firing", "receiver": "ops", "groupKey": "{}:{}", "groupLabels": {},
        "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am", "truncatedAlerts": 0,
        "alerts": [{"status": "firing", "labels": {"alertname": "HostMemoryUsageHigh", "instance": "rpt-app-02:9100"},
                    "annotations": {}, "startsAt": fmt_ts(T0 + 300 * 12), "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "", "fingerprint": "ab12"}],
    }  # fmt: skip
    (tmp_path / "alert.json").write_text(json.dumps(alert))


def test_a_memory_alert_that_counts_the_page_cache_is_a_false_alarm(tmp_path: Path) -> None:
    _memory(tmp_path, swap_taken=False)
    d = investigate(load_bundle(tmp_path), "rpt-app-02 is out of memory?")
    assert d.category == Category.HEALTHY, d.root_cause


def test_memory_that_goes_to_swap_is_not_the_page_cache(tmp_path: Path) -> None:
    _memory(tmp_path, swap_taken=True)
    d = investigate(load_bundle(tmp_path), "rpt-app-02 is out of memory?")
    assert d.category != Category.HEALTHY, d.root_cause


def test_free_and_top_show_a_host_paging_and_who_holds_the_memory(tmp_path: Path) -> None:
    (tmp_path / "host.txt").write_text(
        "ops@ledger-app-01:~$ top -b -n1 -o %MEM | head -9\n"
        "top - 02:41:19 up 13 days, 22:45,  2 users,  load average: 17.82, 15.40, 11.96\n"
        "MiB Mem :  15988.3 total,    141.2 free,  15601.0 used,    246.1 buff/cache\n"
        "MiB Swap:   8192.0 total,   2712.4 free,   5479.6 used.     89.3 avail Mem\n\n"
        "    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND\n"
        " 611842 recon     20   0   11.9g  10.1g   8620 D  38.1  64.7  36:12.40 python3\n"
        "   2211 ledger    20   0   10.4g   4.2g  11204 S  22.3  26.9   1128:41 java\n"
    )
    [snap] = load_bundle(tmp_path).kind("host/snapshot")
    assert snap.data["mem_percent"] == 99.4 and snap.data["swap_percent"] == 66.9
    d = investigate(load_bundle(tmp_path), "why is ledger-api slow?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "python3" in d.root_cause
    (tmp_path / "host.txt").write_text(
        "$ free -h\n               total        used        free      shared  buff/cache   available\n"
        "Mem:            31Gi       5.8Gi       848Mi        41Mi        24Gi        25Gi\n"
        "Swap:          2.0Gi       2.0Mi       2.0Gi\n"
    )
    [snap] = load_bundle(tmp_path).kind("host/snapshot")
    assert snap.data["mem_percent"] < 20 and snap.data["swap_percent"] < 1


def test_goroutines_that_grow_from_a_start_at_a_new_version_are_its_leak(tmp_path: Path) -> None:
    start = T0 + 3600 * 10
    (tmp_path / "feedsync.log").write_text(
        f"{fmt_ts(start)} feeds-01 feedsync[40117]: "
        '{"level":"info","msg":"starting feedsync","version":"v2.14.0"}\n'
        + "".join(
            f"{fmt_ts(start + 600 * i)} feeds-01 feedsync[40117]: "
            '{"level":"info","msg":"fetched feeds","count":120}\n'
            for i in range(1, 60)
        )
    )
    values = [50.0] * 20 + [50.0 + 900 * i for i in range(1, 41)]
    result = [{"metric": {"__name__": "go_goroutines", "job": "feedsync", "instance": "feeds-01:9464"},
               "values": [[T0 + 1800 * i, str(v)] for i, v in enumerate(values)]}]  # fmt: skip
    (tmp_path / "g.json").write_text(
        json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
    )
    d = investigate(load_bundle(tmp_path), "feedsync keeps getting killed")
    assert d.category == Category.CODE_DEFECT and "v2.14.0" in d.root_cause and "goroutine" in d.root_cause


def test_a_steady_trickle_of_tls_failures_for_days_is_background() -> None:
    from diagnosis.analyzers._common import Rec
    from diagnosis.analyzers.network._shared import Failures, steady_background

    item = EvidenceItem(id="l#1", kind="log", source="l", object="feedsync", data={"records": []})
    even = Failures(
        "feeds.oldmart.example", "expired", [Rec(item, T0 + 1200 * i, "x509", i, "error") for i in range(60)]
    )
    burst = Failures(
        "feeds.oldmart.example", "expired", [Rec(item, T0 + 30 * i, "x509", i, "error") for i in range(60)]
    )
    assert steady_background(even) and not steady_background(burst)


def test_php_fpm_workers_stuck_in_database_calls_are_not_the_pools_capacity(tmp_path: Path) -> None:
    slow = []
    for i in range(5):
        slow += [
            f"[08-Jul-2025 14:1{i}:45]  [pool www] pid 3182{i}",
            "script_filename = /var/www/bookings/public/index.php",
            "[0x00007f5c1e65df20] execute() /var/www/bookings/vendor/doctrine/dbal/src/Driver/PDO/Statement.php:121",
            "[0x00007f5c1e65dcd0] findFreeRooms() /var/www/bookings/src/Repository/AvailabilityRepository.php:142",
            "",
        ]
    (tmp_path / "www-slow.log").write_text("\n".join(slow) + "\n")
    (tmp_path / "php-fpm.log").write_text(
        "\n".join(
            f"[08-Jul-2025 14:{20 + i}:31] WARNING: [pool www] server reached pm.max_children setting (40), "
            "consider raising it"
            for i in range(6)
        )
        + "\n"
    )
    [slowlog] = [i for i in load_bundle(tmp_path).kind("log") if i.source == "www-slow.log"]
    assert "waiting on a call in doctrine/dbal" in slowlog.data["records"][0]["msg"]
    d = investigate(load_bundle(tmp_path), "should we raise pm.max_children?")
    assert d.category != Category.RESOURCE_EXHAUSTION, d.root_cause
    (tmp_path / "www-slow.log").unlink()
    d = investigate(load_bundle(tmp_path), "should we raise pm.max_children?")
    assert d.category == Category.RESOURCE_EXHAUSTION, d.root_cause


def test_an_encoder_meeting_unseen_categories_again_and_again_is_bad_data(tmp_path: Path) -> None:
    warning = (
        "/opt/venv/lib/python3.11/site-packages/sklearn/preprocessing/_encoders.py:242: UserWarning: Found unknown "
        "categories in columns [0] during transform. These unknown categories will be encoded as all zeros"
    )
    lines = [f"{fmt_ts(T0 + 60 * i)} WARN executor: {warning}" for i in range(6)]
    lines += [f"{fmt_ts(T0 + 400 + i)} INFO executor: scored batch {i}" for i in range(20)]
    (tmp_path / "executor.log").write_text("\n".join(lines) + "\n")
    assert investigate(load_bundle(tmp_path), "why did flagged drop?").category == Category.DATA_QUALITY
    (tmp_path / "executor.log").write_text("\n".join(lines[:2] + lines[6:]) + "\n")
    assert investigate(load_bundle(tmp_path), "why did flagged drop?").category != Category.DATA_QUALITY
