"""Write tools on the host: signal an allowlisted process, run a runbook from the configured folder.

A process is a target only when its whole command line matches a pattern of OPSGRAPH_PROCESS_SIGNAL_ALLOWLIST,
and never when it is pid 1 or opsgraph's own (this process and its ancestors, or any opsgraph entry point).
A runbook is an executable inside OPSGRAPH_RUNBOOKS_DIR (after resolving links), run without a shell, with
validated arguments, a clean environment (no opsgraph secrets), a time limit and its output captured.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field

from core.logging import redact
from core.settings import Settings
from core.types import Effect, ToolResult, ToolStatus
from tools._registry import CATALOG
from tools._remediation import failed, refused
from tools.base import ToolArgs, ToolContext

# command lines of opsgraph's own processes (API, workers, beat, CLI): never a target, whatever the allowlist says
_OPSGRAPH_CMDLINE = re.compile(r"opsgraph|\bservices\.(api|cli|launcher)\b|\bworkers\.\w+|celery .*-A workers")
_SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}
_EXIT_WAIT_S = 5.0
_RUNBOOK_SAFE_ARG = re.compile(r"^[A-Za-z0-9_.,:=@%+/-]{1,256}$")
_RUNBOOK_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_PREVIEW_LINES = 12


def _signal_allowlisted(settings: Settings) -> str | None:
    if not settings.process_signal_allowlist:
        return "no process may be signalled: OPSGRAPH_PROCESS_SIGNAL_ALLOWLIST is empty"
    for pattern in settings.process_signal_allowlist:
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"OPSGRAPH_PROCESS_SIGNAL_ALLOWLIST has an invalid regex {pattern!r}: {exc}"
    return None


class ProcessSignalArgs(ToolArgs):
    pid: int = Field(gt=1, lt=2**31, description="The process id.")
    signal: Literal["TERM", "KILL"] = Field("TERM", description="TERM asks the process to exit; KILL forces it.")
    create_time: float | None = Field(
        None, description="The process's start time (epoch s) from the preview: refuse if the pid now is another."
    )


def _own_pids() -> set[int]:
    """This process and its ancestors: signalling any of them would stop opsgraph itself."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in psutil.Process().parents())
    return pids


def _inspect(args: ProcessSignalArgs, settings: Settings) -> tuple[psutil.Process, dict[str, object]] | ToolResult:
    """The process and what an approver sees of it, or why it is not a target."""
    if args.pid in _own_pids():
        return refused(f"process_signal refused: pid {args.pid} is opsgraph itself or one of its parents")
    try:
        proc = psutil.Process(args.pid)
        with proc.oneshot():
            cmdline = " ".join(proc.cmdline()) or f"[{proc.name()}]"
            info: dict[str, object] = {
                "pid": proc.pid,
                "name": proc.name(),
                "command": redact(cmdline)[:500],
                "user": proc.username(),
                "status": proc.status(),
                "age_s": round(time.time() - proc.create_time(), 1),
                "create_time": proc.create_time(),
                "rss_bytes": proc.memory_info().rss,
            }
    except psutil.NoSuchProcess:
        return failed(f"no process with pid {args.pid}", "not_found")
    except psutil.AccessDenied:
        return refused(f"process_signal refused: pid {args.pid} cannot be inspected (access denied)")
    if proc.status() == psutil.STATUS_ZOMBIE:
        return failed(f"pid {args.pid} has already exited (zombie)", "not_found", process=info)
    if _OPSGRAPH_CMDLINE.search(cmdline):
        return refused(f"process_signal refused: pid {args.pid} is an opsgraph process", process=info)
    if not any(re.fullmatch(p, cmdline) for p in settings.process_signal_allowlist):
        return refused(
            f"process_signal refused: the command of pid {args.pid} matches no pattern of "
            "OPSGRAPH_PROCESS_SIGNAL_ALLOWLIST",
            process=info,
        )
    if args.create_time is not None and abs(proc.create_time() - args.create_time) > 0.01:
        return refused(f"process_signal refused: pid {args.pid} is now another process than the one approved")
    return proc, info


def _describe(info: dict[str, object]) -> str:
    rss = int(info["rss_bytes"]) / 2**20  # type: ignore[call-overload]
    return f"pid {info['pid']} ({info['command']}) of {info['user']}, up {info['age_s']}s, {rss:.1f} MiB RSS"


def _preview_signal(args: ProcessSignalArgs, ctx: ToolContext) -> ToolResult:
    found = _inspect(args, ctx.settings)
    if isinstance(found, ToolResult):
        return found
    _, info = found
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would send SIG{args.signal} to {_describe(info)}",
        data={"signal": args.signal, "process": info},
    )


@CATALOG.tool(
    args=ProcessSignalArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=20,
    cost_hint_s=0.5,
    prerequisites=[_signal_allowlisted],
    preview_fn=_preview_signal,
)
def process_signal(args: ProcessSignalArgs, ctx: ToolContext) -> ToolResult:
    """Send TERM or KILL to a process whose command line matches OPSGRAPH_PROCESS_SIGNAL_ALLOWLIST.

    Never pid 1 or opsgraph's own processes; waits a few seconds and says whether the process exited."""
    found = _inspect(args, ctx.settings)
    if isinstance(found, ToolResult):
        return found
    proc, info = found
    try:
        proc.send_signal(_SIGNALS[args.signal])
    except psutil.NoSuchProcess:
        return failed(f"pid {args.pid} exited before the signal", "not_found", process=info)
    except psutil.AccessDenied:
        return failed(f"no permission to signal pid {args.pid}", "permission_denied", process=info)
    gone, _ = psutil.wait_procs([proc], timeout=_EXIT_WAIT_S)
    exited = bool(gone) or not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    summary = f"sent SIG{args.signal} to {_describe(info)}: " + (
        "it exited" if exited else f"still running after {_EXIT_WAIT_S:g}s"
    )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={"signal": args.signal, "process": info, "exited": exited},
        evidence=[summary],
    )


