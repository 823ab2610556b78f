"""Recurring work in the database: users' schedules (cron in a timezone, a task body), the slots each schedule
has fired (one row per slot: a second scheduler or a redelivered message fires nothing twice), and the queue
of tuning runs the API's tuning runner takes."""

from __future__ import annotations

import time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from core.db import ScheduleRow, ScheduleRunRow, Store, TuningRunRow, _changed, new_id
from core.errors import Conflict, NotFound, UserError

TUNING_SCHEDULE = "opsgraph-tuning"  # the tuner's own slot keys, beside users' schedule names
TUNING_CHANNEL = "opsgraph:tuning"  # pub/sub wake-up of the API's tuning runner


def parse_cron(cron: str) -> tuple[str, str, str, str, str]:
    """Five fields (minute hour day-of-month month day-of-week); each checked by Celery's own parser."""
    from celery.schedules import crontab

    fields = str(cron).split()
    if len(fields) != 5:
        raise UserError(f"cron {cron!r} must have 5 fields: minute hour day-of-month month day-of-week")
    minute, hour, dom, month, dow = fields
    try:
        crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    except (ValueError, TypeError) as exc:
        raise UserError(f"cron {cron!r}: {exc}") from None
    return minute, hour, dom, month, dow


def check_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UserError(f"unknown timezone {name!r} (an IANA name such as UTC or Europe/Berlin)") from None


def slot_of(fired_at: float, period_s: float) -> int:
    """The slot a firing belongs to: the period boundary nearest to it. Entries fire on boundaries (a cron entry
    on the minute, the tuner on multiples of its interval), a little early or late; rounding, not flooring, keeps
    two consecutive firings out of one slot whatever that jitter (up to half a period)."""
    return round(fired_at / period_s)


def schedule_view(row: ScheduleRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "tenant": row.tenant,
        "cron": row.cron,
        "timezone": row.timezone,
        "task": row.body,
        "paused": row.paused,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


class ScheduleBook:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self, name: str, cron: str, timezone: str, body: dict[str, Any], *, tenant: str = "default"
    ) -> ScheduleRow:
        parse_cron(cron)
        check_timezone(timezone)
        now = time.time()
        row = ScheduleRow(
            name=name,
            tenant=tenant,
            cron=cron,
            timezone=timezone,
            body=body,
            paused=False,
            created_at=now,
            updated_at=now,
        )
        try:
            with self.store.session() as s:
                s.add(row)
        except IntegrityError:
            raise Conflict(f"a schedule named {name!r} exists; delete it first or choose another name") from None
        return row

    def count(self, *, tenant: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(ScheduleRow)
        if tenant is not None:
            stmt = stmt.where(ScheduleRow.tenant == tenant)
        with self.store.session() as s:
            return int(s.scalar(stmt) or 0)

    def all(self, *, tenant: str | None = None) -> list[ScheduleRow]:
        stmt = sa.select(ScheduleRow).order_by(ScheduleRow.name)
        if tenant is not None:
            stmt = stmt.where(ScheduleRow.tenant == tenant)
        with self.store.session() as s:
            return list(s.scalars(stmt))

    def get(self, name: str, *, tenant: str | None = None) -> ScheduleRow:
        """The schedule; with `tenant`, only that tenant's (another's answers as a missing one)."""
        with self.store.session() as s:
            row = s.get(ScheduleRow, name)
        if row is None or (tenant is not None and row.tenant != tenant):
            raise NotFound(f"no schedule named {name!r}")
        return row

    @staticmethod
    def _named(name: str, tenant: str | None) -> Any:
        cond = ScheduleRow.name == name
        return cond if tenant is None else sa.and_(cond, ScheduleRow.tenant == tenant)

    def set_paused(self, name: str, paused: bool, *, tenant: str | None = None) -> ScheduleRow:
        with self.store.session() as s:
            stmt = sa.update(ScheduleRow).where(self._named(name, tenant)).values(paused=paused, updated_at=time.time())
            if not _changed(s.execute(stmt)):
                raise NotFound(f"no schedule named {name!r}")
        return self.get(name)

    def delete(self, name: str, *, tenant: str | None = None) -> None:
        with self.store.session() as s:
            if not _changed(s.execute(sa.delete(ScheduleRow).where(self._named(name, tenant)))):
                raise NotFound(f"no schedule named {name!r}")

    def runs(self, schedule: str, limit: int = 50) -> list[ScheduleRunRow]:
        stmt = (
            sa.select(ScheduleRunRow)
            .where(ScheduleRunRow.schedule == schedule)
            .order_by(ScheduleRunRow.slot.desc())
            .limit(limit)
        )
        with self.store.session() as s:
            return list(s.scalars(stmt))

    def claim_slot(self, schedule: str, slot: int) -> bool:
        """True for the first firing of (schedule, slot) only."""
        try:
            with self.store.session() as s:
                s.add(ScheduleRunRow(schedule=schedule, slot=slot, fired_at=time.time()))
            return True
        except IntegrityError:
            return False

    def set_ref(self, schedule: str, slot: int, ref: str) -> None:
        with self.store.session() as s:
            s.execute(
                sa.update(ScheduleRunRow)
                .where(ScheduleRunRow.schedule == schedule, ScheduleRunRow.slot == slot)
                .values(ref=ref)
            )


# tuning runs


_PG_TUNING_QUEUE_LOCK = 0x6F7073747571  # serialises cap checks of the tuning queue on PostgreSQL


def queue_tuning_run(store: Store, trigger: str) -> TuningRunRow:
    row = TuningRunRow(id=new_id(), trigger=trigger, status="queued", created_at=time.time(), report={})
    with store.session() as s:
        s.add(row)
    return row


class _QueueFull(Exception):
    pass


def queue_tuning_run_capped(store: Store, trigger: str, max_queued: int) -> TuningRunRow | None:
    """Queue a run unless `max_queued` runs already wait (None then). The row goes in first and the count
    follows in the same transaction: on SQLite the insert holds the write lock, on PostgreSQL an advisory lock
    orders concurrent callers, so two requests never both take the last place."""
    row = TuningRunRow(id=new_id(), trigger=trigger, status="queued", created_at=time.time(), report={})
    try:
        with store.session() as s:
            if s.get_bind().dialect.name == "postgresql":
                s.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_TUNING_QUEUE_LOCK})
            s.add(row)
            s.flush()
            if queued_tuning_runs_in(s) > max_queued:
                raise _QueueFull  # rolls the insert back
    except _QueueFull:
        return None
    return row


