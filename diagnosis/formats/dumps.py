"""JVM thread dumps (`jstack`, `jcmd <pid> Thread.print`, `kill -3` output), read as what they prove about the
process: a `log` item with one record per finding, stamped with the dump's time.

- "Found one Java-level deadlock": threads that each hold a monitor the other waits for (a lock-ordering bug).
- Thread-pool starvation: every thread of one pool (threads named `<pool>-<n>`) parked in Future.get /
  CompletableFuture.join from inside the pool's own tasks, so the tasks they wait for sit in the queue behind them
  and nothing ever completes.
- Otherwise one record with the thread counts per state, so a dump of a healthy process says so.

The item is the pod (`kubectl exec -n NS POD -- jcmd ...` pasted above the dump) or the file.

Go goroutine dumps (pprof `debug=1` groups, `debug=2` or SIGQUIT dumps) and PHP-FPM's slow log are read the same
way: a lock-ordering deadlock or a pile-up on one lock; where each slow PHP worker waited.

A JVM class histogram (`jcmd <pid> GC.class_histogram`, `jmap -histo[:live]`) is a `runtime/heap_histogram`
item: `{classes: [{name, instances, bytes}] (largest first), total_bytes, live}`, object `heap/<host or file>`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, TERMINAL_PROMPT, Document, ParseContext, prompt_host
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
    if "Full thread dump" in head:
        return bool(_HEADER.search(doc.text))
    # a dump cut down to some threads (`jcmd <pid> Thread.print | grep -A 14 worker`): their headers and states
    return head.count("java.lang.Thread.State:") >= 2 and len(_HEADER.findall(doc.text[:200_000])) >= 2


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


# a RUNNABLE thread's top frame inside a map that was modified by several threads without synchronisation: the
# tree bin or the bucket chain became a cycle, and every thread that reads it loops forever
_MAP_LOOP = re.compile(
    r"^\s+at (java\.util\.(?:HashMap(?:\$TreeNode)?|TreeMap|WeakHashMap|IdentityHashMap)\.(?:find|getTreeNode|"
    r"balanceInsertion|balanceDeletion|putTreeVal|treeifyBin|treeify|getNode|getEntry|put|get|rotateLeft|rotateRight|"
    r"fixAfterInsertion|fixAfterDeletion))\(",
    re.M,
)
SPINNING_MIN_THREADS = 3


def _spinning(threads: list[tuple[str, str]]) -> str | None:
    """A record when 3+ RUNNABLE threads sit in a non-thread-safe map's lookup or insert: an infinite loop."""
    hits: dict[str, list[str]] = defaultdict(list)
    for _, block in threads:
        state = _STATE.search(block)
        top = _MAP_LOOP.search(block)
        if state and state["state"] == "RUNNABLE" and top and block.find(top.group(0)) < block.find("\tat ") + 200:
            hits[top.group(1).split(".")[-2].split("$")[0]].append(block)
    for cls, blocks in hits.items():
        if len(blocks) >= SPINNING_MIN_THREADS:
            frame = _APP_FRAME.search(blocks[0])
            return (
                f"infinite loop: {len(blocks)} RUNNABLE threads spin inside java.util.{cls}"
                + (f", called from {frame.group(1)}" if frame else "")
                + f": a {cls} shared by threads without synchronisation was corrupted into a cycle (a race)"
            )
    return None


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
    spinning = _spinning(threads)
    if spinning:
        add("error", spinning)
    states = Counter(s["state"] for _, b in threads if (s := _STATE.search(b)))
    add("info", f"thread dump: {len(threads)} threads, " + ", ".join(f"{n} {s}" for s, n in states.most_common()))
    obj, source = _object(doc)
    data = {"records": records, "source": {"path": doc.path, "export": "thread-dump", **source}, "truncated": False}
    yield ctx.item(doc.path, "log", obj, data, ts)


