"""Rules widened by mechanism, not by one scenario's wording: each case is a message as a real library, server or
platform words it (Jackson, Kafka, Go's encoding/json, Python, Node, Ruby, MySQL, PostgreSQL), written for
these tests."""

from __future__ import annotations

import pytest

from diagnosis.analyzers.logs import log_errors
from diagnosis.model import Category
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes


def _log_causes(obj: str, lines: list[str], extra: list[str] | None = None):  # type: ignore[no-untyped-def]
    b = Builder()
    recs = [(T0 + 10 * i, "error", line) for i, line in enumerate(lines * 4)]
    recs += [(T0 + 10 * len(recs) + i, "warn", line) for i, line in enumerate(extra or [])]
    b.log(obj, recs, namespace="shop", pod=obj.rsplit("/", 1)[-1])
    ev = b.set()
    found = log_errors(ev)
    assert_refs_real(ev, found)
    return causes(found)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("Listener failed; nested exception is com.fasterxml.jackson.core.JsonParseException: Unexpected character "
         "('<' (code 60)): expected a valid value", "JsonParseException"),
        ("org.apache.kafka.common.errors.RecordDeserializationException: Error deserializing key/value for partition "
         "orders-2 at offset 991", "RecordDeserializationException"),
        ("handler: decode event: invalid character '<' looking for beginning of value", "invalid character"),
        ("worker: strconv.ParseFloat: parsing \"12,50\": invalid syntax", "strconv.ParseFloat: parsing"),
        ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 14: invalid continuation byte",
         "UnicodeDecodeError"),
        ("SyntaxError: Unexpected token < in JSON at position 0", "SyntaxError"),
        ("JSON::ParserError: unexpected token at '<html>'", "ParserError"),
        ("SQLSTATE[HY000]: General error: 1366 Incorrect string value: '\\xF0\\x9F\\x98' for column 'name' at row 1",
         "Incorrect string value"),
        ("ERROR: invalid input value for enum order_status: \"SHIPPED \"", "invalid input value"),
        ("java.time.format.DateTimeParseException: Text '2025-13-01' could not be parsed at index 5",
         "DateTimeParseException"),
        ("ValueError: invalid literal for int() with base 10: 'N/A'", "invalid literal for int()"),
    ],
)  # fmt: skip
def test_bad_data_by_its_real_wording_is_data_quality_and_named(line: str, named: str) -> None:
    found = _log_causes("Pod/shop/importer-6f7d8c9b5-q2w3e", [line])
    (cause,) = found
    assert cause.code == "bad_data" and cause.category == Category.DATA_QUALITY
    assert named in cause.mechanism


def test_poison_message_names_the_offset_and_partition_it_keeps_re_reading() -> None:
    line = (
        "KafkaException: Seek to current after exception; nested exception is "
        "com.fasterxml.jackson.databind.exc.MismatchedInputException: Cannot deserialize value of type `long`"
    )
    seek = "[Consumer clientId=billing-0, groupId=billing] Seeking to offset 4417 for partition invoices-1"
    (cause,) = _log_causes("Pod/shop/billing-consumer-5d8c7b9f4-m2kzr", [line], [seek] * 5)
    assert "MismatchedInputException" in cause.mechanism
    assert "offset 4417 of partition invoices-1" in cause.mechanism and "poison" in cause.mechanism


def test_a_code_bug_is_still_a_code_defect() -> None:
    found = _log_causes(
        "Pod/shop/cart-7c8d9f5b6a-x2k4p", ["TypeError: Cannot read properties of undefined (reading 'id')"]
    )
    assert [f.category for f in found] == [Category.CODE_DEFECT]
    assert by_code(found, "bad_data") == []


# ---------------------------------------------------------------- dependency failures


def _network_causes(lines: list[str]):  # type: ignore[no-untyped-def]
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    b.log("Pod/shop/checkout-6b7c8d9f5-k2j3h", [(T0 + 5 * i, "error", ln) for i, ln in enumerate(lines * 4)],
          namespace="shop", pod="checkout-6b7c8d9f5-k2j3h")  # fmt: skip
    ev = b.set()
    found = network_failures(ev)
    assert_refs_real(ev, found)
    return [f for f in found if f.role == "cause"]


