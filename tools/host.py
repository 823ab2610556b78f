"""This machine: CPU, memory, swap, disks (space and inodes), file descriptors, load, processes (psutil).

opsgraph never measures or matches itself: the CPU opsgraph's own processes spend while host_metrics samples
is taken out of the machine's figure (the sampling, the plan's other checks starting at the same moment), and
process_check skips opsgraph's processes (a question naming a service is on the command line of the CLI that
asked it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import Field

from core.logging import redact
from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding

_SKIP_FS = {
    "squashfs",
    "tmpfs",
    "devtmpfs",
    "overlay",
    "proc",
    "sysfs",
    "nsfs",
    "cgroup",
    "cgroup2",
    "autofs",
}


# what makes a command line opsgraph's own: the CLI, API, workers and scheduler all start as one of these
_OPSGRAPH_MODULES = ("services.cli", "services.launcher", "services.api", "workers.celery_app")


def is_opsgraph_cmdline(cmdline: list[str]) -> bool:
    if any(os.path.basename(a) == "opsgraph" for a in cmdline[:2]):  # the entry point, run directly or by python
        return True
    return any(m in a for a in cmdline[:4] for m in _OPSGRAPH_MODULES)


def opsgraph_pids() -> set[int]:
    """This process, its ancestors (the worker that runs it, the shell or CLI that started it) and every process
    whose command line is opsgraph's."""
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in me.parents())
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if is_opsgraph_cmdline(p.info["cmdline"] or []):
                pids.add(p.pid)
    return pids


@dataclass(frozen=True)
class CpuCounters:
    total: float  # CPU seconds of every kind, all cores
    busy: float  # of which not idle (and not waiting on I/O)
    own: float  # of which opsgraph's own processes


def read_cpu_counters(own: list[psutil.Process]) -> CpuCounters:
    t = psutil.cpu_times()
    total = sum(t)
    idle = t.idle + getattr(t, "iowait", 0.0)
    spent = 0.0
    for p in own:
        with contextlib.suppress(psutil.Error):
            c = p.cpu_times()
            spent += c.user + c.system
    return CpuCounters(total=total, busy=total - idle, own=spent)


def cpu_percent_without(before: CpuCounters, after: CpuCounters) -> float:
    """The machine's busy share between two readings, less what opsgraph itself spent."""
    total = after.total - before.total
    if total <= 0:
        return 0.0
    busy = (after.busy - before.busy) - max(0.0, after.own - before.own)
    return round(min(100.0, max(0.0, 100.0 * busy / total)), 1)


def file_descriptors() -> dict[str, int] | None:
    """System-wide open file handles against the kernel's limit (Linux /proc/sys/fs/file-nr)."""
    try:
        allocated, _free, maximum = Path("/proc/sys/fs/file-nr").read_text().split()[:3]
    except (OSError, ValueError):
        return None
    return {"used": int(allocated), "max": int(maximum)}


def _inodes(mount: str) -> tuple[float | None, int | None]:
    try:
        st = os.statvfs(mount)
    except OSError:
        return None, None
    if not st.f_files:  # file systems without inode limits (btrfs, some network mounts) report 0
        return None, None
    used = st.f_files - st.f_ffree
    return round(100.0 * used / st.f_files, 1), st.f_ffree


Sleep = Callable[[float], None]
_SAMPLE_STEP_S = 0.2


class HostMetricsArgs(ToolArgs):
    top: int = Field(5, ge=1, le=50, description="How many top processes to list.")
    sample_seconds: float = Field(2.0, ge=0.2, le=30, description="How long to sample CPU usage.")


def sample_cpu(
    seconds: float,
    own: list[psutil.Process],
    is_cancelled: Callable[[], bool],
    read: Callable[[list[psutil.Process]], CpuCounters] = read_cpu_counters,
    sleep: Sleep = time.sleep,
) -> list[float] | None:
    """CPU busy % every 0.2 s for `seconds`, opsgraph's own CPU taken out; None when cancelled.

    One warm-up step is taken and dropped: it overlaps the start of the plan (this tool's set-up and its sibling
    checks), which is opsgraph's work, not the machine's."""
    steps = max(1, int(seconds / _SAMPLE_STEP_S))
    series: list[float] = []
    last = read(own)
    for i in range(steps + 1):
        if is_cancelled():
            return None
        sleep(_SAMPLE_STEP_S)
        now = read(own)
        if i > 0:
            series.append(cpu_percent_without(last, now))
        last = now
    return series


