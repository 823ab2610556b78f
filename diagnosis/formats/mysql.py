"""MySQL and MariaDB lock diagnostics pasted from the `mysql` client: boxed tables (`+----+` rules, `| a | b |`
rows) and vertical records (`\\G`: `*** 1. row ***` then `column: value`), read into the same items as PostgreSQL's
views so the database analyzer follows the same blocking chain:

- information_schema.innodb_trx (trx_mysql_thread_id, trx_state, trx_started, trx_query) -> `pg/session`: a
  transaction RUNNING with no statement is "idle in transaction" (the client opened it and went quiet); LOCK WAIT
  is an active session waiting on a lock
- information_schema.processlist (ID, USER, HOST, DB, COMMAND, TIME, INFO) -> who each thread is, and how long it
  has been in its state
- sys.innodb_lock_waits (waiting_pid, blocking_pid, locked_table) -> `blocked_by`, and `pg/lock` rows naming the
  table: the blocker's lock granted, the waiter's not
- performance_schema.metadata_locks joined to its threads (OBJECT_NAME, LOCK_TYPE, LOCK_STATUS, PROCESSLIST_ID) ->
  `pg/lock` rows: a metadata lock GRANTED or PENDING, its type (`mdl`) and the PostgreSQL mode that conflicts alike
  (`mode`: SHARED_READ as AccessShareLock, EXCLUSIVE as AccessExclusiveLock), so DDL queued behind an open
  transaction, and every statement queued behind the DDL, read as one blocking chain
- a processlist row "Waiting for table metadata lock" is a session waiting on a lock
- a processlist grouped by user (`SELECT user, command, COUNT(*) AS n ... GROUP BY`) -> one session per group that
  stands for `count` threads, so the connection rules see who holds the slots
- `SHOW VARIABLES` / `mysqladmin variables` (Variable_name, Value) -> `pg/settings` (max_connections, wait_timeout)
- a `NOW()` column dates the snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.postgres import COUNT_COLUMNS
from diagnosis.model import EvidenceItem

_BOX_RULE = re.compile(r"^\+(?:-+\+)+\s*$")
_VERTICAL = re.compile(r"^\*+ (\d+)\. row \*+\s*$")
_NULL = ("NULL", "")


def mysql_tables(text: str) -> list[list[dict[str, str]]]:
    """The result tables of a mysql client session as rows {column: text}."""
    lines = text.splitlines()
    tables: list[list[dict[str, str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if _BOX_RULE.match(line) and i + 2 < len(lines) and lines[i + 1].lstrip().startswith("|"):
            header = [h.strip() for h in lines[i + 1].strip().strip("|").split("|")]
            rows: list[dict[str, str]] = []
            i += 3  # rule, header, rule
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[i].strip()[1:-1].split("|")]
                if len(cells) > len(header):  # a '|' inside the last value
                    cells = [*cells[: len(header) - 1], " | ".join(cells[len(header) - 1 :])]
                if len(cells) == len(header):
                    rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            if rows:
                tables.append(rows)
            continue
        if _VERTICAL.match(line.strip()):
            records: list[dict[str, str]] = []
            while i < len(lines) and (lines[i].strip() and not lines[i].lstrip().startswith(("mysql>", "MariaDB"))):
                if _VERTICAL.match(lines[i].strip()):
                    records.append({})
                elif records and ":" in lines[i]:
                    key, _, value = lines[i].partition(":")
                    records[-1][key.strip()] = value.strip()
                i += 1
            if records:
                tables.append(records)
            continue
        i += 1
    return tables


def _kind(rows: list[dict[str, str]]) -> str | None:
    cols = {c.lower() for c in rows[0]}
    if {"trx_mysql_thread_id", "trx_state"} <= cols:
        return "trx"
    if {"waiting_pid", "blocking_pid"} <= cols:
        return "waits"
    if {"object_name", "lock_type", "lock_status", "processlist_id"} <= cols:
        return "mdl"
    if {"id", "user", "command", "time"} <= cols:
        return "processlist"
    if "user" in cols and "id" not in cols and cols & set(_COUNT_COLUMNS):
        return "grouped"
    if {"variable_name", "value"} <= cols:
        return "variables"
    if "now()" in cols or "current_timestamp" in cols or "now" in cols:
        return "now"
    return None


_COUNT_COLUMNS = (*COUNT_COLUMNS, "count(*)", "cnt", "threads")  # pg_stat_activity's group counts, and MySQL's
# the tables that make a paste MySQL's own: lock views, the processlist (raw or grouped by user), server variables
_SESSION_KINDS = ("trx", "waits", "mdl", "processlist", "grouped", "variables")


def _detect(doc: Document) -> bool:
    head = doc.text[:200_000]
    if "+-" not in head and ". row *" not in head:
        return False
    return any(_kind(t) in _SESSION_KINDS for t in mysql_tables(head))


def _v(row: dict[str, str], *names: str) -> str | None:
    lower = {k.lower(): v for k, v in row.items()}
    for n in names:
        v = lower.get(n)
        if v is not None and v not in _NULL:
            return v
    return None


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.strip().lstrip("-").isdigit() else None


def _group(row: dict[str, str], pid: int) -> dict[str, Any] | None:
    """A processlist row grouped by user (and client, command): the threads it counts, as one session (a negative
    pid, as pg_stat_activity's groups have: it never matches a lock or a blocker)."""
    count = _int(_v(row, *_COUNT_COLUMNS))
    user = _v(row, "user")
    if not count or not user:
        return None
    command = _v(row, "command") or ""
    oldest = _int(_v(row, "max_s", "max_time", "max(time)", "oldest_s"))
    return {
        "pid": pid,
        "usename": user,
        "application_name": user,
        "client_addr": _v(row, "client", "host"),
        "datname": _v(row, "db"),
        "state": "idle" if command == "Sleep" else "active",
        "count": count,
        "query": None,
        "blocked_by": [],
        "captured_at": None,
        "engine": "mysql",
        "backend_type": "background worker" if command in ("Daemon", "Binlog Dump", "Binlog Dump GTID") else None,
        "xact_start": None,
        "state_change": None,
        "state_age_s": oldest,
    }


def _table(name: str | None) -> str | None:
    return name.replace("`", "") if name else None


# a metadata lock's type, as the PostgreSQL table-lock mode with the same conflicts (MySQL's MDL compatibility matrix:
# shared reads and writes coexist, an upgradable lock excludes only its like and stronger, EXCLUSIVE excludes all)
_MDL_MODE = {
    "SHARED": "AccessShareLock",
    "SHARED_HIGH_PRIO": "AccessShareLock",
    "SHARED_READ": "AccessShareLock",
    "SHARED_WRITE": "RowExclusiveLock",
    "SHARED_WRITE_LOW_PRIO": "RowExclusiveLock",
    "SHARED_UPGRADABLE": "ShareUpdateExclusiveLock",
    "SHARED_READ_ONLY": "ShareLock",
    "SHARED_NO_WRITE": "ShareLock",
    "SHARED_NO_READ_WRITE": "ExclusiveLock",
    "EXCLUSIVE": "AccessExclusiveLock",
}
_MDL_WAIT = re.compile(r"^Waiting for (?:table metadata|table level|global read|schema metadata) lock", re.I)


@FORMATS.format("mysql-text", shapes={"text"}, detect=_detect, order=39)
def parse_mysql(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    tables = [(k, t) for t in mysql_tables(doc.text) if (k := _kind(t))]
    captured = next((parse_ts(_v(t[0], "now()", "current_timestamp", "now")) for k, t in tables if k == "now"), None)
    sessions: dict[int, dict[str, Any]] = {}

    def session(pid: int) -> dict[str, Any]:
        return sessions.setdefault(
            pid,
            {"pid": pid, "state": None, "query": None, "blocked_by": [], "captured_at": captured, "engine": "mysql"},
        )

    settings: dict[str, str] = {}
    grouped: list[dict[str, Any]] = []
    for kind, rows in tables:
        if kind == "variables":
            settings.update((str(_v(r, "variable_name")), str(_v(r, "value"))) for r in rows if _v(r, "variable_name"))
            continue
        if kind == "grouped":
            for r in rows:
                if g := _group(r, -len(grouped) - 1):
                    grouped.append(g)
            continue
        for row in rows:
            if kind == "processlist" and (pid := _int(_v(row, "id"))) is not None:
                s = session(pid)
                user = _v(row, "user")
                s.update(usename=user, application_name=s.get("application_name") or user, datname=_v(row, "db"))
                s["client_addr"] = (_v(row, "host") or "").rsplit(":", 1)[0] or None
                secs = _int(_v(row, "time"))
                s["state_age_s"] = secs
                if captured is not None and secs is not None:
                    s["state_change"] = captured - secs
                if s["state"] is None:
                    s["state"] = "idle" if _v(row, "command") == "Sleep" else "active"
                if _MDL_WAIT.match(_v(row, "state") or ""):
                    s["wait_event_type"], s["wait_event"] = "Lock", str(_v(row, "state"))
                s["query"] = s["query"] or _v(row, "info")
            elif kind == "trx" and (pid := _int(_v(row, "trx_mysql_thread_id"))) is not None:
                s = session(pid)
                query = _v(row, "trx_query")
                waiting = (_v(row, "trx_state") or "").upper() == "LOCK WAIT"
                s["state"] = "active" if waiting or query else "idle in transaction"
                s["wait_event_type"] = "Lock" if waiting else None
                s["xact_start"] = parse_ts(_v(row, "trx_started"))
                s["query"] = query or s["query"]
    locks: list[dict[str, Any]] = []
    for kind, rows in tables:
        if kind == "mdl":
            locks += _metadata_locks(rows, session)
        if kind != "waits":
            continue
        for row in rows:
            waiter, blocker = _int(_v(row, "waiting_pid")), _int(_v(row, "blocking_pid"))
            if waiter is None or blocker is None:
                continue
            w, b = session(waiter), session(blocker)
            if blocker not in w["blocked_by"]:
                w["blocked_by"].append(blocker)
            w["state"] = w["state"] or "active"
            w["wait_event_type"] = "Lock"
            w["query"] = w["query"] or _v(row, "waiting_query")
            b["query"] = b["query"] or _v(row, "blocking_query")
            if b["state"] is None:
                b["state"] = "idle in transaction" if _v(row, "blocking_query") is None else "active"
            table = _table(_v(row, "locked_table", "object_name"))
            locktype = "tuple" if (_v(row, "locked_type") or "").upper() == "RECORD" else "relation"
            locks.append(
                {
                    "pid": waiter,
                    "locktype": locktype,
                    "relation": table,
                    "mode": _v(row, "waiting_lock_mode", "waiting_lock_type") or "X",
                    "granted": False,
                }
            )
            locks.append(
                {
                    "pid": blocker,
                    "locktype": "relation",
                    "relation": table,
                    "mode": _v(row, "blocking_lock_mode", "blocking_lock_type") or "X",
                    "granted": True,
                }
            )
    for i, g in enumerate(grouped):
        g["captured_at"] = captured
        yield ctx.item(
            doc.path, "pg/session", f"{g['usename']} {g['state']} x{g['count']} (group {i + 1})", g, captured
        )
    for pid, s in sessions.items():
        s.setdefault("xact_start", None)
        s.setdefault("state_change", None)
        yield ctx.item(doc.path, "pg/session", f"pid {pid}", s, captured or s.get("state_change"))
    if settings:
        yield ctx.item(doc.path, "pg/settings", "mysql variables", settings, captured)
    seen: set[tuple[Any, ...]] = set()
    for lk in locks:
        key = (lk["pid"], lk["relation"], lk["granted"], lk.get("mdl"))
        if key in seen:
            continue
        seen.add(key)
        lk.update(waitstart=None, transactionid=None)
        yield ctx.item(doc.path, "pg/lock", f"pid {lk['pid']} {lk['mode']} on {lk['relation']}", lk, captured)


def _metadata_locks(rows: list[dict[str, str]], session: Any) -> Iterator[dict[str, Any]]:
    """performance_schema.metadata_locks rows on tables, as `pg/lock` rows; a PENDING lock's thread waits."""
    for row in rows:
        pid, table = _int(_v(row, "processlist_id")), _table(_v(row, "object_name"))
        mdl = (_v(row, "lock_type") or "").upper()
        if pid is None or table is None or mdl not in _MDL_MODE:
            continue
        if (_v(row, "object_type") or "TABLE").upper() != "TABLE":
            continue
        granted = (_v(row, "lock_status") or "").upper() == "GRANTED"
        if not granted:
            s = session(pid)
            s["wait_event_type"] = "Lock"
            s["state"] = s["state"] or "active"
        schema = _v(row, "object_schema")
        yield {
            "pid": pid,
            "locktype": "relation",
            "relation": table,
            "schema": schema,
            "mode": _MDL_MODE[mdl],
            "mdl": mdl,
            "granted": granted,
        }


# --- the slow query log (`slow_query_log_file`, or `grep -A` of it) ---------------------------------------------
# # Time: 2024-09-17T10:02:40.710106Z
# # User@Host: orders_api[orders_api] @  [10.90.2.21]  Id: 881228
# # Query_time: 2.710106  Lock_time: 0.000004 Rows_sent: 4  Rows_examined: 9184827
# use orders;
# SET timestamp=1726567358;
# SELECT ... ;
_SLOW_STATS = re.compile(
    r"^# Query_time: (?P<qt>[\d.]+)\s+Lock_time: (?P<lt>[\d.]+)\s+Rows_sent: (?P<rs>\d+)\s+Rows_examined: (?P<re>\d+)"
)
_SLOW_USER = re.compile(r"^# User@Host: (?P<user>[^\[\s]+)\[[^\]]*\] @ (?P<host>[^\[]*)\[(?P<ip>[^\]]*)\]")
_SLOW_TIME = re.compile(r"^# Time: (?P<t>\S+(?: \S+)?)")
_SLOW_SET_TS = re.compile(r"^SET timestamp=(\d+);")


def _detect_slow(doc: Document) -> bool:
    head = doc.text[:20000]
    return "# Query_time:" in head and "Rows_examined:" in head


@FORMATS.format("mysql-slow-log", shapes={"text"}, detect=_detect_slow, order=38)
def parse_slow_log(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `db/slow_queries` item: every logged statement with who ran it, when, its time and the rows it read
    against the rows it returned (a statement reading millions to return a handful scans instead of seeking)."""
    entries: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    user: dict[str, str] = {}
    when: float | None = None
    for n, raw in enumerate(doc.lines(), 1):
        line = raw.strip()
        if m := _SLOW_TIME.match(line):
            when = parse_ts(m["t"])
        elif m := _SLOW_USER.match(line):
            user = {"user": m["user"], "client": (m["ip"] or m["host"]).strip()}
        elif m := _SLOW_STATS.match(line):
            cur = {
                "query_time": float(m["qt"]), "lock_time": float(m["lt"]), "rows_sent": int(m["rs"]),
                "rows_examined": int(m["re"]), "ts": when, "line": n, "statement": "", **user,
            }  # fmt: skip
            entries.append(cur)
            user, when = {}, None
        elif cur is not None and (m := _SLOW_SET_TS.match(line)):
            cur["ts"] = float(m.group(1))
        elif cur is not None and line and not line.startswith(("#", "use ", "--")) and not cur["statement"]:
            cur["statement"] = line[:2000]
        elif line.startswith(("[", "$")) and cur is not None:
            cur = None  # the next command of a terminal session
    if not entries:
        return
    stamps = [e["ts"] for e in entries if e["ts"] is not None]
    data = {"entries": entries, "command": doc.command}
    yield ctx.item(doc.path, "db/slow_queries", f"slow log {doc.path}", data, max(stamps) if stamps else None)
