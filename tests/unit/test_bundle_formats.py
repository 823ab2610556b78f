"""Evidence bundle formats: each recognised by content (also renamed), each normalised to the shapes of
diagnosis.model; unknown and malformed files reported without stopping the load."""

from __future__ import annotations

import calendar
import gzip
import json
import shutil
from pathlib import Path

import pytest

from diagnosis.bundle import load_bundle
from diagnosis.evidence import EvidenceSet
from diagnosis.formats.logs import LineParser

DATA = Path(__file__).resolve().parent.parent / "data" / "formats"


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: float = 0.0) -> float:
    return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) + s


@pytest.fixture(scope="module")
def bundle() -> EvidenceSet:
    return load_bundle(DATA)


def one(ev: EvidenceSet, kind: str, obj: str) -> dict:
    found = [i for i in ev.kind(kind) if i.object == obj]
    assert len(found) == 1, f"{kind} {obj}: {[i.object for i in ev.kind(kind)]}"
    return found[0].data


def copy(tmp_path: Path, name: str, as_name: str) -> Path:
    folder = tmp_path / "b"
    (folder / as_name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / name, folder / as_name)
    return folder


def test_every_file_is_recognised_ignored_or_an_error(bundle: EvidenceSet) -> None:
    sources = {i.source for i in bundle} | {x["path"] for x in bundle.ignored} | {x["path"] for x in bundle.errors}
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file()}
    assert sources | {"rds-cpu.request.json"} == on_disk  # a CloudWatch request lends names, it makes no items
    assert bundle.ignored == [
        {"path": "inventory.csv", "reason": "CSV with columns sku, warehouse, qty: no known format"},
        {"path": "notes.txt", "reason": "plain text with no timestamps or log levels: no known format"},
        {"path": "unknown.json", "reason": "JSON object with keys owner, severity, ticket: no known format"},
    ]
    assert bundle.errors == [
        {"path": "broken.json", "error": "malformed JSON: Expecting ',' delimiter at line 6 column 1"}
    ]


def test_ids_name_the_file_and_are_checkable(bundle: EvidenceSet) -> None:
    pod = next(i for i in bundle.kind("k8s/Pod") if i.object == "Pod/shop/checkout-7d9f4c6b8-x2kqp")
    assert pod.id == "data.txt#1" and pod.source == "data.txt"
    from diagnosis.model import EvidenceRef

    ref = EvidenceRef(item=pod.id, field="status.containerStatuses.0.lastState.terminated.reason")
    assert bundle.check(ref)
    assert not bundle.check(EvidenceRef(item=pod.id, field="status.nothing"))


def test_alertmanager_webhook(bundle: EvidenceSet) -> None:
    alerts = sorted(bundle.kind("alert"), key=lambda i: i.data["status"])
    assert [a.object for a in alerts] == ["alert/KubePodCrashLooping"] * 2
    firing, resolved = (a.data for a in alerts)
    assert firing["status"] == "firing" and resolved["status"] == "resolved"
    assert firing["starts_at"] == pytest.approx(utc(2024, 6, 12, 14, 5, 30.123))
    assert firing["ends_at"] is None  # 0001-01-01T00:00:00Z is Go's zero time: unset
    assert resolved["ends_at"] == utc(2024, 6, 12, 13, 52)
    assert firing["labels"]["pod"] == "checkout-7d9f4c6b8-x2kqp"
    assert firing["annotations"]["summary"].startswith("Pod shop/checkout")
    assert firing["receiver"] == "opsgraph" and firing["group_key"].startswith("{}/{severity")
    assert firing["fingerprint"] == "5f0c2a7e1b9d3c41"


def test_alertmanager_list_of_payloads(tmp_path: Path) -> None:
    payload = json.loads((DATA / "alertmanager-webhook.json").read_text())
    second = payload | {"groupKey": "other", "alerts": payload["alerts"][:1]}
    (tmp_path / "notifications").write_text(json.dumps([payload, second]))
    ev = load_bundle(tmp_path)
    assert sorted(a.data["group_key"][:5] for a in ev.kind("alert")) == ["other", "{}/{s", "{}/{s"]


def test_kubectl_list_renamed_to_txt_keeps_the_object_less_bookkeeping(bundle: EvidenceSet) -> None:
    pod = one(bundle, "k8s/Pod", "Pod/shop/checkout-7d9f4c6b8-x2kqp")
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert "managedFields" not in pod["metadata"]
    deploy = one(bundle, "k8s/Deployment", "Deployment/shop/checkout")
    assert "kubectl.kubernetes.io/last-applied-configuration" not in deploy["metadata"]["annotations"]
    assert deploy["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "7"


@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        ("k8s/Deployment", "Deployment/shop/checkout"),
        ("k8s/ReplicaSet", "ReplicaSet/shop/checkout-7d9f4c6b8"),
        ("k8s/StatefulSet", "StatefulSet/shop/web"),
        ("k8s/DaemonSet", "DaemonSet/monitoring/node-exporter"),
        ("k8s/Job", "Job/shop/nightly-report-28631520"),
        ("k8s/Node", "Node/ip-10-0-1-5.eu-west-1.compute.internal"),
        ("k8s/Service", "Service/shop/checkout"),
        ("k8s/Endpoints", "Endpoints/shop/checkout"),
        ("k8s/HorizontalPodAutoscaler", "HorizontalPodAutoscaler/shop/checkout"),
        ("k8s/ResourceQuota", "ResourceQuota/shop/compute"),
        ("k8s/PersistentVolumeClaim", "PersistentVolumeClaim/shop/data-web-0"),
        ("k8s/ConfigMap", "ConfigMap/shop/checkout-config"),  # other kinds are kept too
    ],
)
def test_kubernetes_kinds(bundle: EvidenceSet, kind: str, obj: str) -> None:
    data = one(bundle, kind, obj)
    assert data["kind"] == kind.removeprefix("k8s/")


