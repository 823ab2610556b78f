"""Host: disks and inodes full, the kernel OOM killer, file-descriptor exhaustion, one process saturating the
CPU, memory pressure with swapping, a process that is down, and disk/kernel hardware errors.

Reads the live host snapshot and process check, and any log (dmesg, syslog, journal, application logs).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from diagnosis.analyzers._common import (
    BROKER_ALARM,
    HOST_CONNTRACK,
    HOST_DISK,
    HOST_EPHEMERAL,
    HOST_FDS,
    HOST_HW,
    HOST_LOST,
    HOST_OOM,
    HOST_PIDS,
    Rec,
    Searcher,
    first_and_last_refs,
    host_of_kernel_file,
    is_db_storage_line,
    now_of,
    ref_of,
    service_of,
    signature_records,
    span_text,
    with_aliases,
)
from diagnosis.analyzers._kube import kube_index
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

# A file system at >= 95% (space or inodes) fails writes soon (ext4 keeps 5% for root; databases and logs burst);
# 90-95% is a warning worth an action but not a failure (benign, so a full-ish but working disk reads healthy).
DISK_FULL = 95.0
DISK_HIGH = 90.0
# File descriptors at >= 90% of the limit: the next burst of connections fails with EMFILE.
FDS_HIGH = 0.9
# CPU saturated at >= 90%; one process is the cause when it uses >= 50% of the machine's CPU.
CPU_HIGH = 90.0
CPU_PROCESS_SHARE = 0.5
# Memory pressure: >= 95% used with >= 50% of swap in use (the kernel is paging working memory).
MEM_HIGH = 95.0
SWAP_HIGH = 50.0
# An OOM kill or a disk error older than this before "now" is history, not the current fault.
STALE_AFTER_S = 3600

_OOM_KILLED = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process (\d+) \(([^)]+)\)"
    r"(?:.*?anon-rss:(\d+)kB)?",
    re.I,
)
_OOM_KILL_LINE = re.compile(r"oom-kill:.*?task=([^,\s]+),pid=(\d+)", re.I)
_OOM_MEMCG = re.compile(r"CONSTRAINT_MEMCG|Memory cgroup out of memory|oom_memcg=(\S+)", re.I)
# systemd: "search-indexer.service: A process of this unit has been killed by the OOM killer."
_SYSTEMD_OOM = re.compile(
    r"([\w@.\-]+)\.service: (?:A process of this unit has been killed by the OOM killer|Failed with result 'oom-kill')",
    re.I,
)
_PG_SIGNAL9 = re.compile(r"server process \(PID (\d+)\) was terminated by signal 9", re.I)
_MOUNT = re.compile(r"(?:on|mount(?:point)?|filesystem|fs|dir|directory)[\s:=]+\"?(/[\w./\-]*)", re.I)
_PATH = re.compile(r"(/(?:var|data|tmp|home|srv|opt|mnt|usr|log)[\w./\-]*)")
_DEVICE = re.compile(
    r"\b((?:eth|ens|enp|eno|bond)\w*):|"
    r"EXT4-fs error \(device (\w+)\)|\bdev (\w+)|\bnvme (nvme\d+(?:n\d+)?)\b|\bdevice (\w+)|\(([A-Za-z]\w*)\)|"
    r"\[(sd[a-z]+)\] tag#",
    re.I,
)


# what a process or host that went away explains: its own absence and what its clients saw
_DOWN_EFFECTS = [
    "process_down",
    "pod_restarts",
    "crash_loop",
    "errors",
    "exception",
    "db_connection_errors",
    "connection_refused",
    "upstream_reset",
    "upstream_timeout",
    "upstream_5xx",
    "http_5xx",
    "latency",
]


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"host/snapshot", "host/process", "log"})
def host(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    out: list[Finding] = []
    for snap in evidence.kind("host/snapshot"):
        out += _snapshot(snap)
    oom = _oom_kills(evidence, now)
    out += oom
    killed = {t for f in oom for t in f.tags if t.startswith("process:")}
    for proc in evidence.kind("host/process"):
        out += _process(proc, killed)
    out += _log_signatures(evidence, now)
    return with_aliases(out)


# ---------------------------------------------------------------- live snapshot


def _snapshot(snap: EvidenceItem) -> list[Finding]:
    d = snap.data
    host = snap.object.split("/", 1)[-1] if snap.object.startswith("host/") else snap.object
    tags = [f"host:{host}"]
    out: list[Finding] = []
    for i, disk in enumerate(d.get("disks") or ()):
        mount = str(disk.get("mount") or disk.get("mountpoint") or "?")
        for key, what in (("percent", "space"), ("inodes_percent", "inodes")):
            pct = _num(disk.get(key))
            if pct is None or pct < DISK_HIGH:
                continue
            full = pct >= DISK_FULL
            free = disk.get("free_bytes")
            out.append(
                Finding(
                    analyzer="host",
                    domain=Domain.HOST,
                    role="cause" if full else "benign",
                    code=("disk_full" if what == "space" else "inodes_full") if full else "disk_nearly_full",
                    category=Category.RESOURCE_EXHAUSTION if full else Category.HEALTHY,
                    title=f"{host}: {mount} {what} {pct:.0f}% used",
                    mechanism=(
                        f"file system {mount} on {host} is {pct:.0f}% full of {what}"
                        + (
                            f" ({free / 2**30:.1f} GiB free)"
                            if isinstance(free, int | float) and what == "space"
                            else ""
                        )
                        + (
                            ": writes there fail with 'No space left on device'."
                            if full
                            else ": not failing yet, but close."
                        )
                    ),
                    object=f"file system {mount} on {host}",
                    score=0.85 if full else 0.55,
                    ts=snap.ts,
                    tags=[*tags, f"fs:{mount}"],
                    explains=[
                        "errors",
                        "disk_full",
                        "pod_restarts",
                        "http_5xx",
                        "process_down",
                        "db_connection_errors",
                    ],
                    evidence=[EvidenceRef(item=snap.id, field=f"disks.{i}.{key}", value=pct)],
                    actions=_disk_actions(mount, what),
                )
            )
    fds = d.get("fds") or {}
    used, mx = _num(fds.get("used")), _num(fds.get("max"))
    if used is not None and mx and used >= FDS_HIGH * mx:
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="cause",
                code="fd_exhaustion",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{host}: {used:.0f} of {mx:.0f} file descriptors in use",
                mechanism=(
                    f"{host} uses {used:.0f} of its {mx:.0f} file descriptors: new sockets and files fail with "
                    "'Too many open files'."
                ),
                object=f"file descriptors on {host}",
                score=0.8,
                ts=snap.ts,
                tags=tags,
                explains=["errors", "connection_refused", "http_5xx", "latency"],
                evidence=[
                    EvidenceRef(item=snap.id, field="fds.used", value=used),
                    EvidenceRef(item=snap.id, field="fds.max", value=mx),
                ],
                actions=_fd_actions(None),
            )
        )
    cpu = _num(d.get("cpu_percent"))
    top = [p for p in (d.get("top") or d.get("top_processes") or ()) if isinstance(p, dict)]
    cores = _num(d.get("cpu_count") or d.get("cores")) or 1.0
    if cpu is not None and cpu >= CPU_HIGH:
        hog = max(top, key=lambda p: _num(p.get("cpu_percent")) or 0.0, default=None)
        # psutil counts a process' CPU per core (400% = 4 cores busy); the machine's share divides by the cores
        share = ((_num(hog.get("cpu_percent")) or 0.0) / (100.0 * cores)) if hog else 0.0
        if hog and share >= CPU_PROCESS_SHARE:
            pid, name = hog.get("pid"), hog.get("name")
            out.append(
                Finding(
                    analyzer="host",
                    domain=Domain.HOST,
                    role="cause",
                    code="cpu_saturated_by_process",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{host}: {name} (pid {pid}) uses {hog.get('cpu_percent')}% CPU",
                    mechanism=(
                        f"{host}'s CPU is at {cpu:.0f}%, {share:.0%} of it taken by {name} (pid {pid}); everything "
                        "else on the machine waits for CPU."
                    ),
                    object=f"process {name} pid {pid} on {host}",
                    score=0.8,
                    ts=snap.ts,
                    tags=[*tags, f"pid:{pid}", f"process:{name}"],
                    explains=["cpu_high", "latency", "upstream_timeout", "errors"],
                    evidence=[
                        EvidenceRef(item=snap.id, field="cpu_percent", value=cpu),
                        EvidenceRef(
                            item=snap.id,
                            field=f"{'top' if d.get('top') else 'top_processes'}.{top.index(hog)}.cpu_percent",
                            value=hog.get("cpu_percent"),
                        ),
                    ],
                    actions=[
                        Action(
                            description=f"What {name} is doing",
                            command=f"top -H -b -n 1 -p {pid} | head -20; cat /proc/{pid}/status | grep -E 'State|Threads'",  # noqa: E501 (an exact command or data line reads better whole)
                        ),
                        Action(
                            description=f"Stop {name} (pid {pid}) if it is runaway work",
                            command=f"kill -TERM {pid}",
                            kind="write",
                            tool="process_signal",
                            args={"pid": pid, "signal": "TERM"},
                        ),
                    ],
                )
            )
        else:
            out.append(
                Finding(
                    analyzer="host",
                    domain=Domain.HOST,
                    role="symptom",
                    code="cpu_high",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{host}: CPU {cpu:.0f}%",
                    mechanism=f"{host}'s CPU is at {cpu:.0f}%, spread over several processes.",
                    object=f"CPU of {host}",
                    score=0.5,
                    ts=snap.ts,
                    tags=tags,
                    evidence=[EvidenceRef(item=snap.id, field="cpu_percent", value=cpu)],
                )
            )
    mem, swap = _num(d.get("mem_percent")), _num(d.get("swap_percent"))
    if mem is not None and mem >= MEM_HIGH and (swap or 0) >= SWAP_HIGH:
        hog = max(top, key=lambda p: _num(p.get("memory_percent") or p.get("mem_percent")) or 0.0, default=None)
        who = (
            (
                f"; the largest is {hog.get('name')} (pid {hog.get('pid')}, "
                f"{hog.get('memory_percent') or hog.get('mem_percent')}%)"
            )
            if hog
            else ""
        )
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="cause",
                code="memory_pressure",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{host}: memory {mem:.0f}% used, swap {swap:.0f}%",
                mechanism=(
                    f"{host} is out of memory ({mem:.0f}% used) and paging ({swap:.0f}% swap used){who}: "
                    "everything slows on page faults and the OOM killer is next."
                ),
                object=f"memory of {host}",
                score=0.75,
                ts=snap.ts,
                tags=tags + ([f"pid:{hog.get('pid')}", f"process:{hog.get('name')}"] if hog else []),
                explains=["latency", "memory_high", "cpu_high", "errors", "upstream_timeout"],
                evidence=[
                    EvidenceRef(item=snap.id, field="mem_percent", value=mem),
                    EvidenceRef(item=snap.id, field="swap_percent", value=swap),
                ],
                actions=[
                    Action(
                        description="Largest processes by resident memory",
                        command="ps -eo pid,comm,rss --sort=-rss | head -10",
                    )
                ],
            )
        )
    return out


def _process(proc: EvidenceItem, killed: set[str]) -> list[Finding]:
    d = proc.data
    if d.get("running", True):
        return []
    pattern = str(d.get("pattern") or proc.object.split("/", 1)[-1])
    return [
        Finding(
            analyzer="host",
            domain=Domain.HOST,
            role="symptom",
            code="process_down",
            category=Category.UNKNOWN,
            title=f"process {pattern} is not running",
            mechanism=f"no process matches '{pattern}': the service is down"
            + (
                "; the kernel OOM killer killed it (see that finding)."
                if f"process:{pattern}" in killed
                else "; why it stopped is not in the evidence."
            ),
            object=f"process {pattern}",
            score=0.6,
            ts=proc.ts,
            tags=[f"process:{pattern}", f"service:{pattern}"],
            evidence=[EvidenceRef(item=proc.id, field="running", value=False)],
            needs=[f"logs of {pattern} (journalctl -u {pattern})", "kernel log (dmesg -T) for OOM kills or segfaults"],
            actions=[
                Action(
                    description=f"Why {pattern} stopped",
                    command=f"journalctl -u {pattern} --since '-1h' --no-pager | tail -50; dmesg -T | tail -50",
                ),
                Action(
                    description=f"Start {pattern} again",
                    command=f"systemctl restart {pattern}",
                    kind="write",
                    tool="run_runbook",
                    args={"runbook": "restart-service", "service": pattern},
                ),
            ],
        )
    ]


# ---------------------------------------------------------------- logs


def _oom_kills(evidence: EvidenceSet, now: float | None) -> list[Finding]:
    kills: dict[str, list[tuple[Rec, str, str | None]]] = defaultdict(list)  # process name -> (rec, pid, rss kB)
    units: dict[str, list[Rec]] = defaultdict(list)  # systemd unit -> its "killed by the OOM killer" lines
    for rec in signature_records(evidence):
        if not HOST_OOM.search(rec.msg):
            continue
        m = _OOM_KILLED.search(rec.msg)
        if m:
            kills[m.group(2)].append((rec, m.group(1), m.group(3)))
            continue
        m2 = _OOM_KILL_LINE.search(rec.msg)
        if m2:
            kills[m2.group(1)].append((rec, m2.group(2), None))
            continue
        m3 = _PG_SIGNAL9.search(rec.msg)
        if m3:
            kills["postgres"].append((rec, m3.group(1), None))
            continue
        m4 = _SYSTEMD_OOM.search(rec.msg)
        if m4:
            units[m4.group(1)].append(rec)
    # a kill the kernel logged names the process ("java"); systemd names the unit that ran it ("search-indexer"):
    # the unit is the service an operator knows, so it names the finding when the kernel's memcg line ties them
    unit_of: dict[str, str] = {}
    for name, hits in kills.items():
        for rec, _, _ in hits:
            mu = re.search(r"task_memcg=/[\w.\-/]*?([\w@.\-]+)\.service", rec.msg)
            if mu:
                unit_of[name] = mu.group(1)
    if len(units) == 1 and kills and not unit_of:
        unit_of = {name: next(iter(units)) for name in kills}
    for unit_name, unit_recs in units.items():
        if unit_name not in unit_of.values():
            kills[unit_name] = [(r, "?", None) for r in unit_recs]
    out = []
    for name, hits in kills.items():
        unit: str | None = unit_of.get(name)
        if unit:
            hits = hits + [(r, pid, None) for r in units.get(unit, []) for pid in ([hits[0][1]] if hits else ["?"])]
        # "oom-kill:" and "Killed process" lines describe the same kill: count distinct pids
        pids = list(dict.fromkeys(pid for _, pid, _ in hits if pid != "?")) or ["?"]
        recs = sorted((r for r, _, _ in hits), key=lambda r: r.ts or 0)
        last = recs[-1].ts
        host = _host_of(recs[0])
        memcg = any(_OOM_MEMCG.search(r.msg) for r in recs)
        rss = next((int(kb) for _, _, kb in hits if kb), None)
        stale = now is not None and last is not None and now - last >= STALE_AFTER_S
        where = "its container's memory limit (cgroup)" if memcg else f"{host or 'the host'}'s memory"
        memcg_unit = next((u for r in recs if (u := _systemd_unit(r.msg, "oom_memcg="))), None)
        if memcg and memcg_unit:  # a systemd service's cgroup: its limit is the unit's MemoryMax
            where = f"the memory limit of systemd unit {memcg_unit} (MemoryMax=)"
        who = f"{unit} ({name})" if unit else name
        n_kills = len(pids) if pids != ["?"] else len(recs)
        tags = [f"process:{name}", f"service:{name}", *(f"pid:{p}" for p in pids[:10] if p != "?")]
        if unit:
            tags += [f"service:{unit}", f"process:{unit}"]
        if host:
            tags.append(f"host:{host}")
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="benign" if stale else "cause",
                code="kernel_oom_kill_old" if stale else "kernel_oom_kill",
                category=Category.HEALTHY if stale else Category.RESOURCE_EXHAUSTION,
                title=f"kernel oom-killer killed {who} (pid {', '.join(pids[:3])})",
                mechanism=(
                    f"the kernel's oom-killer killed {who} (pid {', '.join(pids[:5])}) {n_kills} time(s) "
                    f"{span_text(recs[0].ts, last)}: "
                    f"it exhausted {where}"
                    + (f" at {rss / 1024:.0f} MiB resident" if rss else "")
                    + "."
                    + (" That was long before the newest evidence: history." if stale else "")
                ),
                object=f"process {who} (pid {pids[0]})" + (f" on {host}" if host else ""),
                score=0.2 if stale else 0.9,
                ts=recs[0].ts,
                tags=tags,
                explains=[] if stale else [*_DOWN_EFFECTS, "memory_high"],
                evidence=[ref_of(r) for r in recs[:2]],
                actions=[
                    Action(
                        description="The kills and the memory each task used",
                        command="dmesg -T | grep -iE -A 20 'invoked oom-killer|Killed process'",
                    ),
                    Action(
                        description=f"{name}'s memory use against its limit",
                        command=f"ps -o pid,rss,vsz,comm -C {name}; systemctl show {name} -p MemoryMax 2>/dev/null",
                    ),
                ],
            )
        )
    return out


LINK_FLAPS = 2  # a network link that went down this often in the window is failing, not maintained
_LINK_DOWN = re.compile(r"NIC Link is Down|link status definitely down", re.I)

_HW_PARTS = (
    ("GPU", re.compile(r"NVRM: Xid|fallen off the bus", re.I)),
    (
        "network interface",
        re.compile(
            r"NETDEV WATCHDOG|\bTx\b.*completed on time|tx completions|Hardware Unit Hang|"
            r"TX timeout|mlx5_core|ixgbe|\bena \S+ eth|Link is Down|link status definitely down",
            re.I,
        ),
    ),
    (
        "storage controller",
        re.compile(r"mpt\dsas|megaraid|hpsa|aacraid|has been suspended|Controller lockup", re.I),
    ),
    ("power supply", re.compile(r"Power Supply|\bPSU\b|AC lost", re.I)),
    ("memory", re.compile(r"\bEDAC\b|\bECC\b|memory (?:read|write|scrub) error|Memory failure|\bDIMM", re.I)),
    ("CPU/memory (machine check)", re.compile(r"Machine check|mce:", re.I)),
    ("disk", re.compile(r"I/O error|\bnvme|EXT4-fs|XFS|SCSI|medium error|offline device", re.I)),
)


def _hardware_part(recs: list[Rec]) -> tuple[str, Rec]:
    """The hardware the kernel's error lines are about (memory (ECC/EDAC), a machine check, a disk; else unsaid),
    and the line that says so."""
    for part, pattern in _HW_PARTS:
        shown = next((r for r in recs if pattern.search(r.msg)), None)
        if shown is not None:
            return part, shown
    return "disk/CPU", recs[-1]


_SUSPENDED_POOL = re.compile(
    r"Pool '(?P<pool>[^']+)' has encountered an uncorrectable I/O failure and has been suspended"
)


def _log_signatures(evidence: EvidenceSet, now: float | None) -> list[Finding]:
    fds: dict[str, list[Rec]] = defaultdict(list)
    disk: dict[str, list[Rec]] = defaultdict(list)
    hw: dict[str, list[Rec]] = defaultdict(list)
    for rec in signature_records(evidence):
        if HOST_FDS.search(rec.msg):
            fds[service_of(rec.item) or rec.item.object].append(rec)
        elif HOST_DISK.search(rec.msg) and not is_db_storage_line(rec):
            disk[_mount_of(rec.msg) or _mount_before(rec) or "?"].append(rec)
        elif HOST_HW.search(rec.msg):
            m = _DEVICE.search(rec.msg)
            dev = next((g for g in m.groups() if g), None) if m else None
            hw[dev or "?"].append(rec)
    out: list[Finding] = []
    for svc, recs in fds.items():
        if _stale(recs, now):
            continue
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="cause",
                code="fd_exhaustion",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{svc}: too many open files ({len(recs)}x)",
                mechanism=(
                    f"{svc} has run out of file descriptors: '{recs[0].msg.strip()[:160]}' {len(recs)}x "
                    f"{span_text(recs[0].ts, recs[-1].ts)}; new connections and files fail (a descriptor leak "
                    "or a too-low ulimit)."
                ),
                object=f"file descriptors of {svc}",
                score=0.85,
                ts=recs[0].ts,
                tags=[f"service:{svc}", "resource:file-descriptors"],
                explains=[
                    "errors",
                    "exception",
                    "connection_refused",
                    "upstream_reset",
                    "http_5xx",
                    "latency",
                    "upstream_timeout",
                ],
                evidence=first_and_last_refs(recs),
                actions=_fd_actions(svc),
            )
        )
    for mount, recs in disk.items():
        if _stale(recs, now) and not _died_of_it(recs, evidence):
            continue
        host = _host_of(recs[0]) or service_of(recs[0].item)
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="cause",
                code="disk_full",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"no space left on {mount if mount != '?' else 'a file system'} ({len(recs)}x)",
                mechanism=f"writes fail with no space left on {mount if mount != '?' else 'the device'}"
                + (f" on {host}" if host else "")
                + f": '{_said(recs[0].msg)[:160]}' {len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}.",
                object=f"file system {mount}" + (f" on {host}" if host else ""),
                score=0.8,
                ts=recs[0].ts,
                tags=[
                    f"fs:{mount}",
                    *([f"host:{host}"] if host else []),
                    *{f"service:{s}" for s in (service_of(r.item) for r in recs) if s},
                ],
                explains=[
                    "errors",
                    "exception",
                    "disk_full",
                    "pod_restarts",
                    "crash_loop",
                    "crash_resource",
                    "crash_code",
                    "job_failed",
                    "http_5xx",
                    "process_down",
                ],
                evidence=first_and_last_refs(recs),
                actions=_disk_actions(mount if mount != "?" else "/", "space"),
            )
        )
    failures_end = _last_failure(evidence) if hw else None
    for dev, recs in hw.items():
        # an old hardware error is over, unless what failed on that machine failed after it (a job it killed)
        stale = _stale(recs, now) and _stale(recs, failures_end) and not _alerted_after(recs, evidence)
        if stale or (len(recs) < LINK_FLAPS and all(_LINK_DOWN.search(r.msg) for r in recs)):
            continue
        part, shown = _hardware_part(recs)
        machine = next((h for r in reversed(recs) if (h := _host_of(r))), None) or host_of_kernel_file(recs[0].item)
        panic = any("kernel panic" in r.msg.lower() for r in recs)
        bmc = "ipmi: " in shown.msg  # the line shown is from the machine's own controller (ipmitool sel)
        pool = next((m["pool"] for r in recs if (m := _SUSPENDED_POOL.search(r.msg))), None)
        out.append(
            Finding(
                analyzer="host",
                domain=Domain.HOST,
                role="cause",
                code="host_hardware_error",
                category=Category.INFRASTRUCTURE,
                title=f"{'the BMC' if bmc else 'kernel'} reports {part} errors{f' on {dev}' if dev != '?' else ''} "
                f"({len(recs)}x)" + (" and panicked" if panic else ""),
                mechanism=(
                    f"{'the baseboard management controller' if bmc else 'the kernel'}"
                    f"{f' of {machine}' if machine else ''} logged "
                    f"'{shown.msg.strip()[:160]}' {len(recs)}x "
                    f"{span_text(recs[0].ts, recs[-1].ts)}: "
                    + (
                        "failing hardware or a hung device under the workload"
                        if part == "disk/CPU"
                        else f"failing {part} hardware"
                    )
                    + (f"; ZFS suspended pool '{pool}', whose disks are behind it" if pool else "")
                    + (" (Kernel panic: the host went down)" if panic else "")
                    + "."
                ),
                object=(f"device {dev}" if dev != "?" else "host hardware") + (f" on {machine}" if machine else ""),
                # a GPU that failed takes its share of a scarce resource with it: the pods that wanted it wait
                score=0.8 if part == "GPU" else 0.7,
                ts=recs[0].ts,
                tags=[
                    f"device:{dev}",
                    *([f"host:{machine}"] if machine else []),
                    *(node_pod_tags(evidence, machine) if part in ("network interface", "GPU") else []),
                ],
                explains=[*_DOWN_EFFECTS, "io_high"]
                + (["insufficient_resources", "crash_loop", "probe_failed", "gpu_*"] if part == "GPU" else [])
                + (
                    ["upstream_timeout", "upstream_reset", "latency", "probe_*", "http_5xx"]
                    if part == "network interface"
                    else []
                ),
                evidence=[ref_of(shown)],
                actions=[
                    Action(
                        description="Kernel errors and the device's health",
                        command=(
                            "dmesg -T | grep -iE 'error|fail' | tail -30; smartctl -a "
                            f"/dev/{dev if dev != '?' else 'sda'}"
                        ),
                    )
                ],
            )
        )
    return out


def node_pod_tags(evidence: EvidenceSet, host: str | None) -> list[str]:
    """The pods a Kubernetes node named `host` runs, by name and address: a NIC failing there fails the calls
    to and from each of them, so their callers' timeouts are its symptoms."""
    if not host:
        return []
    short = host.split(".")[0]
    tags: list[str] = []
    for node, pods in kube_index(evidence).pods_by_node.items():
        if node != host and node.split(".")[0] != short:
            continue
        tags.append(f"node:{node}")
        for ns, name, item in pods:
            tags.append(f"pod:{ns}/{name}")
            ip = (item.data.get("status") or {}).get("podIP")
            if ip:
                tags.append(f"instance:{ip}")
    return tags


