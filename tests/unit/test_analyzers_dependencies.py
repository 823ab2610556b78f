"""A named upstream failing its callers, as each client library and proxy words it: the upstream is extracted
whatever the style, and the failure is a dependency_failure (never a code defect of the caller)."""

from __future__ import annotations

import pytest

from diagnosis.analyzers.database import database
from diagnosis.analyzers.network import network_failures
from diagnosis.investigate import investigate
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes


def _caller_log(msg: str, n: int = 6) -> Builder:
    b = Builder()
    b.log("Pod/shop/orders-api-7d9f8c6b5-x2k4p/app", [(T0 + i * 20, "error", msg) for i in range(n)])
    return b


@pytest.mark.parametrize(
    ("msg", "code", "upstream"),
    [
        # OkHttp / java.net
        ("java.net.ConnectException: Failed to connect to api.stripe.com/54.187.216.72:443", "connection_refused",
         "api.stripe.com"),
        # aiohttp
        ("aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host geo.internal:443 ssl:default "
         "[Connect call failed ('10.0.0.7', 443)]", "connection_refused", "geo.internal"),
        ("aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected while calling "
         "https://search.internal/query", "upstream_reset", "search.internal"),
        # requests / http.client
        ("requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed "
         "connection without response')) url=https://rates.fx.example/latest", "upstream_reset", "rates.fx.example"),
        # reactor-netty
        ("reactor.netty.http.client.PrematureCloseException: Connection prematurely closed BEFORE response "
         "uri=http://pricing-svc:8080/price", "upstream_reset", "pricing-svc"),
        # gRPC: the full method names the service; grpc-java's remote_addr names the host
        ("call /inventory.v1.Inventory/Reserve failed: rpc error: code = DeadlineExceeded desc = context deadline "
         "exceeded", "upstream_timeout", "inventory"),
        ("io.grpc.StatusRuntimeException: DEADLINE_EXCEEDED: deadline exceeded after 4.999s. [closed=[], "
         "open=[[remote_addr=inventory-grpc.stock.svc.cluster.local/10.0.4.3:9090]]]", "upstream_timeout",
         "inventory-grpc"),
        # structured attributes
        ('level=error msg="rpc failed" grpc.code=Unavailable err="code = Unavailable desc = connection refused" '
         "peer.service=ledger-grpc", "connection_refused", "ledger-grpc"),
    ],
)  # fmt: skip
def test_upstream_is_named_from_each_client_style(msg: str, code: str, upstream: str) -> None:
    ev = _caller_log(msg).set()
    found = network_failures(ev)
    [cause] = causes(found)
    assert cause.code == code
    assert cause.category == "dependency_failure"
    assert upstream in cause.object
    assert "service:orders-api" in cause.tags
    assert_refs_real(ev, found)


def test_prose_before_calling_is_not_taken_for_the_caller() -> None:
    ev = _caller_log("httpx.ConnectError: [Errno 111] Connection refused while calling http://ledger.internal:8000/x")
    [cause] = causes(network_failures(ev.set()))
    assert "service:while" not in cause.tags and "orders-api" in cause.object


@pytest.mark.parametrize(
    "msg",
    [
        'Post "https://api.bank.example/v2/pay": remote error: tls: handshake failure',
        "ssl.SSLError: [SSL: SSLV3_ALERT_HANDSHAKE_FAILURE] sslv3 alert handshake failure (_ssl.c:1007) calling "
        "https://api.bank.example/v2/pay",
        "javax.net.ssl.SSLHandshakeException: Received fatal alert: handshake_failure url=https://api.bank.example/v2",
    ],
)
def test_a_handshake_the_other_side_aborts_is_the_dependency_not_our_certificate(msg: str) -> None:
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.code == "upstream_tls_failure" and cause.category == "dependency_failure"
    assert "api.bank.example" in cause.object


def test_our_client_certificate_refused_stays_a_configuration_error() -> None:
    msg = "javax.net.ssl.SSLHandshakeException: PKIX path building failed calling https://api.bank.example/v2"
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.category == "configuration_error"


