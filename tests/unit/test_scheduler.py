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