def _last_failure(evidence: EvidenceSet) -> float | None:
    """The newest error-level log record of the bundle: when what failed last failed."""
    newest: float | None = None
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            ts = r.get("ts")
            if isinstance(ts, int | float) and str(r.get("level") or "") in ("error", "fatal", "critical", "crit"):
                newest = ts if newest is None or ts > newest else newest
    return newest


DIED_WITHIN_S = 120.0  # a log that ends this soon after its last error ended with it


def _died_of_it(recs: list[Rec], evidence: EvidenceSet) -> bool:
    """Whether the process that logged these errors stopped with them and is still down: its log ends within two
    minutes of the last one, and an alert that began after the first still fires (the node or service down)."""
    first = min((r.ts for r in recs if r.ts is not None), default=None)
    last = max((r.ts for r in recs if r.ts is not None), default=None)
    if first is None or last is None:
        return False
    ends = max(
        (t for r in recs[-1].item.data.get("records") or () if isinstance(t := r.get("ts"), int | float)), default=last
    )
    if ends - last > DIED_WITHIN_S:
        return False
    return _firing_since(evidence, first)


def _firing_since(evidence: EvidenceSet, lo: float, hi: float = float("inf")) -> bool:
    """Whether an alert that began between `lo` and `hi` fires still."""
    return any(
        a.data.get("status") == "firing"
        and isinstance(start := a.data.get("starts_at"), int | float)
        and lo <= start <= hi
        for a in evidence.kind("alert")
    )


