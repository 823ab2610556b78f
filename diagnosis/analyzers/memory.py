"""Host memory that only looks used: an alert on `1 - MemFree/MemTotal` counts the page cache, which the kernel
gives back on demand. With MemAvailable still a large share of memory, no swap being taken and no OOM kill, the
memory alert is a false alarm (after a backup or a batch that read many files, the cache fills by design)."""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of

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
