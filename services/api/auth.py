"""Who is calling: a credential (API key or OIDC bearer token) becomes a Principal with a tenant and scopes.

The contract routes rely on (docs/security.md):
- every route except /healthz, /readyz (and /metrics when configured open) takes one of the aliases in
  services/api/deps.py (`Reader`, `Operator`, `Approver`, `Admin`), which authenticate the caller and check
  the scope (401 `unauthenticated`, 403 `forbidden`);
- the tenant a route acts for is `principal.tenant`, never the request body; an admin may name another tenant
  explicitly (`Tenant` / `acting_tenant` in deps.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.apikeys import KEY_PREFIX, SCOPES, KeyBook
from core.settings import Settings

__all__ = ["IMPLIES", "SCOPES", "Authenticator", "Forbidden", "OidcVerifier", "Principal", "Unauthenticated"]

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
    def who(self) -> str:
        """How this principal is named on tasks and approvals: its name and id (four-eyes compares it)."""
        return self.id if not self.name or self.name == self.id else f"{self.name} [{self.id}]"

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes


class Unauthenticated(Exception):
    """No credential, or one that is not (or no longer) valid: 401."""


class Forbidden(Exception):
    """A valid credential without the right to do this: 403."""


class OidcVerifier:
    """Bearer JWTs from a configured issuer: signature by a key of its JWKS (fetched and cached by PyJWKClient,
    refetched when a token names an unknown key id), issuer, audience, expiry; tenant and scopes from claims."""

    def __init__(self, settings: Settings) -> None:
        import jwt

        self.settings = settings
        self._jwks = jwt.PyJWKClient(settings.oidc_jwks_url, cache_keys=True, lifespan=300, timeout=5)

    def verify(self, token: str) -> Principal:
        import jwt

        s = self.settings
        try:
            signing_key = self._jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                signing_key.key,
                algorithms=s.oidc_algorithms,
                audience=s.oidc_audience,
                issuer=s.oidc_issuer,
                leeway=s.oidc_leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired") from None
        except jwt.PyJWKClientError as exc:
            raise Unauthenticated(f"the token's signing key is not the issuer's ({type(exc).__name__})") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the token is not valid: {exc}") from None
        tenant = claims.get(s.oidc_tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise Unauthenticated(f"the token has no {s.oidc_tenant_claim!r} claim (the caller's tenant)")
        raw = claims.get(s.oidc_scopes_claim, "")
        names = raw.split() if isinstance(raw, str) else [str(x) for x in raw] if isinstance(raw, list) else []
        scopes = frozenset(n for n in names if n in SCOPES)  # other scopes of the issuer mean nothing here
        if not scopes:
            raise Forbidden(f"the token grants none of the scopes {', '.join(SCOPES)}")
        sub = str(claims["sub"])
        return Principal(id=f"oidc:{sub}"[:200], name=str(claims.get("name") or sub), tenant=tenant, scopes=scopes,
                         via="oidc")  # fmt: skip


class Authenticator:
    """Turns the bearer credential of a request into a Principal: an opsgraph API key (`og_...`) is checked
    against the database on every request (a revocation holds at once); anything else is tried as an OIDC
    JWT when OIDC is configured."""

    def __init__(self, settings: Settings, keys: KeyBook) -> None:
        self.keys = keys
        self.oidc = OidcVerifier(settings) if settings.oidc_enabled else None

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthenticated("send a credential: Authorization: Bearer <key>")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be 'Bearer <key or token>'")
        if token.startswith(f"{KEY_PREFIX}_"):
            row = self.keys.verify(token)
            if row is None:
                raise Unauthenticated("the API key is unknown, revoked or expired")
            return Principal(id=row.id, name=row.name, tenant=row.tenant, scopes=frozenset(row.scopes), via="key")
        if self.oidc is None:
            raise Unauthenticated("not an opsgraph API key (og_...), and OIDC is not configured")
        return self.oidc.verify(token)