def _alerted_after(recs: list[Rec], evidence: EvidenceSet) -> bool:
    """Whether an alert that began within the hour after these errors still fires (a replication that has failed
    since a controller died): what broke then is still broken, however quiet its own log has been since."""
    last = max((r.ts for r in recs if r.ts is not None), default=None)
    return last is not None and _firing_since(evidence, last - 60, last + STALE_AFTER_S)


def _stale(recs: list[Rec], now: float | None) -> bool:
    last = max((r.ts for r in recs if r.ts is not None), default=None)
    return now is not None and last is not None and now - last >= STALE_AFTER_S


def _mount_before(rec: Rec) -> str | None:
    """The path the record just before names, when this one (an exception printed on its own line, as Java and
    Kafka log it: "ERROR Error while appending to ... in dir /var/lib/kafka/data" then "java.io.IOException: No
    space left on device") names none."""
    records = rec.item.data.get("records") or ()
    for i, r in enumerate(records):
        if r.get("line") == rec.line and r.get("msg") == rec.msg:
            if i == 0:
                return None
            prev = records[i - 1]
            near = rec.ts is None or prev.get("ts") is None or abs(rec.ts - prev["ts"]) <= 2
            return _mount_of(str(prev.get("msg") or "")) if near else None
    return None


def _said(msg: str) -> str:
    """The line of a (multi-line) record that says the disk is full."""
    return next((line.strip() for line in msg.splitlines() if HOST_DISK.search(line)), msg.strip())


