"""PostgreSQL views exported as CSV (`psql --csv`, `COPY ... TO STDOUT WITH CSV HEADER`) or JSON (`json_agg`
output, any array of row objects, or `row_to_json` lines), recognised by their columns:

- pg_stat_activity (pid, state and one of query, wait_event_type, backend_type, xact_start ...) -> `pg/session`
- pg_locks (locktype, mode, granted, pid) -> `pg/lock`
- pg_settings (name, setting) -> one `pg/settings` item

The same views pasted from a psql terminal are read too: aligned tables (`-----+-----` under the header, values
wrapped with `+`), expanded records (`\\x`: `-[ RECORD 1 ]-----`), and `SHOW <setting>`; several in one file, with
or without the prompt and the query.

`blocked_by` comes from a pg_blocking_pids(pid) column (named pg_blocking_pids, blocked_by or blocking_pids);
without one, and with pg_locks in the same bundle, it is worked out from the locks: a session waiting for a lock
is blocked by the sessions holding a granted lock on the same relation, transaction id or tuple.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, FormatError, ParseContext
from diagnosis.model import EvidenceItem

ACTIVITY_HINTS = {"query", "wait_event_type", "backend_type", "xact_start", "datname", "usename", "query_start"}
BLOCKER_COLUMNS = ("pg_blocking_pids", "blocked_by", "blocking_pids")
CAPTURED_COLUMNS = ("captured_at", "now", "snapshot_at", "sampled_at", "clock_timestamp")
TS_COLUMNS = ("xact_start", "query_start", "state_change", "backend_start")


_IDENTITY = ("datname", "usename", "application_name", "client_addr", "backend_type", "state")


def _session_identity(row: dict[str, Any]) -> dict[str, Any]:
    """Who a session (or a group of sessions) is: database, user, application, client, kind, state."""
    return {k: _text(row.get(k)) for k in _IDENTITY}


def _columns(doc: Document) -> set[str]:
    if doc.shape == "csv":
        return set(doc.header)
    if doc.shape == "jsonl":
        first = next((line for line in doc.lines() if line.strip()), "")
        try:
            row = json.loads(first)
        except ValueError:
            return set()
        return set(row) if isinstance(row, dict) else set()
    v = doc.value
    if isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
        return set(v[0])
    return set()


def _rows(doc: Document) -> Iterable[dict[str, Any]]:
    if doc.shape == "csv":
        return doc.rows()
    if doc.shape == "jsonl":
        return _json_rows(doc)
    return doc.value


def _json_rows(doc: Document) -> Iterator[dict[str, Any]]:
    """`SELECT row_to_json(a) FROM pg_stat_activity a`: one JSON object per line."""
    for n, line in enumerate(doc.lines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise FormatError(f"line {n}: not a JSON row ({exc})") from exc
        if not isinstance(row, dict):
            raise FormatError(f"line {n}: not a JSON object")
        yield row


def _is_activity(cols: set[str]) -> bool:
    return {"pid", "state"} <= cols and bool(cols & ACTIVITY_HINTS)


def _is_locks(cols: set[str]) -> bool:
    return {"locktype", "mode", "granted", "pid"} <= cols


def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s if s != "" else None


def _int(v: Any, column: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except (TypeError, ValueError) as exc:
        raise FormatError(f"column {column}: {v!r} is not a number") from exc


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool) or v is None:
        return v
    s = str(v).strip().lower()
    return True if s in ("t", "true", "1", "yes") else False if s in ("f", "false", "0", "no") else None


def _pids(v: Any) -> list[int]:
    """pg_blocking_pids as JSON ([1, 2]) or as a PostgreSQL array literal in CSV ("{1,2}")."""
    if isinstance(v, list):
        return [int(p) for p in v]
    s = str(v or "").strip().strip("{}[]")
    return [int(p) for p in s.replace(" ", "").split(",") if p]


@FORMATS.format("pg-activity", shapes={"csv", "json", "jsonl"}, detect=lambda d: _is_activity(_columns(d)), order=40)
def parse_activity(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    cols = _columns(doc)
    blocker_col = next((c for c in BLOCKER_COLUMNS if c in cols), None)
    captured_col = next((c for c in CAPTURED_COLUMNS if c in cols), None)
    for row in _rows(doc):
        pid = _int(row.get("pid"), "pid")
        if pid is None:
            continue
        data: dict[str, Any] = {
            "pid": pid,
            **_session_identity(row),
            "wait_event_type": _text(row.get("wait_event_type")),
            "wait_event": _text(row.get("wait_event")),
            **{c: parse_ts(row.get(c)) for c in TS_COLUMNS},
            "query": _text(row.get("query")),
            "blocked_by": _pids(row.get(blocker_col)) if blocker_col else [],
            "captured_at": parse_ts(row.get(captured_col)) if captured_col else None,
        }
        if not blocker_col:
            ctx.shared.setdefault("pg_sessions_unresolved", []).append(data)
            _defer_blockers(ctx)
        captured = parse_ts(row.get(captured_col)) if captured_col else None
        yield ctx.item(doc.path, "pg/session", f"pid {pid}", data, captured or parse_ts(row.get("state_change")))


GROUP_KEYS = {"application_name", "usename", "datname", "client_addr"}
COUNT_COLUMNS = ("count", "sessions", "connections", "n")


def _is_activity_grouped(cols: set[str]) -> bool:
    """`SELECT application_name, state, count(*) ... FROM pg_stat_activity GROUP BY ...`: no pid, a count."""
    return "pid" not in cols and "state" in cols and bool(cols & GROUP_KEYS) and any(c in cols for c in COUNT_COLUMNS)


@FORMATS.format(
    "pg-activity-grouped",
    shapes={"csv", "json", "jsonl"},
    detect=lambda d: _is_activity_grouped(_columns(d)),
    order=41,
)
def parse_activity_grouped(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each group is one pg/session item standing for `count` sessions (no pid: it blocks and waits for no one);
    the oldest state change of the group is its state_change."""
    cols = _columns(doc)
    count_col = next(c for c in COUNT_COLUMNS if c in cols)
    change_col = next((c for c in cols if "state_change" in c), None)
    captured_col = next((c for c in CAPTURED_COLUMNS if c in cols), None)
    for n, row in enumerate(_rows(doc), 1):
        count = _int(row.get(count_col), count_col)
        if not count:
            continue
        data: dict[str, Any] = {
            "pid": -n,  # groups have no backend pid; a negative one never matches a lock or a blocker
            "count": count,
            **_session_identity(row),
            "state_change": parse_ts(row.get(change_col)) if change_col else None,
            "captured_at": parse_ts(row.get(captured_col)) if captured_col else None,
            "blocked_by": [],
        }
        who = data["application_name"] or data["usename"] or data["datname"]
        yield ctx.item(doc.path, "pg/session", f"{count} sessions {who} {data['state']}", data, data["state_change"])


@FORMATS.format("pg-locks", shapes={"csv", "json", "jsonl"}, detect=lambda d: _is_locks(_columns(d)), order=40)
def parse_locks(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for row in _rows(doc):
        pid = _int(row.get("pid"), "pid")
        relation = _text(row.get("relname")) or _text(row.get("relation_name")) or _text(row.get("relation"))
        data = {
            "pid": pid,
            "locktype": _text(row.get("locktype")),
            "relation": relation,
            "mode": _text(row.get("mode")),
            "granted": _bool(row.get("granted")),
            "waitstart": parse_ts(row.get("waitstart")),
            "transactionid": _text(row.get("transactionid")),
        }
        target = relation or (
            f"transactionid {data['transactionid']}" if data["transactionid"] else data["locktype"] or "?"
        )
        ctx.shared.setdefault("pg_locks", []).append(data)
        yield ctx.item(
            doc.path, "pg/lock", f"pid {pid} {data['mode']} on {target}", data, parse_ts(row.get("waitstart"))
        )


@FORMATS.format(
    "pg-settings", shapes={"csv", "json", "jsonl"}, detect=lambda d: {"name", "setting"} <= _columns(d), order=40
)
def parse_settings(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    settings: dict[str, Any] = {}
    for row in _rows(doc):
        value = row.get("setting")
        text = str(value) if value is not None else None
        settings[str(row.get("name"))] = int(text) if text and text.lstrip("-").isdigit() else text
    yield ctx.item(doc.path, "pg/settings", "pg/settings", settings)


def _defer_blockers(ctx: ParseContext) -> None:
    if not ctx.shared.get("pg_blockers_deferred"):
        ctx.shared["pg_blockers_deferred"] = True
        ctx.after.append(_resolve_blockers)


def _lock_target(lock: dict[str, Any]) -> tuple[Any, ...]:
    return (lock["locktype"], lock["relation"], lock["transactionid"])


def _resolve_blockers(ctx: ParseContext) -> None:
    """Fill blocked_by from pg_locks for sessions exported without pg_blocking_pids; makes no new items."""
    holders: dict[tuple[Any, ...], set[int]] = {}
    waiting: dict[int, list[tuple[Any, ...]]] = {}
    for lock in ctx.shared.get("pg_locks", []):
        if lock["pid"] is None:
            continue
        if lock["granted"]:
            holders.setdefault(_lock_target(lock), set()).add(lock["pid"])
        else:
            waiting.setdefault(lock["pid"], []).append(_lock_target(lock))
    for session in ctx.shared.get("pg_sessions_unresolved", []):
        blockers = {p for t in waiting.get(session["pid"], ()) for p in holders.get(t, ()) if p != session["pid"]}
        session["blocked_by"] = sorted(blockers)


# ------------------------------------------------------------------------------------------------ psql text

_PSQL_RULE = re.compile(r"^\s*-+(?:\+-+)+\s*$|^\s*-{3,}\s*$")
_PSQL_RECORD = re.compile(r"^-\[ RECORD \d+ \]-*(?:\+-*)?\s*$")
_SETTING_NAME = re.compile(r"^[a-z][a-z0-9_.]*$")


def _psql_cells(line: str, width: int) -> list[str] | None:
    cells = [c.strip() for c in line.split("|")]
    if len(cells) > width:  # a '|' inside the last value (a query): it belongs to that value
        cells = [*cells[: width - 1], " | ".join(cells[width - 1 :])]
    return cells if len(cells) == width else None


def psql_tables(text: str) -> list[list[dict[str, str]]]:
    """The result tables of a psql session as rows {column: text}: aligned tables and expanded records."""
    lines = text.splitlines()
    tables: list[list[dict[str, str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _PSQL_RECORD.match(line.strip()):
            records: list[dict[str, str]] = []
            while i < len(lines) and lines[i].strip():
                if _PSQL_RECORD.match(lines[i].strip()):
                    records.append({})
                elif records and "|" in lines[i]:
                    key, _, value = lines[i].partition("|")
                    if key.strip():
                        records[-1][key.strip()] = value.strip().removesuffix("+").rstrip()
                    elif records[-1]:  # a wrapped value goes on under an empty key
                        last = list(records[-1])[-1]
                        records[-1][last] += "\n" + value.strip().removesuffix("+").rstrip()
                i += 1
            tables.append(records)
            continue
        if i + 1 < len(lines) and _PSQL_RULE.match(lines[i + 1]) and line.strip() and not line.lstrip().startswith("-"):
            header = [h.strip() for h in line.split("|")]
            rows: list[dict[str, str]] = []
            i += 2
            while i < len(lines) and lines[i].strip() and not re.match(r"^\s*\(\d+ rows?\)\s*$", lines[i]):
                cells = _psql_cells(lines[i], len(header))
                if cells is None:
                    break
                wrapped = [c.endswith("+") for c in cells]
                cells = [c.removesuffix("+").rstrip() for c in cells]
                if rows and not cells[0] and any(cells) and rows[-1].get("\0wrap"):
                    for h, c in zip(header, cells, strict=True):
                        if c:
                            rows[-1][h] = f"{rows[-1][h]}\n{c}"
                else:
                    rows.append(dict(zip(header, cells, strict=True)))
                rows[-1]["\0wrap"] = "1" if any(wrapped) else ""
                i += 1
            for row in rows:
                row.pop("\0wrap", None)
            tables.append(rows)
            continue
        i += 1
    return [t for t in tables if t]


def _table_doc(doc: Document, rows: list[dict[str, str]]) -> Document:
    return Document(doc.path, "json", value=rows)


def _detect_psql(doc: Document) -> bool:
    if "---" not in doc.text[:65536]:  # every psql table has a rule under its header (or its record marks)
        return False
    return any(_psql_kind(t) for t in psql_tables(doc.text[:65536]))


def _psql_kind(rows: list[dict[str, str]]) -> str | None:
    cols = set(rows[0])
    if _is_activity(cols):
        return "activity"
    if _is_locks(cols):
        return "locks"
    if _is_activity_grouped(cols):
        return "grouped"
    if {"name", "setting"} <= cols:
        return "settings"
    if (
        len(cols) == 1
        and len(rows) == 1
        and _SETTING_NAME.match(name := next(iter(cols)))
        and name not in (CAPTURED_COLUMNS)
    ):
        return "show"
    return None


@FORMATS.format("psql-text", shapes={"text"}, detect=_detect_psql, order=39)
def parse_psql(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each table of a psql paste goes to the reader of its view; `SHOW x` results gather into one settings item."""
    shown: dict[str, Any] = {}
    for rows in psql_tables(doc.text):
        kind = _psql_kind(rows)
        table = _table_doc(doc, rows)
        if kind == "activity":
            yield from parse_activity(table, ctx)
        elif kind == "locks":
            yield from parse_locks(table, ctx)
        elif kind == "grouped":
            yield from parse_activity_grouped(table, ctx)
        elif kind == "settings":
            yield from parse_settings(table, ctx)
        elif kind == "show":
            ((name, value),) = rows[0].items()
            shown[name] = int(value) if value.lstrip("-").isdigit() else value
    if shown:
        yield ctx.item(doc.path, "pg/settings", "pg/settings", shown)
