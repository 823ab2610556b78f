"""The scheduler: celery beat firing recurring tasks declared in settings (name, cron, goal, inputs)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.schedules import crontab

from core.errors import UserError
from core.settings import Settings
from workers.celery_app import SCHEDULED_TASK


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule = {}
    for entry in settings.schedules:
        name, cron, goal = entry.get("name"), entry.get("cron"), entry.get("goal")
        if not (name and cron and goal):
            raise UserError(f"schedule {entry!r} needs name, cron and goal")
        fields = str(cron).split()
        if len(fields) != 5:
            raise UserError(f"schedule {name}: cron {cron!r} must have 5 fields (minute hour day month weekday)")
        minute, hour, dom, month, dow = fields
        schedule[name] = {
            "task": SCHEDULED_TASK,
            "schedule": crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow),
            "args": [name, goal, entry.get("inputs") or {}],
            "options": {"queue": "cpu"},
        }
    return schedule


def run_beat(celery: Celery, settings: Settings) -> None:
    celery.conf.beat_schedule = beat_schedule(settings)
    settings.ensure_dirs()
    celery.Beat(schedule=str(settings.var_dir / "celerybeat-schedule"), loglevel=settings.log_level, quiet=True).run()