_FRAME = re.compile(r"^\s*(?:\[\w+\]:\s*)?(?:File \"|at |from )")


def _mount_of(msg: str) -> str | None:
    # the line that says it first, then any line but a stack frame's (whose path is the code's, not the data's)
    said = _said(msg)
    rest = "\n".join(line for line in msg.splitlines() if not _FRAME.match(line))
    m = _MOUNT.search(said) or _PATH.search(said) or _MOUNT.search(rest) or _PATH.search(rest)
    if not m:
        return None
    path = m.group(1)
    # a file path names its top directories, which is what an operator checks with df
    parts = [p for p in path.split("/") if p]
    return "/" + "/".join(parts[:2]) if len(parts) > 2 else path


def _host_of(rec: Rec) -> str | None:
    # syslog: "Mar  3 10:00:01 web-1 kernel: ..."; "<host> kernel:"
    m = re.search(
        r"(?:^|\s)([A-Za-z0-9][\w.\-]*)\s+(?:(?:EMERG|ALERT|CRIT|ERR|WARNING|NOTICE|INFO|DEBUG)\s+)?kernel:", rec.msg
    )
    if m and not m.group(1).isdigit():
        return m.group(1)
    src = rec.item.data.get("source")
    if isinstance(src, dict) and isinstance(src.get("host"), str):
        return str(src["host"])
    return None


