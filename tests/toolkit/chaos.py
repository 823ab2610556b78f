"""Tools for fault-injection tests, loaded through OPSGRAPH_TOOL_MODULES like any user's tool module."""

from __future__ import annotations

import os
import signal
import time

from pydantic import Field

from core.types import Effect, ToolResult, ToolStatus
from tools import CATALOG, ToolArgs, ToolContext


class SleepArgs(ToolArgs):
    seconds: float = Field(ge=0, le=600)


@CATALOG.tool(args=SleepArgs, timeout_s=120, name="chaos_sleep")
def chaos_sleep(args: SleepArgs, ctx: ToolContext) -> ToolResult:
    """Sleep, checking for cancellation every 0.1 s."""
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        if ctx.is_cancelled():
            return ToolResult(status=ToolStatus.ERROR, summary="cancelled while sleeping")
        time.sleep(0.1)
    return ToolResult(status=ToolStatus.SUCCESS, summary=f"slept {args.seconds:g}s", data={"pid": os.getpid()})


class CrashArgs(ToolArgs):
    pass


@CATALOG.tool(args=CrashArgs, timeout_s=30, name="chaos_crash_worker")
def chaos_crash_worker(args: CrashArgs, ctx: ToolContext) -> ToolResult:
    """Kill the process running this tool with SIGKILL, every time."""
    os.kill(os.getpid(), signal.SIGKILL)
    return ToolResult(status=ToolStatus.ERROR, summary="unreachable")


class WriteArgs(ToolArgs):
    service: str


@CATALOG.tool(args=WriteArgs, effect=Effect.WRITE, idempotent=False, name="chaos_restart")
def chaos_restart(args: WriteArgs, ctx: ToolContext) -> ToolResult:
    """A write that touches nothing real: for the cache's invalidation-on-write test."""
    return ToolResult(status=ToolStatus.SUCCESS, summary=f"pretended to restart {args.service}")
