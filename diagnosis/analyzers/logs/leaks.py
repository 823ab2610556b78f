"""A leak the runtime itself reports: HikariCP's leak detection, Node's EventEmitter listener warning, Netty's
ByteBuf leak detector, Python's unclosed-resource warnings.

A pool with no free connection or a heap that ran out is where a leak ends up; when the application's own runtime
said it was leaking, the leak is the cause (`code_defect`, named after the code that leaked where the trace shows
it) and the exhaustion its effect: a bigger pool or heap only delays the next one.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import object_tags, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs.errors import _where
from diagnosis.analyzers.logs.settings import _spaced
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

# (pattern, what leaks)
_LEAKS = (
    (re.compile(r"Connection leak detection triggered|Apparent connection leak detected"), "database connections"),
    (
        re.compile(
            r"Possible EventEmitter memory leak detected\. \d+ (?P<event>[\w:.\-]+) listeners added to "
            r"\[?(?P<emitter>[\w.\-]+)"
        ),
        "event listeners (memory)",
    ),
    (re.compile(r"LEAK: (?:ByteBuf\.release\(\) was not called|\w+ was GC'd before being released)"), "buffers"),
    (re.compile(r"ResourceWarning: unclosed (?P<res>[\w.]+)"), "unclosed resources"),
    (re.compile(r"\bleaked (?:connection|session|file descriptor|goroutine)s?\b", re.I), "connections"),
)
_SYSLOG_TAG = re.compile(r"^[\w.\-]+ [\w.\-/]+\[\d+\]: ")
_TRACE_LINES = 16
LEAK_EFFECTS = [
    "app_pool_exhausted",
    "db_pool_exhausted",
    "pool_exhausted",
    "app_out_of_memory",
    "oom_killed",
    "oom_kill",
    "memory_high",
    "memory_near_limit",
    "pod_restarts",
    "crash_loop",
    "errors",
    "exception",
    "latency",
    "http_5xx",
    "upstream_timeout",
    "too_many_connections",
    "connections_high",
    "idle_in_transaction",
    "alert:*",
]


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def runtime_leaks(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits: dict[str, list[tuple[dict[str, Any], re.Match[str], int]]] = {}
        records = item.data.get("records") or ()
        for i, r in enumerate(records):
            msg = str(r.get("msg") or "")
            if "eak" not in msg and "unclosed" not in msg and "LEAK" not in msg:
                continue  # cheap substring test first: this runs on every line of the bundle
            for pattern, what in _LEAKS:
                if m := pattern.search(msg):
                    hits.setdefault(what, []).append((r, m, i))
                    break
        for what, found in hits.items():
            r, m, i = found[0]
            # where the application took what it did not give back: the trace under the report (or the next record)
            where = ""
            for _, _, j in found:
                # a journal or syslog gives each frame a line (and a record) of its own, behind "host unit[pid]: "
                trace = "\n".join(_SYSLOG_TAG.sub("", str(x.get("msg") or "")) for x in records[j : j + _TRACE_LINES])
                if where := _where(trace):
                    break
            stamps = [x[0]["ts"] for x in found if isinstance(x[0].get("ts"), int | float)]
            first, last = (min(stamps), max(stamps)) if stamps else (None, None)
            service = service_of(item)
            who = service or item.object
            sample = " ".join(str(r.get("msg") or "").split())[:160]
            detail = ""
            if m.groupdict().get("emitter"):
                detail = f" ('{m['event']}' listeners on {m['emitter']} keep being added and never removed)"
            elif m.groupdict().get("res"):
                detail = f" (unclosed {m['res']})"
            out.append(
                Finding(
                    analyzer="runtime_leaks",
                    domain=Domain.LOGS,
                    role="cause",
                    code="resource_leak",
                    category=Category.CODE_DEFECT,
                    title=f"{who} leaks {what}{where} ({len(found)}x)",
                    mechanism=(
                        f"{who}'s runtime reported a leak of {what}{detail}{where} "
                        f"{'once' if len(found) == 1 else f'{len(found)} times'}{_spaced(span_text(first, last))}: "
                        f"'{sample}'. What it takes and never gives back runs out in the end (a pool with no free "
                        "connection, a heap at its limit); more of it only delays that."
                    ),
                    object=who,
                    score=0.8,
                    ts=first,
                    tags=object_tags(item, service),
                    explains=LEAK_EFFECTS,
                    evidence=[
                        EvidenceRef(item=item.id, line=x[0].get("line"), value=str(x[0].get("msg") or "")[:200])
                        for x in found[:3]
                    ],
                    actions=[
                        Action(
                            description="See every leak report with the code path that took the resource",
                            command=f"grep -n -A 12 -i 'leak' <{item.object} log>",
                        ),
                        Action(
                            description="Roll back the release that began leaking, or restart to buy time",
                            command="<roll back the service to its previous version>",
                            kind="write",
                        ),
                    ],
                )
            )
    return out
