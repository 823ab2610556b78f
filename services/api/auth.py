"""Who is calling: a credential (API key or OIDC bearer token) becomes a Principal with a tenant and scopes.

CONTRACT (the security issue fills in the implementation; routes already depend on this shape):
- every route except /healthz, /readyz (and /metrics when configured open) takes one of the aliases in
  services/api/deps.py (`Reader`, `Operator`, `Approver`, `Admin`), which authenticate the caller and check
  the scope (401 `unauthenticated`, 403 `forbidden`);
- the tenant a route acts for is `principal.tenant`, never the request body; an admin may name another tenant
  explicitly (`acting_tenant`).
"""

from __future__ import annotations

from dataclasses import dataclass

SCOPES = ("read", "operate", "approve", "admin")
# a scope implies the ones it lists: admin may do everything, operate and approve may also read
IMPLIES = {"admin": set(SCOPES), "operate": {"read"}, "approve": {"read"}, "read": set()}


@dataclass(frozen=True)
class Principal:
    id: str  # the key's id, or the token's subject
    name: str
    tenant: str
    scopes: frozenset[str]
    via: str = "key"  # key | oidc

    def allows(self, scope: str) -> bool:
        return any(scope == s or scope in IMPLIES.get(s, set()) for s in self.scopes)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes
