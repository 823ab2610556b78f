"""Runtime: a process whose own runtime is starved, so it fails calls that its dependencies would answer.

- `thread_pool_starvation` (code_defect): the .NET thread pool starved by threads that block on async work
  (sync-over-async: `.Result`, `.Wait()`, `GetAwaiter().GetResult()`, a lock around an awaited call).
  StackExchange.Redis prints the pool in every timeout (`WORKER: (Busy=56,Free=..,Min=2,..)`,
  `POOL: (Threads=60,QueuedItems=403,..)`):
  busy workers far above the minimum with work queued mean the pool is growing slowly under blocked threads, not
  that Redis is slow. Kestrel's "heartbeat has been running for ... longer than" and "thread pool starvation" say
  the same. The client's timeouts are then its own, and the release that brought the blocking is the cause.
"""

from __future__ import annotations

import re

from diagnosis.analyzers._common import Rec, object_tags, ref_of, service_of, span_text, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_SE_REDIS_POOL = re.compile(r"WORKER: \(Busy=(\d+),Free=\d+,Min=(\d+)")
_QUEUED = re.compile(r"QueuedItems=(\d+)")
_STARVATION_WORDS = re.compile(
    r"heartbeat has been running for .{0,40}longer than|thread ?pool starvation|ThreadPool starvation", re.I
)
STARVED_MIN = 3  # signs of it in one service's log
BUSY_OVER_MIN = 4  # busy workers this many times the pool's minimum (and at least 16)