@CATALOG.tool(args=HostMetricsArgs, timeout_s=45, cost_hint_s=2.7, cost_fn=lambda a: a.sample_seconds + 0.7)
def host_metrics(args: HostMetricsArgs, ctx: ToolContext) -> ToolResult:
    """CPU, memory, swap, disks (space and inodes), file descriptors, load average and the top processes of this
    machine, with a CPU usage series.

    The series (one sample every 0.2 s, opsgraph's own CPU taken out) lets metric_anomalies look for spikes in it.
    """
    mine = opsgraph_pids()
    own = []
    for pid in mine:
        with contextlib.suppress(psutil.Error):
            own.append(psutil.Process(pid))
    procs = list(psutil.process_iter(["pid", "name", "username", "memory_percent"]))
    for p in procs:  # prime per-process CPU counters so the sample below measures the same window
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    series = sample_cpu(args.sample_seconds, own, ctx.is_cancelled, read=read_cpu_counters)
    if series is None:
        return ToolResult(status=ToolStatus.ERROR, summary="host_metrics cancelled")
    top = []
    for p in procs:
        if p.pid in mine:
            continue
        try:
            top.append(
                {
                    "pid": p.pid,
                    "name": p.info["name"],
                    "user": p.info["username"],
                    "cpu_percent": round(p.cpu_percent(None), 1),
                    "memory_percent": round(p.info["memory_percent"] or 0.0, 2),
                }
            )
        except psutil.Error:
            continue
    top.sort(key=lambda r: (r["cpu_percent"], r["memory_percent"]), reverse=True)
    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    load1, load5, load15 = os.getloadavg()
    cores = psutil.cpu_count() or 1
    disks = []
    for part in psutil.disk_partitions(all=False):
        if part.fstype in _SKIP_FS:
            continue
        try:
            du = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue
        inodes_percent, inodes_free = _inodes(part.mountpoint)
        disks.append(
            {
                "mount": part.mountpoint,
                "device": part.device,
                "fstype": part.fstype,
                "percent": du.percent,
                "free_bytes": du.free,
                "free_gb": round(du.free / 2**30, 2),
                "total_bytes": du.total,
                "inodes_percent": inodes_percent,
                "inodes_free": inodes_free,
            }
        )
    fds = file_descriptors()
    cpu_avg = round(sum(series) / len(series), 1)
    findings = []
    if vm.percent >= 90:
        findings.append(finding("critical", f"memory {vm.percent:.0f}% used"))
    elif vm.percent >= 80:
        findings.append(finding("warn", f"memory {vm.percent:.0f}% used"))
    if sw.total and sw.percent >= 50 and vm.percent >= 80:
        findings.append(finding("warn", f"swap {sw.percent:.0f}% used while memory is {vm.percent:.0f}% used"))
    for d in disks:
        if d["percent"] >= 90:
            findings.append(finding("critical", f"disk {d['mount']} {d['percent']:.0f}% full"))
        elif d["percent"] >= 80:
            findings.append(finding("warn", f"disk {d['mount']} {d['percent']:.0f}% full"))
        if d["inodes_percent"] is not None and d["inodes_percent"] >= 90:
            findings.append(finding("critical", f"disk {d['mount']} {d['inodes_percent']:.0f}% of inodes used"))
    if fds and fds["max"] and fds["used"] >= 0.9 * fds["max"]:
        findings.append(finding("critical", f"{fds['used']} of {fds['max']} file descriptors open"))
    if load5 > 2 * cores:
        findings.append(finding("warn", f"load {load5:.2f} over 5 min on {cores} cores"))
    if cpu_avg >= 90:
        findings.append(finding("warn", f"CPU {cpu_avg:.0f}% busy while sampled"))
    if not findings:
        findings.append(finding("ok", "CPU, memory, swap, disks, file descriptors and load within normal limits"))
    summary = (
        f"CPU {cpu_avg:.0f}% ({cores} cores), memory {vm.percent:.0f}%, swap {sw.percent:.0f}%, "
        f"load {load1:.2f}/{load5:.2f}/{load15:.2f}"
        + (f", fullest disk {max(d['percent'] for d in disks):.0f}%" if disks else "")
        + (f", {fds['used']}/{fds['max']} file descriptors" if fds else "")
    )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "host": os.uname().nodename,
            "cpu_percent": cpu_avg,
            "cpu_series": series,
            "cpu_series_step_s": _SAMPLE_STEP_S,
            "cores": cores,
            "memory": {
                "percent": vm.percent,
                "total_gb": vm.total / 2**30,
                "available_gb": vm.available / 2**30,
            },
            "swap_percent": sw.percent,
            "swap": {"percent": sw.percent, "total_gb": sw.total / 2**30, "used_gb": sw.used / 2**30},
            "load": [load1, load5, load15],
            "disks": disks,
            "fds": fds,
            "top_processes": top[: args.top],
            "uptime_s": time.time() - psutil.boot_time(),
            "captured_at": time.time(),
            "excluded_own_pids": len(mine),
            "findings": findings,
        },
        evidence=[
            f"CPU over {args.sample_seconds:.1f}s (opsgraph's own use excluded): {cpu_avg:.1f}%",
            f"memory: {vm.percent}% used of {vm.total / 2**30:.1f} GiB; swap {sw.percent}%",
            f"load average: {load1:.2f} {load5:.2f} {load15:.2f} on {cores} cores",
            *[
                f"disk {d['mount']}: {d['percent']}% used, {d['free_gb']} GiB free"
                + (f", inodes {d['inodes_percent']}%" if d["inodes_percent"] is not None else "")
                for d in disks[:5]
            ],
            *([f"file descriptors: {fds['used']} of {fds['max']}"] if fds else []),
            *[f"top: {p['name']} (pid {p['pid']}) cpu {p['cpu_percent']}%" for p in top[:3]],
        ],
    )


