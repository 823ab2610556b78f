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
from diagnosis.model import Action, Category, Domain, Finding

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
