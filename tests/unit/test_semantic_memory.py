from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.db import Store
from core.settings import Settings
from memory._tables import FactRow, init_memory_tables
from memory.semantic import SemanticMemory


@pytest.fixture
def memory(database_url: str, tmp_path: Path, embedder) -> Iterator[SemanticMemory]:  # type: ignore[no-untyped-def]
    store = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    yield SemanticMemory(store, embedder)
    init_memory_tables(store.engine)
    with store.session() as s:  # the PostgreSQL database is shared by the module's tests
        s.execute(sa.delete(FactRow))
    store.engine.dispose()


def test_a_contradicting_fact_closes_the_old_one_and_keeps_history(memory: SemanticMemory) -> None:
    first, closed = memory.assert_fact("t", "orders-api", "depends on", "postgres-main", source="person:ana")
    assert closed == [] and first.current and first.predicate == "depends_on"
    again, closed = memory.assert_fact("t", "orders-api", "depends_on", "postgres-main", source="task:x")
    assert again.id == first.id and closed == []  # asserting what holds changes nothing
    second, closed = memory.assert_fact("t", "orders-api", "depends_on", "postgres-replica", source="person:bo")
    assert [c.id for c in closed] == [first.id]
    history = memory.history("t", "orders-api")
    assert [(f.object, f.current) for f in history] == [("postgres-main", False), ("postgres-replica", True)]
    assert history[0].superseded_by == second.id and history[0].valid_to is not None
    _other, closed = memory.assert_fact("t", "orders-api", "owned_by", "team-checkout", source="person:ana")
    assert closed == []  # another predicate does not contradict


def test_facts_about_the_entities_a_request_names(memory: SemanticMemory) -> None:
    memory.assert_fact("t", "orders-api", "depends_on", "postgres-main", source="person:ana")
    memory.assert_fact("t", "payments-api", "depends_on", "redis", source="person:ana")
    memory.assert_fact("u", "orders-api", "depends_on", "mysql-1", source="person:zed")
    about = memory.about("t", "why is orders-api slow since 14:00")
    assert [f.text() for f in about] == ["orders-api depends on postgres-main"]  # tenant u's fact stays out
    assert [f.subject for f in memory.about("t", "is redis ok")] == ["payments-api"]
    found = memory.search("t", "what does the orders service need", k=1)
    assert found[0][0].subject == "orders-api"


def test_facts_past_their_stated_validity_are_closed(memory: SemanticMemory) -> None:
    memory.assert_fact(
        "t", "db-01.internal", "in_maintenance", "true", source="person:ana", valid_until=time.time() - 1
    )
    assert memory.expire() == 1
    assert memory.about("t", "check db-01.internal") == []
    assert memory.history("t", "db-01.internal")[0].valid_to is not None