def test_typed_list_and_single_object(tmp_path: Path) -> None:
    pods = json.loads((DATA / "data.txt").read_text())["items"]
    for p in pods:
        del p["kind"], p["apiVersion"]  # the API's PodList leaves them off its items
    (tmp_path / "a").write_text(json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}}
    (tmp_path / "b").write_text(json.dumps(node))
    ev = load_bundle(tmp_path)
    assert sorted(i.object for i in ev.kind("k8s/")) == [
        "Node/n1",
        "Pod/shop/cart-5b6c7d8e9f-qwert",
        "Pod/shop/checkout-7d9f4c6b8-x2kqp",
    ]
    assert all(i.data["kind"] == "Pod" for i in ev.kind("k8s/Pod"))


def test_core_and_events_k8s_io_events_share_one_shape(bundle: EvidenceSet) -> None:
    core = one(bundle, "k8s/Event", "Pod/shop/checkout-7d9f4c6b8-x2kqp")
    new = one(bundle, "k8s/Event", "Pod/shop/web-0")
    assert set(core) == set(new) == {"type", "reason", "message", "involved", "count", "first_ts", "last_ts", "source"}
    assert core == {
        "type": "Warning",
        "reason": "BackOff",
        "message": core["message"],
        "involved": {"kind": "Pod", "namespace": "shop", "name": "checkout-7d9f4c6b8-x2kqp"},
        "count": 5,
        "first_ts": utc(2024, 6, 12, 13, 59, 40),
        "last_ts": utc(2024, 6, 12, 14, 5, 12),
        "source": "kubelet",
    }
    assert new["reason"] == "FailedScheduling" and new["message"].startswith("0/3 nodes are available")
    assert new["count"] == 12 and new["source"] == "default-scheduler"
    assert new["first_ts"] == pytest.approx(utc(2024, 6, 12, 14, 2, 0.512345))
    assert new["last_ts"] == utc(2024, 6, 12, 14, 6, 30)
    node = one(bundle, "k8s/Event", "Node/ip-10-0-1-5.eu-west-1.compute.internal")
    assert node["involved"]["namespace"] == ""


def test_kubectl_logs_object_from_the_path_with_timestamps_and_a_go_panic(bundle: EvidenceSet) -> None:
    log = one(bundle, "log", "Pod/shop/checkout-7d9f4c6b8-x2kqp/app")
    assert log["source"]["namespace"] == "shop" and log["source"]["container"] == "app"
    recs = log["records"]
    assert [r["line"] for r in recs] == [1, 2, 3, 4, 10]
    assert [r["level"] for r in recs] == ["info", "info", "warn", "fatal", "error"]
    assert recs[0]["msg"] == "starting checkout" and recs[0]["ts"] == pytest.approx(utc(2024, 6, 12, 14, 4, 20.118))
    assert recs[3]["msg"].startswith("panic: runtime error") and "/src/cache.go:88" in recs[3]["msg"]
    assert recs[4]["ts"] == utc(2024, 6, 12, 14, 5, 11)


def test_kubectl_logs_without_container_and_previous(tmp_path: Path) -> None:
    (tmp_path / "logs" / "ns1").mkdir(parents=True)
    (tmp_path / "logs" / "ns1" / "api-1.log").write_text("starting\nlistening on :8080\n")
    (tmp_path / "logs" / "ns1" / "api-2").mkdir()
    (tmp_path / "logs" / "ns1" / "api-2" / "app.previous.log").write_text("fatal: config missing\n")
    ev = load_bundle(tmp_path)
    assert sorted(i.object for i in ev.kind("log")) == ["Pod/ns1/api-1", "Pod/ns1/api-2/app"]
    prev = one(ev, "log", "Pod/ns1/api-2/app")
    assert prev["source"]["previous"] is True
    plain = one(ev, "log", "Pod/ns1/api-1")  # under logs/ even a file with no timestamps is a log
    assert [r["msg"] for r in plain["records"]] == ["starting", "listening on :8080"]


def test_plain_log_renamed_to_json_with_klog_and_syslog_in_the_bundles_year(bundle: EvidenceSet) -> None:
    log = one(bundle, "log", "x.json")
    recs = log["records"]
    assert [r["level"] for r in recs] == ["info", "warn", "error", None, None]
    # klog and syslog write no year: the bundle's other evidence is from 2024, so these are too
    assert recs[2]["ts"] == pytest.approx(utc(2024, 6, 12, 14, 5, 12.004511))
    assert recs[3]["ts"] == utc(2024, 6, 12, 14, 5, 13)
    assert recs[2]["msg"].startswith('"Error syncing pod, skipping"')
    assert "Memory cgroup out of memory" in recs[3]["msg"]


