"""Canonical entities: each normalisation, the change intent, and what makes two requests the same."""

from __future__ import annotations

import pytest

from memory.entities import change_intent, extract_entities, same_entities


def ents(text: str) -> dict[str, frozenset[str]]:
    return extract_entities(text)


def same(a: str, b: str) -> bool:
    return same_entities(ents(a), ents(b))[0]


@pytest.mark.parametrize(
    ("text", "times"),
    [
        ("slow since 14:00", {"14:00"}),
        ("slow since 2pm", {"14:00"}),
        ("slow since 2 p.m.", {"14:00"}),
        ("slow since 2:30 pm", {"14:30"}),
        ("slow since half past two", {"02:30|14:30"}),
        ("slow after two", {"02:00|14:00"}),  # am or pm not said: both
        ("slow since noon", {"12:00"}),
        ("slow since midnight", {"00:00"}),
        ("slow since 1400", {"14:00"}),
        ("slow since 14:00 UTC", {"14:00@utc"}),
        ("slow since 16:00 CEST", {"14:00@utc"}),  # zones compared in UTC
    ],
)
def test_clock_times(text: str, times: set[str]) -> None:
    assert ents(text)["times"] == times


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("errors in the last 5 minutes", "errors in the last 5m"),
        ("errors in the last hour", "errors over the past 60 minutes"),
        ("errors in the last hour", "errors in the last 1h"),
        ("errors in the past half hour", "errors in the last 30 mins"),
        ("errors in the last quarter hour", "errors in the last 15 minutes"),
        ("errors over the last three days", "errors over the last 72 hours"),
        ("latency over 500ms", "latency over 0.5s"),
        ("disk above 80%", "disk above 80 percent"),
        ("memory limit 2GB", "memory limit 2048 MiB"),
        ("top 5 queries", "top five queries"),
    ],
)
def test_windows_durations_and_numbers_with_units(a: str, b: str) -> None:
    assert same(a, b), (ents(a), ents(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("why the 502s on orders-api", "why bad gateway errors on orders-api"),
        ("504 errors on the gateway", "gateway timeouts on the gateway"),
        ("orders-api returning 503", "orders-api service unavailable"),
        ("too many requests from profile-api", "profile-api answers 429"),
    ],
)
def test_http_codes_and_their_names(a: str, b: str) -> None:
    assert same(a, b), (ents(a), ents(b))


def test_environments_hosts_and_addresses() -> None:
    assert ents("is redis ok in prod")["environments"] == {"prod"}
    assert same("is redis ok in prod", "is the production redis healthy")
    assert not same("is redis ok in prod", "is redis ok in staging")
    assert same("check web-01", "check web1") and not same("check web-1", "check web-11")
    assert ents("check 10.0.3.17:6379")["hosts"] == {"10.0.3.17:6379"}
    assert not same("is 10.0.0.5:6379 up", "is 10.0.0.6:6379 up")
    assert "times" not in ents("is 192.168.10.5:6379 reachable")  # an address holds no clock


def test_service_names_with_or_without_suffix_or_namespace() -> None:
    assert ents("why is checkout-api slow")["names"] == {"checkout"}
    assert same("why is checkout-api slow", "why is the checkout service slow")
    assert same("errors of shop/checkout", "errors of checkout in namespace shop")
    assert same("errors of checkout.shop.svc.cluster.local", "errors of shop/checkout-api")
    assert not same("errors of shop/checkout", "errors of eu/checkout")
    assert not same("is checkout up", "is the checkout worker up")  # a component is another service
    assert not same("why is checkout slow", "why is payments slow")  # plain words can be services too
    assert same("is shopfront healthy", "is storefront healthy") is False
    assert same_entities(
        extract_entities("is shopfront healthy", {"shopfront": "storefront"}), ents("is storefront healthy")
    )[0]


@pytest.mark.parametrize(
    ("text", "verb"),
    [
        ("restart checkout-api", "restart"),
        ("please restart the checkout api", "restart"),
        ("can you roll back the payments deploy", "rollback"),
        ("scale orders-api to 5 replicas", "scale"),
        ("check the health and then restart nginx", "restart"),
        ("silence the disk alerts on web-2", "silence"),
        ("kill pid 4711", "kill"),
        ("why did checkout-api restart", None),
        ("how many restarts did orders have today", None),
        ("why does cart-api keep restarting", None),
        ("errors since the start of the day", None),
        ("when was payments deployed", None),
        ("is checkout healthy", None),
    ],
)
def test_change_intent_is_what_is_asked_for_not_asked_about(text: str, verb: str | None) -> None:
    assert change_intent(text) == verb


def test_change_requests_are_never_the_same_request() -> None:
    assert not same("restart checkout-api", "please restart checkout-api")
    assert not same("is checkout-api healthy", "restart checkout-api")
