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
