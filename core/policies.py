"""The versioned policy document in the database: who changed it (tuner or person), why, on which telemetry
window; rollback is a new version that restores an old body. Readers (the release loop, the cache, the
planner) call `current()`, which looks for a newer version at most every `refresh_s`, so a change is live in
every process within seconds, without a restart."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from core.db import PolicyRow, Store
from core.errors import NotFound, UserError
from core.policy import PolicyDocument
from core.settings import Settings

AUTHORS = ("settings", "person", "tuner")


class PolicyInvalid(UserError):
    """A policy document that does not validate: every reason, with its path."""

    code = "policy_invalid"

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("policy invalid: " + "; ".join(reasons))
        self.reasons = reasons


def parse_policy(body: Any) -> PolicyDocument:
    """Types, ranges and no unknown keys, at every level; raises PolicyInvalid listing each problem."""
    try:
        return PolicyDocument.model_validate(body)
    except ValidationError as exc:
        reasons = [f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}" for e in exc.errors()]
        raise PolicyInvalid(reasons) from None


def version_view(row: PolicyRow, *, body: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": row.version,
        "author": row.author,
        "actor": row.actor,
        "reason": row.reason,
        "window": row.window,
        "rollback_of": row.rollback_of,
        "prediction": row.prediction,
        "created_at": row.created_at,
    }
    if body:
        out["policy"] = row.body
    return out


class PolicyStore:
    def __init__(
        self, store: Store, settings: Settings, *, refresh_s: float | None = None, telemetry: Any = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.refresh_s = settings.policy_refresh_s if refresh_s is None else refresh_s
        self.telemetry = telemetry
        self._lock = threading.Lock()
        self._cached: tuple[int, PolicyDocument] | None = None
        self._checked = 0.0

    def defaults(self) -> PolicyDocument:
        """Version 1: what settings say (OPSGRAPH_SCHEDULING_POLICY, OPSGRAPH_CACHE_POLICY)."""
        doc = PolicyDocument()
        doc.scheduling = self.settings.scheduling_policy
        doc.serving.cache = self.settings.cache_policy
        return doc

    def ensure(self) -> int:
        """Write version 1 from settings when the database has none (two processes racing: one wins)."""
        if self.latest_version() is None:
            with contextlib.suppress(IntegrityError):
                self._write(self.defaults(), author="settings", reason="initial policy from settings")
        return self.latest_version() or 1

    def latest_version(self) -> int | None:
        with self.store.session() as s:
            return s.scalar(sa.select(sa.func.max(PolicyRow.version)))

    def current(self) -> PolicyDocument:
        return self.current_version()[1]

    def current_version(self) -> tuple[int, PolicyDocument]:
        now = time.monotonic()
        with self._lock:
            if self._cached is not None and now - self._checked < self.refresh_s:
                return self._cached
            self._checked = now
        try:
            latest = self.latest_version()
        except Exception:  # the database is away: keep the last policy we saw
            if self._cached is not None:
                return self._cached
            raise
        if latest is None:
            latest = self.ensure()
        with self._lock:
            if self._cached is not None and self._cached[0] == latest:
                return self._cached
        row = self.get(latest)
        doc = PolicyDocument.model_validate(row.body)
        with self._lock:
            self._cached = (latest, doc)
        return self._cached

    def get(self, version: int) -> PolicyRow:
        with self.store.session() as s:
            row = s.get(PolicyRow, version)
        if row is None:
            raise NotFound(f"no policy version {version}")
        return row

    def history(self, limit: int = 50) -> list[PolicyRow]:
        with self.store.session() as s:
            return list(s.scalars(sa.select(PolicyRow).order_by(PolicyRow.version.desc()).limit(limit)))

    def put(
        self,
        body: Any,
        *,
        author: str,
        reason: str,
        actor: str = "",
        window: dict[str, Any] | None = None,
        prediction: dict[str, Any] | None = None,
        rollback_of: int | None = None,
    ) -> PolicyRow:
        if author not in AUTHORS:
            raise UserError(f"author must be one of {', '.join(AUTHORS)}")
        if not reason.strip():
            raise UserError("a policy change needs a reason")
        doc = body if isinstance(body, PolicyDocument) else parse_policy(body)
        self.ensure()
        return self._write(
            doc,
            author=author,
            reason=reason,
            actor=actor,
            window=window,
            prediction=prediction,
            rollback_of=rollback_of,
        )

    def rollback(self, version: int, *, author: str, reason: str, actor: str = "") -> PolicyRow:
        old = self.get(version)
        return self.put(old.body, author=author, reason=reason, actor=actor, rollback_of=version)

    def _write(self, doc: PolicyDocument, **meta: Any) -> PolicyRow:
        for _ in range(20):  # two writers: the unique version decides, the loser numbers again
            try:
                with self.store.session() as s:
                    latest = s.scalar(sa.select(sa.func.max(PolicyRow.version))) or 0
                    row = PolicyRow(
                        version=latest + 1, body=doc.model_dump(mode="json"), created_at=time.time(), **meta
                    )
                    s.add(row)
                break
            except IntegrityError:
                if meta.get("author") == "settings":
                    raise
                time.sleep(0.01)
        else:
            raise RuntimeError("could not write a policy version after 20 tries")
        with self._lock:
            self._cached = (row.version, doc)
            self._checked = time.monotonic()
        if self.telemetry is not None:
            self.telemetry.record(
                "policy",
                name=row.author,
                outcome="rollback" if row.rollback_of else "change",
                data={"version": row.version, "reason": row.reason[:500], "rollback_of": row.rollback_of},
            )
        return row