def _disk_actions(mount: str, what: str) -> list[Action]:
    if what == "inodes":
        return [
            Action(
                description=f"Directories with the most files under {mount}",
                command=(
                    f"df -i {mount}; sudo find {mount} -xdev -type f | cut -d/ -f1-4 | sort | uniq -c | sort -rn | head"
                ),
            )
        ]
    return [
        Action(
            description=f"What fills {mount}",
            command=f"df -h {mount}; sudo du -xh --max-depth=2 {mount} 2>/dev/null | sort -rh | head -20",
        ),
        Action(
            description="Deleted files still held open (space not freed)",
            command="sudo lsof +L1 2>/dev/null | head -20",
        ),
    ]


def _fd_actions(svc: str | None) -> list[Action]:
    target = f"$(pgrep -o {svc})" if svc else "<pid>"
    return [
        Action(
            description="Descriptors in use against the limit",
            command=f"ls /proc/{target}/fd | wc -l; grep 'open files' /proc/{target}/limits; cat /proc/sys/fs/file-nr",
        ),
        Action(
            description="What the descriptors are (sockets leak most often)",
            command=f"sudo lsof -p {target} | awk '{{print $5}}' | sort | uniq -c | sort -rn | head",
        ),
    ]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# ---------------------------------------------------------------- cloud health checks (EC2 volumes, instances)

