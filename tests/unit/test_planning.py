from __future__ import annotations

from datetime import datetime

import pytest

from agents.planner import OfflinePlanner, instantiate
from agents.slots import SlotError, fill_slots
from agents.validation import validate_plan
from core.settings import Settings
from memory.playbooks import PlaybookLibrary, load_playbooks
from tools import load_tool_modules

CATALOG = load_tool_modules(Settings().tool_modules)  # as the service loads them

LIB = PlaybookLibrary.default()


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(var_dir=tmp_path)


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("check the health of this machine and of http://127.0.0.1:8000/healthz", "host-health"),
        ("why is checkout slow since 14:00", "slow-service"),
        ("nightly capacity report", "capacity-report"),
        ("probe these endpoints: https://example.org and https://example.com/status", "endpoint-health"),
        ("search the logs for errors in /var/log/nginx", "log-errors"),
        ("redis evictions?", "redis-health"),
        ("are there long queries or locks in postgres", "postgres-health"),
        ("is the opsgraph queue backlog growing, are workers alive", "opsgraph-self"),
        ("hello", "triage"),
    ],
)
def test_the_best_playbook_is_chosen(request_text: str, expected: str) -> None:
    assert LIB.choose(request_text)[0].name == expected


def test_there_are_at_least_six_useful_playbooks_and_one_fallback() -> None:
    books = load_playbooks()
    assert len([b for b in books if not b.fallback]) >= 6
    assert sum(b.fallback for b in books) == 1


def test_every_playbook_instantiates_to_a_valid_plan(settings: Settings) -> None:
    text = "why is checkout-api slow since 14:00, see http://127.0.0.1:9/x and /var/log/app, is nginx running"
    for book in load_playbooks():
        slots = fill_slots(book, text, {})
        plan = instantiate(book, slots, text, CATALOG, settings)
        assert plan.nodes, book.name
        validate_plan(plan, CATALOG, settings)


def test_slots_come_from_the_text_and_inputs_win() -> None:
    book = LIB.by_name["slow-service"]
    now = datetime(2026, 11, 22, 15, 30)
    slots = fill_slots(book, "why is checkout-api slow since 14:00 on https://shop.example/api", {}, now)
    assert slots["service"] == "checkout-api"
    assert slots["window_minutes"] == 90
    assert slots["urls"] == ["https://shop.example/api"]
    assert slots["log_path"] == "/var/log"
    slots = fill_slots(
        book, "why is checkout slow in the last 2 hours", {"log_path": "/srv/logs", "urls": "http://a/"}, now
    )
    assert slots["window_minutes"] == 120
    assert slots["service"] == "checkout"
    assert (slots["log_path"], slots["urls"]) == ("/srv/logs", ["http://a/"])
    # a clock time later than now means yesterday
    assert fill_slots(book, "slow since 16:00", {}, now)["window_minutes"] == 23.5 * 60


def test_required_slots_fall_through_to_the_next_playbook(settings: Settings) -> None:
    with pytest.raises(SlotError):
        fill_slots(LIB.by_name["endpoint-health"], "probe the endpoints", {})
    outcome = OfflinePlanner(LIB, CATALOG, settings).plan("probe the endpoints", {})
    assert outcome.plan.playbook != "endpoint-health"
    assert any("needs urls" in n for n in outcome.notes)


def test_foreach_fans_out_and_dependencies_follow(settings: Settings) -> None:
    text = "check the health of this host and http://127.0.0.1:1/a and http://127.0.0.1:1/b"
    plan = OfflinePlanner(LIB, CATALOG, settings).plan(text, {}).plan
    ids = {n.id: n for n in plan.nodes}
    assert {"probe-1", "probe-2"} <= set(ids)
    assert ids["probe-2"].args == {"url": "http://127.0.0.1:1/b"}
    assert ids["cpu_spikes"].depends_on == ["metrics"]


def test_nodes_whose_tool_is_unavailable_are_left_out(settings: Settings) -> None:
    plan = OfflinePlanner(LIB, CATALOG, settings).plan("why is checkout slow", {}).plan
    assert "postgres" not in {n.id for n in plan.nodes}  # no DSN configured
    with_dsn = Settings(var_dir=settings.var_dir, postgres_dsns=["postgresql://postgres@127.0.0.1:5432/test"])
    plan = OfflinePlanner(LIB, CATALOG, with_dsn).plan("why is checkout slow", {}).plan
    assert "postgres" in {n.id for n in plan.nodes}


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("check the health of this machine and of http://127.0.0.1:8000/healthz", "host-health"),
        ("why is checkout slow since 14:00", "slow-service"),
        ("nightly capacity report", "capacity-report"),
        ("is redis ok", "redis-health"),
        # no keyword in common: only meaning can choose these
        ("how much headroom do we have before we run out of room", "capacity-report"),
        ("are our web pages answering", "endpoint-health"),
        ("any stack traces in the app output lately", "log-errors"),
        ("hello", "triage"),
    ],
)
def test_semantic_choice_finds_playbooks_by_meaning(embedder, request_text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    library = PlaybookLibrary.default(embedder)
    assert library.choose(request_text)[0].name == expected
    if not any(slot.required for slot in library.by_name[expected].slots.values()):
        # the planner plans with the playbook the cache classified the request by
        plan = OfflinePlanner(library, CATALOG, Settings()).plan(request_text, {}).plan
        assert plan.playbook == expected
