"""Alertmanager alert groups: one investigation per group (groupKey) per tenant while it fires.

A notification of a group nobody has seen opens an investigation; a repeated one while the group fires is counted
on it (notifications, last_notified_at) and opens nothing; a resolved one marks the group resolved; firing again
after that opens a new investigation on the same row. Every transition is a conditional statement, so two
notifications of one group arriving together open one investigation.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from core.db import AlertGroupRow, Store, _changed, new_id

FIRING = "firing"
RESOLVED = "resolved"


@dataclass
class Notified:
    group: AlertGroupRow
    opened: bool  # this notification opened an investigation


def key_hash(group_key: str) -> str:
    return hashlib.sha256(group_key.encode()).hexdigest()


def get_group(store: Store, tenant: str, group_key: str) -> AlertGroupRow | None:
    stmt = sa.select(AlertGroupRow).where(AlertGroupRow.tenant == tenant, AlertGroupRow.key_hash == key_hash(group_key))
    with store.session() as s:
        return s.scalars(stmt).first()


def list_groups(store: Store, tenant: str, limit: int = 50) -> list[AlertGroupRow]:
    stmt = (
        sa.select(AlertGroupRow)
        .where(AlertGroupRow.tenant == tenant)
        .order_by(AlertGroupRow.last_notified_at.desc())
        .limit(limit)
    )
    with store.session() as s:
        return list(s.scalars(stmt))


def _note(store: Store, row_id: str, **values: Any) -> None:
    with store.session() as s:
        s.execute(
            sa.update(AlertGroupRow)
            .where(AlertGroupRow.id == row_id)
            .values(notifications=AlertGroupRow.notifications + 1, last_notified_at=time.time(), **values)
        )


def notify(
    store: Store,
    *,
    tenant: str,
    group_key: str,
    status: str,
    receiver: str,
    labels: dict[str, Any],
    open_investigation: Callable[[], str],
) -> Notified:
    """Records one notification; `open_investigation` (which creates the task and returns its id) runs only when
    this notification opens one."""
    now = time.time()
    firing = status == FIRING
    row = get_group(store, tenant, group_key)
    if row is None:
        fresh = AlertGroupRow(
            id=new_id(),
            tenant=tenant,
            key_hash=key_hash(group_key),
            group_key=group_key,
            receiver=receiver,
            status=FIRING if firing else RESOLVED,
            labels=labels,
            notifications=1,
            investigations=1 if firing else 0,
            created_at=now,
            last_notified_at=now,
            resolved_at=None if firing else now,
        )
        try:
            with store.session() as s:
                s.add(fresh)
        except IntegrityError:  # the same group's other notification got there first
            row = get_group(store, tenant, group_key)
        else:
            if firing:
                # the row claims the group; if the investigation cannot be opened the claim goes, so that
                # Alertmanager's retry of this notification opens it (no alert group left without one)
                drop = sa.delete(AlertGroupRow).where(AlertGroupRow.id == fresh.id)
                return Notified(_attach(store, fresh, open_investigation, drop), True)
            return Notified(fresh, False)
    assert row is not None
    if firing and row.status == RESOLVED:
        reopen = (
            sa.update(AlertGroupRow)
            .where(AlertGroupRow.id == row.id, AlertGroupRow.status == RESOLVED)
            .values(
                status=FIRING,
                resolved_at=None,
                task_id=None,
                labels=labels,
                investigations=AlertGroupRow.investigations + 1,
                notifications=AlertGroupRow.notifications + 1,
                last_notified_at=now,
            )
        )
        with store.session() as s:
            won = _changed(s.execute(reopen))
        if won:
            unclaim = (
                sa.update(AlertGroupRow)
                .where(AlertGroupRow.id == row.id)
                .values(status=RESOLVED, resolved_at=row.resolved_at, investigations=AlertGroupRow.investigations - 1)
            )
            return Notified(_attach(store, _reload(store, row.id), open_investigation, unclaim), True)
    if firing:
        _note(store, row.id)
    else:
        _note(store, row.id, status=RESOLVED, resolved_at=now)
    return Notified(_reload(store, row.id), False)


def _reload(store: Store, row_id: str) -> AlertGroupRow:
    with store.session() as s:
        row = s.get(AlertGroupRow, row_id)
        assert row is not None
        return row


def _attach(
    store: Store, row: AlertGroupRow, open_investigation: Callable[[], str], undo: sa.Executable
) -> AlertGroupRow:
    """Opens the claimed group's investigation and records its task. Until then the group shows
    `investigations` counted and `task_id` null: its investigation is being opened."""
    try:
        task_id = open_investigation()
    except BaseException:
        with store.session() as s:
            s.execute(undo)
        raise
    with store.session() as s:
        s.execute(sa.update(AlertGroupRow).where(AlertGroupRow.id == row.id).values(task_id=task_id))
    return _reload(store, row.id)


def group_view(row: AlertGroupRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "group_key": row.group_key,
        "receiver": row.receiver,
        "status": row.status,
        "task_id": row.task_id,
        "labels": row.labels,
        "notifications": row.notifications,
        "investigations": row.investigations,
        "created_at": row.created_at,
        "last_notified_at": row.last_notified_at,
        "resolved_at": row.resolved_at,
    }
