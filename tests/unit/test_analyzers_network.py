"""Network analyzer: failing upstreams, DNS, TLS, access-log 5xx; and the red herrings around them."""

from __future__ import annotations

from diagnosis.analyzers.network import network_failures
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes


def test_200_upstream_timeouts_name_payments_api_as_the_failing_upstream_of_orders_api() -> None:
    b = Builder()
    lines = [(T0 + i * 3, "error", "ERROR orders-api upstream payments-api timed out after 5000ms") for i in range(200)]
    b.log("logs/orders-api.log", lines)
    ev = b.set()
    found = network_failures(ev)
    [cause] = causes(found)
    assert cause.code == "upstream_timeout"
    assert cause.category == "dependency_failure"
    assert "payments-api" in cause.object and "orders-api" in cause.object
    assert "200x" in cause.mechanism
    assert cause.ts == T0
    assert "upstream:payments-api" in cause.tags and "service:orders-api" in cause.tags
    assert {"latency", "http_5xx", "errors"} <= set(cause.explains)
    assert_refs_real(ev, found)


def test_nginx_error_log_names_the_upstream_address() -> None:
    b = Builder()
    msg = (
        "2024/03/01 10:00:00 [error] 31#31: *1 upstream timed out (110: Connection timed out) while reading "
        'response header from upstream, client: 10.0.0.1, server: shop, request: "GET /api HTTP/1.1", '
        'upstream: "http://10.1.2.3:8080/api", host: "shop"'
    )
    b.log("logs/nginx/error.log", [(T0 + i, "error", msg) for i in range(5)])
    [cause] = causes(network_failures(b.set()))
    assert "10.1.2.3:8080" in cause.object


def test_go_dial_refused_names_the_dependency_and_tags_the_database() -> None:
    b = Builder()
    msg = "failed to connect: dial tcp 10.0.3.7:5432: connect: connection refused"
    b.log("Pod/shop/checkout-7d9f8c6b5-x2k4p/app", [(T0 + i, "error", msg) for i in range(10)])
    [cause] = causes(network_failures(b.set()))
    assert cause.code == "connection_refused"
    assert "10.0.3.7:5432" in cause.object
    assert "db:10.0.3.7" in cause.tags and "service:checkout" in cause.tags


def test_errors_that_stopped_long_ago_are_benign() -> None:
    b = Builder()
    b.log(
        "logs/orders-api.log",
        [(T0 + i, "error", "upstream payments-api timed out after 5000ms") for i in range(20)]
        + [(T0 + 7200 + i * 60, "info", "GET /orders 200 12ms") for i in range(10)],
    )
    found = network_failures(b.set())
    assert not causes(found)
    assert by_code(found, "upstream_timeout_stopped")[0].role == "benign"


def test_one_or_two_timeouts_are_noise() -> None:
    b = Builder()
    b.log("logs/api.log", [(T0, "error", "upstream payments-api timed out after 5000ms"), (T0 + 5, "info", "ok")])
    assert not causes(network_failures(b.set()))


def test_nxdomain_for_one_name_is_a_configuration_error_naming_it() -> None:
    b = Builder()
    msg = 'Get "http://payment-svc.shop.svc.cluster.local:8080/charge": dial tcp: lookup payment-svc.shop.svc.cluster.local on 10.96.0.10:53: no such host'  # noqa: E501 (an exact command or data line reads better whole)
    b.log("Pod/shop/orders-api-5c8d7f9b6-abcde/app", [(T0 + i, "error", msg) for i in range(8)])
    [cause] = causes(network_failures(b.set()))
    assert cause.code == "dns_name_not_found"
    assert cause.category == "configuration_error"
    assert "payment-svc.shop.svc.cluster.local" in cause.object


def test_temporary_resolution_failures_point_at_the_resolver() -> None:
    b = Builder()
    b.log(
        "logs/worker.log",
        [(T0 + i, "error", "could not connect: Temporary failure in name resolution (redis-master)") for i in range(6)],
    )
    [cause] = causes(network_failures(b.set()))
    assert cause.code == "dns_resolution_failure"
    assert cause.category == "infrastructure"


def test_dns_config_forming_event_is_benign() -> None:
    b = Builder()
    b.event(
        "Pod",
        "shop",
        "web-1",
        "DNSConfigForming",
        (
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied "
            "nameserver line is: 10.0.0.2 10.0.0.3 10.0.0.4"
        ),
        T0,
    )
    found = network_failures(b.set())
    assert not causes(found)
    assert by_code(found, "dns_config_forming")[0].role == "benign"


