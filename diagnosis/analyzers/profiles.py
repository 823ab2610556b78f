"""CPU profiles: one frame holding most of a process's CPU samples is where its CPU goes.

- `cpu_hotspot` (cause): the heaviest frame of a `runtime/cpu_profile` with 40%+ of the samples (idle and
  wait frames aside). Application code or a regular expression it runs is a code defect (a regex that
  backtracks catastrophically, a hot loop), named with its caller and the release that brought it when one is in
  the bundle; a garbage collector's frames are memory pressure (resource exhaustion).
"""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.regressions import releases, same_workload, traffic_surge
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

HOT_SHARE = 0.4  # of all samples in one frame: where the CPU goes
_IDLE = re.compile(
    r"epoll_p?wait|futex|\bpoll\b|nanosleep|swapper|cpu_idle|intel_idle|\[idle\]|runtime\.(?:futex|usleep|notesleep)|"
    r"__select|pthread_cond_wait|uv__io_poll",
    re.I,
)
_GC = re.compile(
    r"\bGC\b|^gc_|GarbageCollect|\bG1\w*|Scavenge|Mark-?Sweep|MarkCompact|runtime\.(?:gcBgMarkWorker|mallocgc|"
    r"scanobject|gcDrain)|ParallelGC|ConcurrentMark",
    re.I,
)
_REGEX = re.compile(r"^RegExp: |\bregexp\.|\bre\.(?:match|search|sub|findall)|java\.util\.regex\.|\bPattern\.|"
                    r"\bMatcher\.|onig_|pcre", re.I)  # fmt: skip
_APP = re.compile(r"/(?:srv|opt|var/www|home|apps?|usr/src/app)/(?P<app>[\w.\-]+)/")
_FUNCTION = re.compile(r"^(?:JS: [*~^]?|LazyCompile: [*~]?)?(?P<fn>[\w.$<>]+)")


def _workload(frame: dict, obj: str) -> str:
    for text in [frame["name"], *frame.get("callers", [])]:
        m = _APP.search(text)
        if m and m["app"] not in ("node_modules", "lib", "bin"):
            return m["app"]
    return obj.removeprefix("profile/")


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"runtime/cpu_profile"})
def cpu_hotspot(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("runtime/cpu_profile"):
        frames = [f for f in item.data.get("frames") or () if not _IDLE.search(str(f.get("name")))]
        if not frames or float(frames[0].get("share") or 0) < HOT_SHARE:
            continue
        top = frames[0]
        name, share = str(top["name"]), float(top["share"])
        callers = [str(c) for c in top.get("callers") or ()]
        caller = next((m["fn"] for c in callers if (m := _FUNCTION.match(c))), None)
        who = _workload(top, item.object)
        gc = bool(_GC.search(name))
        regex = bool(_REGEX.search(name))
        rels = [r for r in releases(evidence) if same_workload(r.workload, who)]
        rel = rels[-1] if rels and not gc else None
        where = f"{name[:120]}" + (f" (called from {caller})" if caller else "")
        if gc:
            what = "the garbage collector: the process is short of memory and collects all the time"
        elif regex:
            what = (
                "one regular expression: it backtracks catastrophically on some inputs (a nested quantifier), "
                "pinning the CPU and blocking the process"
            )
        else:
            what = "one function of the application: a hot loop or an algorithm that does not scale with its input"
        refs = [EvidenceRef(item=item.id, field="frames.0", value=f"{name[:200]} {share:.1%}")]
        if rel is not None:
            refs.append(rel.ref)
        # a hot function of a process whose load itself multiplied does the work it always did, more often
        surge = traffic_surge(evidence) if not gc and not regex else None
        if surge is not None:
            what += f", while its traffic rose {surge[0]:.1f}x: the same work done more often, not a new defect"
            refs.append(surge[1])
        out.append(
            Finding(
                analyzer="cpu_hotspot",
                domain=Domain.HOST,
                role="cause",
                code="gc_pressure" if gc else "cpu_hotspot",
                category=Category.RESOURCE_EXHAUSTION if gc else Category.CODE_DEFECT,
                title=f"{who}: {share:.0%} of its CPU samples in {where[:100]}",
                mechanism=(
                    f"the CPU profile of {who} ({item.data.get('tool')}) spends {share:.0%} of its samples in "
                    f"{where}: its CPU goes to {what}"
                    + (f"; it came with {who} {rel.version}" if rel is not None else "")
                    + "."
                ),
                object=f"{who} {rel.version}" if rel is not None else who,
                score=0.4 if surge is not None else 0.8 if share >= 0.6 else 0.65,
                ts=rel.ts if rel is not None else item.ts,
                tags=[f"service:{who}", *([f"version:{rel.version}"] if rel is not None else [])],
                explains=[
                    "cpu_high",
                    "saturation",
                    "latency",
                    "errors",
                    "http_5xx",
                    "upstream_timeout",
                    "probe_*",
                    "metric_shift",
                    "alert:*",
                    "monitor:*",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description=f"Roll back {who} to the version before {rel.version}"
                        if rel is not None
                        else f"Find what calls {caller or name[:60]} with expensive input",
                        command=f"git log -p -S '{(caller or name)[:40]}'",
                        kind="read",
                    ),
                ],
            )
        )
    return out
