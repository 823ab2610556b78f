"""Limits without the API process: the tuning queue cap (deterministic, on SQLite and PostgreSQL), the rate
limiter's accounting and keys, and the JSON bounds every task input meets."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.db import Store
from core.errors import UserError
from core.jobs import claim_tuning_run, queue_tuning_run_capped, queued_tuning_runs_in
from core.jsonvalues import check_json_value, json_value_problem
from core.settings import Settings
from services.api.limits import RateLimits, caller_key


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Iterator[Store]:
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    yield s
    s.engine.dispose()


def test_the_tuning_queue_holds_at_its_cap_and_frees_as_runs_start(store: Store) -> None:
    with store.session() as s:
        cap = queued_tuning_runs_in(s) + 2  # the PostgreSQL database is shared by this module's tests
    first = queue_tuning_run_capped(store, "api", cap)
    second = queue_tuning_run_capped(store, "api", cap)
    assert first is not None and second is not None
    assert queue_tuning_run_capped(store, "api", cap) is None
    assert claim_tuning_run(store, first.id)  # the runner takes one: a place is free
    assert queue_tuning_run_capped(store, "api", cap) is not None
    assert queue_tuning_run_capped(store, "api", cap) is None


def test_concurrent_callers_never_overfill_the_tuning_queue(store: Store) -> None:
    with store.session() as s:
        waiting = queued_tuning_runs_in(s)  # the PostgreSQL database is shared by this module's tests
    results: list[object] = []
    lock = threading.Lock()

    def take() -> None:
        row = queue_tuning_run_capped(store, "api", waiting + 3)
        with lock:
            results.append(row)

    threads = [threading.Thread(target=take) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 3


def _limits(**kw: str) -> RateLimits:
    return RateLimits(Settings(rate_limit_storage="memory", **kw))


def test_the_limiter_allows_the_limit_then_refuses_with_a_retry_after() -> None:
    limits = _limits(rate_limit_writes="5/minute", rate_limit_reads="100/minute")

    async def burst() -> list[object]:
        return [await limits.hit("write", "k1") for _ in range(8)]

    verdicts = asyncio.run(burst())
    assert verdicts[:5] == [None] * 5
    refused = verdicts[5:]
    assert all(r is not None and r.kind == "write" and 1 <= r.retry_after_s <= 60 for r in refused)  # type: ignore[attr-defined]
    assert asyncio.run(limits.hit("read", "k1")) is None  # reads count apart
    assert asyncio.run(limits.hit("write", "k2")) is None  # so does another key


def test_the_limiter_fails_open_when_its_storage_is_away() -> None:
    limits = RateLimits(Settings(redis_url="redis://127.0.0.1:1/0", rate_limit_writes="1/minute"))
    assert asyncio.run(limits.hit("write", "k")) is None
    assert asyncio.run(limits.hit("write", "k")) is None


def test_caller_keys_prefer_the_principal_then_a_credential_digest_then_the_address() -> None:
    class P:
        id = "key-7"

    secret = b"Bearer s3cret-value"
    with_principal = {"state": {"principal": P()}, "headers": [(b"authorization", secret)], "client": ("1.2.3.4", 1)}
    assert caller_key(with_principal) == "principal:key-7"
    by_credential = caller_key({"headers": [(b"authorization", secret)], "client": ("1.2.3.4", 1)})
    assert by_credential.startswith("credential:") and "s3cret" not in by_credential
    assert caller_key({"headers": [], "client": ("1.2.3.4", 1)}) == "address:1.2.3.4"


def test_requests_are_classed_as_reads_or_writes() -> None:
    assert [RateLimits.kind_of(m) for m in ("GET", "HEAD", "POST", "PUT", "DELETE")] == [
        "read", "read", "write", "write", "write"
    ]  # fmt: skip


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [2**63, -(2**63) - 1, {"a": [1, {"b": 2**100}]}, float("nan"), {"x": float("inf")}, _nested(40)],
)
def test_values_a_lower_layer_cannot_hold_are_found(value: object) -> None:
    assert json_value_problem(value) is not None
    with pytest.raises(UserError):
        check_json_value(value)


def test_ordinary_values_pass() -> None:
    assert json_value_problem({"n": 2**63 - 1, "m": -(2**63), "f": 1.5, "s": "x", "l": [True, None]}) is None


def test_the_store_refuses_an_oversized_integer_whoever_submits(store: Store) -> None:
    with pytest.raises(UserError, match="64-bit"):
        store.create_task("goal", inputs={"n": 2**64})
