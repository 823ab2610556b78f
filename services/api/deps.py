"""Typed dependencies, so routes read as plain parameters (full-stack-fastapi-template's habit)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from agents import OpsContext, TaskRunner


def get_ctx(request: Request) -> OpsContext:
    return request.app.state.ctx  # type: ignore[no-any-return]


def get_runner(request: Request) -> TaskRunner:
    return request.app.state.runner  # type: ignore[no-any-return]


Ctx = Annotated[OpsContext, Depends(get_ctx)]
Runner = Annotated[TaskRunner, Depends(get_runner)]