@pytest.mark.parametrize(
    ("line", "target", "code"),
    [
        ("rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp "
         "10.4.0.7:50051: connect: connection refused\"", "10.4.0.7:50051", "connection_refused"),
        ("io.grpc.StatusRuntimeException: DEADLINE_EXCEEDED: deadline exceeded after 2.99s calling "
         "inventory.shop.svc:9090", "inventory.shop.svc:9090", "upstream_timeout"),
        ("HTTPSConnectionPool(host='api.stripe.com', port=443): Max retries exceeded with url: /v1/charges "
         "(Caused by ConnectTimeoutError)", "api.stripe.com", "upstream_timeout"),
        ("requests.exceptions.HTTPError: 502 Server Error: Bad Gateway for url: https://api.shipfast.io/v2/labels",
         "api.shipfast.io", "upstream_5xx"),
        ("io.github.resilience4j.circuitbreaker.CallNotPermittedException: CircuitBreaker 'loyalty-api' is OPEN "
         "and does not permit further calls", "loyalty-api", "upstream_circuit_open"),
        ("backend pricing has no server available!", "pricing", "connection_refused"),
        # (no route to host: the machine is down or cut off, not its service failing; stop 28)
        ("dial tcp 10.4.0.9:8080: connect: no route to host", "10.4.0.9:8080", "host_unreachable"),
    ],
)  # fmt: skip
def test_upstream_failures_as_real_clients_word_them(line: str, target: str, code: str) -> None:
    found = _network_causes([line])
    category = Category.INFRASTRUCTURE if code == "host_unreachable" else Category.DEPENDENCY_FAILURE
    assert [(f.code, f.category) for f in found] == [(code, category)]
    assert target in found[0].object or target in found[0].mechanism


def test_python_traceback_keeps_its_unindented_exception_line_and_names_the_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from diagnosis.bundle import load_bundle
    from diagnosis.investigate import investigate

    log = (
        "2026-02-03 10:12:01,114 INFO import.runner: picked up s3://uploads/m-1/orders_2026-02-03.csv for m-1\n"
        "2026-02-03 10:12:01,733 ERROR import.runner: import failed for orders_2026-02-03.csv\n"
        "Traceback (most recent call last):\n"
        '  File "/app/importer/runner.py", line 88, in run\n'
        '    df = pd.read_csv(buf, encoding="utf-8")\n'
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 1811: invalid continuation byte\n"
        "2026-02-03 10:12:02,001 INFO import.runner: next upload\n"
        "Traceback (most recent call last):\n"
        '  File "/app/importer/runner.py", line 90, in run\n'
        "KeyError: 'sku'\n"
    )
    (tmp_path / "importer.log").write_text(log)
    ev = load_bundle(tmp_path)
    recs = ev.kind("log")[0].data["records"]
    tracebacks = [r["msg"] for r in recs if r["msg"].startswith("Traceback")]
    assert len(tracebacks) == 2 and tracebacks[0].endswith("invalid continuation byte")
    assert tracebacks[1].endswith("KeyError: 'sku'")
    d = investigate(ev)
    assert d.category == Category.DATA_QUALITY
    assert "UnicodeDecodeError" in d.root_cause and "orders_2026-02-03.csv" in d.root_cause


# ---------------------------------------------------------------- resource exhaustion


def _pod(name: str, cpu_limit: str) -> dict:  # type: ignore[type-arg]
    return {
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"containers": [{"name": "api", "resources": {"limits": {"cpu": cpu_limit}}}]},
        "status": {"phase": "Running"},
    }


def test_cpu_throttling_from_cadvisor_counters_names_the_container_and_its_limit() -> None:
    from diagnosis.analyzers.metrics import cpu_throttling

    b = Builder()
    labels = {"namespace": "shop", "pod": "quote-7d9f8b6c5-x2k4p", "container": "api"}
    b.metric("container_cpu_cfs_periods_total", [(T0 + 60 * i, 600.0 * i) for i in range(8)], labels)
    b.metric("container_cpu_cfs_throttled_periods_total", [(T0 + 60 * i, 240.0 * i) for i in range(8)], labels)
    b.raw("k8s/Pod", "Pod/shop/quote-7d9f8b6c5-x2k4p", _pod("quote-7d9f8b6c5-x2k4p", "250m"))
    ev = b.set()
    (f,) = cpu_throttling(ev)
    assert_refs_real(ev, [f])
    assert f.category == Category.RESOURCE_EXHAUSTION and "250m" in f.mechanism and "40%" in f.mechanism
    assert f.object == "container api of pod shop/quote-7d9f8b6c5-x2k4p"