def test_json_lines_log_fields(bundle: EvidenceSet) -> None:
    recs = one(bundle, "log", "app-json.log")["records"]
    assert [r["level"] for r in recs] == ["error", "info", "warn", "error"]
    assert recs[0]["msg"] == "upstream payments-api timed out after 5000ms"
    assert recs[0]["ts"] == pytest.approx(utc(2024, 6, 12, 12, 5, 1.1))  # +02:00
    assert recs[3]["ts"] == 1718193904.0 and recs[3]["msg"] == "pino error record"


def test_access_log_status_is_not_a_level(bundle: EvidenceSet) -> None:
    recs = one(bundle, "log", "access.log")["records"]
    assert [r["level"] for r in recs] == [None, None, None]
    assert recs[1]["ts"] == utc(2024, 6, 12, 14, 5, 2) and '" 502 ' in recs[1]["msg"]


@pytest.mark.parametrize(
    ("line", "ts", "level", "msg"),
    [
        (
            "2024-06-12T14:03:01.123456789Z ERROR db down",
            utc(2024, 6, 12, 14, 3, 1.123456789),
            "error",
            "ERROR db down",
        ),
        ("2024-06-12 14:03:01,250 WARNING pool low", utc(2024, 6, 12, 14, 3, 1.25), "warn", "WARNING pool low"),
        ("[2024-06-12 16:03:01 +0200] [INFO] ok", utc(2024, 6, 12, 14, 3, 1), "info", "[INFO] ok"),
        ("2024/06/12 14:03:01 [error] 31#31: *7 connect() failed", utc(2024, 6, 12, 14, 3, 1), "error", None),
        ("1718200981 level=error msg=boom", utc(2024, 6, 12, 14, 3, 1), "error", "level=error msg=boom"),
        ("1718200981123 FATAL out of memory", utc(2024, 6, 12, 14, 3, 1.123), "fatal", "FATAL out of memory"),
        ("E0612 14:03:01.123456   7 server.go:12] listen failed", utc(2024, 6, 12, 14, 3, 1.123456), "error", None),
        ('2024-06-12T14:03:01Z {"lvl":"crit","message":"x"}', utc(2024, 6, 12, 14, 3, 1), "fatal", "x"),
        ("Jun 12 14:03:01 web-1 sshd[812]: PANIC in main", utc(2024, 6, 12, 14, 3, 1), "fatal", None),
        (
            'time="2024-06-12T14:03:01Z" level=warning msg="pool nearly full"',
            utc(2024, 6, 12, 14, 3, 1),
            "warn",
            None,
        ),  # logrus / slog text: logfmt
        ("no time, no level here", None, None, "no time, no level here"),
        ("INFO retry after ERROR", None, "info", "INFO retry after ERROR"),  # the first level word wins
    ],
)
def test_line_parser(line: str, ts: float | None, level: str | None, msg: str | None) -> None:
    got_ts, got_level, got_msg = LineParser(now=utc(2024, 7, 1)).parse(line)
    assert got_ts == (pytest.approx(ts) if ts is not None else None)
    assert got_level == level
    if msg is not None:
        assert got_msg == msg


def test_prometheus_matrix_and_vector(bundle: EvidenceSet) -> None:
    obj = "metric/container_memory_working_set_bytes{container=app,namespace=shop,pod=checkout-7d9f4c6b8-x2kqp}"
    mem = one(bundle, "metric", obj)
    assert mem["unit"] == "bytes" and mem["source"] == "prometheus"
    assert mem["points"] == [[1718200980.0, 201326592.0], [1718201040.0, 234881024.0], [1718201100.0, 267386880.0]]
    # a query result without __name__ takes the file's name
    rate = one(bundle, "metric", "metric/error-rate{code=5xx,service=checkout}")
    assert rate["points"] == [[1718201100.781, 0.4213]] and rate["labels"] == {"service": "checkout", "code": "5xx"}


def test_prometheus_scalar_hint_and_error_response(tmp_path: Path) -> None:
    (tmp_path / "saved.json").write_text(
        json.dumps(
            {"query": "up", "response": {"status": "success", "data": {"resultType": "scalar", "result": [1.5, "3"]}}}
        )
    )
    (tmp_path / "failed.json").write_text(
        json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 4"})
    )
    ev = load_bundle(tmp_path)
    assert one(ev, "metric", "metric/up{}")["points"] == [[1.5, 3.0]]
    assert ev.errors == [
        {"path": "failed.json", "error": "prometheus: Prometheus API error response: bad_data: parse error at char 4"}
    ]