# --- Go: the goroutine profile (`/debug/pprof/goroutine?debug=1`: "N @ addrs" groups, one "#\taddr\tfunc+0x..\tfile"
# line per frame) and the full dump (`?debug=2`, a panic or SIGQUIT: "goroutine 7 [semacquire, 5 minutes]:")
_GO_PROFILE = re.compile(r"^goroutine profile: total (\d+)\s*$", re.M)
_GO_GROUP = re.compile(r"^(\d+) @(?: 0x[0-9a-f]+)+\s*$")
_GO_FRAME = re.compile(r"^#\s+0x[0-9a-f]+\s+(\S+?)\+0x[0-9a-f]+\s")
_GO_FULL = re.compile(r"^goroutine \d+ \[(?P<state>[^\],]+)(?:, [^\]]*)?\]:\s*$")
_GO_FUNC = re.compile(r"^(?P<func>[\w./*()\-]+?)\((?:[^()]*)\)\s*$")
_GO_LOCK = re.compile(r"^sync\.(?:\(\*(?:RW)?Mutex\)\.(?:R?Lock|lockSlow)|runtime_Semacquire\w*)$")
_GO_STD = re.compile(r"^(?:runtime|sync|internal|net|syscall|os|io|bufio|context|time|reflect|crypto)[./]")
PILE_UP_SHARE = 0.5  # this share of all goroutines waiting on locks is a pile-up behind a lock that is not released
PILE_UP_MIN = 20


def detect_goroutines(doc: Document) -> bool:
    head = doc.text[:4000]
    return bool(_GO_PROFILE.search(head)) or (
        bool(re.search(r"^goroutine \d+ \[", head, re.M)) and "runtime." in doc.text[:20000]
    )


def _go_groups(text: str) -> list[tuple[int, list[str]]]:
    """(how many goroutines, their frames innermost first) per distinct stack."""
    groups: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        if m := _GO_GROUP.match(line):
            groups.append((int(m.group(1)), []))
        elif m := _GO_FULL.match(line):
            groups.append((1, []))
        elif groups and (f := _GO_FRAME.match(line) or _GO_FUNC.match(line.strip())):
            groups[-1][1].append(f.group(1))
    return [g for g in groups if g[1]]


def _short_func(func: str) -> str:
    return func.rsplit("/", 1)[-1]  # github.com/acme/api/internal/pricing.(*Cache).Get -> pricing.(*Cache).Get


