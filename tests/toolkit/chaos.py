"""Tools for fault-injection tests, loaded through OPSGRAPH_TOOL_MODULES like any user's tool module."""

from __future__ import annotations

import os
import signal
import time

from pydantic import Field

from core.types import Effect, PlanChanges, ToolResult, ToolStatus
from tools import CATALOG, ToolArgs, ToolContext


class SleepArgs(ToolArgs):
    seconds: float = Field(ge=0, le=600)


@CATALOG.tool(args=SleepArgs, timeout_s=120, name="chaos_sleep", cost_fn=lambda a: a.seconds)
def chaos_sleep(args: SleepArgs, ctx: ToolContext) -> ToolResult:
    """Sleep, checking for cancellation every 0.1 s (0 s returns at once: the benchmarks' no-op)."""
    end = time.monotonic() + args.seconds
    while (left := end - time.monotonic()) > 0:
        if ctx.is_cancelled():
            return ToolResult(status=ToolStatus.ERROR, summary="cancelled while sleeping")
        time.sleep(min(0.1, left))
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


class FlakyArgs(ToolArgs):
    key: str = Field(description="A counter in Redis: calls so far for this key.")
    fail_times: int = Field(ge=0, le=20)
    transient: bool = True


@CATALOG.tool(args=FlakyArgs, timeout_s=20, name="chaos_flaky")
def chaos_flaky(args: FlakyArgs, ctx: ToolContext) -> ToolResult:
    """Fail the first `fail_times` calls for a key (transiently or not), then succeed."""
    calls = int(ctx.redis.incr(f"opsgraph:test:flaky:{args.key}"))
    if calls <= args.fail_times:
        return ToolResult(status=ToolStatus.ERROR, summary=f"call {calls} failed", transient=args.transient)
    return ToolResult(status=ToolStatus.SUCCESS, summary=f"call {calls} succeeded", data={"calls": calls})


class SlowWorkerArgs(ToolArgs):
    seconds: float = Field(0.2, ge=0, le=60)


@CATALOG.tool(args=SlowWorkerArgs, timeout_s=60, name="chaos_slow_worker")
def chaos_slow_worker(args: SlowWorkerArgs, ctx: ToolContext) -> ToolResult:
    """Sleep `seconds`, or OPSGRAPH_TEST_SLOW_S on a worker started with it (a straggler); stops when cancelled."""
    seconds = float(os.environ.get("OPSGRAPH_TEST_SLOW_S") or args.seconds)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.is_cancelled():
            return ToolResult(status=ToolStatus.ERROR, summary=f"cancelled on {ctx.worker}")
        time.sleep(0.05)
    return ToolResult(
        status=ToolStatus.SUCCESS, summary=f"slept {seconds:g}s on {ctx.worker}", data={"worker": ctx.worker}
    )


class FollowUpArgs(ToolArgs):
    add: list[dict] = Field(default_factory=list)  # type: ignore[type-arg]
    cancel: list[str] = Field(default_factory=list)


@CATALOG.tool(args=FollowUpArgs, timeout_s=20, name="chaos_follow_up")
def chaos_follow_up(args: FollowUpArgs, ctx: ToolContext) -> ToolResult:
    """Ask the dispatcher to add these nodes and cancel those (what a real finding would do)."""
    changes = PlanChanges(add=args.add, cancel=args.cancel, reason="the test asked for it")
    return ToolResult(status=ToolStatus.SUCCESS, summary="follow-up requested", plan_changes=changes)


class BatchEchoArgs(ToolArgs):
    value: int


def _echo_batch(calls: list[BatchEchoArgs], ctx: ToolContext) -> list[ToolResult]:
    return [
        ToolResult(
            status=ToolStatus.SUCCESS, summary=f"echo {c.value}", data={"value": c.value, "batch_size": len(calls)}
        )
        for c in calls
    ]


@CATALOG.tool(args=BatchEchoArgs, timeout_s=20, name="chaos_batch_echo", batch_fn=_echo_batch)
def chaos_batch_echo(args: BatchEchoArgs, ctx: ToolContext) -> ToolResult:
    """Echo a value; calls that arrive together run as one batch."""
    return _echo_batch([args], ctx)[0]
