"""Routing analyzer: a path's requests moved to another backend that fails them, read from each proxy's access log,
and the Ingress rule behind the move."""

from __future__ import annotations

import time
from typing import Any

from diagnosis.analyzers.routing import routing_changes
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes


def _clf(ts: float) -> str:
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(ts))


def _nginx(ts: float, path: str, status: int, backend: str) -> str:
    return (
        f'10.0.0.1 - - [{_clf(ts)}] "GET {path} HTTP/1.1" {status} 512 "-" "curl/8" 80 0.010 [{backend}] [] '
        f"10.4.0.9:8080 512 0.010 {status} 0123456789abcdef"
    )


def _requests(line: Any, switch_at: int, n: int = 40) -> list[tuple[float, str | None, str]]:
    """Requests alternating between /billing/* and the home page; /billing moves to the catch-all at `switch_at`."""
    out: list[tuple[float, str | None, str]] = []
    for i in range(n):
        ts = T0 + i * 30
        moved = i >= switch_at
        out.append((ts, None, line(ts, "/billing/invoices", 404 if moved else 200, moved)))
        out.append((ts + 1, None, line(ts + 1, "/", 200, True)))
    return out


def _ingress(path: str, pathtype: str = "Prefix", regex: bool = False) -> dict[str, Any]:
    paths = [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web-ui", "port": {"number": 80}}}},
        {"path": path, "pathType": pathtype, "backend": {"service": {"name": "billing-api", "port": {"number": 80}}}},
    ]
    annotations = {"nginx.ingress.kubernetes.io/use-regex": "true"} if regex else {}
    return {
        "metadata": {"name": "portal", "namespace": "shop", "annotations": annotations},
        "spec": {"rules": [{"host": "portal.example", "http": {"paths": paths}}]},
    }


def _nginx_line(ts: float, path: str, status: int, moved: bool) -> str:
    return _nginx(ts, path, status, "shop-web-ui-80" if moved or path == "/" else "shop-billing-api-80")


def test_ingress_nginx_path_moved_to_the_catch_all_names_the_ingress_and_its_wrong_path() -> None:
    b = Builder()
    b.log("Pod/ingress-nginx/ingress-nginx-controller-7d9f8c6b5-x2k4p", _requests(_nginx_line, 20))
    b.raw("k8s/Ingress", "Ingress/shop/portal", _ingress("/biling"))
    b.event("Ingress", "shop", "portal", "Sync", "Scheduled for sync", T0 + 20 * 30 - 5, type_="Normal")
    ev = b.set()
    found = routing_changes(ev)
    [cause] = causes(found)
    assert cause.code == "route_changed" and cause.category == "configuration_error"
    assert "/biling" in cause.mechanism and "shop/portal" in cause.object
    assert "billing-api" in cause.mechanism and "web-ui" in cause.mechanism
    assert "changed at" in cause.mechanism and cause.score >= 0.85
    assert cause.ts == T0 + 20 * 30
    assert_refs_real(ev, found)


def test_regex_ingress_path_is_matched_as_nginx_matches_it() -> None:
    b = Builder()
    b.log("Pod/ingress-nginx/ingress-nginx-controller-7d9f8c6b5-x2k4p", _requests(_nginx_line, 20))
    b.raw("k8s/Ingress", "Ingress/shop/portal", _ingress("/bllling(/|$)(.*)", "ImplementationSpecific", regex=True))
    [cause] = causes(routing_changes(b.set()))
    assert "/bllling(/|$)(.*)" in cause.mechanism


def test_without_an_ingress_the_move_is_still_named_by_path_and_backends() -> None:
    b = Builder()
    b.log("Pod/ingress-nginx/ingress-nginx-controller-7d9f8c6b5-x2k4p", _requests(_nginx_line, 20))
    [cause] = causes(routing_changes(b.set()))
    assert "/billing" in cause.mechanism and "shop-billing-api" in cause.mechanism
    assert cause.score == 0.7


def test_a_move_that_keeps_answering_is_a_migration_not_a_fault() -> None:
    b = Builder()

    def ok(ts: float, path: str, status: int, moved: bool) -> str:
        return _nginx_line(ts, path, 200, moved)

    b.log("Pod/ingress-nginx/ingress-nginx-controller-7d9f8c6b5-x2k4p", _requests(ok, 20))
    assert routing_changes(b.set()) == []