def test_light_throttling_is_no_cause() -> None:
    from diagnosis.analyzers.metrics import cpu_throttling

    b = Builder()
    labels = {"namespace": "shop", "pod": "quote-7d9f8b6c5-x2k4p", "container": "api"}
    b.metric("namespace_pod_container:container_cpu_cfs_throttled_periods:ratio",
             [(T0 + 60 * i, 0.04) for i in range(8)], labels)  # fmt: skip
    assert cpu_throttling(b.set()) == []


def test_envoy_access_log_response_flags_name_the_failing_upstream() -> None:
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    ok = '"GET /v2/rates HTTP/1.1" 200 - 0 812 41 39 "-" "quote/2.0" "a1" "rates.partner.example" "198.51.100.7:443"'
    ut = '"GET /v2/rates HTTP/1.1" 504 UT 0 24 10000 - "-" "quote/2.0" "a2" "rates.partner.example" "-"'
    uf = '"GET /v2/rates HTTP/1.1" 503 UF,URX 0 91 3 - "-" "quote/2.0" "a3" "rates.partner.example" "198.51.100.7:443"'
    lines = [(T0 + i, None, ok if i % 3 == 0 else ut if i % 3 == 1 else uf) for i in range(12)]
    b.log("Pod/shop/quote-5b8c7d6f9-kx2pq/istio-proxy", lines, namespace="shop", pod="quote-5b8c7d6f9-kx2pq",
          container="istio-proxy")  # fmt: skip
    ev = b.set()
    found = [f for f in network_failures(ev) if f.role == "cause"]
    assert_refs_real(ev, found)
    (f,) = found
    assert f.category == Category.DEPENDENCY_FAILURE and f.code == "upstream_timeout"
    assert "rates.partner.example" in f.object and "quote" in f.mechanism and "504 x4" in f.mechanism


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("java.util.concurrent.RejectedExecutionException: Task io.acme.Job@1f2e rejected from "
         "java.util.concurrent.ThreadPoolExecutor@3c4d[Running, pool size = 64, active threads = 64]",
         "app_pool_exhausted"),
        ("WARNING: [pool www] server reached pm.max_children setting (20), consider raising it", "app_pool_exhausted"),
        ("[CRITICAL] WORKER TIMEOUT (pid:4711)", "app_pool_exhausted"),
        ("Member consumer-orders-1 sending LeaveGroup request to coordinator due to consumer poll timeout has expired. "
         "This means the time between subsequent calls to poll() was longer than the configured "
         "max.poll.interval.ms", "consumer_too_slow"),
    ],
)  # fmt: skip
def test_app_capacity_by_how_servers_word_it_even_at_warn(line: str, code: str) -> None:
    from diagnosis.analyzers.logs import app_capacity

    b = Builder()
    b.log("Pod/shop/orders-7c8d9f5b6a-x2k4p", [(T0 + 20 * i, "warn", line) for i in range(5)],
          namespace="shop", pod="orders-7c8d9f5b6a-x2k4p")  # fmt: skip
    ev = b.set()
    (f,) = app_capacity(ev)
    assert_refs_real(ev, [f])
    assert (f.code, f.category) == (code, Category.RESOURCE_EXHAUSTION) and f.object == "orders"
    # the same lines give no code_defect from the exception rule
    assert all(x.category != Category.CODE_DEFECT for x in log_errors(ev))


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://api.smsgate.example/v1/send",
         "api.smsgate.example"),
        ("E0814 01:10:31.592725 1 reflector.go:150] failed to list *v1.Secret: secrets is forbidden: User "
         "\"system:serviceaccount:ops:backup\" cannot list resource \"secrets\" in API group \"\" "
         "in the namespace \"ops\"",
         "system:serviceaccount:ops:backup"),
        ("botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the PutObject operation: "
         "User: arn:aws:sts::123456789012:assumed-role/exporter/i-0ab is not authorized to perform: s3:PutObject "
         "on resource: https://exports-bucket.s3.amazonaws.com", "exports-bucket.s3.amazonaws.com"),
    ],
)  # fmt: skip
def test_refused_credentials_and_permissions_are_configuration(line: str, named: str) -> None:
    from diagnosis.analyzers.network import access_denied

    b = Builder()
    b.log("Pod/ops/exporter-6f7d8c9b5-q2w3e", [(T0 + 30 * i, "error", line) for i in range(4)],
          namespace="ops", pod="exporter-6f7d8c9b5-q2w3e")  # fmt: skip
    ev = b.set()
    (f,) = access_denied(ev)
    assert_refs_real(ev, [f])
    assert f.category == Category.CONFIGURATION_ERROR and named in f.object and named in f.mechanism
    assert all(x.category != Category.CODE_DEFECT for x in log_errors(ev))