def queued_tuning_runs_in(s: Any) -> int:
    stmt = sa.select(sa.func.count()).select_from(TuningRunRow).where(TuningRunRow.status == "queued")
    return int(s.scalar(stmt) or 0)


def claim_tuning_run(store: Store, run_id: str) -> bool:
    stmt = (
        sa.update(TuningRunRow)
        .where(TuningRunRow.id == run_id, TuningRunRow.status == "queued")
        .values(status="running", started_at=time.time())
    )
    with store.session() as s:
        return _changed(s.execute(stmt))


def finish_tuning_run(
    store: Store,
    run_id: str,
    *,
    status: str,
    decision: str | None,
    report: dict[str, Any],
    policy_version: int | None = None,
    error: str | None = None,
) -> None:
    values = {
        "status": status,
        "decision": decision,
        "report": report,
        "policy_version": policy_version,
        "error": error,
        "finished_at": time.time(),
    }
    with store.session() as s:
        s.execute(sa.update(TuningRunRow).where(TuningRunRow.id == run_id).values(**values))


def tuning_runs(store: Store, *, status: str | None = None, limit: int = 50) -> list[TuningRunRow]:
    stmt = sa.select(TuningRunRow).order_by(TuningRunRow.created_at.desc()).limit(limit)
    if status:
        stmt = stmt.where(TuningRunRow.status == status)
    with store.session() as s:
        return list(s.scalars(stmt))


def get_tuning_run(store: Store, run_id: str) -> TuningRunRow:
    with store.session() as s:
        row = s.get(TuningRunRow, run_id)
    if row is None:
        raise NotFound(f"no tuning run with id {run_id!r}")
    return row


def tuning_run_view(row: TuningRunRow, *, report: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row.id,
        "trigger": row.trigger,
        "status": row.status,
        "decision": row.decision,
        "policy_version": row.policy_version,
        "created_at": row.created_at,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "error": row.error,
    }
    if report:
        out["report"] = row.report
    else:
        out["rationale"] = (row.report or {}).get("rationale")
        out["changes"] = ((row.report or {}).get("applied") or {}).get("changes")  # what the new version changed
    return out
