"""Stop 21's rules: a network policy dropping a workload's traffic, a datastore at its own storage quota, a server
out of connections whose log says who opened them, an input that changed shape and loads anyway, the name that did
not resolve, a service's own red health when the operator asks about it; and the formats they read (Splunk search
results, OTLP/JSON logs, mongod's JSON log attributes)."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.analyzers.database import database
from diagnosis.analyzers.logs import input_drift, log_errors
from diagnosis.analyzers.network import policy_drops
from diagnosis.analyzers.network.extraction import _dns_name
from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code


def _hubble(pod: str, n: int, verdict: str = "Policy denied DROPPED (UDP)") -> list[tuple[float, str | None, str]]:
    return [
        (T0 + 60 + i, None, f"payments/{pod}:{40000 + i} (ID:48213) <> kube-system/coredns-6f8b9d7c5-2kx4q:53 "
         f"(ID:11502) {verdict}")
        for i in range(n)
    ]  # fmt: skip


def _policy(b: Builder, name: str, created: str) -> None:
    b.raw(
        "k8s/CiliumNetworkPolicy",
        f"CiliumNetworkPolicy/payments/{name}",
        {
            "kind": "CiliumNetworkPolicy",
            "metadata": {"name": name, "namespace": "payments", "creationTimestamp": created},
        },
    )


def test_policy_drops_of_dns_name_the_newest_policy_and_explain_the_crash() -> None:
    b = Builder()
    b.log("hubble-observe.txt", _hubble("payments-api-5f9c7d8b4-q8zxn", 6))
    _policy(b, "payments-ingress", "2023-06-18T12:41:09Z")
    _policy(b, "payments-egress", "2023-11-14T22:13:00Z")  # 20 s before T0: the change before the drops
    b.log(
        "Pod/payments/payments-api-5f9c7d8b4-q8zxn",
        [(T0 + 70 + i, "error", "java.net.UnknownHostException: payments-db-rw.data.svc: Temporary failure in name "
          "resolution") for i in range(5)],
    )  # fmt: skip
    ev = b.set()
    [f] = by_code(policy_drops(ev), "network_policy_drops")
    assert f.category == Category.CONFIGURATION_ERROR
    assert "payments-egress" in f.mechanism and "DNS" in f.mechanism and "payments/payments-api" in f.mechanism
    assert any(a.kind == "write" and "payments-egress" in a.command for a in f.actions)
    assert_refs_real(ev, [f])
    d = investigate(ev)
    assert d.category == Category.CONFIGURATION_ERROR and "payments-egress" in d.root_cause


def test_a_few_drops_or_forwarded_flows_are_not_a_policy_fault() -> None:
    b = Builder()
    b.log("hubble.txt", _hubble("payments-api-5f9c7d8b4-q8zxn", 2) + _hubble("web-1", 5, "to-endpoint FORWARDED (UDP)"))
    assert policy_drops(b.set()) == []


def test_the_name_that_did_not_resolve_is_a_host_not_a_word() -> None:
    assert (
        _dns_name("[Channel<1>: (dns:///fx-feed.pricing-prod.svc.cluster.local:9090)] Failed to resolve name.")
        == "fx-feed.pricing-prod.svc.cluster.local"
    )
    assert (
        _dns_name('FX rate lookup failed pair=EUR/USD desc="Unable to resolve host fx-feed.pricing-prod.svc"')
        == "fx-feed.pricing-prod.svc"
    )
    assert _dns_name("dial tcp: lookup payments on 10.96.0.10:53: no such host") == "payments"


def test_etcd_at_its_quota_is_resource_exhaustion_named_after_etcd() -> None:
    b = Builder()
    b.log(
        "unit/etcd",
        [(T0, "warn", 'exceeded backend quota; raising alarm error="etcdserver: mvcc: database space exceeded"'),
         (T0 + 1, "warn", 'alarm raised alarm="NOSPACE"')],
        service="etcd",
    )  # fmt: skip
    b.log("flagsvc.log", [(T0 + 10 + i, "error", "flag update failed: etcdserver: mvcc: database space exceeded")
                          for i in range(4)], service="flagsvc")  # fmt: skip
    ev = b.set()
    [f] = by_code(database(ev), "datastore_quota_full")
    assert f.category == Category.RESOURCE_EXHAUSTION and f.object == "etcd etcd"
    assert "NOSPACE" in f.mechanism and "database space exceeded" in f.mechanism and "flagsvc" in f.mechanism
    assert any("alarm disarm" in a.command for a in f.actions)
    assert_refs_real(ev, [f])


def test_a_mongod_out_of_connections_names_who_opened_them(tmp_path: Path) -> None:
    lines = []
    for i in range(12):
        app = "ledger-reconciler" if i % 6 else "orders-api"
        lines.append({"t": {"$date": f"2024-05-31T10:40:{10 + i:02d}.000+00:00"}, "s": "I", "c": "NETWORK",
                      "id": 51800, "ctx": f"conn{i}", "msg": "client metadata",
                      "attr": {"remote": f"10.42.3.{i}:5000", "doc": {"application": {"name": app}}}})  # fmt: skip
    for i in range(4):
        lines.append({"t": {"$date": f"2024-05-31T10:41:{10 + i:02d}.000+00:00"}, "s": "I", "c": "NETWORK",
                      "id": 22942, "ctx": "listener",
                      "msg": "Connection refused because there are too many open connections",
                      "attr": {"connectionCount": 3001}})  # fmt: skip
    (tmp_path / "mongod-orders-01.log").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    ev = load_bundle(tmp_path)
    [log] = ev.kind("log")
    assert any("connectionCount=3001" in r["msg"] for r in log.data["records"])
    [f] = [x for x in database(ev) if x.code in ("connection_exhaustion", "connection_pool_leak")]
    assert f.role == "cause" and "ledger-reconciler" in f.mechanism and "mongod-orders-01" in f.mechanism
    assert any(a.command.startswith("mongosh") for a in f.actions)


def test_an_input_with_a_new_column_and_most_rows_flagged_is_data_quality() -> None:
    b = Builder()
    runs = []
    for hour in range(3):
        t = T0 + hour * 3600
        runs += [
            (t, "info", "price delta check supplier=alpenhof: 3 rows changed >50% (median ratio 1.0)"),
            (t + 5, "info", "price delta check supplier=nordwind: 5 rows changed >50% (median ratio 1.0)"),
        ]
    t = T0 + 3 * 3600
    runs += [
        (t, "warn", "unexpected column 'price_unit' in feed for supplier=nordwind; column not in mapping, ignoring"),
        (t + 5, "warn", "price delta check supplier=nordwind: 18107 rows changed >50% (median ratio 100.0)"),
        (t + 9, "info", "upserted rows supplier=nordwind count=18422"),
    ]
    b.log("Pod/merch/price-importer-29209625-8x5gk", runs, service="price-importer")
    ev = b.set()
    [f] = by_code(input_drift(ev), "input_drift")
    assert f.category == Category.DATA_QUALITY and f.object == "input from nordwind"
    assert "price_unit" in f.mechanism and "18107" in f.mechanism
    assert_refs_real(ev, [f])


def test_a_usual_count_of_flagged_rows_is_not_drift() -> None:
    b = Builder()
    b.log("importer.log", [(T0 + i * 3600, "warn", f"delta check supplier=acme: {4 + i} rows changed (ratio 1.0)")
                           for i in range(5)])  # fmt: skip
    assert input_drift(b.set()) == []


def test_a_red_cluster_the_operator_asks_about_is_not_its_own_answer() -> None:
    b = Builder()
    b.metric(
        "elasticsearch_cluster_health_status",
        [(T0 + i * 60, 1.0) for i in range(10)],
        labels={"cluster": "search", "color": "red"},
    )
    b.log("search-api.log", [(T0 + i * 30, "error", "search failed: 503 from search cluster") for i in range(6)])
    ev = b.set()
    # asked why the callers fail, the red cluster is their dependency's failure
    told = investigate(ev, "why are checkout requests failing?")
    assert told.category == Category.DEPENDENCY_FAILURE and "reports itself unhealthy" in told.root_cause
    # asked why the cluster is red, "it reports red" is the question, not the answer
    asked = investigate(ev, "why is the search cluster red?")
    assert "reports itself unhealthy" not in asked.root_cause and asked.category != Category.HEALTHY


def test_splunk_results_and_otlp_logs_are_read_as_logs(tmp_path: Path) -> None:
    splunk = {
        "preview": False,
        "results": [
            {"_time": "2025-06-03T11:48:02.117+00:00", "host": "kyc-gw-01", "source": "/var/log/kyc-gateway/app.json",
             "sourcetype": "kyc:gateway:json", "_raw": '{"level":"error","msg":"vendor call failed","status":503}'}
        ],
    }  # fmt: skip
    otlp = {
        "resourceLogs": [
            {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "price-importer"}}]},
             "scopeLogs": [{"logRecords": [
                 {"timeUnixNano": "1752566701800000000", "severityNumber": 13, "body": {"stringValue": "row skipped"},
                  "attributes": [{"key": "supplier", "value": {"stringValue": "nordwind"}}]}]}]}
        ]
    }  # fmt: skip
    (tmp_path / "export-1.json").write_text(json.dumps(splunk))
    (tmp_path / "export-2.json").write_text(json.dumps(otlp))
    ev = load_bundle(tmp_path)
    logs = {i.object: i for i in ev.kind("log")}
    assert set(logs) == {"splunk/kyc-gateway", "otlp/price-importer"}
    [s] = logs["splunk/kyc-gateway"].data["records"]
    assert s["level"] == "error" and "vendor call failed" in s["msg"]
    [o] = logs["otlp/price-importer"].data["records"]
    assert o["level"] == "warn" and "row skipped" in o["msg"] and "supplier=nordwind" in o["msg"]
    assert o["ts"] == 1752566701.8


def test_graphite_and_newrelic_results_are_read(tmp_path: Path) -> None:
    graphite = [
        {"target": "summarize(stats_counts.shop.checkout.completed, '10min', 'sum')",
         "tags": {"name": "stats_counts.shop.checkout.completed", "summarize": "10min"},
         "datapoints": [[241.0, 1752559200], [None, 1752559800], [180.0, 1752560400]]}
    ]  # fmt: skip
    nrql = {"data": {"actor": {"account": {
        "trend": {"nrql": "SELECT percentile(duration, 99) AS 'p99' FROM Transaction WHERE appName = 'catalog-api' "
                          "TIMESERIES 1 minute",
                  "results": [{"beginTimeSeconds": 1738032300, "endTimeSeconds": 1738032360, "p99": {"99": 0.09}},
                              {"beginTimeSeconds": 1738032360, "endTimeSeconds": 1738032420, "p99": {"99": 0.5}}]},
        "errors": {"nrql": "SELECT count(*) FROM TransactionError WHERE appName = 'catalog-api' FACET error.class "
                           "SINCE '2025-01-28 02:45:00+00:00' UNTIL '2025-01-28 03:45:00+00:00'",
                   "results": [{"count": 5214, "error.class": "TypeError", "error.message": "x is undefined",
                                "facet": ["TypeError", "x is undefined"]}]}}}}}  # fmt: skip
    (tmp_path / "render.json").write_text(json.dumps(graphite))
    (tmp_path / "nerdgraph.json").write_text(json.dumps(nrql))
    ev = load_bundle(tmp_path)
    metrics = {m.data["name"]: m for m in ev.kind("metric")}
    assert metrics["stats_counts.shop.checkout.completed"].data["points"] == [
        [1752559200.0, 241.0],
        [1752560400.0, 180.0],
    ]
    assert metrics["p99"].data["labels"]["appName"] == "catalog-api"
    assert [p[1] for p in metrics["p99"].data["points"]] == [0.09, 0.5]
    [log] = ev.kind("log")
    assert log.object == "newrelic/catalog-api"
    [rec] = log.data["records"]
    assert rec["level"] == "error" and "TypeError: x is undefined (5214x)" in rec["msg"] and rec["ts"] == 1738035900.0


def test_a_change_window_written_without_spaces_keeps_its_zone(tmp_path: Path) -> None:
    (tmp_path / "change.txt").write_text(
        "Change CHG-20931\nTitle:        rolling upgrade 3.8.3 -> 3.8.4\nState:        Implemented\n"
        "Window:       2024-09-17 02:00-03:00 UTC\n"
    )
    [item] = load_bundle(tmp_path).kind("log")
    assert item.data["records"][0]["ts"] == 1726538400.0  # 02:00Z, not 02:00 at an offset of -03:00


def test_a_server_closing_the_socket_under_its_client_is_not_a_code_defect() -> None:
    b = Builder()
    b.log(
        "kafka-broker-2.log",
        [(T0 + i * 60, "error", "org.apache.zookeeper.ClientCnxn$EndOfStreamException: Unable to read additional "
          "data from server sessionid 0x2000, likely server has closed socket") for i in range(5)],
    )  # fmt: skip
    d = investigate(b.set())
    assert d.category != Category.CODE_DEFECT


def test_a_load_whose_warnings_jump_names_the_mangled_column_and_the_file() -> None:
    b = Builder()
    lines: list[tuple[float, str | None, str]] = []
    for day, (warnings, column) in enumerate([(2, "settle_date"), (96424, "amount")]):
        t = T0 + day * 86400
        lines += [
            (t, "info", "run start (source=payvia, target=fin-db-1/finance)"),
            (t + 1, "info", f"picked up /data/inbound/payvia/settlements_2024100{day}.csv (4,207,551 bytes)"),
            (t + 4, "info", f"LOAD DATA finished: Records: 50103  Deleted: 0  Skipped: 0  Warnings: {warnings}"),
            (t + 5, "warn", f"{warnings} warnings during load (first 5): [('Warning', 1265, \"Data truncated for "
             f"column '{column}' at row 1\")]"),
        ]  # fmt: skip
    b.log("settlement-loader.log", lines, service="settlement-loader")
    ev = b.set()
    [f] = by_code(input_drift(ev), "input_drift")
    assert f.object == "input from payvia" and "'amount'" in f.mechanism and "settle_date" not in f.mechanism
    assert "settlements_20241001.csv" in f.mechanism and "96424 against 2 usually" in f.mechanism


def test_a_keyspace_replicated_to_a_datacenter_the_ring_lacks_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "nodetool.txt").write_text(
        "$ nodetool status\nDatacenter: eu-central\n==========\n"
        "--  Address     Load       Tokens  Owns  Host ID                               Rack\n"
        "UN  10.40.1.21  412.37 GiB  256    ?     5f1c2a8e-9d3b-4c77-8e21-b0a4f6d31c02  rack-a\n"
        "Datacenter: us-east\n==========\n"
        "DN  10.60.2.33  398.44 GiB  256    ?     b05f3c81-7a2d-4e6b-9c14-58e0d7a1f3b2  rack-c\n"
    )
    (tmp_path / "cqlsh.txt").write_text(
        "cqlsh> DESCRIBE KEYSPACE loyalty;\n\nCREATE KEYSPACE loyalty WITH replication = {'class': "
        "'NetworkTopologyStrategy', 'eu_central': '3'}  AND durable_writes = true;\n"
        "CREATE KEYSPACE rewards WITH replication = {'class': 'NetworkTopologyStrategy', 'eu-central': '3'};\n"
    )
    ev = load_bundle(tmp_path)
    assert {n.data["datacenter"] for n in ev.kind("cassandra/node")} == {"eu-central", "us-east"}
    [f] = by_code(database(ev), "keyspace_unknown_datacenter")
    assert f.category == Category.CONFIGURATION_ERROR and f.object == "keyspace loyalty"
    assert "'eu-central' is" in f.mechanism and "'eu-central': '3'" in f.actions[-1].command


def test_a_deploy_a_ci_log_records_links_the_exception_that_follows_and_sources_merge() -> None:
    b = Builder()
    b.log(
        "github-actions-deploy-prod.txt",
        [(T0, None, "Run helm upgrade --install profile-api ./deploy/chart -n accounts --set image.tag=3.8.0 --wait"),
         (T0 + 90, None, "STATUS: deployed")],
    )  # fmt: skip
    b.log(
        "Pod/accounts/profile-api-7b6d9f8c54-2xkqp",
        [(T0 + 600 + i * 20, "error", "TypeError: Cannot read properties of undefined (reading 'tier') at "
          "buildBadge (/app/badges.js:41:30)") for i in range(6)],
        service="profile-api-7b6d9f8c54-2xkqp",
    )  # fmt: skip
    b.log("traces/profile-api", [(T0 + 650, "error", "span GET /v2/profile failed: TypeError: x is undefined")],
          service="profile-api")  # fmt: skip
    ev = b.set()
    found = [f for f in log_errors(ev) if f.code == "exception"]
    assert len(found) == 1, [f.title for f in found]
    [f] = found
    assert "after the deploy of profile-api 3.8.0" in f.mechanism and f.score == 0.85
    assert "also in 1 other source(s)" in f.mechanism


def test_few_errors_after_which_the_task_gave_up_for_good_are_not_background() -> None:
    b = Builder()
    lines: list[tuple[float, str | None, str]] = [
        (T0 + i * 10, "info", "Completed write of 500 records") for i in range(60)
    ]
    lines += [
        (T0 + 700, "error", "Error encountered in task sink-0: DataException: Failed to deserialize data for topic "
         "scans to Avro: SerializationException: Unknown magic byte!"),
        (T0 + 701, "error", "Task threw an uncaught and unrecoverable exception. Task is being killed and will not "
         "recover until manually restarted"),
    ]  # fmt: skip
    lines += [(T0 + 710 + i * 10, "info", "Node 2 disconnected.") for i in range(10)]
    b.log("connect-worker.log", lines)
    ev = b.set()
    found = log_errors(ev)
    assert not by_code(found, "errors_few")
    [cause] = by_code(found, "bad_data")
    assert cause.score >= 0.6
