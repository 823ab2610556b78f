"""Log shapes real systems write that the first parsers missed: error fields beside a JSON message, JSON mixed
with plain text, dmesg's uptime stamps, zstd-compressed files. Evidence written for these tests."""

from __future__ import annotations

import json
from pathlib import Path

import zstandard

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import record_fields


def _records(tmp_path: Path, name: str, content: bytes) -> list[dict]:
    (tmp_path / name).write_bytes(content)
    ev = load_bundle(tmp_path)
    assert not ev.errors, ev.errors
    (item,) = ev.kind("log")
    return item.data["records"]


def test_zap_error_field_is_appended_to_the_message() -> None:
    obj = {"level": "error", "ts": 1767225600.5, "msg": "lookup failed",
           "error": "dial tcp: lookup orders-db.shop.svc on 10.96.0.10:53: no such host"}  # fmt: skip
    ts, level, msg = record_fields(obj, json.dumps(obj))
    assert (ts, level) == (1767225600.5, "error")
    assert msg == "lookup failed: dial tcp: lookup orders-db.shop.svc on 10.96.0.10:53: no such host"


def test_pino_err_object_and_ecs_error_object_give_type_and_message() -> None:
    error = "Cannot read properties of undefined (reading 'sku')"
    pino = {"level": 50, "time": 1767225600000, "msg": "request failed",
            "err": {"type": "TypeError", "message": error, "stack": f"TypeError: {error}\n  at c.js:4"}}  # fmt: skip
    _, level, msg = record_fields(pino, json.dumps(pino))
    assert level == "error" and msg.startswith("request failed: TypeError: Cannot read properties of undefined")
    ecs = {"@timestamp": "2026-01-01T00:00:00Z", "log.level": "error", "message": "handler crashed",
           "error": {"type": "java.lang.IllegalStateException", "message": "pool closed"}}  # fmt: skip
    assert "java.lang.IllegalStateException: pool closed" in record_fields(ecs, json.dumps(ecs))[2]


def test_message_already_carrying_the_error_is_not_repeated() -> None:
    obj = {"level": "error", "msg": "failed: connection refused", "err": "connection refused"}
    assert record_fields(obj, json.dumps(obj))[2] == "failed: connection refused"


def test_json_lines_mixed_with_plain_text_are_read_line_by_line(tmp_path: Path) -> None:
    lines = [
        json.dumps({"time": "2026-01-01T00:00:00Z", "level": "info", "msg": "starting"}),
        "Picked up JAVA_TOOL_OPTIONS: -Xmx512m",
        "banner line one",
        "banner line two",
        "2026-01-01T00:00:05Z ERROR worker: boom",
        json.dumps({"time": "2026-01-01T00:00:06Z", "level": "error", "msg": "job failed", "err": "EOF"}),
    ]
    recs = _records(tmp_path, "app.txt", "\n".join(lines).encode())
    assert [r["level"] for r in recs if r["level"]] == ["info", "error", "error"]
    assert recs[-1]["msg"] == "job failed: EOF"


def test_dmesg_with_uptime_stamps_is_a_log_without_wall_clock(tmp_path: Path) -> None:
    text = (
        "[8126684.000000] Memory cgroup out of memory: Killed process 4242 (java) total-vm:4194304kB, "
        "anon-rss:2097152kB, file-rss:0kB, shmem-rss:0kB\n"
        "[8126690.123456] eth0: renamed from veth12ab\n"
        "[8126691.5] EXT4-fs error (device nvme1n1): ext4_find_entry:1455: inode #2: comm ls: reading directory\n"
    )
    recs = _records(tmp_path, "kern.txt", text.encode())
    assert len(recs) == 3 and all(r["ts"] is None for r in recs)
    assert recs[0]["msg"].startswith("Memory cgroup out of memory: Killed process 4242 (java)")


def test_dmesg_human_stamps_and_raw_priorities(tmp_path: Path) -> None:
    text = "<3>[  12.5] nvme nvme0: I/O 12 QID 3 timeout\n[Mon Nov 23 19:02:11 2026] Out of memory: Killed process 9\n"
    recs = _records(tmp_path, "dmesg", text.encode())
    assert recs[0]["level"] == "error" and recs[0]["ts"] is None
    assert recs[1]["ts"] == 1795460531.0


