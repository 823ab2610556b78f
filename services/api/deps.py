"""Typed dependencies, so routes read as plain parameters (full-stack-fastapi-template's habit).

Who is calling: `Reader`, `Operator`, `Approver`, `Admin` authenticate the Bearer credential (401
`unauthenticated`) and check the scope (403 `forbidden`). `Tenant` is the tenant the request acts for: the
caller's own, or for an admin one named with `X-Opsgraph-Tenant` or `?tenant=`. `audit` records a change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Header, Query, Request

from agents import OpsContext, TaskRunner
from core.audit import Actor, record
from services.api.auth import Authenticator, Forbidden, Principal

TENANT_PATTERN = r"^[A-Za-z0-9_.-]+$"


def get_ctx(request: Request) -> OpsContext:
    return request.app.state.ctx  # type: ignore[no-any-return]


def get_runner(request: Request) -> TaskRunner:
    return request.app.state.runner  # type: ignore[no-any-return]


def authenticate(request: Request) -> Principal:
    """The caller, from the Authorization header only (no cookies, no query string: a URL leaks into logs,
    history and Referer). Kept on request.state for the rate limiter and the audit log."""
    authenticator: Authenticator = request.app.state.authenticator
    principal = authenticator.authenticate(request.headers.get("authorization"))
    request.state.principal = principal
    return principal


def require(scope: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency that authenticates the caller and checks `scope`."""

    # async: a pure check, so FastAPI runs it inline instead of in a threadpool hop (authenticate, which reads
    # the database, is the one sync step)
    async def dependency(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if not principal.allows(scope):
            raise Forbidden(f"this needs the {scope!r} scope; the credential has {', '.join(sorted(principal.scopes))}")
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


async def acting_tenant(
    principal: Annotated[Principal, Depends(authenticate)],
    tenant: Annotated[
        str | None,
        Query(min_length=1, max_length=64, pattern=TENANT_PATTERN, description="Act for this tenant (admins only)."),
    ] = None,
    x_opsgraph_tenant: Annotated[
        str | None,
        Header(min_length=1, max_length=64, pattern=TENANT_PATTERN, description="Act for this tenant (admins only)."),
    ] = None,
) -> str:
    """The tenant this request acts for: the credential's, or one an admin names explicitly."""
    return tenant_for(principal, x_opsgraph_tenant or tenant)


def tenant_for(principal: Principal, named: str | None) -> str:
    """`named` if the principal may act for it (its own tenant, or any for an admin), else 403."""
    if not named or named == principal.tenant:
        return principal.tenant
    if principal.is_admin:
        return named
    raise Forbidden(f"this credential acts for tenant {principal.tenant!r} only")


def actor(request: Request, principal: Principal) -> Actor:
    client = request.client.host if request.client else ""
    return Actor(principal.id, principal.name, principal.via, client)


def audit(
    request: Request,
    principal: Principal,
    action: str,
    *,
    tenant: str | None = None,
    target: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Record a change in the audit log (one call per change; never pass a secret in details)."""
    record(
        get_ctx(request).store,
        actor(request, principal),
        action,
        tenant=tenant or principal.tenant,
        target=target,
        details=details,
    )


Ctx = Annotated[OpsContext, Depends(get_ctx)]
Runner = Annotated[TaskRunner, Depends(get_runner)]
Reader = Annotated[Principal, Depends(require("read"))]
Operator = Annotated[Principal, Depends(require("operate"))]
Approver = Annotated[Principal, Depends(require("approve"))]
Admin = Annotated[Principal, Depends(require("admin"))]
Tenant = Annotated[str, Depends(acting_tenant)]

__all__ = [
    "Admin",
    "Approver",
    "Ctx",
    "Operator",
    "Reader",
    "Runner",
    "Tenant",
    "acting_tenant",
    "audit",
    "authenticate",
    "require",
    "tenant_for",
]