def test_expired_certificate_in_logs_and_probe() -> None:
    b = Builder()
    msg = 'Post "https://api.partner.example.com/v1/pay": x509: certificate has expired or is not yet valid: current time 2024-03-01T10:00:00Z is after 2024-02-29T23:59:59Z'  # noqa: E501 (an exact command or data line reads better whole)
    b.log("logs/billing.log", [(T0 + i, "error", msg) for i in range(4)])
    b.probe(
        "https://api.partner.example.com/health",
        T0 + 10,
        status=None,
        latency_ms=None,
        error="certificate has expired",
        tls_days_left=-1,
    )
    ev = b.set()
    found = network_failures(ev)
    codes = {f.code for f in causes(found)}
    assert codes == {"tls_certificate_expired"}
    assert all("api.partner.example.com" in f.object for f in causes(found))
    assert_refs_real(ev, found)


def test_certificate_expiring_in_ten_days_is_not_failing() -> None:
    b = Builder()
    b.probe("https://shop.example.com/", T0, status=200, latency_ms=40, error=None, tls_days_left=10)
    found = network_failures(b.set())
    assert not causes(found)
    assert by_code(found, "tls_expiring_soon")


def test_access_log_5xx_is_a_symptom() -> None:
    b = Builder()
    ok = [
        (T0 + i, None, f'10.0.0.1 - - [01/Mar/2024:10:00:{i % 60:02d} +0000] "GET /api/orders HTTP/1.1" 200 512')
        for i in range(50)
    ]
    bad = [
        (T0 + 60 + i, None, f'10.0.0.1 - - [01/Mar/2024:10:01:{i % 60:02d} +0000] "GET /api/orders HTTP/1.1" 502 157')
        for i in range(20)
    ]
    b.log("logs/nginx/access.log", ok + bad)
    found = network_failures(b.set())
    [sym] = by_code(found, "http_5xx")
    assert sym.role == "symptom"
    assert "20 of 70" in sym.title


def test_healthy_logs_give_nothing() -> None:
    b = Builder()
    b.log("logs/api.log", [(T0 + i, "info", f"GET /orders/{i} 200 {10 + i % 7}ms") for i in range(100)])
    assert network_failures(b.set()) == []


def test_a_5xx_from_a_called_url_names_the_provider() -> None:
    b = Builder()
    msg = (
        "label purchase failed: POST https://api.shipfast.io/v1/labels returned 503 Service "
        "Unavailable (x-request-id: sf-1)"
    )
    b.log("Pod/fulfillment/fulfillment-svc-7d9f8c6b5-abcde/app", [(T0 + i * 5, "error", msg) for i in range(40)])
    [cause] = causes(network_failures(b.set()))
    assert cause.code == "upstream_5xx" and cause.category == "dependency_failure"
    assert "api.shipfast.io" in cause.object and "503 x40" in cause.mechanism


def test_a_service_answering_5xx_in_its_own_access_log_is_not_an_upstream() -> None:
    b = Builder()
    b.log(
        "logs/access.log",
        [(T0 + i, None, '10.0.0.1 - - [01/Mar/2024:10:00:00 +0000] "GET /x HTTP/1.1" 503 12') for i in range(20)],
    )
    assert not causes(network_failures(b.set()))


def test_stack_frames_and_spring_placeholders_are_not_hosts() -> None:
    b = Builder()
    trace = (
        "java.net.SocketTimeoutException: Read timed out\n"
        "\tat java.net.SocketInputStream.read(SocketInputStream.java:150)"
    )
    b.log("logs/a.log", [(T0 + i, "error", trace) for i in range(5)])
    placeholder = "Could not resolve placeholder 'DB_URL' in value \"${DB_URL}\""
    b.log("logs/b.log", [(T0 + i, "error", placeholder) for i in range(5)])
    assert not causes(network_failures(b.set()))


def test_istio_cluster_names_the_upstream() -> None:
    b = Builder()
    line = '[2024-03-01T10:00:00.000Z] "POST /charge HTTP/1.1" 504 UT upstream request timeout "outbound|8080||payments.shop.svc.cluster.local"'  # noqa: E501 (one access-log line)
    b.log("Pod/shop/checkout-6d5f8b7c9d-dvlnp/istio-proxy", [(T0 + i, None, line) for i in range(10)])
    [cause] = causes(network_failures(b.set()))
    assert "payments.shop.svc.cluster.local" in cause.object and "upstream:payments" in cause.tags


