"""Approval requests: a write node waits for a person, who approves or rejects it, or the request expires.

States: pending -> approved | rejected | expired. A request leaves pending once: every transition is a
conditional UPDATE on `status = 'pending'`, so two approvers racing, or an approval racing the expiry sweep,
cannot both win; the loser gets ApprovalClosed (a Conflict) saying who decided and when.

A pending request past its expires_at reads as expired at once (get, list), and `expire_due` records it (and
its event), so the gate can resume the waiting graph with "expired, the write was skipped".
"""

from __future__ import annotations

import builtins
import time
from enum import StrEnum
from typing import Any, cast

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.engine import CursorResult

from core.db import ApprovalRow, Store, new_id
from core.errors import Conflict, NotFound, UserError
from core.logging import redact_value
from core.settings import Settings
from core.types import EventType

__all__ = ["Approval", "ApprovalClosed", "ApprovalStatus", "ApprovalStore", "SelfApprovalRefused"]

_MAX_TEXT = 4000


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ApprovalClosed(Conflict):
    """The request was already decided or has expired: it cannot be decided (again)."""

    code = "approval_closed"


class SelfApprovalRefused(UserError):
    """Four-eyes: the requester may not approve their own request (the API answers 403)."""

    code = "four_eyes"
    http_status = 403


