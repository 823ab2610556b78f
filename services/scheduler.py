"""The scheduler: celery beat firing the recurring tasks of settings (OPSGRAPH_SCHEDULES), users' schedules
(the `schedules` table, POST /v1/schedules) and the tuning agent (every TUNING_INTERVAL_S).

Several schedulers may run (one per machine, or a second by mistake): only the holder of a Redis lock fires,
and every firing carries its slot (the minute of a cron entry, the interval of the tuner), which the worker
claims in the database before it creates anything, so even a lock lost mid-tick fires nothing twice."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import redis
import structlog
from celery import Celery, beat
from celery.schedules import crontab, schedstate, schedule

from core import keys
from core.db import Store
from core.errors import UserError
from core.jobs import ScheduleBook, parse_cron, slot_of
from core.settings import Settings
from workers.celery_app import SCHEDULED_TASK, TUNING_TASK

log = structlog.get_logger(__name__)
TUNING_ENTRY = "opsgraph-tuning"
_RELOAD_EVERY_S = 5.0  # users' schedules are read from the database this often


def _cron(cron: str, tz: str = "UTC") -> crontab:
    minute, hour, dom, month, dow = parse_cron(cron)
    zone = ZoneInfo(tz)
    # the fields are read in the schedule's own timezone
    return crontab(
        minute=minute,
        hour=hour,
        day_of_month=dom,
        month_of_year=month,
        day_of_week=dow,
        nowfun=lambda: datetime.now(zone),
    )


class GridSchedule(schedule):
    """Every `run_every`, on the multiples of it (as a cron entry fires on the minute), not `run_every` after the
    last firing: whichever scheduler fires, and whenever it started, a firing falls on the same boundary."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        every = self.run_every.total_seconds()
        now = time.time()
        last = last_run_at if last_run_at.tzinfo else last_run_at.replace(tzinfo=UTC)
        wait = every - (now % every)
        return schedstate(int(now // every) > int(last.timestamp() // every), wait)


def beat_schedule(settings: Settings, store: Store | None = None) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for entry in settings.schedules:
        name, cron, goal = entry.get("name"), entry.get("cron"), entry.get("goal")
        if not (name and cron and goal):
            raise UserError(f"schedule {entry!r} needs name, cron and goal")
        try:
            spec = _cron(str(cron))
        except UserError as exc:
            raise UserError(f"schedule {name}: {exc}") from None
        entries[name] = {
            "task": SCHEDULED_TASK,
            "schedule": spec,
            "args": [name, goal, entry.get("inputs") or {}],
            "options": {"queue": "cpu"},
        }
    if store is not None:
        for row in ScheduleBook(store).all():
            if row.paused or row.name in entries:
                continue
            body = row.body
            entries[row.name] = {
                "task": SCHEDULED_TASK,
                "schedule": _cron(row.cron, row.timezone),
                "args": [row.name, body["goal"], body.get("inputs") or {}],
                "kwargs": {"tenant": row.tenant, "priority": body.get("priority", 5)},
                "options": {"queue": "cpu"},
            }
    if settings.tuning_enabled:
        entries[TUNING_ENTRY] = {
            "task": TUNING_TASK,
            "schedule": GridSchedule(timedelta(seconds=settings.tuning_interval_s)),
            "options": {"queue": "cpu"},
        }
    return entries


class OpsScheduler(beat.Scheduler):
    """Beat's in-memory scheduler, with a leader lock in Redis and entries reloaded from the database."""

    def setup_schedule(self) -> None:
        self.settings: Settings = self.app.conf.opsgraph_settings
        self.store = Store.from_settings(self.settings)
        self.redis = redis.Redis.from_url(self.settings.redis_url, socket_timeout=5)
        self.token = f"{uuid.uuid4()}"
        self.leading = False
        self.lock_ttl_s = max(5.0, 3 * self.max_interval)
        self._reloaded = 0.0
        self.merge_inplace(beat_schedule(self.settings, self.store))

    def _lead(self) -> bool:
        """Take or keep the lock; whoever holds it fires. A holder that dies loses it after lock_ttl_s."""
        ttl_ms = int(self.lock_ttl_s * 1000)
        try:
            if self.redis.set(keys.BEAT_LOCK, self.token, nx=True, px=ttl_ms):
                held = True
            elif self.redis.get(keys.BEAT_LOCK) == self.token.encode():
                self.redis.pexpire(keys.BEAT_LOCK, ttl_ms)
                held = True
            else:
                held = False
        except redis.RedisError as exc:
            log.warning("scheduler cannot reach Redis; not firing", error=str(exc))
            held = False
        if held != self.leading:
            log.info("scheduler leads" if held else "scheduler stands by", token=self.token)
            self.leading = held
        return held

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self._lead():
            return min(self.max_interval, self.lock_ttl_s / 3)
        if time.monotonic() - self._reloaded > _RELOAD_EVERY_S:
            self._reloaded = time.monotonic()
            try:
                self.merge_inplace(beat_schedule(self.settings, self.store))
            except Exception as exc:  # the database away: keep the entries we have
                log.warning("scheduler could not reload schedules", error=repr(exc))
        return float(min(super().tick(*args, **kwargs), self.lock_ttl_s / 3))

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        now = time.time()
        period = self.settings.tuning_interval_s if entry.name == TUNING_ENTRY else 60.0
        slot = slot_of(now, period)
        entry.kwargs = {**(entry.kwargs or {}), "slot": slot}
        return super().apply_async(entry, producer, advance, **kwargs)

    def close(self) -> None:
        try:
            if self.leading and self.redis.get(keys.BEAT_LOCK) == self.token.encode():
                self.redis.delete(keys.BEAT_LOCK)  # the other scheduler takes over at once
        except redis.RedisError:
            pass
        super().close()


def run_beat(celery: Celery, settings: Settings) -> None:
    settings.ensure_dirs()
    celery.conf.beat_max_loop_interval = 1.0 if settings.tuning_interval_s < 60 else 5.0
    celery.Beat(scheduler_cls=OpsScheduler, loglevel=settings.log_level, quiet=True).run()