@pytest.mark.parametrize(
    "msg",
    [
        "org.apache.http.conn.ConnectionPoolTimeoutException: Timeout waiting for connection from pool "
        "(route: https://api.partner.example:443)",
        "reactor.netty.internal.shaded.reactor.pool.PoolAcquirePendingLimitException: Pending acquire queue has "
        "reached its maximum size of 1000 for http://api.partner.example:8080",
        "connection pool exhausted waiting for https://api.partner.example (max 50)",
    ],
)
def test_an_http_client_pool_drained_by_a_slow_upstream_blames_the_upstream(msg: str) -> None:
    ev = _caller_log(msg).set()
    [cause] = causes(network_failures(ev))
    assert cause.code == "upstream_pool_wait" and "api.partner.example" in cause.object
    assert not [f for f in database(ev) if f.code == "app_pool_exhausted"]
    assert investigate(ev).category == "dependency_failure"


def test_a_database_pool_stays_the_database_analyzers() -> None:
    msg = "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    ev = _caller_log(msg).set()
    assert [f.code for f in database(ev) if f.role == "cause"] == ["app_pool_exhausted"]
    assert not [f for f in network_failures(ev) if f.code == "upstream_pool_wait"]


def test_a_service_cluster_ip_is_named_by_its_service() -> None:
    b = _caller_log("rpc error: code = Unavailable desc = dial tcp 10.96.44.12:9090: connect: connection refused")
    b.raw(
        "k8s/Service",
        "Service/stock/inventory-grpc",
        {"metadata": {"name": "inventory-grpc", "namespace": "stock"}, "spec": {"clusterIP": "10.96.44.12"}},
    )
    [cause] = causes(network_failures(b.set()))
    assert "Service stock/inventory-grpc" in cause.object and "service:inventory-grpc" in cause.tags


@pytest.mark.parametrize(
    ("msg", "upstream"),
    [
        ("botocore.exceptions.ClientError: An error occurred (ServiceUnavailable) when calling the PutObject "
         "operation (reached max retries: 4): Service Unavailable", "PutObject"),
        ("software.amazon.awssdk.services.s3.model.S3Exception: We encountered an internal error. (Service: S3, "
         "Status Code: 500, Request ID: 8F3A)", "S3"),
        ("operation error DynamoDB: PutItem, https response error StatusCode: 500, RequestID: 9QX, api error "
         "InternalServerError: Internal server error", "DynamoDB"),
    ],
)  # fmt: skip
def test_a_cloud_api_failing_on_its_side_is_a_dependency(msg: str, upstream: str) -> None:
    ev = _caller_log(msg).set()
    [cause] = causes(network_failures(ev))
    assert cause.code == "upstream_5xx" and upstream in cause.object
    assert investigate(ev).category == "dependency_failure"


@pytest.mark.parametrize(
    ("msg", "upstream"),
    [
        ("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://api.partner.example/v1",
         "api.partner.example"),
        ("botocore.exceptions.ClientError: An error occurred (ThrottlingException) when calling the PutMetricData "
         "operation (reached max retries: 4): Rate exceeded", "PutMetricData"),
        ("ProvisionedThroughputExceededException: The level of configured provisioned throughput for the table was "
         "exceeded.", "rate-limited"),
    ],
)  # fmt: skip
def test_throttling_by_a_provider_is_our_quota_running_out(msg: str, upstream: str) -> None:
    ev = _caller_log(msg).set()
    [cause] = causes(network_failures(ev))
    assert cause.code == "rate_limited" and cause.category == "resource_exhaustion" and upstream in cause.object
    assert investigate(ev).category == "resource_exhaustion"


def test_kafka_broker_not_available_names_the_broker_not_the_node_word() -> None:
    msg = (
        "[Producer clientId=orders] Connection to node 1 (kafka-1.kafka.svc:9092) could not be established. "
        "Broker may not be available."
    )
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.code == "connection_refused" and "kafka-1.kafka.svc:9092" in cause.object


def test_a_documentation_link_is_not_the_upstream() -> None:
    msg = (
        "cURL error 28: Operation timed out after 5001 milliseconds (see https://curl.haxx.se/libcurl/c/"
        "libcurl-errors.html) for https://api.partner.example/v1"
    )
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert "api.partner.example" in cause.object and "curl.haxx.se" not in cause.object