_BAD_CHECK = {"impaired", "failed", "severely-degraded", "degraded", "stalled", "unreachable"}
# a scheduled event the cloud raises because the host under the instance is failing (not planned maintenance)
_DEGRADED_HW = re.compile(r"degraded hardware|hardware (?:failure|degradation)|underlying host", re.I)
# what storage or a machine that stopped answering explains: the database and the applications on top of it
_STALL_EFFECTS = [
    *_DOWN_EFFECTS,
    "io_high",
    "db_waits",
    "connections_high",
    "connection_exhaustion",
    "host_hardware_error",
    "target_down",
    "disk_latency",
]


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"aws/status", "cloud/status"})
def cloud_status_checks(evidence: EvidenceSet) -> list[Finding]:
    """A volume or instance (or a platform's machine) the cloud itself reports impaired (failed status checks, I/O
    paused or severely degraded, its host unreachable) is an infrastructure fault under everything that runs on it;
    passing checks rule it out."""
    out: list[Finding] = []
    for item in [*evidence.kind("aws/status"), *evidence.kind("cloud/status")]:
        d = item.data
        rtype, rid = str(d.get("resource_type") or "resource"), str(d.get("resource") or item.object)
        checks: dict[str, str] = d.get("checks") or {}
        bad = {k: v for k, v in checks.items() if str(v).lower() in _BAD_CHECK}
        status = str(d.get("status") or "").lower()
        events = [e for e in d.get("events") or [] if isinstance(e, dict)]
        degraded = [e for e in events if _DEGRADED_HW.search(str(e.get("description") or ""))]
        if degraded and status not in _BAD_CHECK and not bad:
            # checks still pass, but the cloud has scheduled the instance off hardware it found degraded: the
            # machine under it misbehaves before it fails (steal, stalls, slow I/O)
            status, bad = "running on degraded hardware", {"scheduled event": str(degraded[0].get("type"))}
        if status not in _BAD_CHECK and not bad:
            out.append(
                Finding(
                    analyzer="cloud_status_checks",
                    domain=Domain.HOST,
                    role="benign",
                    code="cloud_checks_ok",
                    category=Category.HEALTHY,
                    title=f"{rtype} {rid} passes its status checks ({status or 'ok'})",
                    mechanism=f"the cloud reports {rtype} {rid} {status or 'ok'}: not an infrastructure fault there.",
                    object=f"{rtype} {rid}",
                    tags=[f"{rtype}:{rid}"],
                    evidence=[EvidenceRef(item=item.id, field="status", value=d.get("status"))],
                )
            )
            continue
        what = ", ".join(f"{k.split('.', 1)[-1]} {v}" for k, v in bad.items()) or status
        ev_txt = "; ".join(f"{e.get('type')}: {str(e.get('description'))[:120]}" for e in events[:2])
        refs = [EvidenceRef(item=item.id, field="status", value=d.get("status"))]
        refs += [EvidenceRef(item=item.id, field="checks", value=f"{k}: {v}") for k, v in list(bad.items())[:2]]
        out.append(
            Finding(
                analyzer="cloud_status_checks",
                domain=Domain.HOST,
                role="cause",
                code=f"{rtype}_impaired",
                category=Category.INFRASTRUCTURE,
                title=f"{rtype} {rid} is {status or 'impaired'} ({what})",
                mechanism=(
                    f"the cloud reports {rtype} {rid} {status or 'impaired'} ({what})"
                    + (f" [{ev_txt}]" if ev_txt else "")
                    + (
                        ": its I/O stalls, so everything on it blocks and its clients pile up"
                        if rtype == "volume"
                        else ": the machine under the workload is failing"
                    )
                    + "."
                ),
                object=f"{rtype} {rid}",
                score=0.85,
                ts=item.ts,
                tags=[f"{rtype}:{rid}", *([f"zone:{d['az']}"] if d.get("az") else [])],
                explains=_STALL_EFFECTS,
                evidence=refs,
                actions=_fly_actions(rid)
                if d.get("provider") == "fly"
                else [
                    Action(
                        description=f"The {rtype}'s status checks and scheduled events",
                        command=(
                            f"aws ec2 describe-volume-status --volume-ids {rid}"
                            if rtype == "volume"
                            else f"aws ec2 describe-instance-status --instance-ids {rid} --include-all-instances"
                        ),
                    ),
                    Action(
                        description=(
                            "Fail over to a replica or restore from a snapshot onto a new volume"
                            if rtype == "volume"
                            else "Stop and start the instance so it moves to healthy hardware"
                        ),
                        command=(
                            f"aws ec2 create-snapshot --volume-id {rid}"
                            if rtype == "volume"
                            else f"aws ec2 stop-instances --instance-ids {rid}; "
                            f"aws ec2 start-instances --instance-ids {rid}"
                        ),
                        kind="write",
                    ),
                ],
            )
        )
    return out


def _fly_actions(machine: str) -> list[Action]:
    return [
        Action(
            description="The machine's state, its host's status and its checks", command=f"fly machine status {machine}"
        ),
        Action(
            description="Replace the machine on a healthy host (restore its volume from a snapshot if it has one)",
            command=f"fly machine clone {machine} && fly machine destroy {machine} --force",
            kind="write",
        ),
    ]


# ---------------------------------------------------------------- a hypervisor or physical host that went away

HOST_LOST_RECENT_S = 6 * 3600  # a host failure this recent still explains guests that are down now
_HOST_BACK = re.compile(
    r"\b(?:reconnected|connected|back online|is responding|exited maintenance|rejoined|uncordoning node|"
    r"status is now: NodeReady)\b",
    re.I,
)
_GUEST = re.compile(
    r"(?:virtual machine|\bvm|\bguest|\binstance|failed to restart|restarted)\s+'?([A-Za-z][\w.\-]*\d[\w.\-]*)|"
    r"\bTarget=([A-Za-z][\w.\-]*)",
    re.I,
)