@FORMATS.format("go-goroutines", shapes={"text"}, detect=detect_goroutines, order=17)
def parse_goroutines(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """What a Go process's goroutines prove: most of them queued on one lock (a pile-up behind a holder that never
    lets go), and the goroutines that hold a lock while waiting for another (a lock-ordering deadlock)."""
    groups = _go_groups(doc.text)
    total_m = _GO_PROFILE.search(doc.text[:4000])
    total = int(total_m.group(1)) if total_m else sum(n for n, _ in groups)
    records: list[dict[str, Any]] = []

    def add(level: str, msg: str) -> None:
        records.append({"ts": None, "level": level, "msg": msg, "line": len(records) + 1})

    waiting: Counter[str] = Counter()  # the app function each lock-waiting group is blocked in
    lone: list[tuple[str, str]] = []  # single goroutines waiting on a lock: (where it waits, what called that)
    for n, frames in groups:
        if not any(_GO_LOCK.match(f) for f in frames[:4]):
            continue
        app = [_short_func(f) for f in frames if not _GO_STD.match(f) and "." in f]
        if not app:
            continue
        waiting[app[0]] += n
        if n == 1:
            lone.append((app[0], app[1] if len(app) > 1 else app[0]))
    blocked = sum(waiting.values())
    if blocked >= PILE_UP_MIN and blocked >= PILE_UP_SHARE * total:
        where = ", ".join(f"{f} ({n})" for f, n in waiting.most_common(3))
        piled = {f for f, n in waiting.items() if n > 1}
        # goroutines alone on a lock in functions other than the pile-up's hold a lock while waiting for another
        holders = [(w, c) for w, c in lone if w not in piled or c.split(".")[0] != w.split(".")[0]]
        holders = holders if len(holders) >= 2 else [(w, c) for w, c in lone]
        if len(holders) >= 2:
            pair = " while ".join(f"{c} waits for a lock in {w}" for w, c in holders[:2])
            add("error", f"lock-ordering deadlock between goroutines: {pair}; {blocked} of {total} goroutines wait "
                         f"behind them ({where})")  # fmt: skip
        else:
            add("error", f"goroutine pile-up on a lock that is never released: {blocked} of {total} goroutines wait "
                         f"to acquire it ({where})")  # fmt: skip
    add("info", f"goroutine profile: {total} goroutines, {blocked} waiting on locks")
    obj, source = _object(doc)
    data = {"records": records, "source": {"path": doc.path, "export": "goroutine-dump", **source}, "truncated": False}
    yield ctx.item(doc.path, "log", obj, data, None)


# --- PHP-FPM's slow log: "[08-Jul-2025 14:17:45]  [pool www] pid 31823", "script_filename = ...", then the stack,
# innermost first ("[0x00007f5c1e65df20] execute() /var/www/.../Statement.php:121")
_FPM_SLOW_HEAD = re.compile(
    r"^\[(?P<ts>\d{2}-\w{3}-\d{4} \d\d:\d\d:\d\d)\]\s+\[pool (?P<pool>[^\]]+)\] pid (?P<pid>\d+)"
)
_FPM_FRAME = re.compile(r"^\[0x[0-9a-f]+\] (?P<func>[\w\\\\:>\-\[\]]+)\(\) (?P<file>\S+?)(?::\d+)?\s*$")
# a frame inside a client library waiting on its server: a database, a cache, an HTTP call
_FPM_WAITING = re.compile(
    r"/(?:doctrine/dbal|illuminate/database|PDO|mysqli|pgsql|predis|phpredis|guzzlehttp|symfony/http-client|"
    r"elasticsearch|mongodb)/|PDOStatement|mysqli_|pg_query|curl_exec|Redis::",
    re.I,
)


def detect_fpm_slow(doc: Document) -> bool:
    head = doc.text[:4000]
    return bool(re.search(_FPM_SLOW_HEAD.pattern, head, re.M)) and "script_filename = " in head


@FORMATS.format("php-fpm-slowlog", shapes={"text"}, detect=detect_fpm_slow, order=17)
def parse_fpm_slow(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One record per slow request the pool traced: where its worker was stuck (the innermost frame of our code,
    and the client library it waited in: "waiting on the database in doctrine/dbal ... execute(), called from
    AvailabilityRepository::findFreeRooms")."""
    records: list[dict[str, Any]] = []
    head: re.Match[str] | None = None
    frames: list[tuple[str, str]] = []
    line_no = 0

    def flush() -> None:
        if head is None or not frames:
            return
        try:
            ts: float | None = datetime.strptime(head["ts"], "%d-%b-%Y %H:%M:%S").replace(tzinfo=UTC).timestamp()
        except ValueError:
            ts = None
        waiting = next((f for f in frames if _FPM_WAITING.search(f"{f[0]} {f[1]}")), None)
        ours = next((f for f in frames if "/vendor/" not in f[1] and not _FPM_WAITING.search(f[1])), frames[-1])
        where = f"{ours[0]}() in {ours[1].rsplit('/', 1)[-1]}"
        msg = (
            f"slow request in pool {head['pool']} (pid {head['pid']}): worker waiting on a call in "
            f"{waiting[1].split('/vendor/')[-1].split('/src/')[0]} ({waiting[0]}()), called from {where}"
            if waiting
            else f"slow request in pool {head['pool']} (pid {head['pid']}): worker busy in {where}"
        )
        records.append({"ts": ts, "level": "warning", "msg": msg, "line": line_no})

    for n, raw in enumerate(doc.lines(), 1):
        line = raw.strip()
        if m := _FPM_SLOW_HEAD.match(line):
            flush()
            head, frames, line_no = m, [], n
        elif f := _FPM_FRAME.match(line):
            frames.append((f["func"], f["file"]))
    flush()
    if not records:
        return
    data = {"records": records, "source": {"path": doc.path, "export": "php-fpm-slowlog"}, "truncated": False}
    yield ctx.item(doc.path, "log", doc.path, data, max((r["ts"] for r in records if r["ts"]), default=None))


# --- JVM class histograms -----------------------------------------------------------------------------------------

_HISTO_HEADER = re.compile(r"^\s*num\s+#instances\s+#bytes\s+class name", re.M)
_HISTO_ROW = re.compile(r"^\s*\d+:\s+(?P<n>\d+)\s+(?P<bytes>\d+)\s+(?P<cls>\S+)")
_HISTO_TOTAL = re.compile(r"^\s*Total\s+(?P<n>\d+)\s+(?P<bytes>\d+)", re.M)


def detect_histogram(doc: Document) -> bool:
    return bool(_HISTO_HEADER.search(doc.text[:20000]))


@FORMATS.format("jvm-class-histogram", shapes={"text"}, detect=detect_histogram, order=17)
def parse_histogram(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    classes: list[dict[str, Any]] = [
        {"name": m["cls"], "instances": int(m["n"]), "bytes": int(m["bytes"])}
        for line in doc.lines()
        if (m := _HISTO_ROW.match(line))
    ]
    if not classes:
        return
    classes.sort(key=lambda c: -int(c["bytes"]))
    total = _HISTO_TOTAL.search(doc.text)
    host = prompt_host(doc.text)
    data = {
        "classes": classes,
        "total_bytes": int(total["bytes"]) if total else sum(int(c["bytes"]) for c in classes),
        "live": ":live" in doc.text[:2000] or "GC.class_histogram" in doc.text[:2000],
    }
    stamp = _DUMP_TIME.search(doc.text)
    ts = parse_ts(stamp.group(1)) if stamp else None
    yield ctx.item(doc.path, "runtime/heap_histogram", f"heap/{host or doc.path}", data, ts)


# --- MinIO's console error log: blocks of "API: ...", "Time: 09:11:44 UTC 06/20/2024", "DeploymentID: ...",
# "RemoteHost/Host/UserAgent/...", "Error: <message> (<type>)", then a numbered stack
_MINIO_TIME = re.compile(r"^Time: (\d\d:\d\d:\d\d) UTC (\d\d/\d\d/\d{4})\s*$", re.M)
_MINIO_KEY = re.compile(r"^(API|Error|RemoteHost|Host|UserAgent|Bucket|Object|DeploymentID|RequestID): (.*)$")
_KUBECTL_LOGS_POD = re.compile(r"\blogs\s+(?:(?:-n|--namespace)[ =]\S+\s+)?(?:pod/)?([a-z0-9][\w.\-]*)")


def detect_minio_log(doc: Document) -> bool:
    head = doc.text[:8192]
    if "API: " not in head or "Time: " not in head:
        return False
    return len(_MINIO_TIME.findall(head)) >= 2 and bool(re.search(r"^API: \S+", head, re.M))


@FORMATS.format("minio-log", shapes={"text"}, detect=detect_minio_log, order=17)
def parse_minio_log(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One error record per block: its time, its API, and its `Error:` line."""
    records: list[dict[str, Any]] = []
    block: dict[str, Any] = {}

    def flush() -> None:
        if block.get("Error"):
            api = f" [{block['API']}]" if block.get("API") else ""
            records.append(
                {"ts": block.get("ts"), "level": "error", "msg": f"{block['Error']}{api}", "line": block["line"]}
            )

    for n, raw in enumerate(doc.lines(), 1):
        line = raw.strip()
        if t := _MINIO_TIME.match(line):
            try:
                ts: float | None = (
                    datetime.strptime(f"{t[2]} {t[1]}", "%m/%d/%Y %H:%M:%S").replace(tzinfo=UTC).timestamp()
                )
            except ValueError:
                ts = None
            block["ts"] = ts
        elif k := _MINIO_KEY.match(line):
            if k[1] == "API":
                flush()
                block = {"API": k[2].strip(), "line": n}
            else:
                block.setdefault("line", n)
                block[k[1]] = k[2].strip()
    flush()
    if not records:
        return
    pod = _KUBECTL_LOGS_POD.search(doc.command or "")
    source: dict[str, Any] = {"path": doc.path, "export": "minio-log"}
    if pod:
        source["app"] = re.sub(r"-\d+$", "", pod[1]) if re.search(r"-pool-\d+-\d+$", pod[1]) else pod[1]
    data = {"records": records, "source": source, "truncated": False}
    yield ctx.item(doc.path, "log", doc.path, data, max((r["ts"] for r in records if r["ts"]), default=None))
