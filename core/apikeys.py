"""API keys: `og_<id>_<secret>`, kept as the id plus the SHA-256 of the secret.

The secret is 32 random bytes (256 bits) from the OS's CSPRNG, so a plain SHA-256 is enough: a slow KDF
(bcrypt, argon2) protects low-entropy passwords from guessing, and nothing can guess 256 random bits; a
fast hash keeps the per-request check at microseconds. The comparison is constant-time all the same.

Every check reads the row (by primary key): a revoked or expired key is refused on its next request, with
no cache to outlive the revocation.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core.db import ApiKeyRow, Store
from core.errors import NotFound, UserError

__all__ = ["KEY_PREFIX", "SCOPES", "IssuedKey", "KeyBook", "key_view", "parse_key", "write_secret_file"]

KEY_PREFIX = "og"
SCOPES = ("read", "operate", "approve", "admin")
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")
# last_used_at is a hint for people pruning keys, not a log: writing it at most once a minute per key keeps a
# database write off the hot path of every request
_TOUCH_EVERY_S = 60.0


@dataclass(frozen=True)
class IssuedKey:
    row: ApiKeyRow
    token: str  # shown once, never stored


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_key(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key, else None. The secret is URL-safe base64 and may hold '_'."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not _ID_PATTERN.match(parts[1]) or len(parts[2]) < 32:
        return None
    return parts[1], parts[2]


def key_view(row: ApiKeyRow) -> dict[str, Any]:
    """What may be shown about a key: never its hash."""
    now = time.time()
    state = "active"
    if row.revoked_at is not None:
        state = "revoked"
    elif row.expires_at is not None and row.expires_at <= now:
        state = "expired"
    return {
        "id": row.id,
        "name": row.name,
        "tenant": row.tenant,
        "scopes": list(row.scopes),
        "state": state,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "revoked_at": row.revoked_at,
        "last_used_at": row.last_used_at,
    }


class KeyBook:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self,
        tenant: str,
        scopes: list[str],
        *,
        name: str = "",
        expires_in_s: float | None = None,
        created_by: str = "",
    ) -> IssuedKey:
        if not TENANT_PATTERN.match(tenant):
            raise UserError(f"tenant {tenant!r} must be 1-64 letters, digits, '_', '.' or '-'")
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise UserError(f"scopes must be among {', '.join(SCOPES)} (got {', '.join(unknown) or 'none'})")
        if expires_in_s is not None and expires_in_s <= 0:
            raise UserError("expiry must be in the future")
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        now = time.time()
        row = ApiKeyRow(
            id=key_id,
            secret_sha256=_sha256(secret),
            tenant=tenant,
            scopes=sorted(set(scopes), key=SCOPES.index),
            name=name[:200],
            created_by=created_by[:64],
            created_at=now,
            expires_at=now + expires_in_s if expires_in_s is not None else None,
        )
        with self.store.session() as s:
            s.add(row)
        return IssuedKey(row, f"{KEY_PREFIX}_{key_id}_{secret}")

    def verify(self, token: str, *, now: float | None = None) -> ApiKeyRow | None:
        """The key's row when the token is a live key (known, secret matches, not revoked, not expired)."""
        parsed = parse_key(token)
        if parsed is None:
            return None
        key_id, secret = parsed
        now = time.time() if now is None else now
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None or not hmac.compare_digest(row.secret_sha256, _sha256(secret)):
                return None
            if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
                return None
            if row.last_used_at is None or now - row.last_used_at >= _TOUCH_EVERY_S:
                row.last_used_at = now
        return row

    def get(self, key_id: str) -> ApiKeyRow:
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
        if row is None:
            raise NotFound(f"no API key with id {key_id!r}")
        return row

    def list(self, *, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKeyRow]:
        stmt = sa.select(ApiKeyRow).order_by(ApiKeyRow.created_at)
        if tenant:
            stmt = stmt.where(ApiKeyRow.tenant == tenant)
        if not include_revoked:
            stmt = stmt.where(ApiKeyRow.revoked_at.is_(None))
        with self.store.session() as s:
            return list(s.scalars(stmt))

    def revoke(self, key_id: str) -> ApiKeyRow:
        """Revoke at once (idempotent: revoking a revoked key keeps its first revocation time)."""
        stmt = (
            sa.update(ApiKeyRow)
            .where(ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None))
            .values(revoked_at=time.time())
        )
        with self.store.session() as s:
            s.execute(stmt)
        return self.get(key_id)  # NotFound for an unknown id


def write_secret_file(path: Path, text: str) -> None:
    """Write a file only its owner may read: created 0600, so it is never readable by others for an instant."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