def _short(host: str) -> str:
    return host.split(":", 1)[0].split(".", 1)[0].lower()


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def host_lost(evidence: EvidenceSet) -> list[Finding]:
    """A hypervisor or cluster host reported lost (not responding, HA host failure, fenced): an infrastructure
    fault that takes down every guest on it together. The guests it names (and targets of theirs seen down) are
    tagged so their symptoms link to it."""
    now = now_of(evidence)
    lost: dict[str, list[Rec]] = defaultdict(list)
    recs = signature_records(evidence)
    for rec in recs:
        m = HOST_LOST.search(rec.msg)
        if m:
            name = next((g for g in m.groups() if g), None) or _target_of(rec.msg) or "?"
            lost[name.lower()].append(rec)
    out: list[Finding] = []
    for host, hits in lost.items():
        first = min((r.ts for r in hits if r.ts is not None), default=None)
        last = max((r.ts for r in hits if r.ts is not None), default=None)
        if now is not None and last is not None and now - last > HOST_LOST_RECENT_S:
            continue
        # back, as its own log says or as another's (a reboot daemon uncordoning the node, the node's Ready event)
        back = [
            r
            for item in evidence.kind("log")
            for r in item.data.get("records") or ()
            if isinstance(r.get("ts"), int | float)
            and last is not None
            and r["ts"] > last
            and host in str(r.get("msg") or "").lower()
            and _HOST_BACK.search(str(r.get("msg") or ""))
        ]
        guests: set[str] = set()
        for r in log_records_of(hits[0].item):
            if r.ts is not None and first is not None and not (first - 300 <= r.ts <= first + 3600):
                continue
            for g in _GUEST.finditer(r.msg):
                name = (g.group(1) or g.group(2) or "").rstrip(".:,")
                if name and _short(name) != _short(host):
                    guests.add(name)
        short_guests = {_short(g) for g in guests}
        tags = [f"host:{host}", *(f"host:{g}" for g in sorted(guests))]
        for series in evidence.kind("metric"):
            inst = str((series.data.get("labels") or {}).get("instance") or "")
            if inst and _short(inst) in short_guests:
                tags.append(f"host:{inst.split(':', 1)[0]}")
        recovered = bool(back)
        came_back = str(back[0].get("msg") or "").strip()[:100] if back else ""
        guest_txt = f"; guests on it: {', '.join(sorted(guests)[:6])}" if guests else ""
        out.append(
            Finding(
                analyzer="host_lost",
                domain=Domain.HOST,
                role="benign" if recovered else "cause",
                code="host_lost",
                category=Category.HEALTHY if recovered else Category.INFRASTRUCTURE,
                title=f"host {host} lost ({len(hits)} record(s))" + (", since back" if recovered else ""),
                mechanism=(
                    f"host {host} stopped responding ('{hits[0].msg.strip()[:160]}' {span_text(first, last)}), "
                    f"so every guest on it went down together{guest_txt}"
                    + (f"; it came back ('{came_back}')" if recovered else "")
                    + "."
                ),
                object=f"host {host}",
                score=0.85,
                ts=first,
                tags=list(dict.fromkeys(tags)),
                explains=[*_DOWN_EFFECTS, "target_down", "host_down", "node_down", "backend_down", "alert:*"],
                evidence=first_and_last_refs(hits),
                actions=[
                    Action(
                        description="The host's state and the guests HA restarted or could not restart",
                        command=f"govc host.info {host}; govc events -n 50 host/{host}",
                    )
                ],
            )
        )
    return out


def _target_of(msg: str) -> str | None:
    m = re.search(r"\bTarget=([\w.\-]+)", msg)
    return m.group(1) if m else None


def log_records_of(item: EvidenceItem) -> list[Rec]:
    return [
        Rec(item, r.get("ts"), str(r.get("msg") or ""), r.get("line"), None) for r in item.data.get("records") or ()
    ]


# ---------------------------------------------------------------- other finite limits

# (code, signature, what ran out, why it fails, the command that shows it)
_LIMITS: list[tuple[str, Searcher, str, str, str, str]] = [
    (
        "ephemeral_ports_exhausted",
        HOST_EPHEMERAL,
        "ephemeral ports",
        "it cannot open new outgoing connections: every local port of the range is in use or in TIME_WAIT "
        "(connections opened and closed per request, no keep-alive or pooling)",
        "Local port range and sockets by state",
        "sysctl net.ipv4.ip_local_port_range; ss -tan | awk 'NR>1{print $1}' | sort | uniq -c",
    ),
    (
        "conntrack_table_full",
        HOST_CONNTRACK,
        "the connection-tracking table",
        "the kernel drops packets of new connections once nf_conntrack_max entries are in use",
        "Tracked connections against the limit",
        "sysctl net.netfilter.nf_conntrack_count net.netfilter.nf_conntrack_max",
    ),
    (
        "pid_limit_reached",
        HOST_PIDS,
        "processes/threads (its PID limit)",
        "it cannot fork or start threads: the pids cgroup limit, ulimit -u or kernel.pid_max/threads-max is "
        "reached (often a thread or process leak)",
        "Threads against the limits",
        "cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids.current 2>/dev/null; ulimit -u; "
        "ps -eLf | wc -l; sysctl kernel.pid_max kernel.threads-max",
    ),
    (
        "broker_resource_alarm",
        BROKER_ALARM,
        "disk or memory (a resource alarm / disk watermark)",
        "the broker or cluster protects itself by blocking publishers or making indices read-only until space "
        "or memory is freed",
        "The broker's alarms and free space",
        "rabbitmq-diagnostics alarms; rabbitmq-diagnostics status | grep -A3 -i disk; "
        "curl -s localhost:9200/_cat/allocation?v",
    ),
]


_UNIT_CGROUP = re.compile(r"/(?:[\w@.\-]+\.slice/)+([\w@.\-]+\.service)\b")


def _systemd_unit(msg: str, after: str = "") -> str | None:
    """The systemd service a kernel line's cgroup path names (/system.slice/x.service), after `after` if given:
    its limits are the unit's settings (MemoryMax=, TasksMax=), not a container's."""
    if after:
        at = msg.find(after)
        if at < 0:
            return None
        msg = msg[at:]
    m = _UNIT_CGROUP.search(msg)
    return m.group(1) if m else None


def _limit_owner(code: str, rec: Rec) -> str:
    """What ran out of the limit: the broker node an alarm names, the host of a kernel line, else the service."""
    if code == "broker_resource_alarm":
        m = BROKER_ALARM.search(rec.msg)
        node = m and (m.group("node") or m.group("esnode") or m.group("esnode2"))
        if node:
            return node.strip(".,")
    if code in _PATH_LIMITS:
        host = _host_of(rec) or host_of_kernel_file(rec.item)
        if host:
            return host
    return service_of(rec.item) or _host_of(rec) or rec.item.object


