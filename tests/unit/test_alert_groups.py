"""Alert groups on SQLite and PostgreSQL: one investigation per group and tenant while it fires, also when
notifications of one group arrive together; resolution; firing again opens a new one."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator

import pytest

from core import alert_groups
from core.db import Store
from core.settings import Settings


@pytest.fixture
def store(database_url: str, tmp_path) -> Iterator[Store]:  # type: ignore[no-untyped-def]
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    yield s
    s.engine.dispose()


def new_key() -> str:
    """A group key of this test alone (the PostgreSQL database is shared by the module's tests)."""
    return '{}:{alertname="' + uuid.uuid4().hex + '"}'


class Opener:
    """Counts the investigations opened (stands for the task the route creates)."""

    def __init__(self) -> None:
        self.key = new_key()
        self.ids = itertools.count(1)
        self.opened: list[str] = []
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            task_id = f"task-{next(self.ids)}"
            self.opened.append(task_id)
            return task_id


def notify(store: Store, opener: Opener, status: str = "firing", tenant: str = "t1") -> alert_groups.Notified:
    return alert_groups.notify(
        store,
        tenant=tenant,
        group_key=opener.key,
        status=status,
        receiver="opsgraph",
        labels={"a": "1"},
        open_investigation=opener,
    )


def test_repeat_resolve_and_refire(store: Store) -> None:
    opener = Opener()
    first = notify(store, opener)
    assert first.opened and first.group.task_id == "task-1" and first.group.notifications == 1
    repeat = notify(store, opener)
    assert not repeat.opened and repeat.group.task_id == "task-1" and repeat.group.notifications == 2
    resolved = notify(store, opener, "resolved")
    assert not resolved.opened and resolved.group.status == "resolved" and resolved.group.resolved_at
    again = notify(store, opener)
    assert again.opened and again.group.task_id == "task-2" and again.group.investigations == 2
    assert again.group.resolved_at is None
    # the same group key of another tenant is another group
    other = notify(store, opener, tenant="t2")
    assert other.opened and other.group.id != again.group.id
    assert opener.opened == ["task-1", "task-2", "task-3"]
    assert other.group.id in {g.id for g in alert_groups.list_groups(store, "t2")}
    assert other.group.id not in {g.id for g in alert_groups.list_groups(store, "t1")}


def test_a_resolved_notification_first_opens_nothing(store: Store) -> None:
    opener = Opener()
    assert not notify(store, opener, "resolved").opened
    assert notify(store, opener).opened and opener.opened == ["task-1"]


def test_notifications_arriving_together_open_one_investigation(store: Store) -> None:
    opener = Opener()
    barrier = threading.Barrier(6)
    results: list[alert_groups.Notified] = []

    def send() -> None:
        barrier.wait()
        results.append(notify(store, opener))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(opener.opened) == 1 and sum(r.opened for r in results) == 1
    assert alert_groups.get_group(store, "t1", opener.key).notifications == 6  # type: ignore[union-attr]


def test_an_investigation_that_fails_to_open_leaves_no_claim_behind(store: Store) -> None:
    """A failed task creation must not leave a firing group without an investigation: the retry opens it."""
    opener = Opener()

    def broken() -> str:
        raise RuntimeError("queue down")

    for status_before in (None, "resolved"):
        if status_before:
            assert notify(store, opener).opened
            notify(store, opener, "resolved")
        with pytest.raises(RuntimeError):
            alert_groups.notify(
                store,
                tenant="t1",
                group_key=opener.key,
                status="firing",
                receiver="opsgraph",
                labels={},
                open_investigation=broken,
            )
        retry = notify(store, opener)
        assert retry.opened and retry.group.task_id == opener.opened[-1] and retry.group.status == "firing"
        opener.key = new_key()