def test_cloudwatch_with_request_beside_it_and_without(bundle: EvidenceSet) -> None:
    cpu = one(
        bundle, "metric", "metric/CPUUtilization{DBInstanceIdentifier=orders-prod,namespace=AWS/RDS,stat=Average}"
    )
    assert cpu["points"] == [
        [utc(2024, 6, 12, 14), 34.2],
        [utc(2024, 6, 12, 14, 5), 96.1],
        [utc(2024, 6, 12, 14, 10), 97.8],
    ]
    assert cpu["unit"] == "percent" and cpu["source"] == "cloudwatch"
    conns = one(
        bundle, "metric", "metric/DatabaseConnections{DBInstanceIdentifier=orders-prod,namespace=AWS/RDS,stat=Maximum}"
    )
    assert conns["points"][-1] == [utc(2024, 6, 12, 14, 10), 412.0]
    free = one(bundle, "metric", "metric/FreeStorageSpace{id=m1}")  # no request holds m1: named by its Label
    assert [p[1] for p in free["points"]] == [3221225472.0, 2147483648.0, 1073741824.0]


def test_cloudwatch_pairs_each_response_with_its_own_request(tmp_path: Path) -> None:
    def req(name: str, db: str) -> dict:
        metric = {
            "Namespace": "AWS/RDS",
            "MetricName": name,
            "Dimensions": [{"Name": "DBInstanceIdentifier", "Value": db}],
        }
        return {"MetricDataQueries": [{"Id": "m1", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Average"}}]}

    resp = {"MetricDataResults": [{"Id": "m1", "Label": "m1", "Timestamps": [1718200800], "Values": [1.0]}]}
    for stem, name, db in (("lag", "ReplicaLag", "replica-1"), ("iops", "WriteIOPS", "primary")):
        (tmp_path / f"{stem}.json").write_text(json.dumps(resp))
        (tmp_path / f"{stem}-request.json").write_text(json.dumps(req(name, db)))
    ev = load_bundle(tmp_path)
    assert sorted(i.object for i in ev.kind("metric")) == [
        "metric/ReplicaLag{DBInstanceIdentifier=replica-1,namespace=AWS/RDS,stat=Average}",
        "metric/WriteIOPS{DBInstanceIdentifier=primary,namespace=AWS/RDS,stat=Average}",
    ]


def test_rds_events(bundle: EvidenceSet) -> None:
    events = [i.data for i in bundle.kind("rds/event")]
    assert events[0] == {
        "source_id": "orders-prod",
        "source_type": "db-instance",
        "message": "Multi-AZ instance failover started.",
        "categories": ["failover"],
        "ts": pytest.approx(utc(2024, 6, 12, 14, 1, 12.345)),
    }
    assert {i.object for i in bundle.kind("rds/event")} == {"rds/orders-prod"}


def test_performance_insights(bundle: EvidenceSet) -> None:
    load = one(bundle, "metric", "metric/db.load.avg{identifier=db-ABCDEFGHIJKLMNOPQRSTUVWXY}")
    assert load["source"] == "pi" and [p[1] for p in load["points"]] == [1.2, 6.4, 7.9]
    waits = one(
        bundle,
        "metric",
        "metric/db.load.avg{db.wait_event.name=Lock:transactionid,db.wait_event.type=Lock,identifier=db-ABCDEFGHIJKLMNOPQRSTUVWXY}",
    )
    assert waits["points"] == [[utc(2024, 6, 12, 14, 5), 5.1]]  # a data point without Value is no point
    top = one(bundle, "pi/sql", "pi/db.sql_tokenized/AKIAIOSFODNN7TOKEN1")
    assert top["statement"] == "UPDATE orders SET status = ? WHERE id = ?" and top["load"] == 5.23
    assert top["group"] == "db.sql_tokenized" and top["metric"] == "db.load.avg"
    assert top["partitions"][1] == {"dimensions": {"db.wait_event.name": "Lock:transactionid"}, "value": 5.12}
    wait = one(bundle, "pi/dimension", "pi/db.wait_event/Lock:transactionid")
    assert wait["load"] == 5.1


def test_performance_insights_db_sql(tmp_path: Path) -> None:
    keys = {"Keys": [{"Dimensions": {"db.sql.statement": "SELECT pg_sleep(30)", "db.sql.id": "ABC"}, "Total": 2.0}]}
    (tmp_path / "k.json").write_text(json.dumps(keys))
    sql = one(load_bundle(tmp_path), "pi/sql", "pi/db.sql/ABC")
    assert sql["group"] == "db.sql" and sql["statement"] == "SELECT pg_sleep(30)" and sql["partitions"] == []


def test_datadog_logs_grouped_by_service_in_time_order(bundle: EvidenceSet) -> None:
    orders = one(bundle, "log", "datadog/orders-api")
    assert [(r["line"], r["level"]) for r in orders["records"]] == [(2, "info"), (1, "error")]
    assert orders["records"][1]["msg"] == "upstream payments-api timed out after 5000ms"
    assert orders["source"]["hosts"] == ["i-0abc123", "i-0abc124"]
    assert one(bundle, "log", "datadog/payments-api")["records"][0]["level"] == "warn"


def test_datadog_monitors(bundle: EvidenceSet) -> None:
    m = one(bundle, "datadog/monitor", "monitor/1234567")
    assert m["state"] == "Alert" and m["type"] == "query alert" and m["tags"] == ["team:orders", "env:prod"]
    assert m["modified_ts"] == utc(2024, 6, 12, 14, 5, 40)
    assert one(bundle, "datadog/monitor", "monitor/1234568")["state"] == "OK"


def test_pg_stat_activity_csv(bundle: EvidenceSet) -> None:
    idle = one(bundle, "pg/session", "pid 26846")
    assert idle["state"] == "idle in transaction" and idle["wait_event"] == "ClientRead"
    assert idle["xact_start"] == pytest.approx(utc(2024, 6, 12, 14, 1, 2.004512))
    assert idle["captured_at"] == pytest.approx(utc(2024, 6, 12, 14, 11, 2.5))
    assert idle["blocked_by"] == []
    assert one(bundle, "pg/session", "pid 26856")["blocked_by"] == [26846]
    waiter = one(bundle, "pg/session", "pid 26860")
    assert waiter["blocked_by"] == [26856, 26846] and waiter["query"].startswith("UPDATE orders\n")
    checkpointer = one(bundle, "pg/session", "pid 1102")
    assert checkpointer["backend_type"] == "checkpointer" and checkpointer["state"] is None


def test_pg_locks_csv(bundle: EvidenceSet) -> None:
    held = one(bundle, "pg/lock", "pid 26846 RowExclusiveLock on orders")
    assert held == {
        "pid": 26846,
        "locktype": "relation",
        "relation": "orders",
        "mode": "RowExclusiveLock",
        "granted": True,
        "waitstart": None,
        "transactionid": None,
    }
    wait = one(bundle, "pg/lock", "pid 26856 ShareLock on transactionid 7352")
    assert wait["granted"] is False and wait["waitstart"] == pytest.approx(utc(2024, 6, 12, 14, 2, 10.41))


def test_pg_json_rows_and_blockers_worked_out_from_locks(bundle: EvidenceSet) -> None:
    assert one(bundle, "pg/session", "pid 4712")["blocked_by"] == [4711]
    assert one(bundle, "pg/session", "pid 4711")["blocked_by"] == []
    assert one(bundle, "pg/lock", "pid 4711 ExclusiveLock on transactionid 90210")["granted"] is True


def test_malformed_csv_row_is_a_file_error_and_the_rest_loads(tmp_path: Path) -> None:
    (tmp_path / "locks.csv").write_text(
        "locktype,relation,pid,mode,granted\nrelation,orders,1,AccessShareLock,t\nrelation,orders,2\n"
    )
    shutil.copy(DATA / "rds-events.json", tmp_path / "events")
    ev = load_bundle(tmp_path)
    assert ev.errors == [{"path": "locks.csv", "error": "pg-locks: CSV line 3: 3 fields where the header has 5"}]
    assert ev.kind("pg/lock") == [] and len(ev.kind("rds/event")) == 2


def test_compressed_files_inside_a_bundle_and_a_truncated_one(tmp_path: Path) -> None:
    raw = (DATA / "events-core.json").read_bytes()
    (tmp_path / "events.json.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "cut.gz").write_bytes(gzip.compress(raw)[:60])
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    ev = load_bundle(tmp_path)
    assert len(ev.kind("k8s/Event")) == 2 and ev.kind("k8s/Event")[0].source == "events.json.gz"
    assert [e["path"] for e in ev.errors] == ["cut.gz"]
    assert ev.errors[0]["error"].startswith("truncated or corrupt compressed file")
    assert ev.ignored == [{"path": "image.png", "reason": "binary file (NUL bytes): not an export opsgraph reads"}]


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [
        ("alertmanager-webhook.json", "alert"),
        ("prometheus-matrix.json", "metric"),
        ("rds-events.json", "rds/event"),
        ("pi-top-sql.json", "pi/sql"),
        ("datadog-monitors.json", "datadog/monitor"),
        ("pg_stat_activity.csv", "pg/session"),
        ("pg_locks.csv", "pg/lock"),
        ("events-k8s-io.json", "k8s/Event"),
    ],
)
def test_detection_ignores_the_file_name(tmp_path: Path, fixture: str, kind: str) -> None:
    ev = load_bundle(copy(tmp_path, fixture, "export-0001.log"))
    assert ev.kinds() == {kind} and not ev.errors and not ev.ignored


def test_a_single_file_is_a_bundle(tmp_path: Path) -> None:
    ev = load_bundle(DATA / "alertmanager-webhook.json")
    assert len(ev.kind("alert")) == 2 and ev.kind("alert")[0].source == "alertmanager-webhook.json"


def test_promtool_json_and_a_bare_cloudwatch_query_list(tmp_path: Path) -> None:
    series = [{"metric": {"__name__": "up", "job": "api"}, "values": [[1718200800, "1"], [1718200860, "0"]]}]
    (tmp_path / "promtool.out").write_text(json.dumps(series))
    queries = [
        {
            "Id": "q",
            "MetricStat": {
                "Metric": {"Namespace": "AWS/EC2", "MetricName": "CPUUtilization", "Dimensions": []},
                "Period": 60,
                "Stat": "Maximum",
            },
        }
    ]
    (tmp_path / "queries.json").write_text(json.dumps(queries))
    resp = {"MetricDataResults": [{"Id": "q", "Label": "q", "Timestamps": [1718200800], "Values": [99.0]}]}
    (tmp_path / "out.json").write_text(json.dumps(resp))
    ev = load_bundle(tmp_path)
    assert one(ev, "metric", "metric/up{job=api}")["points"] == [[1718200800.0, 1.0], [1718200860.0, 0.0]]
    assert one(ev, "metric", "metric/CPUUtilization{namespace=AWS/EC2,stat=Maximum}")["points"] == [
        [1718200800.0, 99.0]
    ]


def test_pg_rows_as_json_lines(tmp_path: Path) -> None:
    rows = json.loads((DATA / "activity.json").read_text())
    (tmp_path / "activity.out").write_text("\n".join(json.dumps(r | {"pg_blocking_pids": [4711]}) for r in rows))
    ev = load_bundle(tmp_path)
    assert ev.kinds() == {"pg/session"}
    assert one(ev, "pg/session", "pid 4712")["blocked_by"] == [4711]


@pytest.mark.parametrize(
    ("raw", "shape"),
    [
        (b'\xef\xbb\xbf{"a": 1}', "json"),  # a byte-order mark is not content
        (b"\n\n  [1, 2]", "json"),
        (b'{"level":"info","msg":"a"}\n{"level":"error","msg":"b"}\n', "jsonl"),
        (b"pid,state,query\n1,active,select 1\n", "csv"),
        (b"[2024-06-12 14:03:01] ERROR disk full\n", "text"),  # a bracket is not always JSON
        (b"Incident notes, written by hand.\n", "text"),  # a comma is not always CSV
    ],
)
def test_sniff_shapes(raw: bytes, shape: str) -> None:
    from diagnosis.formats.base import sniff

    assert sniff("f", raw).shape == shape


@pytest.mark.parametrize("raw", [b"", b"  \n\t\n"])
def test_empty_files_are_ignored(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "empty.json").write_bytes(raw)
    assert load_bundle(tmp_path).ignored == [{"path": "empty.json", "reason": "empty file"}]


def test_kubectl_yaml_output(bundle: EvidenceSet) -> None:
    deploy = one(bundle, "k8s/Deployment", "Deployment/payments/payments-api")
    assert deploy["status"]["conditions"][0]["lastTransitionTime"] == "2024-06-12T14:00:30Z"  # kept as text
    event = one(bundle, "k8s/Event", "Pod/payments/payments-api-6c9f7d-2xkfp")
    assert event["reason"] == "Failed" and event["count"] == 9 and event["last_ts"] == utc(2024, 6, 12, 14, 6, 40)
    assert event["message"].startswith('Failed to pull image "registry.example.com/payments/api:4.2.0"')


def test_malformed_yaml_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text("apiVersion: v1\nkind: List\nitems:\n- name: [unclosed\n")
    ev = load_bundle(tmp_path)
    assert ev.errors[0]["path"] == "pods.yaml" and ev.errors[0]["error"].startswith("malformed YAML")


def test_journald_json_export(tmp_path: Path) -> None:
    """`journalctl -k -o json`: microsecond timestamps as text, PRIORITY the syslog severity."""
    lines = [
        {
            "__REALTIME_TIMESTAMP": "1718201113000000",
            "PRIORITY": "3",
            "_HOSTNAME": "web-1",
            "MESSAGE": "Out of memory: Killed process 24117 (java)",
        },
        {"__REALTIME_TIMESTAMP": "1718201114500000", "PRIORITY": "6", "_HOSTNAME": "web-1", "MESSAGE": "eth0: link up"},
    ]
    (tmp_path / "kernel.json").write_text("\n".join(json.dumps(x) for x in lines))
    recs = one(load_bundle(tmp_path), "log", "kernel.json")["records"]
    assert [(r["ts"], r["level"]) for r in recs] == [(1718201113.0, "error"), (1718201114.5, "info")]
    assert recs[0]["msg"] == "Out of memory: Killed process 24117 (java)"


def test_ec2_volume_and_instance_status(tmp_path: Path) -> None:
    vol = {
        "VolumeStatuses": [
            {
                "VolumeId": "vol-1",
                "AvailabilityZone": "us-east-1a",
                "VolumeStatus": {"Status": "impaired", "Details": [{"Name": "io-performance", "Status": "stalled"}]},
                "Events": [{"EventType": "io-performance:stalled", "NotBefore": "2025-01-02T03:04:05Z"}],
                "Actions": [],
            }
        ]
    }
    inst = {
        "InstanceStatuses": [
            {
                "InstanceId": "i-9",
                "SystemStatus": {"Status": "impaired", "Details": [{"Name": "reachability", "Status": "failed"}]},
                "InstanceStatus": {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]},
            }
        ]
    }
    (tmp_path / "v.json").write_text(json.dumps(vol))
    (tmp_path / "i.json").write_text(json.dumps(inst))
    ev = load_bundle(tmp_path)
    by_obj = {i.object: i for i in ev.kind("aws/status")}
    assert by_obj["volume/vol-1"].data["checks"] == {"volume.io-performance": "stalled"}
    assert by_obj["volume/vol-1"].ts == calendar.timegm((2025, 1, 2, 3, 4, 5))
    assert by_obj["instance/i-9"].data["status"] == "impaired"
    assert by_obj["instance/i-9"].data["checks"]["system.reachability"] == "failed"


def test_dated_csv_event_export_is_read_as_log_records(tmp_path: Path) -> None:
    (tmp_path / "audit.csv").write_text(
        "changed_at,flag,old_value,new_value,severity\n2025-03-01T10:00:00Z,pay.mode,A,B,warning\n"
    )
    (tmp_path / "vc.csv").write_text(
        "CreatedTime,EventType,Message\n2025-03-01 10:05:00,HostConnectionLostEvent,Host h1 is not responding\n"
    )
    ev = load_bundle(tmp_path)
    logs = {i.object: i.data["records"] for i in ev.kind("log")}
    [audit] = logs["audit.csv"]
    assert audit["msg"] == "flag=pay.mode old_value=A new_value=B severity=warning" and audit["level"] == "warn"
    [vc] = logs["vc.csv"]
    assert vc["msg"].startswith("Host h1 is not responding (EventType=HostConnectionLostEvent")
    assert vc["ts"] == calendar.timegm((2025, 3, 1, 10, 5, 0))


def _history(name: str, ts: str, old: str, new: str, reason: str) -> dict:
    data = {"version": "1.0", "oldState": {"stateValue": old}, "newState": {"stateValue": new, "stateReason": reason}}
    return {
        "AlarmName": name,
        "AlarmType": "MetricAlarm",
        "Timestamp": ts,
        "HistoryItemType": "StateUpdate",
        "HistorySummary": f"Alarm updated from {old} to {new}",
        "HistoryData": json.dumps(data),
    }


def test_cloudwatch_alarm_history_becomes_alert_episodes(tmp_path: Path) -> None:
    config = {
        "version": "1.0",
        "type": "Update",
        "updatedAlarm": {
            "AlarmName": "db-cpu",
            "MetricName": "CPUUtilization",
            "Namespace": "AWS/RDS",
            "Dimensions": [{"Name": "DBInstanceIdentifier", "Value": "orders-db"}],
        },
    }
    items = [  # newest first, as AWS returns them
        _history("db-cpu", "2025-02-01T10:30:00Z", "OK", "ALARM", "Threshold Crossed: 3 datapoints > 90"),
        _history("db-cpu", "2025-02-01T10:10:00Z", "ALARM", "OK", "Threshold Crossed: 1 datapoint < 90"),
        _history("db-cpu", "2025-02-01T10:00:00Z", "OK", "ALARM", "Threshold Crossed: 3 datapoints > 90"),
        _history("disk", "2025-02-01T09:00:00Z", "ALARM", "INSUFFICIENT_DATA", "no datapoints"),
        {
            "AlarmName": "db-cpu",
            "Timestamp": "2025-01-01T00:00:00Z",
            "HistoryItemType": "ConfigurationUpdate",
            "HistorySummary": "Alarm updated",
            "HistoryData": json.dumps(config),
        },
    ]
    (tmp_path / "out.txt").write_text(json.dumps({"AlarmHistoryItems": items}))
    alerts = load_bundle(tmp_path).kind("alert")
    cpu = sorted((a for a in alerts if a.object == "alert/db-cpu"), key=lambda a: a.data["starts_at"])
    assert [a.data["status"] for a in cpu] == ["resolved", "firing"]
    assert cpu[0].data["starts_at"] == utc(2025, 2, 1, 10) and cpu[0].data["ends_at"] == utc(2025, 2, 1, 10, 10)
    assert cpu[1].data["ends_at"] is None and "3 datapoints" in cpu[1].data["annotations"]["summary"]
    assert cpu[1].data["labels"]["DBInstanceIdentifier"] == "orders-db"
    assert cpu[0].data["fingerprint"] == cpu[1].data["fingerprint"]  # one alert, two episodes
    [disk] = [a for a in alerts if a.object == "alert/disk"]  # the history began in ALARM
    assert disk.data["status"] == "resolved" and disk.data["starts_at"] is None


def test_empty_aws_events_response_is_read_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"Events": []}')
    ev = load_bundle(tmp_path)
    assert ev.ignored == [] and ev.errors == [] and len(ev) == 0


def test_statuspage_summary_names_the_degraded_provider(tmp_path: Path) -> None:
    summary = {
        "page": {"id": "abc1", "name": "Acme Pay", "url": "https://status.acmepay.example"},
        "status": {"indicator": "major", "description": "Partial System Outage"},
        "components": [
            {"name": "Cards API", "status": "partial_outage"},
            {"name": "Payouts", "status": "operational"},
            {"name": "Webhooks", "status": "under_maintenance"},
        ],
        "incidents": [
            {
                "name": "Elevated card declines",
                "status": "identified",
                "impact": "major",
                "created_at": "2025-05-02T12:00:00.000Z",
                "components": [{"name": "Cards API"}, {"name": "Refunds"}],
                "incident_updates": [{"body": "We found the cause", "created_at": "2025-05-02T12:20:00Z"}],
            },
            {"name": "Old one", "status": "resolved", "created_at": "2025-04-01T00:00:00Z"},
        ],
    }
    (tmp_path / "page").write_text(json.dumps(summary))
    [item] = load_bundle(tmp_path).kind("external/status")
    d = item.data
    assert item.object == "status/Acme Pay" and d["domain"] == "acmepay.example"
    assert d["failing"] == ["Cards API", "Refunds"] and d["degraded"] is True
    assert d["active_incidents"] == ["Elevated card declines"]
    assert d["incidents"][0]["latest_update"] == "We found the cause"
    assert item.ts == utc(2025, 5, 2, 12)


def test_statuspage_all_operational_is_not_degraded(tmp_path: Path) -> None:
    status = {"page": {"id": "x", "name": "Mailer"}, "status": {"indicator": "none", "description": "All good"}}
    (tmp_path / "s.json").write_text(json.dumps(status))
    [item] = load_bundle(tmp_path).kind("external/status")
    assert item.data["degraded"] is False and item.data["failing"] == []


def test_aws_health_events_are_an_external_status(tmp_path: Path) -> None:
    events = {
        "events": [
            {
                "arn": "arn:aws:health:eu-west-1::event/EC2/AWS_EC2_OPERATIONAL_ISSUE/1",
                "service": "EC2",
                "eventTypeCode": "AWS_EC2_OPERATIONAL_ISSUE",
                "eventTypeCategory": "issue",
                "region": "eu-west-1",
                "startTime": "2025-06-01T08:00:00Z",
                "statusCode": "open",
            },
            {
                "service": "RDS",
                "eventTypeCode": "AWS_RDS_MAINTENANCE_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "region": "eu-west-1",
                "statusCode": "upcoming",
            },
        ]
    }
    (tmp_path / "h").write_text(json.dumps(events))
    [item] = load_bundle(tmp_path).kind("external/status")
    assert item.data["failing"] == ["EC2 eu-west-1"] and item.data["degraded"] is True
    assert item.ts == utc(2025, 6, 1, 8)


def test_elasticsearch_cluster_health(tmp_path: Path) -> None:
    health = {
        "cluster_name": "search-prod",
        "status": "red",
        "timed_out": False,
        "number_of_nodes": 5,
        "number_of_data_nodes": 3,
        "active_primary_shards": 40,
        "active_shards": 70,
        "unassigned_shards": 12,
        "active_shards_percent_as_number": 85.4,
    }
    (tmp_path / "now.txt").write_text(json.dumps(health))
    [item] = load_bundle(tmp_path).kind("datastore/health")
    assert item.object == "elasticsearch/search-prod"
    assert item.data["status"] == "red" and item.data["unassigned_shards"] == 12


def test_untimed_command_output_errors_become_log_records(tmp_path: Path) -> None:
    (tmp_path / "session.txt").write_text(
        "$ curl -sS https://billing.internal/health\n"
        "curl: (7) Failed to connect to billing.internal port 443: Connection refused\n"
        "$ psql -h db -c 'select 1'\n"
        'psql: error: connection to server at "db" (10.0.0.5), port 5432 failed: timed out\n'
        "$ python load.py\n"
        "Traceback (most recent call last):\n"
        '  File "load.py", line 3, in <module>\n'
        "ValueError: invalid literal for int() with base 10: 'n/a'\n"
        "$ cp dump.sql /backup/\n"
        "cp: error writing '/backup/dump.sql': No space left on device\n"
    )
    # a saved session: each command's output is read on its own, with the file's line numbers; the traceback is
    # one record from its first line, holding what was raised
    records = [r for item in load_bundle(tmp_path).kind("log") for r in item.data["records"]]
    assert [r["line"] for r in records] == [2, 4, 6, 10]
    assert "ValueError: invalid literal" in records[2]["msg"]
    assert all(r["ts"] is None and r["level"] == "error" for r in records)
    assert records[0]["msg"].startswith("curl: (7) Failed to connect")


@pytest.mark.parametrize(
    "text",
    [
        # release notes: prose about errors, not errors
        "## 2.4.0\n\n- Fixed: connection refused errors are retried\n- Error: messages now include the request id\n",
        # YAML / key-value data whose values mention failures
        'summary: "the job failed: connection refused"\nquestion: why did it fail?\ncategory: unknown\n',
        # plain prose
        "The partner told us their API failed yesterday and timed out for an hour.\nNo action needed.\n",
    ],
)
def test_prose_and_reports_are_not_read_as_errors(tmp_path: Path, text: str) -> None:
    (tmp_path / "notes.txt").write_text(text)
    ev = load_bundle(tmp_path)
    assert ev.kind("log") == [] and len(ev.ignored) == 1


def test_an_excluded_path_is_not_evidence_at_all(tmp_path: Path) -> None:
    (tmp_path / "answer.yaml").write_text("category: code_defect\nsummary: ERROR the answer itself\n")
    (tmp_path / "app.log").write_text("2025-01-02T03:04:05Z ERROR payments timed out after 5000ms\n")
    seen = load_bundle(tmp_path, exclude=("answer.yaml",))
    assert all("answer.yaml" not in (i.source or "") for i in seen)
    assert all(ig.get("path") != "answer.yaml" for ig in seen.ignored)
    assert any(ig.get("path") == "answer.yaml" for ig in load_bundle(tmp_path).ignored) or any(
        "answer.yaml" in (i.source or "") for i in load_bundle(tmp_path)
    )  # without the exclusion the file is met (ignored or read)
