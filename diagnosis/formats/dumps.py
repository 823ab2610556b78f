"""JVM thread dumps (`jstack`, `jcmd <pid> Thread.print`, `kill -3` output), read as what they prove about the
process: a `log` item with one record per finding, stamped with the dump's time.

- "Found one Java-level deadlock": threads that each hold a monitor the other waits for (a lock-ordering bug).
- Thread-pool starvation: every thread of one pool (threads named `<pool>-<n>`) parked in Future.get /
  CompletableFuture.join from inside the pool's own tasks, so the tasks they wait for sit in the queue behind them
  and nothing ever completes.
- Otherwise one record with the thread counts per state, so a dump of a healthy process says so.

The item is the pod (`kubectl exec -n NS POD -- jcmd ...` pasted above the dump) or the file.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, TERMINAL_PROMPT, Document, ParseContext
from diagnosis.model import EvidenceItem

_HEADER = re.compile(r'^"(?P<name>[^"]+)"(?: #\d+)?.*?(?:prio=\d+|tid=0x)', re.M)
_STATE = re.compile(r"java\.lang\.Thread\.State: (?P<state>[A-Z_]+)")
_DUMP_TIME = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\s*$", re.M)
_BLOCKING_WAIT = re.compile(
    r"at java\.util\.concurrent\.(?:CompletableFuture\.(?:join|get|waitingGet)|FutureTask\.get|ForkJoinTask\.join|"
    r"CountDownLatch\.await)"
)
_POOL_WORKER = re.compile(r"ThreadPoolExecutor\$Worker\.run|ForkJoinWorkerThread\.run")
_APP_FRAME = re.compile(
    r"^\s+at ((?!java\.|javax\.|jdk\.|sun\.|org\.springframework\.|org\.apache\.)[\w$.]+\([^)]*\))", re.M
)
_POOL_NAME = re.compile(r"^(?P<pool>.+?)[-_#]?\d+$")
_KUBECTL_EXEC = re.compile(r"kubectl\b.*?\bexec\b(?:\s+-\S+(?:\s+(?!-)\S+)?)*?\s+(?P<pod>[a-z0-9][\w.-]*)")
_NAMESPACE = re.compile(r"(?:-n|--namespace)[= ](?P<ns>[\w.-]+)")
STARVED_MIN_THREADS = 4


def detect(doc: Document) -> bool:
    head = doc.text[:4000]
    return "Full thread dump" in head and bool(_HEADER.search(doc.text))


def _threads(text: str) -> list[tuple[str, str]]:
    """(name, block) per thread, the block being its header, state and stack."""
    marks = list(_HEADER.finditer(text))
    return [
        (m["name"], text[m.start() : marks[i + 1].start() if i + 1 < len(marks) else len(text)])
        for i, m in enumerate(marks)
    ]


def _object(doc: Document) -> tuple[str, dict[str, Any]]:
    first = doc.text.split("\n", 1)[0]
    prompt = TERMINAL_PROMPT.match(first)
    command = doc.command or (prompt["cmd"] if prompt else "")
    m = _KUBECTL_EXEC.search(command)
    if m:
        ns = _NAMESPACE.search(command)
        return f"Pod/{ns['ns'] if ns else 'default'}/{m['pod']}", {"command": command}
    return doc.path, {"command": command} if command else {}


@FORMATS.format("jvm-thread-dump", shapes={"text"}, detect=detect, order=17)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    text = doc.text
    stamp = _DUMP_TIME.search(text)
    ts = parse_ts(stamp.group(1).replace(" ", "T") + "Z") if stamp else None
    threads = _threads(text)
    records: list[dict[str, Any]] = []

    def add(level: str, msg: str) -> None:
        records.append({"ts": ts, "level": level, "msg": msg, "line": len(records) + 1})

    deadlock = text.find("Found one Java-level deadlock")
    if deadlock >= 0:
        names = re.findall(r'^"([^"]+)":\s*$', text[deadlock : deadlock + 4000], re.M)
        add("error", f"Java-level deadlock between threads {', '.join(dict.fromkeys(names)) or '?'}")
    pools: dict[str, list[str]] = defaultdict(list)
    for name, block in threads:
        m = _POOL_NAME.match(name)
        if m and _POOL_WORKER.search(block):
            pools[m["pool"]].append(block)
    for pool, blocks in pools.items():
        waiting = [b for b in blocks if _BLOCKING_WAIT.search(b) and _POOL_WORKER.search(b)]
        if len(blocks) >= STARVED_MIN_THREADS and len(waiting) == len(blocks):
            wait = list(_BLOCKING_WAIT.finditer(waiting[0]))[-1]  # the outermost: the call the task made
            frame = _APP_FRAME.search(waiting[0])
            add(
                "error",
                f"thread-pool starvation deadlock in pool {pool}: all {len(blocks)} of its threads wait in "
                f"{wait.group(0)[3:]} for tasks queued to the same pool"
                + (f", called from {frame.group(1)}" if frame else ""),
            )
    states = Counter(s["state"] for _, b in threads if (s := _STATE.search(b)))
    add("info", f"thread dump: {len(threads)} threads, " + ", ".join(f"{n} {s}" for s, n in states.most_common()))
    obj, source = _object(doc)
    data = {"records": records, "source": {"path": doc.path, "export": "thread-dump", **source}, "truncated": False}
    yield ctx.item(doc.path, "log", obj, data, ts)