def test_zstd_member_is_read_and_a_streamed_frame_too(tmp_path: Path) -> None:
    data = b"2026-01-01T00:00:00Z ERROR payments: upstream timed out\n"
    (tmp_path / "a.log.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    stream = zstandard.ZstdCompressor().compressobj()
    (tmp_path / "b.log.zst").write_bytes(stream.compress(data) + stream.flush())
    ev = load_bundle(tmp_path)
    assert not ev.errors and not ev.ignored
    assert sorted(i.source for i in ev.kind("log")) == ["a.log.zst", "b.log.zst"]
    assert all(i.data["records"][0]["level"] == "error" for i in ev.kind("log"))


def test_zstd_kubectl_log_path_names_the_pod(tmp_path: Path) -> None:
    (tmp_path / "logs" / "shop").mkdir(parents=True)
    data = b"2026-01-01T00:00:00Z ERROR boom\n"
    (tmp_path / "logs" / "shop" / "cart-5c7d-abcde.log.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    (item,) = load_bundle(tmp_path).kind("log")
    assert item.object == "Pod/shop/cart-5c7d-abcde"


def test_php_tomcat_and_apache_stamps_and_levels() -> None:
    from diagnosis.formats.logs import LineParser

    p = LineParser()
    ts, level, msg = p.parse(
        "[02-Dec-2025 08:12:00 UTC] PHP Fatal error:  Uncaught Error: Call to undefined function f()"
    )
    assert (ts, level) == (1764663120.0, "error") and msg.startswith("PHP Fatal error")
    assert p.parse("[02-Dec-2025 08:12:00 UTC] PHP Warning:  session_start(): failed")[1] == "warn"
    assert p.parse("02-Dec-2025 08:12:00.250 SEVERE [main] org.apache.catalina.core.StandardService boom")[:2] == (
        1764663120.25,
        "error",
    )
    apache = "[Tue Dec 02 08:12:00.123456 2025] [proxy:error] [pid 12] AH00940: HTTP: disabled connection for (pay)"
    assert p.parse(apache)[:2] == (1764663120.123456, "error")


def test_df_and_df_i_output_become_host_snapshots_the_host_analyzer_reads(tmp_path: Path) -> None:
    from diagnosis.investigate import investigate

    (tmp_path / "space.txt").write_text(
        "Filesystem      Size  Used Avail Use% Mounted on\n"
        "/dev/nvme0n1p1   50G   21G   29G  42% /\n"
        "/dev/mapper/vg0-data\n"
        "                200G  120G   80G  60% /srv/data\n"
    )
    (tmp_path / "inodes.txt").write_text(
        "Filesystem      Inodes   IUsed IFree IUse% Mounted on\n"
        "/dev/nvme0n1p1 3276800  241178 3035622  8% /\n"
        "/dev/nvme1n1   6553600 6553600       0 100% /var/spool\n"
    )
    ev = load_bundle(tmp_path)
    assert not ev.ignored and not ev.errors
    space = next(i for i in ev.kind("host/snapshot") if i.source == "space.txt")
    assert [d["mount"] for d in space.data["disks"]] == ["/", "/srv/data"]
    d = investigate(ev)
    assert d.category.value == "resource_exhaustion" and "/var/spool" in d.root_cause and "inodes" in d.root_cause


def test_redis_cli_info_is_read_and_maxmemory_found(tmp_path: Path) -> None:
    from diagnosis.investigate import investigate

    (tmp_path / "cache-info.txt").write_text(
        "# Server\r\nredis_version:7.2.4\r\ntcp_port:6379\r\n# Memory\r\nused_memory:2147000000\r\n"
        "maxmemory:2147483648\r\nmaxmemory_policy:noeviction\r\n# Stats\r\nevicted_keys:0\r\n"
    )
    ev = load_bundle(tmp_path)
    (item,) = ev.kind("redis/info")
    assert item.data["maxmemory_policy"] == "noeviction" and item.object == "redis/cache-info:6379"
    d = investigate(ev)
    assert d.category.value == "resource_exhaustion" and "maxmemory" in d.root_cause


def test_datadog_error_attributes_and_elasticsearch_caused_by_join_the_message(tmp_path: Path) -> None:
    entry = {
        "id": "AQAAAY",
        "type": "log",
        "attributes": {
            "timestamp": "2026-01-01T00:00:00.000Z",
            "status": "error",
            "service": "catalog-indexer",
            "message": "bulk item rejected",
            "attributes": {
                "exception": {
                    "type": "mapper_parsing_exception",
                    "reason": "failed to parse field [weight] of type [float]",
                    "caused_by": {"type": "number_format_exception", "reason": 'For input string: "1,5"'},
                },
                "error": {"kind": "BulkError", "message": "1 of 500 items failed"},
            },
        },
    }
    (tmp_path / "page.json").write_text(json.dumps({"data": [entry], "meta": {"page": {}}}))
    recs = _records(tmp_path, "page.json", (tmp_path / "page.json").read_bytes())
    msg = recs[0]["msg"]
    assert msg.startswith("bulk item rejected: BulkError: 1 of 500 items failed; mapper_parsing_exception")
    assert 'caused by number_format_exception: For input string: "1,5"' in msg


def test_json_error_records_keep_the_field_that_names_the_peer() -> None:
    from diagnosis.formats.logs import record_fields

    obj = {"level": "error", "msg": "stock lookup failed", "error": "connect: connection refused",
           "target": "inventory-grpc.stock.svc.cluster.local:9090", "sku": "SKU-1"}  # fmt: skip
    _, level, msg = record_fields(obj, "")
    assert level == "error" and "target=inventory-grpc.stock.svc.cluster.local:9090" in msg and "SKU" not in msg
    info = {"level": "info", "msg": "ok", "target": "inventory-grpc:9090"}
    assert record_fields(info, "")[2] == "ok"


# --- issue 13: more products' default log layouts, each written from the product's documented format ----------


def _utc(*fields: float) -> float:
    import calendar

    whole = calendar.timegm((*(int(f) for f in fields[:6]), 0, 0, 0))
    return whole + (fields[6] if len(fields) > 6 else 0.0)


def _tlm(recs: list[dict]) -> list[tuple]:
    return [(round(r["ts"], 3) if r["ts"] is not None else None, r["level"], r["msg"]) for r in recs]


def test_clickhouse_server_log(tmp_path: Path) -> None:
    text = (
        "2025.04.03 15:12:40.118220 [ 1234 ] {5f1c2a4e-0b1c} <Error> executeQuery: Code: 241. DB::Exception: "
        "Memory limit (total) exceeded (MEMORY_LIMIT_EXCEEDED)\n"
        "2025.04.03 15:12:42.500000 [ 1 ] {} <Information> Application: Ready for connections.\n"
    )
    recs = _records(tmp_path, "server.data", text.encode())
    assert [(r["level"], round(r["ts"], 3)) for r in recs] == [
        ("error", round(_utc(2025, 4, 3, 15, 12, 40, 0.11822), 3)),
        ("info", _utc(2025, 4, 3, 15, 12, 42, 0.5)),
    ]
    assert "Code: 241" in recs[0]["msg"]


def test_redis_server_and_sentinel_logs(tmp_path: Path) -> None:
    text = (
        "1:M 14 Aug 2025 00:05:01.004 # Can't save in background: fork: Cannot allocate memory\n"
        "1:M 14 Aug 2025 00:05:02.000 * Ready to accept connections tcp\n"
        "1:X 14 Aug 2025 00:10:00.123 # +sdown master mymaster 10.0.0.5 6379\n"
        "1:S 14 Aug 2025 00:10:01.000 - Accepted 10.0.0.7:51234\n"
    )
    recs = _records(tmp_path, "r.out", text.encode())
    assert [r["level"] for r in recs] == ["warn", "info", "warn", "debug"]
    assert recs[2]["ts"] == _utc(2025, 8, 14, 0, 10, 0, 0.123)
    assert recs[2]["msg"] == "+sdown master mymaster 10.0.0.5 6379"


def test_mysql_and_mariadb_error_logs(tmp_path: Path) -> None:
    text = (
        "2025-01-02T03:04:05.123456Z 0 [ERROR] [MY-012592] [InnoDB] Operating system error number 28.\n"
        "2025-01-02T03:04:07.000000Z 0 [System] [MY-010931] [Server] /usr/sbin/mysqld: ready for connections.\n"
        "250102  3:04:05 [ERROR] mysqld: Table './shop/orders' is marked as crashed\n"
        "2025-01-02  3:04:06 0 [Note] InnoDB: Completed initialization of buffer pool\n"
    )
    recs = _records(tmp_path, "err.data", text.encode())
    assert [(r["ts"], r["level"]) for r in recs] == [
        (_utc(2025, 1, 2, 3, 4, 5, 0.123456), "error"),
        (_utc(2025, 1, 2, 3, 4, 7), "info"),
        (_utc(2025, 1, 2, 3, 4, 5), "error"),
        (_utc(2025, 1, 2, 3, 4, 6), "info"),
    ]


def test_mongodb_structured_json_and_legacy_text(tmp_path: Path) -> None:
    error = {"code": 6, "codeName": "HostUnreachable", "errmsg": "Connection reset by peer"}
    entry = {"t": {"$date": "2025-01-02T03:04:05.123+00:00"}, "s": "E", "c": "NETWORK", "id": 23256, "ctx": "conn12",
             "msg": "Error receiving request from client", "attr": {"error": error}}  # fmt: skip
    other = {"t": {"$date": "2025-01-02T03:04:06.000+00:00"}, "s": "W", "c": "STORAGE", "id": 1, "msg": "cache"}
    recs = _records(tmp_path, "mongod.data", (json.dumps(entry) + "\n" + json.dumps(other) + "\n").encode())
    assert _tlm(recs)[0] == (
        _utc(2025, 1, 2, 3, 4, 5, 0.123),
        "error",
        "Error receiving request from client: 6: HostUnreachable: Connection reset by peer",
    )
    assert recs[1]["level"] == "warn"
    legacy = "2025-01-02T03:04:05.123+0000 E NETWORK  [conn12] SocketException: reset\n"
    (tmp_path / "mongod.data").unlink()
    recs = _records(tmp_path, "legacy.data", (legacy + legacy.replace(" E ", " I ")).encode())
    assert [r["level"] for r in recs] == ["error", "info"]


def test_log4j_layouts_kafka_zookeeper_cassandra_elasticsearch(tmp_path: Path) -> None:
    text = (
        "ERROR [main] 2025-01-02 03:04:05,123 CassandraDaemon.java:803 - Exception encountered during startup\n"
        "WARN  [GossipTasks:1] 2025-01-02 03:04:06,000 FailureDetector.java:288 - Not marking nodes down\n"
        "[2025-01-02 03:04:07,000] ERROR [ReplicaFetcher replicaId=1] Error for partition (kafka.server.X)\n"
        "[2025-01-02T03:04:08,000][WARN ][o.e.c.r.a.DiskThresholdMonitor] [node-1] high disk watermark\n"
    )
    recs = _records(tmp_path, "system.data", text.encode())
    assert [(r["ts"], r["level"]) for r in recs] == [
        (_utc(2025, 1, 2, 3, 4, 5, 0.123), "error"),
        (_utc(2025, 1, 2, 3, 4, 6), "warn"),
        (_utc(2025, 1, 2, 3, 4, 7), "error"),
        (_utc(2025, 1, 2, 3, 4, 8), "warn"),
    ]
    assert recs[0]["msg"].startswith("CassandraDaemon.java:803 - Exception")


def test_padded_level_after_an_rfc3339_time_starts_a_new_record(tmp_path: Path) -> None:
    """Spring Boot 3 and tracing-subscriber pad the level ("...Z  WARN"): not an indented stack-trace line."""
    text = (
        "2025-01-02T03:04:05.123Z ERROR 1 --- [main] o.s.b.SpringApplication : Application run failed\n"
        "\tat org.example.App.main(App.java:10)\n"
        "2025-01-02T03:04:06.000Z  WARN 1 --- [main] c.z.h.HikariPool : Connection is not available\n"
        "2025-01-02T03:04:07.000000Z  INFO my_crate::http: finished\n"
    )
    recs = _records(tmp_path, "app.data", text.encode())
    assert [r["level"] for r in recs] == ["error", "warn", "info"]
    assert recs[0]["msg"].endswith("at org.example.App.main(App.java:10)")


def test_cri_runtime_log_strips_stream_and_joins_partial_lines(tmp_path: Path) -> None:
    text = (
        "2025-01-02T03:04:05.123456789Z stderr F ERROR connection refused to db:5432\n"
        "2025-01-02T03:04:06.000000000Z stdout P a line the runtime \n"
        "2025-01-02T03:04:06.000000001Z stdout F split in two\n"
        "2025-01-02T03:04:07.000000000Z stderr F panic: runtime error: invalid memory address\n"
    )
    recs = _records(tmp_path, "0.log.data", text.encode())
    assert [(r["level"], r["msg"]) for r in recs] == [
        ("error", "ERROR connection refused to db:5432"),
        (None, "a line the runtime split in two"),
        ("fatal", "panic: runtime error: invalid memory address"),
    ]


def test_docker_json_file_wrapping_a_json_logger(tmp_path: Path) -> None:
    lines = [{"log": '{"level":"error","msg":"db down"}\n', "stream": "stderr", "time": "2025-01-02T03:04:07Z"},
             {"log": "started\n", "stream": "stdout", "time": "2025-01-02T03:04:08Z"}]  # fmt: skip
    recs = _records(tmp_path, "c-json.data", "\n".join(map(json.dumps, lines)).encode())
    assert _tlm(recs) == [(_utc(2025, 1, 2, 3, 4, 7), "error", "db down"), (_utc(2025, 1, 2, 3, 4, 8), None, "started")]


def test_prefixes_before_the_time_and_levels_without_one(tmp_path: Path) -> None:
    """Syslog priorities, PostgreSQL's '< %m >', Ruby's Logger, Erlang reports, .NET console and Serilog."""
    text = (
        "<11>1 2025-01-02T03:04:05.123Z host1 app 1234 - - connection refused\n"
        "< 2025-01-02 03:04:06.000 UTC >ERROR:  deadlock detected\n"
        "E, [2025-01-02T03:04:07.000000 #1234] ERROR -- : ActiveRecord::ConnectionTimeoutError\n"
        "=WARNING REPORT==== 2-Jan-2025::03:04:08.000000 ===\n"
        "fail: Microsoft.AspNetCore.Server.Kestrel[13]\n"
        "      Connection id request failed\n"
        "[03:04:09 WRN] slow query\n"
    )
    recs = _records(tmp_path, "mixed.data", text.encode())
    assert [(r["ts"], r["level"]) for r in recs] == [
        (_utc(2025, 1, 2, 3, 4, 5, 0.123), "error"),
        (_utc(2025, 1, 2, 3, 4, 6), "error"),
        (_utc(2025, 1, 2, 3, 4, 7), "error"),
        (_utc(2025, 1, 2, 3, 4, 8), "warn"),
        (None, "error"),
        (None, "warn"),
    ]
    assert recs[1]["msg"] == "ERROR:  deadlock detected"
    assert recs[4]["msg"].endswith("Connection id request failed")


def test_haproxy_log_time_without_zone(tmp_path: Path) -> None:
    text = (
        "10.0.0.9:51234 [02/Jan/2025:03:04:05.123] fe be/app1 0/0/-1/-1/3001 503 217 - - SC-- 1/1/0/0/3 0/0 "
        '"GET / HTTP/1.1"\n'
    )
    recs = _records(tmp_path, "lb.data", (text * 2).encode())
    assert recs[0]["ts"] == _utc(2025, 1, 2, 3, 4, 5, 0.123) and recs[0]["level"] is None


def test_cloudwatch_logs_export_one_item_per_stream(tmp_path: Path) -> None:
    failed = '{"level":"error","msg":"pool exhausted"}'
    events = {"events": [
        {"logStreamName": "orders/app/1", "timestamp": 1735787045123, "message": failed},
        {"logStreamName": "orders/app/2", "timestamp": 1735787046000, "message": "INFO started\n"},
        {"logStreamName": "orders/app/1", "timestamp": 1735787044000, "message": "WARN slow"},
    ], "searchedLogStreams": []}  # fmt: skip
    (tmp_path / "events.out").write_text(json.dumps(events))
    ev = load_bundle(tmp_path)
    logs = {i.object: i.data["records"] for i in ev.kind("log")}
    assert set(logs) == {"cloudwatch/orders/app/1", "cloudwatch/orders/app/2"}
    assert _tlm(logs["cloudwatch/orders/app/1"]) == [(1735787044.0, "warn", "WARN slow"),
                                                     (1735787045.123, "error", "pool exhausted")]  # fmt: skip


def test_gcloud_logging_read_and_azure_log_analytics(tmp_path: Path) -> None:
    gcp = [
        {"insertId": "a", "logName": "projects/p/logs/stderr", "severity": "ERROR", "timestamp": "2025-01-02T03:04:05Z",
         "resource": {"type": "k8s_container", "labels": {"namespace_name": "shop", "pod_name": "orders-1",
                                                          "container_name": "app"}},
         "textPayload": "connection refused to redis:6379"},
        {"insertId": "b", "logName": "projects/p/logs/run", "severity": "WARNING", "timestamp": "2025-01-02T03:04:06Z",
         "resource": {"type": "cloud_run_revision", "labels": {"service_name": "checkout"}},
         "jsonPayload": {"message": "slow upstream"}},
    ]  # fmt: skip
    azure = {"tables": [{"name": "PrimaryResult",
                         "columns": [{"name": n} for n in ("TimeGenerated", "Computer", "SeverityLevel", "Message")],
                         "rows": [["2025-01-02T03:04:07Z", "vm-1", 3, "Disk full on /data"]]}]}  # fmt: skip
    (tmp_path / "g.out").write_text(json.dumps(gcp))
    (tmp_path / "a.out").write_text(json.dumps(azure))
    ev = load_bundle(tmp_path)
    logs = {i.object: _tlm(i.data["records"]) for i in ev.kind("log")}
    assert logs == {
        "Pod/shop/orders-1/app": [(_utc(2025, 1, 2, 3, 4, 5), "error", "connection refused to redis:6379")],
        "gcp/cloud_run_revision/checkout": [(_utc(2025, 1, 2, 3, 4, 6), "warn", "slow upstream")],
        "azure/vm-1": [(_utc(2025, 1, 2, 3, 4, 7), "error", "Disk full on /data")],
    }


def test_windows_events_from_powershell_csv_and_json(tmp_path: Path) -> None:
    csv = (
        '"TimeCreated","Id","LevelDisplayName","ProviderName","Message"\n'
        '"1/2/2025 3:14:05 PM","7031","Error","Service Control Manager","The MyApp service terminated unexpectedly."\n'
    )
    events = [{"TimeCreated": "/Date(1735787045123)/", "Id": 1014, "Level": 3, "MachineName": "web-1",
               "ProviderName": "Microsoft-Windows-DNS-Client",
               "Message": "Name resolution for db.corp timed out"}]  # fmt: skip
    (tmp_path / "a.out").write_text(csv)
    (tmp_path / "b.out").write_text(json.dumps(events))
    ev = load_bundle(tmp_path)
    logs = {i.object: i.data["records"] for i in ev.kind("log")}
    (row,) = logs["a.out"]
    assert (row["ts"], row["level"]) == (_utc(2025, 1, 2, 15, 14, 5), "error")
    assert row["msg"].startswith("The MyApp service terminated unexpectedly.")
    assert _tlm(logs["windows/web-1"]) == [
        (1735787045.123, "warn", "Microsoft-Windows-DNS-Client: Name resolution for db.corp timed out")
    ]


def test_postgresql_detail_and_statement_join_the_error_above(tmp_path: Path) -> None:
    text = (
        '2025-01-02 03:04:05.123 UTC [1234] ERROR:  duplicate key value violates unique constraint "orders_pkey"\n'
        "2025-01-02 03:04:05.123 UTC [1234] DETAIL:  Key (id)=(42) already exists.\n"
        "2025-01-02 03:04:05.123 UTC [1234] STATEMENT:  INSERT INTO orders VALUES (42)\n"
        "2025-01-02 03:04:06 UTC [1240-1] app@shop FATAL:  remaining connection slots are reserved\n"
    )
    recs = _records(tmp_path, "postgresql.data", text.encode())
    assert [r["level"] for r in recs] == ["error", "fatal"]
    assert recs[0]["msg"].endswith(
        "DETAIL:  Key (id)=(42) already exists.\n[1234] STATEMENT:  INSERT INTO orders VALUES (42)"
    )
