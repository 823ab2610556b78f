"""The versioned policy document: validation, history, rollback, and readers that see a new version."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from core.db import PolicyRow, Store, TelemetryRow
from core.policies import PolicyInvalid, PolicyStore, parse_policy
from core.policy import PolicyDocument
from core.settings import Settings
from core.telemetry import Telemetry


@pytest.fixture
def store(database_url: str, tmp_path) -> Iterator[Store]:
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    with s.session() as sess:  # the PostgreSQL database lives for the module
        sess.execute(sa.delete(PolicyRow))
    yield s
    s.engine.dispose()


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"scheduling": {"release_order": "lifo"}}, "scheduling.release_order"),
        ({"scheduling": {"hedge_factor": 0.5}}, "scheduling.hedge_factor"),
        ({"scheduling": {"retries": "many"}}, "scheduling.retries"),
        ({"scheduling": {"no_such_knob": 1}}, "scheduling.no_such_knob"),
        ({"serving": {"cache": {"categories": {"health": {"threshold": 2}}}}}, "serving.cache.categories.health"),
        ({"servng": {}}, "servng"),
    ],
)
def test_a_bad_document_is_refused_with_every_reason_and_its_path(body: dict, where: str) -> None:
    with pytest.raises(PolicyInvalid) as info:
        parse_policy(body)
    assert any(r.startswith(where) for r in info.value.reasons), info.value.reasons


def test_version_one_comes_from_settings(store: Store, tmp_path) -> None:
    settings = Settings(var_dir=tmp_path, scheduling_policy={"release_order": "fifo"})
    policies = PolicyStore(store, settings)
    version, doc = policies.current_version()
    assert version == 1 and doc.scheduling.release_order == "fifo"
    assert policies.get(1).author == "settings"


def test_changes_are_versions_with_author_reason_and_window_and_rollback_restores_a_body(
    store: Store, tmp_path
) -> None:
    tel = Telemetry(store)
    policies = PolicyStore(store, Settings(var_dir=tmp_path), telemetry=tel)
    policies.ensure()
    fifo = PolicyDocument.model_validate({"scheduling": {"release_order": "fifo"}})
    v2 = policies.put(fifo, author="person", reason="try fifo", actor="ana")
    v3 = policies.put(
        {"scheduling": {"hedging": False}}, author="tuner", reason="no stragglers", window={"start": 1, "end": 2}
    )
    assert (v2.version, v3.version) == (2, 3)
    assert policies.current().scheduling.hedging is False
    back = policies.rollback(2, author="person", reason="hedging was fine")
    assert back.version == 4 and back.rollback_of == 2
    assert policies.current().model_dump() == fifo.model_dump()
    history = [(r.version, r.author, r.reason) for r in policies.history()]
    assert history == [
        (4, "person", "hedging was fine"),
        (3, "tuner", "no stragglers"),
        (2, "person", "try fifo"),
        (1, "settings", "initial policy from settings"),
    ]
    assert policies.get(3).window == {"start": 1, "end": 2}
    with store.session() as s:  # every change is telemetry too
        kinds = s.scalars(sa.select(TelemetryRow.outcome).where(TelemetryRow.kind == "policy")).all()
    assert sorted(kinds) == ["change", "change", "change", "rollback"]
    with pytest.raises(PolicyInvalid):
        policies.put({"scheduling": {"aging": -1}}, author="person", reason="bad")
    assert policies.latest_version() == 4  # nothing written


def test_a_reader_in_another_process_sees_a_new_version_within_its_refresh(store: Store, tmp_path) -> None:
    settings = Settings(var_dir=tmp_path)
    reader = PolicyStore(store, settings, refresh_s=0.2)
    writer = PolicyStore(Store(store.engine), settings)
    assert reader.current().scheduling.release_order == "srpt_aging"
    writer.put({"scheduling": {"release_order": "srpt"}}, author="person", reason="shorter first")
    deadline = time.monotonic() + 5
    while reader.current().scheduling.release_order != "srpt":
        assert time.monotonic() < deadline, "the reader never saw version 2"
        time.sleep(0.05)
    assert reader.current_version()[0] == 2