class ProcessCheckArgs(ToolArgs):
    name: str = Field(min_length=1, max_length=128, description="Process name or a word of its command line.")
    min_count: int = Field(1, ge=0, le=10_000, description="How many must be running to count as healthy.")


@CATALOG.tool(args=ProcessCheckArgs, timeout_s=20, cost_hint_s=0.3)
def process_check(args: ProcessCheckArgs, ctx: ToolContext) -> ToolResult:
    """Whether processes matching a name are running: count, PIDs, CPU, memory and uptime."""
    needle = args.name.lower()
    matches = []
    skipped_own = 0
    mine = opsgraph_pids()
    now = time.time()
    for p in psutil.process_iter(["pid", "name", "cmdline", "create_time", "memory_info", "status"]):
        try:
            name = (p.info["name"] or "").lower()
            cmd = " ".join(p.info["cmdline"] or []).lower()
            if needle not in name and needle not in cmd:
                continue
            if p.pid in mine:  # the CLI, API or worker whose command line holds the question
                skipped_own += 1
                continue
            matches.append(
                {
                    "pid": p.pid,
                    "name": p.info["name"],
                    "status": p.info["status"],
                    "rss_mb": round((p.info["memory_info"].rss if p.info["memory_info"] else 0) / 2**20, 1),
                    "uptime_s": round(now - (p.info["create_time"] or now)),
                    "cmdline": redact(cmd)[:160],
                }
            )
        except psutil.Error:
            continue
    healthy = len(matches) >= args.min_count
    summary = f"{len(matches)} process(es) match {args.name!r}" + ("" if healthy else f", want {args.min_count}")
    return ToolResult(
        status=ToolStatus.SUCCESS if matches or args.min_count == 0 else ToolStatus.NO_DATA,
        summary=summary,
        data={
            "pattern": args.name,
            "count": len(matches),
            "running": len(matches),
            "pids": [m["pid"] for m in matches[:50]],
            "healthy": healthy,
            "min_count": args.min_count,
            "skipped_own": skipped_own,
            "processes": matches[:20],
            "findings": [
                finding("ok", summary) if healthy else finding("critical", f"{args.name} is not running: {summary}")
            ],
        },
        evidence=[f"pid {m['pid']} {m['name']} up {m['uptime_s']}s rss {m['rss_mb']} MB" for m in matches[:5]],
    )