def test_envoy_no_route_flag_after_a_route_change() -> None:
    b = Builder()

    def envoy(ts: float, path: str, status: int, moved: bool) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))
        if moved and path != "/":
            return (
                f'[{stamp}] "GET {path} HTTP/1.1" 404 NR route_not_found - "-" 0 0 0 - "10.0.0.1" "curl/8" '
                f'"req-1" "portal.example" "-" - - 10.4.0.2:8080 10.0.0.1:5000 - -'
            )
        svc = "web-ui" if path == "/" else "billing-api"
        return (
            f'[{stamp}] "GET {path} HTTP/1.1" {status} - via_upstream - "-" 0 512 10 9 "10.0.0.1" "curl/8" '
            f'"req-1" "portal.example" "10.4.1.7:8080" outbound|80||{svc}.shop.svc.cluster.local 10.4.0.2:4000 '
            "10.4.0.2:8080 10.0.0.1:5000 - default"
        )

    b.log("Pod/istio-system/istio-ingressgateway-6c7b9d8f5-9mqz2", _requests(envoy, 20))
    [cause] = causes(routing_changes(b.set()))
    assert "billing-api" in cause.mechanism and "default backend" in cause.mechanism


def test_haproxy_backend_switch_with_5xx() -> None:
    b = Builder()

    def haproxy(ts: float, path: str, status: int, moved: bool) -> str:
        be = "be_web/web-01" if path == "/" else ("be_legacy/<NOSRV>" if moved else "be_billing/bill-02")
        code = 503 if moved and path != "/" else 200
        return (
            f"lb-01 haproxy[1902]: 10.1.2.84:47756 [{_clf(ts)[:-6]}.707] fe_https~ {be} 0/0/1/178/179 {code} 5622 "
            f'- - ---- 383/379/28/5/0 0/0 "GET {path} HTTP/1.1"'
        )

    b.log("haproxy.log", _requests(haproxy, 20))
    [cause] = causes(routing_changes(b.set()))
    assert "be_billing" in cause.mechanism and "default backend" in cause.mechanism


def test_alb_target_group_switch() -> None:
    b = Builder()

    def alb(ts: float, path: str, status: int, moved: bool) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(ts))
        tg = "web-ui-tg" if moved or path == "/" else "billing-tg"
        arn = f"arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/{tg}/73e2d6bc24d8a067"
        return (
            f"https {stamp} app/portal-alb/50dc6c495c0c9188 192.0.2.1:46532 10.0.0.1:80 0.000 0.012 0.000 "
            f'{status} {status} 34 366 "GET https://portal.example:443{path} HTTP/1.1" "curl/8" '
            f'ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 {arn} "Root=1-58337262" "portal.example" "-" 0 {stamp} '
            '"forward" "-" "-" "10.0.0.1:80" "200" "-" "-"'
        )

    b.log("alb/portal.log", _requests(alb, 20))
    [cause] = causes(routing_changes(b.set()))
    assert "billing-tg" in cause.mechanism and "web-ui-tg" in cause.mechanism


def test_a_blip_of_a_few_requests_is_no_move() -> None:
    b = Builder()
    b.log("Pod/ingress-nginx/ingress-nginx-controller-7d9f8c6b5-x2k4p", _requests(_nginx_line, 37))
    assert routing_changes(b.set()) == []


def _vs(timeout: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "reports-api", "namespace": "reports"},
        "spec": {
            "hosts": ["reports.example"],
            "http": [
                {
                    "match": [{"uri": {"prefix": "/v1/reports"}}],
                    "timeout": timeout,
                    "route": [{"destination": {"host": "reports-api.reports.svc.cluster.local"}}],
                }
            ],
        },
    }


def _ut(ts: float, dur: int) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))
    return (
        f'[{stamp}] "GET /v1/reports/monthly HTTP/2" 504 UT response_timeout - "-" 0 24 {dur} - "198.51.100.15" '
        '"curl/8" "req-1" "reports.example" "10.8.3.162:8080" outbound|8080||reports-api.reports.svc.cluster.local '
        "10.8.0.12:51834 10.8.0.12:8443 198.51.100.9:41220 reports.example -"
    )


def test_gateway_timeouts_at_the_routes_configured_timeout_are_the_setting() -> None:
    from diagnosis.analyzers.routing import route_timeouts
    from diagnosis.investigate import investigate

    b = Builder()
    b.raw("k8s/VirtualService", "VirtualService/reports/reports-api", _vs("1s"))
    b.log(
        "Pod/istio-ingress/istio-ingressgateway-6c8d9f7b5-x2lqm",
        [(T0 + i, "info", _ut(T0 + i, 1000)) for i in range(8)],
    )
    ev = b.set()
    found = route_timeouts(ev)
    [cause] = causes(found)
    assert cause.code == "route_timeout_too_short" and "VirtualService/reports/reports-api" in cause.object
    assert_refs_real(ev, found)
    d = investigate(ev)
    assert d.category == "configuration_error"


def test_timeouts_of_every_length_are_a_slow_upstream_not_the_route() -> None:
    from diagnosis.analyzers.routing import route_timeouts

    b = Builder()
    b.raw("k8s/VirtualService", "VirtualService/reports/reports-api", _vs("30s"))
    b.log(
        "Pod/istio-ingress/istio-ingressgateway-6c8d9f7b5-x2lqm",
        [(T0 + i, "info", _ut(T0 + i, 1000 + 700 * i)) for i in range(8)],
    )
    assert route_timeouts(b.set()) == []