class Approval(BaseModel):
    """One approval request as callers see it (the row's status, or expired once expires_at has passed)."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    task_id: str
    node_id: str
    tool: str
    args: dict[str, Any]
    preview: dict[str, Any]
    reason: str
    requested_by: str
    status: ApprovalStatus
    decided_by: str | None
    decided_at: float | None
    decision_reason: str | None
    from_addr: str | None
    expires_at: float
    created_at: float

    @classmethod
    def from_row(cls, row: ApprovalRow, now: float | None = None) -> Approval:
        status = ApprovalStatus(row.status)
        if status == ApprovalStatus.PENDING and row.expires_at <= (now if now is not None else time.time()):
            status = ApprovalStatus.EXPIRED
        return cls(
            id=row.id,
            tenant=row.tenant,
            task_id=row.task_id,
            node_id=row.node_id,
            tool=row.tool,
            args=row.args,
            preview=row.preview,
            reason=row.reason,
            requested_by=row.requested_by,
            status=status,
            decided_by=row.decided_by,
            decided_at=row.decided_at,
            decision_reason=row.decision_reason,
            from_addr=row.from_addr,
            expires_at=row.expires_at,
            created_at=row.created_at,
        )

    def closed_message(self) -> str:
        if self.status == ApprovalStatus.EXPIRED:
            return f"approval {self.id} expired at {_utc(self.expires_at)}; it can no longer be decided"
        return f"approval {self.id} was already {self.status.value} by {self.decided_by} at {_utc(self.decided_at)}"


def _matched(result: Any) -> bool:
    """Whether a conditional UPDATE matched its row: the guard that lets only one transition win."""
    return bool(cast(CursorResult[Any], result).rowcount)


def _utc(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _event_data(a: Approval) -> dict[str, Any]:
    data: dict[str, Any] = {
        "approval_id": a.id,
        "node_id": a.node_id,
        "tool": a.tool,
        "status": a.status.value,
        "summary": str(a.preview.get("summary", "")),
    }
    if a.status == ApprovalStatus.PENDING:
        data |= {"requested_by": a.requested_by, "expires_at": a.expires_at}
    else:
        data |= {"decided_by": a.decided_by, "decided_at": a.decided_at, "decision_reason": a.decision_reason}
    return data


class ApprovalStore:
    """The approvals table over the service's database; each change also lands on the task's event stream."""

    def __init__(self, store: Store, *, ttl_s: float = 3600.0, four_eyes: bool = False) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.four_eyes = four_eyes

    @classmethod
    def from_settings(cls, settings: Settings, store: Store) -> ApprovalStore:
        return cls(store, ttl_s=settings.approval_ttl_s, four_eyes=settings.approval_four_eyes)

    def create(
        self,
        *,
        tenant: str,
        task_id: str,
        node_id: str,
        tool: str,
        args: dict[str, Any],
        preview: dict[str, Any],
        reason: str,
        requested_by: str,
        ttl_s: float | None = None,
    ) -> Approval:
        """A pending request for this write node. Asking again while one is pending returns that one (a graph
        that replays its interrupt after a restart must not ask twice)."""
        if not requested_by:
            raise UserError("an approval request needs requested_by (the principal the task runs for)")
        now = time.time()
        with self.store.session() as s:
            existing = s.scalar(
                sa.select(ApprovalRow).where(
                    ApprovalRow.task_id == task_id,
                    ApprovalRow.node_id == node_id,
                    ApprovalRow.status == ApprovalStatus.PENDING.value,
                    ApprovalRow.expires_at > now,
                )
            )
            if existing is not None:
                return Approval.from_row(existing, now)
            row = ApprovalRow(
                id=new_id(),
                tenant=tenant,
                task_id=task_id,
                node_id=node_id,
                tool=tool,
                args=redact_value(args),
                preview=redact_value(preview),
                reason=reason[:_MAX_TEXT],
                requested_by=requested_by,
                status=ApprovalStatus.PENDING.value,
                expires_at=now + (self.ttl_s if ttl_s is None else ttl_s),
                created_at=now,
            )
            s.add(row)
        approval = Approval.from_row(row, now)
        self.store.append_event(task_id, EventType.APPROVAL_REQUESTED, _event_data(approval))
        return approval

    def get(self, approval_id: str, *, tenant: str | None = None) -> Approval:
        """The request; another tenant's request is not found (its existence is not disclosed)."""
        with self.store.session() as s:
            row = s.get(ApprovalRow, approval_id)
            if row is None or (tenant is not None and row.tenant != tenant):
                raise NotFound(f"no approval with id {approval_id!r}")
            return Approval.from_row(row)

    def list(
        self,
        *,
        tenant: str | None,
        status: ApprovalStatus | str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Newest first; tenant None lists every tenant's (admin); task_id: one task's requests."""
        now = time.time()
        stmt = sa.select(ApprovalRow).order_by(ApprovalRow.created_at.desc()).limit(limit)
        if tenant is not None:
            stmt = stmt.where(ApprovalRow.tenant == tenant)
        if task_id is not None:
            stmt = stmt.where(ApprovalRow.task_id == task_id)
        if status is not None:
            wanted = ApprovalStatus(status)
            pending = ApprovalRow.status == ApprovalStatus.PENDING.value
            if wanted == ApprovalStatus.PENDING:
                stmt = stmt.where(pending, ApprovalRow.expires_at > now)
            elif wanted == ApprovalStatus.EXPIRED:
                stmt = stmt.where(
                    sa.or_(ApprovalRow.status == wanted.value, sa.and_(pending, ApprovalRow.expires_at <= now))
                )
            else:
                stmt = stmt.where(ApprovalRow.status == wanted.value)
        with self.store.session() as s:
            return [Approval.from_row(r, now) for r in s.scalars(stmt)]

    def latest_for(self, task_id: str, node_id: str) -> Approval | None:
        """The newest request of a write node in any state (a gate that runs again after a resume or a restart
        finds the request it made instead of asking twice). An expiry that is due is recorded first."""
        stmt = (
            sa.select(ApprovalRow.id)
            .where(ApprovalRow.task_id == task_id, ApprovalRow.node_id == node_id)
            .order_by(ApprovalRow.created_at.desc())
            .limit(1)
        )
        with self.store.session() as s:
            approval_id = s.scalar(stmt)
        return None if approval_id is None else self.refresh(approval_id)

    def refresh(self, approval_id: str) -> Approval:
        """The request as it stands now; one whose expiry is due is recorded as expired (with its event)."""
        approval = self.get(approval_id)
        if approval.status == ApprovalStatus.EXPIRED:
            self._record_expiry(approval)
            approval = self.get(approval_id)
        return approval

    def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        decided_by: str,
        reason: str = "",
        tenant: str | None = None,
        from_addr: str | None = None,
    ) -> Approval:
        """Approve or reject a pending request, recording who, when, why and from where.

        Raises NotFound (unknown, or another tenant's), SelfApprovalRefused (four-eyes and the decider asked
        for it) or ApprovalClosed (already decided, or expired)."""
        if not decided_by:
            raise UserError("a decision needs decided_by (the approver's principal)")
        current = self.get(approval_id, tenant=tenant)
        if current.status != ApprovalStatus.PENDING:
            self._record_expiry(current)
            raise ApprovalClosed(current.closed_message())
        if approve and self.four_eyes and decided_by == current.requested_by:
            raise SelfApprovalRefused(
                f"four-eyes: {decided_by} requested approval {approval_id} and may not approve it; "
                "another approver must decide"
            )
        now = time.time()
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        stmt = (
            sa.update(ApprovalRow)
            .where(
                ApprovalRow.id == approval_id,
                ApprovalRow.status == ApprovalStatus.PENDING.value,
                ApprovalRow.expires_at > now,
            )
            .values(
                status=status.value,
                decided_by=decided_by,
                decided_at=now,
                decision_reason=reason[:_MAX_TEXT],
                from_addr=from_addr,
            )
        )
        with self.store.session() as s:
            won = _matched(s.execute(stmt))
        decided = self.get(approval_id)
        if not won:  # another decision, or the expiry, got there first
            self._record_expiry(decided)
            raise ApprovalClosed(decided.closed_message())
        self.store.append_event(decided.task_id, EventType.APPROVAL_DECIDED, _event_data(decided))
        return decided

    def expire_due(self, now: float | None = None) -> builtins.list[Approval]:
        """Mark every pending request past its expiry as expired; returns them (each graph waiting on one resumes
        with the write skipped)."""
        now = time.time() if now is None else now
        with self.store.session() as s:
            ids = list(
                s.scalars(
                    sa.select(ApprovalRow.id).where(
                        ApprovalRow.status == ApprovalStatus.PENDING.value, ApprovalRow.expires_at <= now
                    )
                )
            )
        expired = []
        for approval_id in ids:
            approval = self._expire(approval_id, now)
            if approval is not None:
                expired.append(approval)
        return expired

    def _record_expiry(self, approval: Approval) -> None:
        """A request read as expired but still pending in the table: record the expiry now."""
        if approval.status == ApprovalStatus.EXPIRED:
            self._expire(approval.id, time.time())

    def _expire(self, approval_id: str, now: float) -> Approval | None:
        stmt = (
            sa.update(ApprovalRow)
            .where(
                ApprovalRow.id == approval_id,
                ApprovalRow.status == ApprovalStatus.PENDING.value,
                ApprovalRow.expires_at <= now,
            )
            .values(status=ApprovalStatus.EXPIRED.value, decided_at=now, decided_by="system")
        )
        with self.store.session() as s:
            if not _matched(s.execute(stmt)):
                return None  # decided or expired by another process meanwhile
        approval = self.get(approval_id)
        self.store.append_event(approval.task_id, EventType.APPROVAL_DECIDED, _event_data(approval))
        return approval