def test_an_http_503_reason_phrase_is_a_5xx_not_a_grpc_unavailable() -> None:
    msg = "HttpServerErrorException$ServiceUnavailable: 503 Service Unavailable: while calling http://tax-svc:8080/t"
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.code == "upstream_5xx"


def test_istio_access_log_with_trailing_fields_reads_its_flags() -> None:
    line = (
        '[2025-01-01T10:00:00.000Z] "GET /v1/tax HTTP/1.1" 503 UH no_healthy_upstream - "-" 0 19 0 - "-" "curl" '
        '"req-1" "tax-svc.billing:8080" "-" outbound|8080||tax-svc.billing.svc.cluster.local - 10.0.0.1:8080 '
        "10.0.0.2:5000 - default"
    )
    b = Builder()
    b.log("Pod/shop/orders-api-7d9f8c6b5-x2k4p/istio-proxy", [(T0 + i, "info", line) for i in range(5)])
    [cause] = causes(network_failures(b.set()))
    # named by the upstream cluster the sidecar called (at an ingress gateway the authority is the public host)
    assert cause.code == "connection_refused" and "tax-svc.billing.svc.cluster.local" in cause.object


def test_a_unix_socket_upstream_is_named_by_its_socket_and_a_version_is_no_domain() -> None:
    msg = (
        "[error] 2211#2211: *9 upstream timed out (110: Connection timed out) while reading response header from "
        'upstream, client: 1.2.3.4, server: shop, request: "GET / HTTP/1.1", upstream: '
        '"fastcgi://unix:/run/php/php8.2-fpm.sock:", host: "shop"'
    )
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert "upstream:php8.2-fpm" in cause.tags


def test_a_php_fpm_pool_at_max_children_explains_nginx_timing_out_on_its_socket() -> None:
    b = Builder()
    nginx = (
        "[error] 2211#2211: *9 upstream timed out (110: Connection timed out) while reading response header from "
        'upstream, client: 1.2.3.4, server: shop, request: "GET / HTTP/1.1", upstream: '
        '"fastcgi://unix:/run/php/php8.2-fpm.sock:", host: "shop"'
    )
    b.log("nginx-error.log", [(T0 + 60 + i * 10, "error", nginx) for i in range(20)])
    fpm = "WARNING: [pool www] server reached pm.max_children setting (24), consider raising it"
    b.log("php8.2-fpm.log", [(T0 + i * 30, "warn", fpm) for i in range(10)])
    assert investigate(b.set()).category == "resource_exhaustion"


def test_kafka_broker_errors_in_a_client_blame_the_brokers() -> None:
    msg = (
        "WARN org.apache.kafka.clients.producer.internals.Sender - [Producer clientId=checkout-events] Got error "
        "produce response with correlation id 1 on topic-partition orders.events-3, retrying. "
        "Error: NOT_ENOUGH_REPLICAS"
    )
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.code == "broker_unavailable" and "upstream:kafka" in cause.tags


def test_an_sdk_namespace_names_the_cloud_service_and_a_more_info_link_is_no_upstream() -> None:
    msg = (
        "Microsoft.Azure.Cosmos.CosmosException : Response status code does not indicate success: "
        "ServiceUnavailable (503); Substatus: 20003; Reason: (Service is currently unavailable. More info: "
        "https://aka.ms/cosmosdb-tsg-service-unavailable)"
    )
    [cause] = causes(network_failures(_caller_log(msg).set()))
    assert cause.code == "upstream_5xx" and "Cosmos" in cause.object and "aka.ms" not in cause.object


def test_a_json_error_with_an_endpoint_field_names_the_search_domain() -> None:
    from diagnosis.formats.logs import record_fields

    obj = {
        "level": "error",
        "msg": "search failed",
        "endpoint": "https://vpc-catalog-os-7gk2x4mhb5p3q.eu-west-1.es.amazonaws.com",
        "error": "elastic: Error 503 (Service Unavailable): all shards failed",
    }
    _, level, msg = record_fields(obj, "")
    b = Builder()
    b.log("Pod/search/catalog-search-6c9d8b7f5-fx2ql", [(T0 + i * 10, level, msg) for i in range(5)])
    [cause] = causes(network_failures(b.set()))
    assert cause.code == "upstream_5xx" and "upstream:catalog-os" in cause.tags