def test_servfail_for_one_external_name_is_its_providers_dns_not_our_resolver() -> None:
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    client = "lookup api.partnermaps.example on 172.20.0.10:53: server misbehaving"
    coredns = (
        "[ERROR] plugin/errors: 2 api.partnermaps.example. A: read udp 10.0.2.41:3{:04d}->10.0.0.2:53: i/o timeout"
    )
    b.log("Pod/shop/geo-6f7d8c9b5-q2w3e", [(T0 + 20 * i, "error", client) for i in range(6)],
          namespace="shop", pod="geo-6f7d8c9b5-q2w3e")  # fmt: skip
    b.log("Pod/kube-system/coredns-5d78c9869d-abcde", [(T0 + 20 * i, "error", coredns.format(i)) for i in range(6)],
          namespace="kube-system", pod="coredns-5d78c9869d-abcde")  # fmt: skip
    ev = b.set()
    found = [f for f in network_failures(ev) if f.role == "cause"]
    assert_refs_real(ev, found)
    (f,) = found
    assert f.category == Category.DEPENDENCY_FAILURE and "api.partnermaps.example" in f.object
    assert "SERVFAIL" in f.mechanism and "partnermaps.example" in f.mechanism


def test_a_resolver_timing_out_for_many_names_is_still_infrastructure() -> None:
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    lines = [(T0 + 20 * i, "error", f"lookup svc{i % 4}.shop.svc.cluster.local on 10.96.0.10:53: read udp: i/o timeout")
             for i in range(8)]  # fmt: skip
    b.log("Pod/shop/geo-6f7d8c9b5-q2w3e", lines, namespace="shop", pod="geo-6f7d8c9b5-q2w3e")
    (f,) = [f for f in network_failures(b.set()) if f.role == "cause"]
    assert f.category == Category.INFRASTRUCTURE


def test_an_upstream_pod_ip_is_named_by_its_pod_and_service() -> None:
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    line = ("connect() failed (111: Connection refused) while connecting to upstream, client: 20.1.2.3, "
            "upstream: \"http://10.244.1.18:8080/v1/quote\"")  # fmt: skip
    b.log("Pod/ingress/nginx-7d9f8c6b5d-z4hpl", [(T0 + 10 * i, "error", line) for i in range(5)],
          namespace="ingress", pod="nginx-7d9f8c6b5d-z4hpl")  # fmt: skip
    pod = {"metadata": {"name": "quote-5f7b9c6d4-9xw2d", "namespace": "shop"}, "status": {"podIP": "10.244.1.18"}}
    b.raw("k8s/Pod", "Pod/shop/quote-5f7b9c6d4-9xw2d", pod)
    address = {"ip": "10.244.1.18", "targetRef": {"kind": "Pod", "name": "quote-5f7b9c6d4-9xw2d"}}
    endpoints = {"metadata": {"name": "quote", "namespace": "shop"}, "subsets": [{"addresses": [address]}]}
    b.raw("k8s/Endpoints", "Endpoints/shop/quote", endpoints)
    (f,) = [f for f in network_failures(b.set()) if f.role == "cause"]
    assert "pod shop/quote-5f7b9c6d4-9xw2d (Service quote)" in f.object
    assert {"pod:shop/quote-5f7b9c6d4-9xw2d", "service:quote"} <= set(f.tags)


def test_nvme_command_timeouts_are_a_device_failure_named_by_its_device() -> None:
    from diagnosis.analyzers.host import host

    b = Builder()
    line = "nvme nvme1: I/O tag 871 (5367) opcode 0x1 (I/O Cmd) QID 3 timeout, aborting req_op:WRITE(1) size:131072"
    b.log("dmesg.txt", [(None, None, line)] * 3)  # type: ignore[list-item]
    ev = b.set()
    (f,) = [f for f in host(ev) if f.role == "cause"]
    assert f.category == Category.INFRASTRUCTURE and f.object == "device nvme1"
