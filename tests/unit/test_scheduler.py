from __future__ import annotations

import pytest

from core.errors import UserError
from core.settings import Settings
from services.scheduler import beat_schedule
from workers.celery_app import SCHEDULED_TASK


def test_schedules_become_beat_entries_on_the_cpu_queue(tmp_path) -> None:
    settings = Settings(
        var_dir=tmp_path,
        schedules=[
            {"name": "edge", "cron": "*/5 * * * *", "goal": "check endpoints", "inputs": {"urls": ["http://a/"]}}
        ],
    )
    entry = beat_schedule(settings)["edge"]
    assert entry["task"] == SCHEDULED_TASK
    assert entry["args"] == ["edge", "check endpoints", {"urls": ["http://a/"]}]
    assert entry["options"] == {"queue": "cpu"}
    assert entry["schedule"].minute == set(range(0, 60, 5))


@pytest.mark.parametrize(
    ("entry", "message"),
    [({"name": "x", "cron": "* * *", "goal": "g"}, "must have 5 fields"), ({"name": "x", "goal": "g"}, "needs name")],
)
def test_bad_schedules_are_refused_with_a_reason(tmp_path, entry: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        beat_schedule(Settings(var_dir=tmp_path, schedules=[entry]))


def test_users_schedules_and_the_tuner_become_entries_and_a_paused_one_does_not(tmp_path) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from core.db import Store
    from core.jobs import ScheduleBook
    from services.scheduler import TUNING_ENTRY
    from workers.celery_app import TUNING_TASK

    settings = Settings(var_dir=tmp_path, tuning_interval_s=90)
    store = Store.from_settings(settings)
    book = ScheduleBook(store)
    # the tenant is the schedule's own (the one its creator acted for), never the body's
    book.create("berlin-2am", "0 2 * * *", "Europe/Berlin", {"goal": "capacity report", "priority": 3}, tenant="ops")
    book.create("paused", "*/5 * * * *", "UTC", {"goal": "x"})
    book.set_paused("paused", True)
    entries = beat_schedule(settings, store)
    entry = entries["berlin-2am"]
    assert entry["args"] == ["berlin-2am", "capacity report", {}]
    assert entry["kwargs"] == {"tenant": "ops", "priority": 3}
    assert entry["schedule"].hour == {2}
    assert entry["schedule"].now().tzinfo == ZoneInfo("Europe/Berlin")  # the fields are read in its timezone
    assert abs(entry["schedule"].now().timestamp() - datetime.now().timestamp()) < 5
    assert "paused" not in entries
    assert entries[TUNING_ENTRY]["task"] == TUNING_TASK
    assert entries[TUNING_ENTRY]["schedule"].run_every.total_seconds() == 90
    assert book.claim_slot("berlin-2am", 7) and not book.claim_slot("berlin-2am", 7)  # a slot fires once
    assert "opsgraph-tuning" not in beat_schedule(Settings(var_dir=tmp_path, tuning_enabled=False), store)


def test_firings_a_little_early_or_late_never_share_a_slot_and_the_tuner_fires_on_its_grid() -> None:
    from datetime import UTC, datetime, timedelta

    from core.jobs import slot_of
    from services.scheduler import GridSchedule

    # seen live: a 2 s entry fired at :36.009 then :37.999, both in [36, 38) by flooring
    assert slot_of(36.009, 2) != slot_of(37.999, 2)
    assert [slot_of(t, 60) for t in (119.998, 180.02, 239.999)] == [2, 3, 4]
    grid = GridSchedule(timedelta(seconds=3600))
    just_fired = datetime.now(UTC)
    due, wait = grid.is_due(just_fired)
    assert not due and 0 < wait <= 3600  # the next boundary, not an hour after the firing
    due, _ = grid.is_due(just_fired - timedelta(seconds=3600))
    assert due