def test_a_providers_own_expired_certificate_is_the_dependency_ours_is_configuration() -> None:
    msg = (
        'Post "https://api.bankgate.example/v2/payouts": tls: failed to verify certificate: x509: certificate has '
        "expired or is not yet valid"
    )
    b = Builder()
    b.log("Pod/treasury/payouts-worker-5c7d9b8f6-q2mzx", [(T0 + i * 10, "error", msg) for i in range(5)])
    [theirs] = causes(network_failures(b.set()))
    assert theirs.code == "tls_certificate_expired" and theirs.category == "dependency_failure"
    b.event("Certificate", "treasury", "api-bankgate-tls", "Failed", "The certificate request has failed", T0)
    [ours] = causes(network_failures(b.set()))
    assert ours.category == "configuration_error"


def test_an_expired_certificate_of_a_cluster_service_is_ours() -> None:
    msg = "x509: certificate has expired or is not yet valid, dialing lineage-collector.data.svc:4317"
    b = Builder()
    b.log("Pod/data/etl-worker-5b8c7d6f9e-vkpcj", [(T0 + i * 10, "error", msg) for i in range(5)])
    [cause] = causes(network_failures(b.set()))
    assert cause.category == "configuration_error"


def _limited(client: str, i: int) -> str:
    return (
        f"2025/09/30 11:20:{i % 60:02d} [error] 1411#1411: *88{i} limiting requests, excess: 21.064 by zone "
        f'"api_per_ip", client: {client}, server: api.example.shop, request: "GET /v1/cart HTTP/2.0"'
    )


def test_our_rate_limit_refusing_many_clients_is_set_too_low() -> None:
    from diagnosis.analyzers.network import own_rate_limits

    b = Builder()
    b.log("edge-01/error.log", [(T0 + i, "error", _limited(f"203.0.113.{i}", i)) for i in range(40)])
    ev = b.set()
    found = own_rate_limits(ev)
    [cause] = causes(found)
    assert cause.code == "rate_limit_too_low" and "api_per_ip" in cause.object and "service:edge-01" in cause.tags
    assert_refs_real(ev, found)


def test_our_rate_limit_stopping_one_client_is_working() -> None:
    from diagnosis.analyzers.network import own_rate_limits

    b = Builder()
    b.log("edge-01/error.log", [(T0 + i, "error", _limited("203.0.113.7", i)) for i in range(40)])
    assert causes(own_rate_limits(b.set())) == []


def _status_page(b: Builder, provider: str, failing: list[str], domain: str | None = None) -> str:
    data = {"provider": provider, "domain": domain, "description": "Partial System Outage", "failing": failing}
    return b.raw("external/status", f"status/{provider}", {**data, "degraded": bool(failing)}, T0)


def test_a_providers_status_page_confirms_the_failing_upstream_it_names() -> None:
    b = Builder()
    msg = "ERROR checkout POST https://api.acmepay.example/v1/charges -> 503 Service Unavailable"
    b.log("logs/checkout.log", [(T0 + i, "error", msg) for i in range(30)])
    page = _status_page(b, "Acme Pay", ["Charges API"])
    ev = b.set()
    found = network_failures(ev)
    [cause] = causes(found)
    assert "Acme Pay's status page confirms it" in cause.mechanism and "Charges API" in cause.mechanism
    assert page in [r.item for r in cause.evidence] and cause.code == "upstream_5xx"
    assert "provider:acmepay" in cause.tags
    assert_refs_real(ev, found)


def test_a_degraded_provider_no_call_names_is_a_weak_candidate_and_an_operational_one_nothing() -> None:
    b = Builder()
    _status_page(b, "TextBeam", ["Messaging API - EU"])
    _status_page(b, "Mailer", [])
    found = network_failures(b.set())
    [cause] = causes(found)
    assert cause.code == "provider_degraded" and cause.score <= 0.3 and "TextBeam" in cause.title


def test_a_provider_name_inside_another_word_is_not_a_match() -> None:
    b = Builder()
    msg = "ERROR shop upstream payments-api timed out after 5000ms"
    b.log("logs/shop.log", [(T0 + i, "error", msg) for i in range(30)])
    _status_page(b, "Pay", ["API"])
    [cause] = [c for c in causes(network_failures(b.set())) if c.code == "upstream_timeout"]
    assert "status page" not in cause.mechanism


def test_a_provider_or_vendor_field_names_the_external_dependency_that_fails() -> None:
    b = Builder()
    msg = 'WARNING [kyc] check failed applicant=a1 provider=idcheck status=504 body="upstream request timeout"'
    b.log("logs/signup-api.log", [(T0 + i * 20, "warning", msg) for i in range(12)])
    [cause] = causes(network_failures(b.set()))
    assert cause.category == "dependency_failure" and "upstream:idcheck" in cause.tags
