"""Disks saturated by I/O: a device `iostat -x` shows busy all the time with requests waiting long, and the
processes `pidstat -d` shows doing that I/O. Whatever runs on the host (a database, a Kubernetes node's pods) waits
on the disk, so its slowness is a symptom of this cause; the heaviest writer or reader is named when it is known."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import HOST_HW, Rec, signature_records
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.host import node_pod_tags
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

BUSY_UTIL = 90.0  # %util: the device had a request in flight this share of the time
SLOW_AWAIT_MS = 20.0  # and requests waited this long (an SSD answers in well under a millisecond)
LONG_QUEUE = 8.0  # or this many requests queued on the device on average
# what a saturated disk explains: whatever on its host reads or writes and so waits
_EXPLAINS = ["latency", "slow_query", "slow_queries", "db_waits", "errors", "upstream_timeout", "http_5xx", "io_wait",
             "cpu_iowait", "metric_shift", "backlog", "replication_lag", "probe_*", "alert:*"]  # fmt: skip


def _device_errors(evidence: EvidenceSet, source: str, device: str) -> list[Rec]:
    """The kernel's hardware error lines about this device: naming it, or printed in the same saved session as the
    iostat that showed it saturated (libata names its port, `ata1.00`, not the disk). Hung tasks are the disk's
    effect, not its fault."""
    name = re.compile(rf"\b{re.escape(device)}\b")
    return [
        r
        for r in signature_records(evidence)
        if HOST_HW.search(r.msg)
        and "blocked for more than" not in r.msg
        and (name.search(r.msg) or (r.item.source == source and " ata" in f" {r.msg}"))
    ]


def _top_process(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    return procs[0] if procs and procs[0]["read_kbs"] + procs[0]["write_kbs"] > 0 else None


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"host/snapshot"})
def disk_io_saturation(evidence: EvidenceSet) -> list[Finding]:
    snaps = evidence.kind("host/snapshot")
    procs = {s.object: s for s in snaps if s.data.get("io_processes")}
    out: list[Finding] = []
    for snap in snaps:
        host = snap.object.removeprefix("host/")
        for i, dev in enumerate(snap.data.get("io") or ()):
            util, wait = dev.get("util"), dev.get("await_ms")
            queue = dev.get("queue") or 0.0
            if util is None or wait is None or util < BUSY_UTIL or (wait < SLOW_AWAIT_MS and queue < LONG_QUEUE):
                continue
            refs = [EvidenceRef(item=snap.id, field=f"io.{i}.util", value=util),
                    EvidenceRef(item=snap.id, field=f"io.{i}.await_ms", value=wait)]  # fmt: skip
            who = ""
            proc_item = procs.get(snap.object)
            top = _top_process(proc_item.data["io_processes"]) if proc_item else None
            if proc_item is not None and top is not None:
                same = [p for p in proc_item.data["io_processes"] if p["command"] == top["command"]]
                rate = sum(p["read_kbs"] + p["write_kbs"] for p in same) / 1024
                who = f"; {top['command']} ({len(same)} process(es), pid {top['pid']}) does most, {rate:,.0f} MB/s"
                refs.append(EvidenceRef(item=proc_item.id, field="io_processes.0.command", value=top["command"]))
            iowait = snap.data.get("iowait")
            failing = _device_errors(evidence, snap.source, str(dev["device"]))
            if failing:
                out.append(_failing_disk(evidence, dev, host, refs, failing))
                continue
            out.append(
                Finding(
                    analyzer="disk_io_saturation",
                    domain=Domain.HOST,
                    role="cause",
                    code="disk_io_saturated",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"disk {dev['device']} on {host} saturated ({util:.0f}% busy, {wait:.0f} ms per request)",
                    mechanism=(
                        f"disk {dev['device']} on {host} is {util:.0f}% busy and its requests wait {wait:.0f} ms "
                        f"(queue {dev.get('queue') or 0:.0f})"
                        + (f", the CPUs {iowait:.0f}% in iowait" if iowait else "")
                        + f"{who}: everything on {host} that reads or writes waits on the disk"
                    ),
                    object=f"disk {dev['device']} on {host}",
                    score=0.75 if top is not None else 0.65,
                    tags=[f"host:{host}", f"disk:{host}/{dev['device']}", *node_pod_tags(evidence, host)],
                    explains=_EXPLAINS,
                    evidence=refs,
                    actions=[
                        Action(description="Which processes do the I/O", command=f"ssh {host} sudo pidstat -d 5 3"),
                        Action(description="Watch the device", command=f"ssh {host} iostat -xz {dev['device']} 5 3"),
                    ]
                    + (
                        [
                            Action(
                                description=f"Stop the process flooding the disk (pid {top['pid']}) if it is not "
                                f"meant to run",
                                command=f"ssh {host} sudo kill {top['pid']}",
                                kind="write",
                            )
                        ]
                        if top is not None
                        else []
                    ),
                )
            )
    return out


def _failing_disk(
    evidence: EvidenceSet, dev: dict[str, Any], host: str, refs: list[EvidenceRef], errs: list[Rec]
) -> Finding:
    """A saturated disk whose commands the kernel reports timing out or failing: the device is failing, and its queue
    is full of requests waiting on timeouts and link resets, not of more work than it can do."""
    name = dev["device"]
    return Finding(
        analyzer="disk_io_saturation",
        domain=Domain.HOST,
        role="cause",
        code="disk_failing",
        category=Category.INFRASTRUCTURE,
        title=f"disk {name} on {host} failing ({len(errs)} kernel error line(s)) and saturated",
        mechanism=(
            f"disk {name} on {host} is failing: the kernel logged '{errs[-1].msg.strip()[:140]}' ({len(errs)} error "
            f"line(s)), and its requests wait {dev['await_ms']:.0f} ms at {dev['util']:.0f}% busy (queue "
            f"{dev.get('queue') or 0:.0f}): commands time out and the link is reset, so everything on {host} that "
            "writes to it (an fsync, a database's log) stalls"
        ),
        object=f"disk {name} on {host}",
        score=0.85,
        ts=min((r.ts for r in errs if r.ts is not None), default=None),
        tags=[f"host:{host}", f"disk:{host}/{name}", f"device:{name}", *node_pod_tags(evidence, host)],
        explains=[*_EXPLAINS, "host_hardware_error", "disk_io_saturated", "disk_latency", "leader_changes"],
        evidence=[*refs, *(EvidenceRef(item=r.item.id, line=r.line, value=r.msg.strip()[:300]) for r in errs[-2:])],
        actions=[
            Action(
                description="The device's health and error counters", command=f"ssh {host} sudo smartctl -a /dev/{name}"
            ),
            Action(
                description="Move what writes to it (etcd, a database's WAL) off this disk and replace it",
                command=f"ssh {host} sudo dmesg -T | grep -E '{name}|ata' | tail -30",
            ),
        ],
    )
