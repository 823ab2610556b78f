"""Typed dependencies, so routes read as plain parameters (full-stack-fastapi-template's habit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from agents import OpsContext, TaskRunner
from services.api.auth import Principal


def get_ctx(request: Request) -> OpsContext:
    return request.app.state.ctx  # type: ignore[no-any-return]


def get_runner(request: Request) -> TaskRunner:
    return request.app.state.runner  # type: ignore[no-any-return]


def require(scope: str) -> Callable[[Request], Principal]:
    """A dependency that authenticates the caller and checks `scope`.

    TEMPORARY until the security issue lands: every caller is an admin of tenant "default".
    """

    def dependency(request: Request) -> Principal:
        return Principal(id="dev", name="dev", tenant="default", scopes=frozenset({"admin"}))

    return dependency


Ctx = Annotated[OpsContext, Depends(get_ctx)]
Runner = Annotated[TaskRunner, Depends(get_runner)]
Reader = Annotated[Principal, Depends(require("read"))]
Operator = Annotated[Principal, Depends(require("operate"))]
Approver = Annotated[Principal, Depends(require("approve"))]
Admin = Annotated[Principal, Depends(require("admin"))]
