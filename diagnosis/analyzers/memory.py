"""Memory that only looks used. A host: an alert on `1 - MemFree/MemTotal` counts the page cache, which the kernel
gives back on demand. With MemAvailable still a large share of memory, no swap being taken and no OOM kill, the
memory alert is a false alarm (after a backup or a batch that read many files, the cache fills by design). A
collected heap: it fills between collections by design; with its live set flat, a heap-use alert is a false alarm."""

from __future__ import annotations

import itertools
import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of, thirds

AVAILABLE_OVER_FREE = 4.0  # MemAvailable this many times MemFree: most of the "used" memory is reclaimable cache
AVAILABLE_MIN_BYTES = 1 << 30
SWAP_TAKEN = 0.1  # swap free falling by this share of its most: memory is really short (pages go to swap)
_MEMORY_ALERT = re.compile(r"memory|(?<![a-z])mem(?![a-z])|\bram\b", re.I)  # not Memcached


def _instance(m: EvidenceItem) -> str | None:
    labels = m.data.get("labels") or {}
    return str(labels.get("instance") or labels.get("nodename") or labels.get("host") or "") or None


def _last(m: EvidenceItem) -> float | None:
    pts = points_of(m.data.get("points"))
    return pts[-1][1] if pts else None


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"metric", "alert"})
def page_cache(evidence: EvidenceSet) -> list[Finding]:
    by_host: dict[str, dict[str, EvidenceItem]] = {}
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        host = _instance(m)
        for key in ("MemAvailable", "MemFree", "MemTotal", "SwapFree"):
            if host and f"memory_{key}" in name:
                by_host.setdefault(host, {})[key] = m
    alerts = sorted({str(a.data.get("name") or a.object.removeprefix("alert/")) for a in evidence.kind("alert")})
    memory_alerts = [a for a in alerts if _MEMORY_ALERT.search(a)]
    out: list[Finding] = []
    for host, series in by_host.items():
        if "MemAvailable" not in series or "MemFree" not in series:
            continue
        avail, free = _last(series["MemAvailable"]), _last(series["MemFree"])
        total = _last(series["MemTotal"]) if "MemTotal" in series else None
        if avail is None or free is None or avail < AVAILABLE_MIN_BYTES or avail < AVAILABLE_OVER_FREE * max(free, 1):
            continue
        if total and avail < 0.2 * total:
            continue
        if "SwapFree" in series:
            swap = [v for _, v in points_of(series["SwapFree"].data.get("points"))]
            if swap and max(swap) > 0 and (max(swap) - swap[-1]) > SWAP_TAKEN * max(swap):
                continue  # pages are going to swap: memory is short, whatever the cache says
        gib = 1 << 30
        share = f" ({avail / total:.0%} of {total / gib:.1f} GiB)" if total else ""
        out.append(
            Finding(
                analyzer="page_cache",
                domain=Domain.HOST,
                role="benign",
                code="memory_is_cache",
                category=Category.HEALTHY,
                title=f"{host}: {avail / gib:.1f} GiB available, only {free / gib:.1f} GiB free: the rest is cache",
                mechanism=(
                    f"{host} has {avail / gib:.1f} GiB available{share} while only {free / gib:.1f} GiB is free: "
                    "the difference is page cache the kernel reclaims on demand, no swap is being taken; an alert "
                    "on free memory counts that cache as used."
                ),
                object=f"memory of {host}",
                score=0.3,
                ts=series["MemAvailable"].ts,
                tags=[f"host:{host}", f"instance:{host}"],
                explains=[f"alert:{a}" for a in memory_alerts],
                evidence=[
                    EvidenceRef(item=series["MemAvailable"].id, field="points", value=round(avail / gib, 2)),
                    EvidenceRef(item=series["MemFree"].id, field="points", value=round(free / gib, 2)),
                ],
                actions=[
                    Action(
                        description="Alert on MemAvailable, not MemFree",
                        command="# expr: node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes < 0.1",
                        kind="write",
                    )
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a collected heap that only looks full

_HEAP_ALERT = re.compile(r"heap|jvm.?mem|gc|old.?gen|memory", re.I)
_LIVE_SET = re.compile(r"live_data|after_gc|old_gen|tenured|heap_after", re.I)
_HEAP = re.compile(r"heap|jvm_memory_used", re.I)
LIVE_FLAT = 1.2  # the live set's last third over its first third: it does not grow
SAWTOOTH_FALLS = 3  # collections seen in the heap series (falls of a quarter or more)


def _pod_of(m: EvidenceItem) -> str | None:
    labels = m.data.get("labels") or {}
    return str(labels.get("pod") or labels.get("pod_name") or "") or None


def _oom_killed(evidence: EvidenceSet, pod: str) -> bool:
    for p in evidence.kind("k8s/Pod"):
        if not p.object.endswith(f"/{pod}"):
            continue
        for c in (p.data.get("status") or {}).get("containerStatuses") or ():
            for state in ("state", "lastState"):
                if ((c.get(state) or {}).get("terminated") or {}).get("reason") == "OOMKilled":
                    return True
    return False


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"metric", "alert"})
def collected_heap(evidence: EvidenceSet) -> list[Finding]:
    """A JVM (or any collected) heap alert on a pod whose heap rises and is collected again and again while what
    survives collection (its live set) stays flat: the heap fills between collections by design, nothing leaks and
    nothing is short. The alert on heap use is a false alarm; no OOM kill of the pod says otherwise."""
    alerts = [a for a in evidence.kind("alert") if _HEAP_ALERT.search(str(a.data.get("name") or a.object))]
    if not alerts:
        return []
    live: dict[str, EvidenceItem] = {}
    heap: dict[str, EvidenceItem] = {}
    for m in evidence.kind("metric"):
        name, pod = str(m.data.get("name") or m.object), _pod_of(m)
        if pod and _LIVE_SET.search(name):
            live[pod] = m
        elif pod and _HEAP.search(name) and (m.data.get("labels") or {}).get("area", "heap") == "heap":
            heap[pod] = m
    out: list[Finding] = []
    for pod, m in live.items():
        values = [v for _, v in points_of(m.data.get("points"))]
        if len(values) < 6 or _oom_killed(evidence, pod):
            continue
        first, last = thirds(values)
        if first <= 0 or last > LIVE_FLAT * first:
            continue  # what survives collection grows: maybe a leak
        used = [v for _, v in points_of(heap[pod].data.get("points"))] if pod in heap else []
        falls = sum(1 for a, b in itertools.pairwise(used) if a > 0 and b < 0.75 * a)
        if used and falls < SAWTOOTH_FALLS:
            continue
        names = [str(a.data.get("name") or a.object.removeprefix("alert/")) for a in alerts]
        out.append(
            Finding(
                analyzer="collected_heap",
                domain=Domain.HOST,
                role="benign",
                code="heap_collected",
                category=Category.HEALTHY,
                title=f"pod {pod}: its heap is collected as it fills; its live set stays ~{last / (1 << 20):.0f} MiB",
                mechanism=(
                    f"pod {pod}'s heap rises between collections and falls back after each"
                    + (f" ({falls} collections in the window)" if used else "")
                    + f", while what survives collection stays flat (~{first / (1 << 20):.0f} MiB then "
                    f"~{last / (1 << 20):.0f} MiB): the heap fills by design and nothing leaks; an alert on heap "
                    "use before collection fires on that sawtooth."
                ),
                object=f"heap of pod {pod}",
                score=0.3,
                ts=m.ts,
                tags=[f"pod:{pod}"],
                explains=[f"alert:{n}" for n in dict.fromkeys(names)],
                evidence=[EvidenceRef(item=m.id, field="points", value=f"{first:.4g} -> {last:.4g}")]
                + ([EvidenceRef(item=heap[pod].id, field="points", value=f"{falls} collections")] if used else []),
                actions=[
                    Action(
                        description="Alert on the heap after collection (live data), not on heap use",
                        command="# expr: jvm_gc_live_data_size_bytes / jvm_gc_max_data_size_bytes > 0.85",
                        kind="write",
                    )
                ],
            )
        )
    return out
