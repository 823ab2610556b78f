"""Stop 35: message samples (an SQS or Pub/Sub peek, kcat output, a captured webhook delivery) and the rules that
read them: a producer that changed its payload's shape (a key gone, renamed or nulled) under a consumer that fails on
it, and records of the wrong encoding on a topic. Each rule's test asserts the negative case beside it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.toolkit.exports import iso

T0 = 1754393949  # 2025-08-05 11:39:09Z


def _sqs(payloads: list[dict], queue: str = "stock-events-dlq") -> str:
    messages = []
    for i, p in enumerate(payloads):
        envelope = {"Type": "Notification", "MessageId": f"m-{i}", "Message": json.dumps(p), "Timestamp": iso(T0)}
        messages.append(
            {
                "MessageId": f"00000000-0000-4000-8000-{i:012d}",
                "ReceiptHandle": "AQEB" + "x" * 40,
                "Body": json.dumps(envelope),
                "Attributes": {
                    "ApproximateReceiveCount": "5",
                    "SentTimestamp": str((T0 - 60 + i) * 1000),
                    "DeadLetterQueueSourceArn": f"arn:aws:sqs:eu-west-2:123456789012:{queue.removesuffix('-dlq')}",
                },
            }
        )
    return (
        f"$ aws sqs receive-message --queue-url https://sqs.eu-west-2.amazonaws.com/123456789012/{queue} "
        "--max-number-of-messages 10\n" + json.dumps({"Messages": messages}, indent=2) + "\n"
    )


def _projector_log(errors: int) -> str:
    """`aws logs tail` output: each line behind its timestamp and ECS stream, a KeyError traceback among them."""
    stream = "ecs/projector/74cd8216b39fc832b8d5531e6bbdd2c0"
    lines = []
    t = T0 - 600
    for i in range(40):
        stamp = iso(t)
        lines.append(f"{stamp} {stream} 2025-08-05 11:29:{i % 60:02d},100 INFO projector projected sku=A-{i} delta=-1")
        t += 10
    for i in range(errors):
        t += 20
        for body in (
            f"2025-08-05 11:40:{i % 60:02d},200 ERROR projector failed to project message_id=m-{i}",
            "Traceback (most recent call last):",
            '  File "/app/projector/events.py", line 41, in from_payload',
            '    sku=payload["sku"],',
            "KeyError: 'sku'",
        ):
            lines.append(f"{iso(t)} {stream} {body}")
    return "\n".join(lines) + "\n"


V1 = {"schema_version": "1", "event_type": "STOCK_ADJUSTED", "sku": "A-1", "warehouse": "LHR3", "delta": -2}
V2 = {
    "schema_version": "2",
    "eventType": "STOCK_ADJUSTED",
    "skuId": "A-2",
    "warehouse": {"code": "LHR3"},
    "quantityDelta": -2,
    "source": {"system": "wms-publisher", "version": "7.0.0"},
}


def test_aws_logs_tail_stream_prefixes_are_stripped_so_a_traceback_is_one_record(tmp_path: Path) -> None:
    (tmp_path / "tail.txt").write_text(_projector_log(3))
    ev = load_bundle(tmp_path)
    (log,) = ev.kind("log")
    tracebacks = [r for r in log.data["records"] if "Traceback" in str(r.get("msg"))]
    assert len(tracebacks) == 3 and all("KeyError: 'sku'" in r["msg"] for r in tracebacks)
    assert not any(str(r.get("msg")).startswith("ecs/") for r in log.data["records"])


def test_a_producers_renamed_key_under_a_failing_consumer_is_the_data_not_the_code(tmp_path: Path) -> None:
    (tmp_path / "tail.txt").write_text(_projector_log(12))
    (tmp_path / "dlq-peek.txt").write_text(_sqs([V2, V2, V2]))
    d = investigate(load_bundle(tmp_path), "why did stock stop updating?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "wms-publisher" in d.root_cause and "'sku'" in d.root_cause and "skuId" in d.root_cause


def test_messages_that_carry_the_key_do_not_turn_a_consumer_bug_into_bad_data(tmp_path: Path) -> None:
    (tmp_path / "tail.txt").write_text(_projector_log(12))
    (tmp_path / "dlq-peek.txt").write_text(_sqs([V1, V1, V1]))
    d = investigate(load_bundle(tmp_path), "why did stock stop updating?")
    assert not any(f.code == "payload_changed" for f in d.findings)
    assert d.category == Category.CODE_DEFECT, d.root_cause


def _kcat(records: list[tuple[int, str, str]], topic: str = "orders") -> str:
    """A terminal session (a cloud shell prompt) running kcat with a -f format: metadata line, then the value."""
    out = [
        f"sre@cloudshell:~ (shop-prod)$ kcat -C -b kafka:9092 -t {topic} -o 100 -e -f 'offset=%o ts=%T\\n%h\\n%s\\n'"
    ]
    for offset, headers, value in records:
        out += [f"offset={offset} ts={(T0 + offset) * 1000}", f"headers: {headers}", value]
    out.append("sre@cloudshell:~ (shop-prod)$ date -u")
    out.append("Tue Aug  5 11:50:00 UTC 2025")
    return "\n".join(out) + "\n"


_PROTO = '^J$9c5e2b14-5cb5^R$2c1f6a43^Z^M^J^CUSD^P^J^X M-^@M-^HM-^PM-^A^C")^J^R1600 Amphitheatre^R^M'


def _consumer_log(error: str, n: int = 6) -> str:
    lines = [f"{iso(T0 + i)} INFO consumer processed order {i}" for i in range(30)]
    lines += [f"{iso(T0 + 100 + 30 * i)} ERROR consumer failed at orders @104: {error}" for i in range(n)]
    return "\n".join(lines) + "\n"


def test_json_records_on_a_protobuf_topic_are_bad_data(tmp_path: Path) -> None:
    records = [(100 + i, "content-type=application/x-protobuf", _PROTO) for i in range(4)]
    records += [(104 + i, "source=backfill", json.dumps({"orderId": f"o-{i}", "items": []})) for i in range(3)]
    (tmp_path / "session.txt").write_text(_kcat(records))
    logs = tmp_path / "logs" / "shop"
    logs.mkdir(parents=True)
    error = "Google.Protobuf.InvalidProtocolBufferException: Protocol message end-group tag did not match expected tag."
    (logs / "accounting-6d9f.log").write_text(_consumer_log(error))
    d = investigate(load_bundle(tmp_path), "why is accounting crash looping?")
    assert any(f.code == "payload_encoding_changed" for f in d.findings), d.root_cause
    assert d.category == Category.DATA_QUALITY and "offset 104" in d.root_cause, d.root_cause


def test_a_decode_error_beside_records_all_in_the_topics_encoding_is_not_called_bad_encoding(tmp_path: Path) -> None:
    records = [(100 + i, "content-type=application/x-protobuf", _PROTO) for i in range(6)]
    (tmp_path / "session.txt").write_text(_kcat(records))
    logs = tmp_path / "logs" / "shop"
    logs.mkdir(parents=True)
    error = "Google.Protobuf.InvalidProtocolBufferException: Protocol message end-group tag did not match expected tag."
    (logs / "accounting-6d9f.log").write_text(_consumer_log(error))
    d = investigate(load_bundle(tmp_path), "why is accounting crash looping?")
    assert not any(f.code == "payload_encoding_changed" for f in d.findings)


def test_a_key_a_new_producer_version_nulls_under_a_nil_dereference_is_the_data(tmp_path: Path) -> None:
    old = {"order_id": "o-1", "shipping_address": {"city": "Berlin"}}
    new = {"order_id": "o-2", "shipping_address": None, "shippingAddress": {"city": "Bonn"}}
    records = [
        (100, "producer=checkout,producer_version=7.13.2", json.dumps(old)),
        (101, "producer=checkout,producer_version=7.14.0", json.dumps(new)),
        (102, "producer=checkout,producer_version=7.13.2", json.dumps(old)),
    ]
    (tmp_path / "kcat.txt").write_text(_kcat(records, "orders.placed"))
    logs = tmp_path / "logs" / "fulfilment"
    logs.mkdir(parents=True)
    (logs / "router-7f9c.log").write_text(
        _consumer_log("panic: runtime error: invalid memory address or nil pointer dereference")
    )
    d = investigate(load_bundle(tmp_path), "why is the router crash looping?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "7.14.0" in d.root_cause and "shipping_address" in d.root_cause


def test_pubsub_pulls_and_webhook_deliveries_are_read_as_message_samples(tmp_path: Path) -> None:
    data = base64.b64encode(json.dumps({"order": {"id": 1}}).encode()).decode()
    pulled = [{"ackId": "a1", "message": {"data": data, "messageId": "9", "publishTime": iso(T0)}}]
    (tmp_path / "pull.json").write_text(json.dumps(pulled))
    delivery = {"route": "/hooks/orders", "headers": {"user-agent": "Partner-Hooks/2.0"}, "body": {"data": {}}}
    (tmp_path / "delivery.json").write_text(json.dumps(delivery))
    ev = load_bundle(tmp_path)
    by_source = {i.source: i for i in ev.kind("messages")}
    assert by_source["pull.json"].data["messages"][0]["payload"] == {"order": {"id": 1}}
    assert by_source["delivery.json"].data["messages"][0]["producer"] == "Partner-Hooks"
    assert by_source["delivery.json"].data["queue"] == "/hooks/orders"


# --- rules from the dev88-dev95 batches ------------------------------------------------------------------------


def _pod_list(container: str, pod: str, restarts: int = 7) -> str:
    status = {
        "name": container,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": iso(T0 + 500)}},
    }
    pod_obj = {
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": "media", "creationTimestamp": iso(T0 - 86400)},
        "spec": {"containers": [{"name": container, "image": f"reg/{container}:1.4.2"}]},
        "status": {"phase": "Running", "containerStatuses": [status]},
    }
    return json.dumps({"kind": "List", "apiVersion": "v1", "items": [pod_obj]})


def test_a_crash_whose_last_words_are_undecodable_input_is_bad_data(tmp_path: Path) -> None:
    (tmp_path / "pods.json").write_text(_pod_list("thumbnailer", "thumbnailer-6d8f9b7c54-wv2nk"))
    logs = tmp_path / "logs" / "media" / "thumbnailer-6d8f9b7c54-wv2nk"
    logs.mkdir(parents=True)
    lines = [f"{iso(T0 + i)} INFO thumbnailer made thumbnail photo-{i}.jpg" for i in range(20)]
    lines += [
        f"{iso(T0 + 30)} ERROR thumbnailer failed on photo-77.jpg",
        "Traceback (most recent call last):",
        '  File "/app/worker.py", line 142, in handle',
        "    img = Image.open(io.BytesIO(body))",
        "PIL.UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x7f3c2a1e9b20>",
    ]
    (logs / "thumbnailer.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why is the thumbnailer crash looping?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    # the same crash on a programming error stays a code defect
    (logs / "thumbnailer.log").write_text("\n".join([*lines[:-1], "ZeroDivisionError: division by zero"]) + "\n")
    d = investigate(load_bundle(tmp_path), "why is the thumbnailer crash looping?")
    assert d.category == Category.CODE_DEFECT, d.root_cause


def _logfmt(lines: list[tuple[int, str, str]]) -> str:
    return "".join(f"time={iso(T0 + dt)} level={lvl} {msg}\n" for dt, lvl, msg in lines)


def test_a_tenant_limit_at_a_multi_tenant_backend_is_exhaustion_and_a_cephfs_stall_is_the_file_servers(
    tmp_path: Path,
) -> None:
    err = (
        'msg="non-recoverable error" err="server returned HTTP status 400 Bad Request: user=k8s-prod: per-user '
        'series limit of 1500000 exceeded (err-mimir-max-series-per-user)"'
    )
    (tmp_path / "prometheus.log").write_text(
        _logfmt([(i, "info", 'msg="remote write ok"') for i in range(10)] + [(60 + i, "error", err) for i in range(5)])
    )
    d = investigate(load_bundle(tmp_path), "why are the new nodes missing from Grafana?")
    assert any(f.code == "quota_exceeded" and "k8s-prod" in f.title for f in d.findings), d.root_cause
    assert d.category == Category.RESOURCE_EXHAUSTION

    ceph = tmp_path / "ceph"
    ceph.mkdir()
    dmesg = [
        "[Tue Oct  8 13:58:41 2024] libceph: mds0 (1)10.40.2.21:6801 socket closed (con state OPEN)",
        "[Tue Oct  8 13:59:44 2024] ceph: mds0 caps stale",
        "[Tue Oct  8 14:00:41 2024] ceph: mds0 hung",
        "[Tue Oct  8 14:02:51 2024] INFO: task php-fpm:2212334 blocked for more than 122 seconds.",
        "[Tue Oct  8 14:20:41 2024] ceph: mds0 hung",
    ]
    (ceph / "dmesg-worker-07.txt").write_text("\n".join(dmesg) + "\n")
    d = investigate(load_bundle(ceph), "why are the docs pods hanging?")
    assert any(f.code == "file_server_unresponsive" and "mds0" in f.title for f in d.findings), d.root_cause
    assert d.category == Category.DEPENDENCY_FAILURE


def test_two_replicas_with_one_server_id_are_a_configuration_error(tmp_path: Path) -> None:
    err = (
        "ERROR [catalog-cdc|task-0] Producer failure io.debezium.DebeziumException: A replica with the same "
        "server_uuid/server_id as this replica has connected to the source; the first event 'binlog.002429' at 4"
    )
    (tmp_path / "connect.log").write_text(
        _logfmt(
            [(i, "info", 'msg="committed offsets"') for i in range(10)] + [(100, "error", err), (900, "error", err)]
        )
    )
    d = investigate(load_bundle(tmp_path), "why does the connector keep failing?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause


def test_records_refused_for_their_time_stamps_from_a_point_on_are_bad_data_and_a_steady_few_are_not(
    tmp_path: Path,
) -> None:
    late = "Skipping record for expired window. topic=[positions] partition=[3] offset=[88] timestamp=[1747912472]"
    steady = [
        (60 * i, "warn" if i % 10 == 0 else "info", late if i % 10 == 0 else 'msg="window closed"') for i in range(120)
    ]
    (tmp_path / "agg.log").write_text(_logfmt(steady))
    d = investigate(load_bundle(tmp_path), "why are the fleet numbers low?")
    assert not any(f.code == "timestamps_refused" for f in d.findings)
    surge = steady + [(7200 + 5 * i, "warn", late) for i in range(60)]
    (tmp_path / "agg.log").write_text(_logfmt(surge))
    samples = [
        (100, "vendor=teltrack", json.dumps({"vendor": "teltrack", "fw": "4.1.7", "recordedAt": 1747912320583})),
        (101, "vendor=teltrack", json.dumps({"vendor": "teltrack", "fw": "4.2.0", "recordedAt": 1747912321})),
    ]
    (tmp_path / "sample.txt").write_text(_kcat(samples, "positions"))
    d = investigate(load_bundle(tmp_path), "why are the fleet numbers low?")
    assert d.category == Category.DATA_QUALITY, d.root_cause
    assert "recordedAt is in seconds in the messages from teltrack 4.2.0" in d.root_cause


def test_argocd_history_and_mail_files_are_read_and_a_key_value_pair_is_not_a_host(tmp_path: Path) -> None:
    (tmp_path / "history.txt").write_text(
        "$ argocd app history billing-prod\nSOURCE  https://git.example/deploy.git\nID  DATE                           "
        "REVISION\n41  2025-04-02 15:40:02 +0000 UTC  apps/billing (a8d03b7)\n42  2025-04-07 16:21:48 +0000 UTC  "
        "apps/billing (c71e5aa)\n"
    )
    (tmp_path / "cron.eml").write_text(
        "From: root@batch02 (Cron Daemon)\nTo: ledger@batch02\nSubject: Cron <ledger@batch02> ledger-upload\n"
        "Date: Wed, 14 Jan 2026 01:15:01 +0000\n\nTraceback (most recent call last):\n"
        '  File "/opt/app/selector.py", line 44, in select_files\n    if f.mtime > since:\n'
        "TypeError: can't compare offset-naive and offset-aware datetimes\n"
    )
    ev = load_bundle(tmp_path)
    by_source = {i.source: i for i in ev.kind("log")}
    assert [r["msg"][:33] for r in by_source["history.txt"].data["records"]] == [
        "argocd synced billing-prod to rev"
    ] * 2
    mail = by_source["cron.eml"].data["records"]
    assert mail[0]["msg"].startswith("Subject: Cron") and all(r["ts"] == 1768353301.0 for r in mail)
    d = investigate(ev, "why did the upload not run?")
    assert "can't compare offset-naive and offset-aware datetimes" in d.root_cause, d.root_cause

    from diagnosis.analyzers.network.extraction import _target

    assert (
        _target('proxy.go:325 request="min_time:1 max_resolution_window:60000" err=timeout')
        != "max_resolution_window:60000"
    )


def test_workers_tail_fly_machines_and_dashboard_series_are_read(tmp_path: Path) -> None:
    tail = {
        "scriptName": "points-api",
        "outcome": "exception",
        "eventTimestamp": T0 * 1000,
        "event": {"request": {"url": "https://api.example/points", "method": "GET"}},
        "logs": [{"message": ["catalog served"], "level": "log", "timestamp": T0 * 1000}],
        "exceptions": [{"name": "TypeError", "message": "Cannot read properties of undefined", "timestamp": T0 * 1000}],
    }
    (tmp_path / "tail.ndjson").write_text(
        json.dumps(tail) + "\n" + json.dumps({**tail, "outcome": "ok", "exceptions": []}) + "\n"
    )
    machines = [
        {"id": "3d8d9e1b2c4589", "state": "started", "region": "iad", "host_status": "unreachable", "checks": []}
    ]
    (tmp_path / "machines.json").write_text(json.dumps(machines))
    points = [{"timestamp": iso(T0 + 60 * i), "value": 3e8 + i} for i in range(5)]
    series = {"memory": [{"labels": [{"field": "instance", "value": "srv-1"}], "unit": "bytes", "values": points}]}
    (tmp_path / "metrics.json").write_text(json.dumps(series))
    ev = load_bundle(tmp_path)
    (worker,) = ev.kind("log")
    assert worker.object == "worker/points-api"
    assert [r["level"] for r in worker.data["records"]] == ["info", "error", "error", "info"]
    (metric,) = ev.kind("metric")
    assert metric.data["labels"] == {"instance": "srv-1"} and len(metric.data["points"]) == 5
    d = investigate(ev, "why is search down?")
    assert any(f.code == "machine_impaired" and "host unreachable" in f.title for f in d.findings)


def test_a_switch_port_flapping_in_its_syslog_is_a_failing_link(tmp_path: Path) -> None:
    port = "%LINEPROTO-5-UPDOWN: Line protocol on Interface Ethernet49/1 (spine-01 Ethernet14/1), changed state to"
    lines = []
    for i in range(4):
        lines.append(f"Apr  9 13:{10 + 5 * i:02d}:12 leaf-r14 Ebra: {port} down")
        lines.append(f"Apr  9 13:{11 + 5 * i:02d}:02 leaf-r14 Ebra: {port} up")
    (tmp_path / "syslog-netdev.txt").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why do the build agents keep dropping?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "Ethernet49/1" in d.root_cause and "leaf-r14" in d.root_cause
    link = next(f for f in d.findings if f.code == "link_failing")
    assert any("show interfaces Ethernet49/1 transceiver" in a.command for a in link.actions)


def test_validators_words_for_implausible_values_and_missing_scopes(tmp_path: Path) -> None:
    from diagnosis.analyzers._common import AUTH_DENIED
    from diagnosis.analyzers.logs._shared import BAD_DATA

    assert BAD_DATA.search("ERROR RATE TOLERANCE EXCEEDED ccy=JPY prior=163.2100 today=0.006115")
    assert BAD_DATA.search("ValueError: duplicate Sample_ID 'WB-2291' with different index pairs")
    assert not BAD_DATA.search("org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error handler")
    assert AUTH_DENIED.search(
        '403 Body: {"message":"This app hasn\'t been granted all required scopes","category":"MISSING_SCOPES"}'
    )
    # Jenkins' innermost-first trace, in a console log with no time stamps, is read as an error
    (tmp_path / "console.txt").write_text(
        "Started by an SCM change\nLoading library pipeline-commons@v3.14.0\n[Pipeline] node\n"
        "Caused: java.io.NotSerializableException: java.util.regex.Matcher\n"
        "\tat org.jboss.marshalling.river.RiverMarshaller.doWriteObject(RiverMarshaller.java:278)\nFinished: FAILURE\n"
    )
    d = investigate(load_bundle(tmp_path), "why do main builds fail?")
    assert "NotSerializableException" in d.root_cause, d.root_cause
    # Tornado's module:line is where it logged, not a host it called
    from diagnosis.formats.logs import LineParser

    ts, level, msg = LineParser().parse("[W 2025-10-06 08:54:31.166 JupyterHub spawner:2940] spawn slow")
    assert (level, msg) == ("warn", "spawn slow") and ts is not None
