"""This machine: CPU, memory, disk, load, processes (psutil)."""

from __future__ import annotations

import contextlib
import os
import time

import psutil
from pydantic import Field

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


class HostMetricsArgs(ToolArgs):
    top: int = Field(5, ge=1, le=50, description="How many top processes to list.")
    sample_seconds: float = Field(2.0, ge=0.2, le=30, description="How long to sample CPU usage.")


@CATALOG.tool(args=HostMetricsArgs, timeout_s=45, cost_hint_s=2.5, cost_fn=lambda a: a.sample_seconds + 0.5)
def host_metrics(args: HostMetricsArgs, ctx: ToolContext) -> ToolResult:
    """CPU, memory, swap, disk, load average and the top processes of this machine, with a CPU usage series.

    The series (one sample every 0.2 s) lets metric_anomalies look for spikes in it.
    """
    procs = list(psutil.process_iter(["pid", "name", "username", "memory_percent"]))
    for p in procs:  # prime per-process CPU counters so the sample below measures the same window
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    series: list[float] = []
    steps = max(1, int(args.sample_seconds / 0.2))
    for _ in range(steps):
        if ctx.is_cancelled():
            return ToolResult(status=ToolStatus.ERROR, summary="host_metrics cancelled")
        series.append(psutil.cpu_percent(interval=0.2))
    top = []
    for p in procs:
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
        disks.append(
            {
                "mount": part.mountpoint,
                "fstype": part.fstype,
                "percent": du.percent,
                "free_gb": du.free / 2**30,
            }
        )
    cpu_avg = sum(series) / len(series)
    findings = []
    if vm.percent >= 90:
        findings.append(finding("critical", f"memory {vm.percent:.0f}% used"))
    elif vm.percent >= 80:
        findings.append(finding("warn", f"memory {vm.percent:.0f}% used"))
    for d in disks:
        if d["percent"] >= 90:
            findings.append(finding("critical", f"disk {d['mount']} {d['percent']:.0f}% full"))
        elif d["percent"] >= 80:
            findings.append(finding("warn", f"disk {d['mount']} {d['percent']:.0f}% full"))
    if load5 > 2 * cores:
        findings.append(finding("warn", f"load {load5:.2f} over 5 min on {cores} cores"))
    if cpu_avg >= 90:
        findings.append(finding("warn", f"CPU {cpu_avg:.0f}% busy while sampled"))
    if not findings:
        findings.append(finding("ok", "CPU, memory, disk and load within normal limits"))
    summary = (
        f"CPU {cpu_avg:.0f}% ({cores} cores), memory {vm.percent:.0f}%, load {load1:.2f}/{load5:.2f}/{load15:.2f}"
        + (f", fullest disk {max(d['percent'] for d in disks):.0f}%" if disks else "")
    )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "cpu_percent": round(cpu_avg, 1),
            "cpu_series": series,
            "cores": cores,
            "memory": {
                "percent": vm.percent,
                "total_gb": vm.total / 2**30,
                "available_gb": vm.available / 2**30,
            },
            "swap_percent": sw.percent,
            "load": [load1, load5, load15],
            "disks": disks,
            "top_processes": top[: args.top],
            "uptime_s": time.time() - psutil.boot_time(),
            "findings": findings,
        },
        evidence=[
            f"psutil.cpu_percent over {args.sample_seconds:.1f}s: {cpu_avg:.1f}%",
            f"psutil.virtual_memory: {vm.percent}% used of {vm.total / 2**30:.1f} GiB",
            f"os.getloadavg: {load1:.2f} {load5:.2f} {load15:.2f}",
            *[f"disk {d['mount']}: {d['percent']}% used" for d in disks[:5]],
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
    now = time.time()
    for p in psutil.process_iter(["pid", "name", "cmdline", "create_time", "memory_info", "status"]):
        try:
            name = (p.info["name"] or "").lower()
            cmd = " ".join(p.info["cmdline"] or []).lower()
            if needle not in name and needle not in cmd:
                continue
            if p.pid == os.getpid():
                continue
            matches.append(
                {
                    "pid": p.pid,
                    "name": p.info["name"],
                    "status": p.info["status"],
                    "rss_mb": round((p.info["memory_info"].rss if p.info["memory_info"] else 0) / 2**20, 1),
                    "uptime_s": round(now - (p.info["create_time"] or now)),
                    "cmdline": cmd[:160],
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
            "count": len(matches),
            "healthy": healthy,
            "processes": matches[:20],
            "findings": [
                finding("ok", summary) if healthy else finding("critical", f"{args.name} is not running: {summary}")
            ],
        },
        evidence=[f"pid {m['pid']} {m['name']} up {m['uptime_s']}s rss {m['rss_mb']} MB" for m in matches[:5]],
    )
