"""One conformance suite every database backend passes: SQLite (the default) and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from core.db import Store
from core.settings import Settings
from core.types import NodeStatus, Plan, TaskStatus


@pytest.fixture
def store(database_url: str, tmp_path) -> Iterator[Store]:
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    yield s
    s.engine.dispose()


def test_tasks_move_forward_only(store: Store) -> None:
    t = store.create_task("goal", inputs={"urls": ["http://a"]}, priority=2)
    assert store.get_task(t.id).status == "queued"
    assert store.set_task_status(t.id, TaskStatus.RUNNING)
    assert store.set_task_status(t.id, TaskStatus.SUCCEEDED)
    assert not store.set_task_status(t.id, TaskStatus.FAILED)  # an ended task stays ended
    row = store.get_task(t.id)
    assert row.status == "succeeded" and row.finished_at is not None and row.inputs == {"urls": ["http://a"]}
    assert [t.id for t in store.unfinished_tasks()] == []


def test_plans_are_versioned(store: Store) -> None:
    t = store.create_task("goal")
    p = Plan(goal="goal", nodes=[{"id": "a", "tool": "redis_info"}])
    assert store.save_plan(t.id, p) == 1
    assert store.save_plan(t.id, p.model_copy(update={"source": "llm"})) == 2
    assert store.latest_plan(t.id).source == "llm"


def test_an_attempt_finishes_once_and_deliveries_are_counted(store: Store) -> None:
    t = store.create_task("goal")
    run = store.create_node_run(t.id, "a", tool="redis_info", args={}, pool="cpu", queue="cpu")
    row, starts = store.start_node_run(run.id, "w1@h")  # a fast worker starts it before the send is recorded
    assert row is not None
    store.mark_nodes_queued([run.id], row.started_at - 0.25)
    assert store.get_node_run(run.id).status == "running"
    assert store.get_node_run(run.id).queue_wait_s == pytest.approx(0.25)
    assert row is not None and row.deliveries == 1 and starts == 1
    row, starts = store.start_node_run(run.id, "w2@h")  # redelivered after its worker died
    assert row.worker == "w2@h" and starts == 2
    assert store.finish_node_run(run.id, NodeStatus.SUCCEEDED, result={"status": "success"})
    assert not store.finish_node_run(run.id, NodeStatus.FAILED, error="late duplicate")
    assert store.start_node_run(run.id, "w3@h") == (None, 0)
    assert store.get_node_run(run.id).status == "succeeded"
    second = store.create_node_run(t.id, "a", tool="redis_info", args={}, pool="cpu", queue="cpu")
    assert second.attempt == 2
    # the node is decided by the attempt that succeeded, whatever was started after it (a hedge)
    assert store.latest_attempts(t.id)["a"].id == run.id
    assert store.start_node_run(second.id, "w1@h")[0] is not None
    assert store.finish_node_run(second.id, NodeStatus.FAILED, error="lost the race")
    assert store.latest_attempts(t.id)["a"].id == run.id


def test_concurrent_event_appends_get_unique_gapless_sequence_numbers(store: Store) -> None:
    t = store.create_task("goal")  # writes event 1

    def writer(n: int) -> None:
        for i in range(15):
            store.append_event(t.id, "log", {"writer": n, "i": i})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    events = store.events_after(t.id, 0)
    assert [e.seq for e in events] == list(range(1, 62))
    assert [e.seq for e in store.events_after(t.id, 59)] == [60, 61]