def _runbooks_configured(settings: Settings) -> str | None:
    if settings.runbooks_dir is None:
        return "no runbooks folder: set OPSGRAPH_RUNBOOKS_DIR"
    if not settings.runbooks_dir.is_dir():
        return f"OPSGRAPH_RUNBOOKS_DIR {settings.runbooks_dir} is not a folder"
    for runbook, patterns in settings.runbook_arg_patterns.items():
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                return f"OPSGRAPH_RUNBOOK_ARG_PATTERNS[{runbook!r}] has an invalid regex {pattern!r}: {exc}"
    return None


class RunRunbookArgs(ToolArgs):
    name: str = Field(min_length=1, max_length=255, description="The runbook's path inside the runbooks folder.")
    args: list[str] = Field(default_factory=list, max_length=16, description="Positional arguments (validated).")


def _resolve_runbook(args: RunRunbookArgs, settings: Settings) -> tuple[Path, list[str]] | ToolResult:
    """The executable and argv to run, or why not: outside the folder, not executable, an argument refused."""
    root = (settings.runbooks_dir or Path("/nonexistent")).resolve()
    path = (root / args.name).resolve()
    if not path.is_relative_to(root) or path == root:
        return refused(f"run_runbook refused: {args.name!r} is outside the runbooks folder")
    if not path.is_file():
        return failed(f"no runbook {args.name!r} in the runbooks folder", "not_found")
    if not os.access(path, os.X_OK):
        return refused(f"run_runbook refused: {args.name!r} is not executable")
    patterns = settings.runbook_arg_patterns.get(path.name)
    if patterns is not None and len(args.args) > len(patterns):
        return refused(f"run_runbook refused: {path.name} takes at most {len(patterns)} argument(s)")
    for i, value in enumerate(args.args):
        pattern = re.compile(patterns[i]) if patterns is not None else _RUNBOOK_SAFE_ARG
        if not pattern.fullmatch(value):
            return refused(f"run_runbook refused: argument {i + 1} {value[:60]!r} does not match {pattern.pattern!r}")
    return path, [str(path), *args.args]


def _head(path: Path) -> list[str]:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n")[:200] for _, line in zip(range(_PREVIEW_LINES), f, strict=False)]
    except OSError:
        return []


def _description(lines: list[str]) -> str:
    """The runbook's own account of itself: its first comment lines after the shebang."""
    comments = []
    for line in lines[1:] if lines and lines[0].startswith("#!") else lines:
        if not line.startswith("#"):
            break
        comments.append(line.lstrip("#").strip())
    return " ".join(c for c in comments if c)


def _preview_runbook(args: RunRunbookArgs, ctx: ToolContext) -> ToolResult:
    resolved = _resolve_runbook(args, ctx.settings)
    if isinstance(resolved, ToolResult):
        return resolved
    path, argv = resolved
    head = _head(path)
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would run {shlex.join(argv)} (time limit {ctx.settings.runbook_timeout_s:g}s)"
        + (f": {_description(head)}" if _description(head) else ""),
        data={
            "command": shlex.join(argv),
            "argv": argv,
            "description": _description(head),
            "head": head,
            "timeout_s": ctx.settings.runbook_timeout_s,
        },
    )


def _tail(data: bytes, limit: int) -> tuple[str, bool]:
    """The last `limit` bytes (an error is usually at the end), secrets in URLs masked."""
    cut = len(data) > limit
    text = data[-limit:].decode("utf-8", errors="replace")
    return redact(text), cut


@CATALOG.tool(
    args=RunRunbookArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=900,  # the worker's limit; RUNBOOK_TIMEOUT_S (at most 840) kills the runbook first
    cost_hint_s=10,
    prerequisites=[_runbooks_configured],
    preview_fn=_preview_runbook,
)
def run_runbook(args: RunRunbookArgs, ctx: ToolContext) -> ToolResult:
    """Run an executable from the runbooks folder with validated arguments, a time limit and captured output.

    No shell; a clean environment; a path that resolves outside the folder is refused."""
    resolved = _resolve_runbook(args, ctx.settings)
    if isinstance(resolved, ToolResult):
        return resolved
    path, argv = resolved
    limit_s, keep = ctx.settings.runbook_timeout_s, ctx.settings.runbook_output_bytes
    started = time.monotonic()
    # its own session, so a time-out kills everything it started, not only the first process
    proc = subprocess.Popen(
        argv,
        cwd=path.parent,
        env=dict(_RUNBOOK_ENV),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    elapsed = round(time.monotonic() - started, 3)
    output, truncated = _tail(out or b"", keep)
    data = {
        "command": shlex.join(argv),
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "duration_s": elapsed,
        "output": output,
        "output_truncated": truncated,
    }
    if timed_out:
        return failed(f"runbook {shlex.join(argv)} killed after its {limit_s:g}s time limit", "timeout", **data)
    if proc.returncode != 0:
        return failed(f"runbook {shlex.join(argv)} exited with {proc.returncode}", "runbook_failed", **data)
    last = output.strip().splitlines()[-1:] if output.strip() else []
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"runbook {shlex.join(argv)} succeeded in {elapsed:g}s" + (f": {last[0][:160]}" if last else ""),
        data=data,
        evidence=[f"{shlex.join(argv)} exit 0" + (f": {last[0][:160]}" if last else "")],
    )