# limits on the network path of a host: every connection through it suffers, whatever its destination
_PATH_LIMITS = {"conntrack_table_full", "ephemeral_ports_exhausted"}
_CALL_FAILED = re.compile(
    r"timed? ?out|timeout|deadline exceeded|ETIMEDOUT|connection reset|ECONNRESET|i/o timeout|"
    r"Temporary failure in name resolution|EAI_AGAIN|connection refused|ECONNREFUSED",
    re.I,
)


def _path_victims(evidence: EvidenceSet, since: float | None) -> dict[str, set[str]]:
    """Services whose calls fail to two or more different destinations from `since` on: a limit on their own
    network path (dropped packets, no local port) fails all of them at once, where a failing dependency fails one.
    Service -> the destinations."""
    from diagnosis.analyzers.network import _base, _target  # one reading of a call's target

    out: dict[str, set[str]] = defaultdict(set)
    for rec in signature_records(evidence):
        if since is not None and rec.ts is not None and rec.ts < since - 60:
            continue
        if not _CALL_FAILED.search(rec.msg):
            continue
        svc = service_of(rec.item)
        target = _target(rec.msg)
        if svc and target and _base(target) != svc:
            out[svc].add(_base(target))
    return {svc: dests for svc, dests in out.items() if len(dests) >= 2}


_LISTEN = re.compile(r"\blisten(?:ing)? (?:tcp|udp|on|to)|\bbind: |\bbind\(\)|\(Bind failed\)", re.I)


def _bind_failed(owner: str, recs: list[Rec]) -> Finding:
    """A server that cannot listen on the address it is configured with ("Cannot assign requested address": no
    interface of this host has it): its configuration names another host's address (a wrong id, a copied config)."""
    recs.sort(key=lambda r: r.ts or 0)
    return Finding(
        analyzer="resource_limits",
        domain=Domain.HOST,
        role="cause",
        code="bind_failed",
        category=Category.CONFIGURATION_ERROR,
        title=f"{owner} cannot listen on the address it is configured with ({len(recs)}x)",
        mechanism=(
            f"{owner} cannot bind the address its configuration gives it: '{recs[0].msg.strip()[:200]}' "
            f"{len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}".rstrip()
            + "; no interface of this host has that address, so its configuration names another host's (a wrong "
            "node id or listen address, a config copied from a peer), and its peers' connections to it are refused."
        ),
        object=f"listen address of {owner}",
        score=0.8,
        ts=recs[0].ts,
        tags=[f"service:{owner}"],
        explains=["errors", "exception", "connection_refused", "upstream_reset", "upstream_timeout", "crash_loop"],
        evidence=first_and_last_refs(recs),
        actions=[
            Action(
                description=f"Compare the address {owner} binds with this host's addresses and its node id",
                command="ip -brief addr; grep -n -E 'server\\.|listen|bind' <its config>; cat <its myid / node id>",
            )
        ],
    )


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"log"})
def resource_limits(evidence: EvidenceSet) -> list[Finding]:
    """Finite limits other than memory, disk and descriptors that a process, the kernel or a broker ran out of:
    ephemeral ports, the conntrack table, the PID/thread limit, a broker's resource alarm. Each is
    resource_exhaustion on the thing that ran out, whatever the callers' errors look like."""
    now = now_of(evidence)
    groups: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    for rec in signature_records(evidence):
        for code, rx, *_ in _LIMITS:
            if rx.search(rec.msg):
                if code == "ephemeral_ports_exhausted" and _LISTEN.search(rec.msg):
                    # a server binding an address the host lacks is a configuration error, not ports
                    groups[("bind_failed", _limit_owner(code, rec))].append(rec)
                    break
                groups[(code, _limit_owner(code, rec))].append(rec)
                break
    out: list[Finding] = []
    spec = {code: rest for code, *rest in _LIMITS}
    for (code, owner), recs in groups.items():
        if _stale(recs, now):
            continue
        if code == "bind_failed":
            out.append(_bind_failed(owner, recs))
            continue
        _, what, why, action_what, command = spec[code]
        unit = next((u for r in recs if (u := _systemd_unit(r.msg))), None)
        if code == "pid_limit_reached" and unit:  # a systemd service's pids cgroup: the unit's TasksMax
            why = (
                f"it cannot fork or start threads: systemd unit {unit} reached its TasksMax= (the pids limit of its "
                "cgroup; often a thread or process leak)"
            )
        recs.sort(key=lambda r: r.ts or 0)
        services = sorted({s for r in recs if (s := service_of(r.item))})
        host = _host_of(recs[0]) or host_of_kernel_file(recs[0].item)
        victims = _path_victims(evidence, recs[0].ts) if code in _PATH_LIMITS else {}
        if host:
            services = [s for s in services if s != service_of(recs[0].item)]  # the kernel log's file name
        victims_txt = "; ".join(
            f"{svc} fails calls to {', '.join(sorted(d)[:4])} at once" for svc, d in victims.items()
        )
        out.append(
            Finding(
                analyzer="resource_limits",
                domain=Domain.HOST,
                role="cause",
                code=code,
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{owner}: out of {what} ({len(recs)}x)",
                mechanism=(
                    f"{owner} has run out of {what}: '{recs[0].msg.strip()[:160]}' {len(recs)}x "
                    f"{span_text(recs[0].ts, recs[-1].ts)}".rstrip()
                    + f"; {why}"
                    + (f" ({victims_txt}: many destinations failing together is the path, not them)" if victims else "")
                    + "."
                ),
                object=f"{what} of {owner}",
                score=0.8,
                ts=recs[0].ts,
                tags=list(
                    dict.fromkeys(
                        [
                            f"service:{owner}",
                            *(f"service:{x}" for x in services),
                            *([f"host:{host}", f"node:{host}"] if host else []),
                            *(f"service:{v}" for v in victims),
                        ]
                    )
                ),
                explains=[
                    "errors",
                    "exception",
                    "connection_refused",
                    "upstream_timeout",
                    "upstream_reset",
                    "http_5xx",
                    "latency",
                    "pod_restarts",
                    "crash_loop",
                    "backlog",
                    "dns_resolution_failure",
                    "db_connection_errors",
                ],
                evidence=first_and_last_refs(recs),
                actions=[Action(description=action_what, command=command)],
            )
        )
    return with_aliases(out)