def _starved(msg: str) -> bool:
    if "WORKER: (" not in msg and "eartbeat" not in msg and "tarvation" not in msg:
        return False  # every log line passes here: a substring test first
    m = _SE_REDIS_POOL.search(msg)
    if m:
        busy, least = int(m.group(1)), int(m.group(2))
        queued = _QUEUED.search(msg)
        return busy >= max(16, BUSY_OVER_MIN * least) and (queued is None or int(queued.group(1)) > 0)
    return bool(_STARVATION_WORDS.search(msg))


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def runtime_starvation(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        recs = [
            Rec(item, r.get("ts"), str(r.get("msg") or ""), r.get("line"), r.get("level"))
            for r in item.data.get("records") or ()
            if _starved(str(r.get("msg") or ""))
        ]
        if len(recs) < STARVED_MIN:
            continue
        who = service_of(item) or item.object
        stamps = [r.ts for r in recs if r.ts is not None]
        pool = next((m for r in recs if (m := _SE_REDIS_POOL.search(r.msg))), None)
        queued = next((m for r in recs if (m := _QUEUED.search(r.msg))), None)
        shown = (
            f" (WORKER busy {pool.group(1)} against a minimum of {pool.group(2)}"
            + (f", {queued.group(1)} work items queued" if queued else "")
            + ")"
            if pool
            else ""
        )
        span = span_text(min(stamps, default=None), max(stamps, default=None))
        span = f" {span}" if span else ""
        out.append(
            Finding(
                analyzer="runtime_starvation",
                domain=Domain.LOGS,
                role="cause",
                code="thread_pool_starvation",
                category=Category.CODE_DEFECT,
                title=f"{who}: .NET thread pool starved{shown} ({len(recs)}x)",
                mechanism=(
                    f"{who}'s thread pool is starved{shown}{span}: "
                    "threads block synchronously on async work (.Result, .Wait(), GetAwaiter().GetResult(), a lock "
                    "around an awaited call), so the pool grows slowly, queued work waits, and calls time out on the "
                    "client side while the server they call answers in time."
                ),
                object=who,
                score=0.8,
                ts=min(stamps, default=None),
                tags=object_tags(item, service_of(item)),
                explains=["upstream_timeout", "latency", "errors", "http_5xx", "exception", "probe_*", "metric_shift"],
                evidence=[ref_of(r) for r in recs[:2]],
                actions=[
                    Action(
                        description="Take a stack dump: many threads waiting in Monitor.Enter, Task.Wait or "
                        "GetResult name the blocking call",
                        command="dotnet-stack report -p 1   # or dotnet-dump collect, then `clrstack -all`",
                    ),
                    Action(
                        description="Watch the thread pool's queue and thread count",
                        command="dotnet-counters monitor -p 1 "
                        "System.Runtime[threadpool-queue-length,threadpool-thread-count]",
                    ),
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- a JVM memory area capped below what the code needs

# A JVM that runs out of a fixed-size area it was given a cap for (-XX:MaxMetaspaceSize, -XX:MaxDirectMemorySize):
# the classes or direct buffers the application needs at start-up do not fit, so it dies every time it starts. The
# flag someone set is the cause (configuration_error), not the container's memory.
_AREA_OOM = re.compile(r"OutOfMemoryError: (Metaspace|Compressed class space|Direct buffer memory)")
_AREA_FLAG = {
    "Metaspace": re.compile(r"-XX:MaxMetaspaceSize=(\d+[kKmMgG]?)"),
    "Compressed class space": re.compile(r"-XX:CompressedClassSpaceSize=(\d+[kKmMgG]?)"),
    "Direct buffer memory": re.compile(r"-XX:MaxDirectMemorySize=(\d+[kKmMgG]?)"),
}


def _flag_source(evidence: EvidenceSet, rx: re.Pattern[str]) -> tuple[str, str, EvidenceRef] | None:
    """Where the cap is set: a ConfigMap key, else a log line (the JVM's "Picked up JAVA_TOOL_OPTIONS")."""
    for cm in evidence.kind("k8s/ConfigMap"):
        for key, value in ((cm.data.get("data") or {}) if isinstance(cm.data.get("data"), dict) else {}).items():
            if m := rx.search(str(value)):
                name = (cm.data.get("metadata") or {}).get("name") or cm.object
                return (
                    m[1],
                    f"ConfigMap {name} {key}",
                    EvidenceRef(item=cm.id, field=f"data.{key}", value=str(value)[:200]),
                )
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            if m := rx.search(str(r.get("msg") or "")):
                return (
                    m[1],
                    f"the JVM options of {service_of(item) or item.object}",
                    EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:200]),
                )
    return None


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log", "k8s/ConfigMap"})
def jvm_area_capped(evidence: EvidenceSet) -> list[Finding]:
    """A JVM dying of a memory area whose size a flag caps, the flag set where the evidence shows it."""
    out: list[Finding] = []
    seen: set[str] = set()
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "OutOfMemoryError" not in msg or not (m := _AREA_OOM.search(msg)):
                continue
            who = service_of(item) or item.object
            if who in seen:
                continue
            found = _flag_source(evidence, _AREA_FLAG[m[1]])
            if found is None:
                continue
            seen.add(who)
            value, where, ref = found
            flag = _AREA_FLAG[m[1]].pattern.split("=")[0].removeprefix("-XX:")
            out.append(
                Finding(
                    analyzer="jvm_area_capped",
                    domain=Domain.LOGS,
                    role="cause",
                    code="jvm_area_capped",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"{who} dies of OutOfMemoryError: {m[1]} under {flag}={value} ({where})",
                    mechanism=(
                        f"{where} caps the JVM's {m[1]} at {value} ({flag}), less than {who} needs: it throws "
                        f"OutOfMemoryError: {m[1]} and dies however much memory the container has; the flag is "
                        "set too low for this application."
                    ),
                    object=f"{flag}={value}",
                    score=0.85,
                    ts=r.get("ts") if isinstance(r.get("ts"), int | float) else None,
                    tags=[*object_tags(item, who), f"config:{flag}"],
                    explains=["crash_loop", "pod_restarts", "app_out_of_memory", "oom_*", "exception", "errors"],
                    evidence=[ref, ref_of(Rec(item, r.get("ts"), msg, r.get("line"), "error"))],
                    actions=[
                        Action(
                            description=f"Remove {flag} or raise it above what the application loads",
                            command=f"kubectl get configmap -A -o yaml | grep -n {flag}",
                            kind="read",
                        )
                    ],
                )
            )
    return with_aliases(out)
