"""What postgres_activity reads from one PostgreSQL server, and how it turns it into a report.

One snapshot in one transaction (pg_stat_activity, pg_locks joined to relation names, a few settings), so every
age is measured against the same now(). Lock waits become a blocking graph: who waits behind whom, the root
blockers (sessions that block others and wait on nobody), what each root holds and what its waiters want.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from typing import Any

import psycopg
from psycopg.rows import dict_row

from core.logging import redact
from core.types import ToolResult, ToolStatus
from tools.base import finding

QUERY_CHARS = 300  # query text kept per session, after masking
_MAX_SESSIONS = 200
_MAX_LOCKS = 300

_SESSIONS_SQL = """
SELECT pid, datname, usename, application_name, host(client_addr) AS client_addr, backend_type, state,
       wait_event_type, wait_event,
       EXTRACT(EPOCH FROM xact_start)::float AS xact_start,
       EXTRACT(EPOCH FROM query_start)::float AS query_start,
       EXTRACT(EPOCH FROM state_change)::float AS state_change,
       EXTRACT(EPOCH FROM backend_start)::float AS backend_start,
       left(query, 4000) AS query,
       pg_blocking_pids(pid) AS blocked_by
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""

_LOCKS_SQL = """
SELECT l.pid, l.locktype, l.mode, l.granted, {waitstart} AS waitstart,
       COALESCE(CASE WHEN n.nspname IN ('public', 'pg_catalog') THEN c.relname ELSE n.nspname || '.' || c.relname END,
                l.relation::text) AS relation,
       c.relkind::text AS relkind, l.transactionid::text AS transactionid, l.page, l.tuple
FROM pg_locks l
LEFT JOIN pg_class c ON c.oid = l.relation
     AND l.database IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid IS NOT NULL AND l.pid <> pg_backend_pid() AND l.locktype <> 'virtualxid'
LIMIT 5000
"""

_SETTINGS = (
    "max_connections",
    "idle_in_transaction_session_timeout",
    "statement_timeout",
    "lock_timeout",
    "deadlock_timeout",
    "server_version",
)

# literals: quoted strings (with '' escapes, E'' and N'' prefixes), dollar-quoted bodies, numbers not part of
# a name or a $1 parameter
_STRING = re.compile(r"(?:\b[EeNn])?'(?:[^']|'')*'")
_DOLLAR = re.compile(r"\$(\w*)\$.*?\$\1\$", re.S)
_NUMBER = re.compile(r"(?<![\w$.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b")
_SPACE = re.compile(r"\s+")
_STRONG_MODES = [  # strongest first
    "AccessExclusiveLock",
    "ExclusiveLock",
    "ShareRowExclusiveLock",
    "ShareLock",
    "ShareUpdateExclusiveLock",
    "RowExclusiveLock",
    "RowShareLock",
    "AccessShareLock",
]


def mask_query(sql: str | None, limit: int = QUERY_CHARS) -> str:
    """The statement with its literals masked (numbers -> ?, strings -> '?') and cut to `limit` characters:
    enough to recognise the statement, nothing of the data in it."""
    if not sql:
        return ""
    text = _DOLLAR.sub("$$?$$", sql)
    text = _STRING.sub("'?'", text)
    text = _NUMBER.sub("?", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown time"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _strongest(modes: list[str]) -> str:
    return min(modes, key=lambda m: _STRONG_MODES.index(m) if m in _STRONG_MODES else len(_STRONG_MODES))


def snapshot(dsn: str) -> dict[str, Any]:
    """Sessions, locks and settings as one consistent read; ages against the server's now()."""
    with psycopg.connect(dsn, connect_timeout=5, row_factory=dict_row) as conn:
        conn.execute("SET statement_timeout = '10s'")
        conn.execute("SET lock_timeout = '2s'")
        with conn.transaction():
            captured = conn.execute("SELECT EXTRACT(EPOCH FROM now())::float AS now").fetchone()
            sessions = conn.execute(_SESSIONS_SQL).fetchall()
            version = conn.info.server_version
            waitstart = "EXTRACT(EPOCH FROM l.waitstart)::float" if version >= 140000 else "NULL::float"
            locks = conn.execute(_LOCKS_SQL.format(waitstart=waitstart)).fetchall()
            settings = {
                r["name"]: r["setting"]
                for r in conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(_SETTINGS)]
                ).fetchall()
            }
    return {
        "captured_at": captured["now"] if captured else None,
        "sessions": sessions,
        "locks": locks,
        "settings": settings,
    }


def blocking_graph(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """Who waits behind whom: {edges: [[waiter, blocker]], roots: {root pid: [every pid waiting behind it]},
    children: {blocker: [direct waiters]}}. A root blocks others and waits on nobody (or only inside a cycle)."""
    edges = [(int(s["pid"]), int(b)) for s in sessions for b in (s.get("blocked_by") or [])]
    children: dict[int, list[int]] = {}
    blocked = set()
    for waiter, blocker in edges:
        children.setdefault(blocker, []).append(waiter)
        blocked.add(waiter)
    roots = [b for b in children if b not in blocked]
    if not roots and children:  # a cycle (a deadlock the server has not broken yet): start anywhere in it
        roots = [min(children)]
    behind: dict[int, list[int]] = {}
    for root in sorted(roots):
        seen: list[int] = []
        queue = deque(children.get(root, []))
        while queue:
            pid = queue.popleft()
            if pid in seen or pid == root:
                continue
            seen.append(pid)
            queue.extend(children.get(pid, []))
        behind[root] = seen
    return {
        "edges": [[w, b] for w, b in edges],
        "roots": behind,
        "children": {b: sorted(set(w)) for b, w in children.items()},
    }


def _session_row(s: dict[str, Any], now: float | None) -> dict[str, Any]:
    row = {
        "pid": s["pid"],
        "datname": s["datname"],
        "usename": s["usename"],
        "application_name": s["application_name"],
        "client_addr": s["client_addr"],
        "backend_type": s["backend_type"],
        "state": s["state"],
        "wait_event_type": s["wait_event_type"],
        "wait_event": s["wait_event"],
        "xact_start": s["xact_start"],
        "query_start": s["query_start"],
        "state_change": s["state_change"],
        "backend_start": s["backend_start"],
        "query": mask_query(s["query"]),
        "blocked_by": [int(b) for b in (s["blocked_by"] or [])],
        "captured_at": now,
    }
    row["xact_age_s"] = round(now - s["xact_start"], 1) if now and s["xact_start"] else None
    row["state_age_s"] = round(now - s["state_change"], 1) if now and s["state_change"] else None
    row["query_age_s"] = round(now - s["query_start"], 1) if now and s["query_start"] else None
    return row


def _lock_row(lock: dict[str, Any]) -> dict[str, Any]:
    return {
        "pid": lock["pid"],
        "locktype": lock["locktype"],
        "relation": lock["relation"],
        "relkind": lock["relkind"],
        "mode": lock["mode"],
        "granted": lock["granted"],
        "waitstart": lock["waitstart"],
        "transactionid": lock["transactionid"],
        "page": lock["page"],
        "tuple": lock["tuple"],
    }


def _is_table(lock: dict[str, Any]) -> bool:
    return lock["relation"] is not None and lock["relkind"] in ("r", "p", "m", None)


def describe_root(root: dict[str, Any], waiters: list[dict[str, Any]], locks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a root blocker holds and what the sessions behind it wait for; the contested relation first."""
    pids = {w["pid"] for w in waiters}
    held = [lk for lk in locks if lk["pid"] == root["pid"] and lk["granted"] and _is_table(lk)]
    wanted = [lk for lk in locks if lk["pid"] in pids and not lk["granted"]]
    touched = {lk["relation"] for lk in locks if lk["pid"] in pids and _is_table(lk)}
    # the relation both sides touch: what the waiters want by name (tuple or table locks) first, then what
    # the root holds that the waiters also lock (a row lock wait shows only a transaction id)
    order: list[str] = [lk["relation"] for lk in wanted if _is_table(lk)]
    order += [lk["relation"] for lk in held if lk["relation"] in touched]
    order += [lk["relation"] for lk in held if not str(lk["relation"]).startswith("pg_")]
    relations = list(dict.fromkeys(order))
    relation = relations[0] if relations else None
    held_modes = [lk["mode"] for lk in held if lk["relation"] == relation]
    waiting_for = Counter(
        f"{lk['mode']} on {lk['locktype'] if lk['locktype'] != 'relation' else 'table'}"
        + (f" of {lk['relation']}" if lk["relation"] else "")
        for lk in wanted
    )
    return {
        "pid": root["pid"],
        "state": root["state"],
        "usename": root["usename"],
        "application_name": root["application_name"],
        "client_addr": root["client_addr"],
        "xact_age_s": root["xact_age_s"],
        "state_age_s": root["state_age_s"],
        "wait_event_type": root["wait_event_type"],
        "wait_event": root["wait_event"],
        "query": root["query"],
        "relation": relation,
        "relations": relations,
        "mode": _strongest(held_modes) if held_modes else None,
        "waiting_for": dict(waiting_for.most_common()),
        "waiters": sorted(pids),
        "waiting": len(pids),
    }


def root_message(r: dict[str, Any]) -> str:
    state = r["state"] or "unknown state"
    age = f" for {human_age(r['state_age_s'])}" if r["state_age_s"] is not None else ""
    xact = f", transaction open {human_age(r['xact_age_s'])}" if r["xact_age_s"] is not None else ""
    holds = (
        f" holds {r['mode']} on {r['relation']}"
        if r["mode"]
        else (f" blocks on {r['relation']}" if r["relation"] else " holds the locks they need")
    )
    wants = ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in r["waiting_for"].items())
    last = f"; its last query: {r['query'][:160]}" if r["query"] else ""
    return (
        f"pid {r['pid']} ({state}{age}{xact}){holds}; {r['waiting']} session(s) wait behind it"
        + (f" ({wants})" if wants else "")
        + last
    )


def build_report(
    snap: dict[str, Any], where: str, *, long_query_s: float = 5.0, idle_in_transaction_s: float = 60.0
) -> ToolResult:
    """The tool's answer from one snapshot (pure: tests feed it recorded snapshots too)."""
    now = snap["captured_at"]
    sessions = [_session_row(s, now) for s in snap["sessions"]]
    by_pid = {s["pid"]: s for s in sessions}
    all_locks = [_lock_row(lk) for lk in snap["locks"]]
    graph = blocking_graph(sessions)
    involved = set(graph["roots"]) | {p for w in graph["roots"].values() for p in w}
    roots = [
        describe_root(by_pid[pid], [by_pid[w] for w in waiters if w in by_pid], all_locks)
        for pid, waiters in graph["roots"].items()
        if pid in by_pid
    ]
    roots.sort(key=lambda r: r["waiting"], reverse=True)
    max_conn = int(snap["settings"].get("max_connections") or 0)
    states = Counter(s["state"] or "unknown" for s in sessions)
    waits = Counter(
        f"{s['wait_event_type']}:{s['wait_event']}"
        for s in sessions
        if s["state"] == "active" and s["wait_event_type"] and s["wait_event_type"] != "Client"
    )
    long = [
        s for s in sessions if s["state"] == "active" and (s["query_age_s"] or 0) > long_query_s and not s["blocked_by"]
    ]
    idle_tx = [
        s
        for s in sessions
        if (s["state"] or "").startswith("idle in transaction")
        and (s["state_age_s"] or 0) > idle_in_transaction_s
        and s["pid"] not in graph["roots"]
    ]
    blocked = [s for s in sessions if s["blocked_by"]]
    findings = []
    for r in roots:
        findings.append(finding("critical", root_message(r)))
    for s in idle_tx[:5]:
        findings.append(
            finding(
                "warn",
                f"pid {s['pid']} {s['state']} for {human_age(s['state_age_s'])} "
                f"(transaction open {human_age(s['xact_age_s'])}), blocking nobody yet: {s['query'][:120]}",
            )
        )
    for s in sorted(long, key=lambda s: s["query_age_s"] or 0, reverse=True)[:5]:
        wait = f", waiting on {s['wait_event_type']}:{s['wait_event']}" if s["wait_event_type"] else ""
        findings.append(
            finding("warn", f"pid {s['pid']} running {human_age(s['query_age_s'])}{wait}: {s['query'][:120]}")
        )
    if max_conn and len(sessions) > 0.8 * max_conn:
        findings.append(finding("warn", f"{len(sessions)} of {max_conn} connections in use"))
    summary = (
        f"PostgreSQL {where}: {len(sessions)}/{max_conn} connections "
        f"({', '.join(f'{k} {v}' for k, v in sorted(states.items()))}), {len(long)} long, {len(blocked)} blocked"
        + (f", root blocker pid {roots[0]['pid']} ({roots[0]['state']})" if roots else "")
    )
    if not findings:
        findings.append(finding("ok", summary))
    # sessions worth evidence first: the blocking chain, then idle transactions and long queries, then the rest
    rank = {pid: 0 for pid in involved} | {s["pid"]: 1 for s in idle_tx} | {s["pid"]: 1 for s in long}
    kept_sessions = sorted(sessions, key=lambda s: (rank.get(s["pid"], 2), -(s["xact_age_s"] or 0)))[:_MAX_SESSIONS]
    kept_locks = [
        lk
        for lk in all_locks
        if (lk["pid"] in involved or not lk["granted"])
        and not (lk["granted"] and lk["relkind"] == "i")  # index locks repeat their table's
        and not str(lk["relation"] or "").startswith("pg_")
    ][:_MAX_LOCKS]
    evidence = [f"pg_stat_activity on {where}: {summary}"]
    evidence += [f["message"] for f in findings if f["severity"] != "ok"]
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "healthy": not roots,
            "server": where,
            "captured_at": now,
            "connections": len(sessions),
            "max_connections": max_conn,
            "by_state": dict(states),
            "wait_events": dict(waits.most_common(10)),
            "settings": dict(snap["settings"]),
            "sessions": kept_sessions,
            "locks": kept_locks,
            "blocking": {"roots": roots, "edges": graph["edges"]},
            "long_queries": [
                {
                    k: s[k]
                    for k in ("pid", "usename", "datname", "query_age_s", "wait_event_type", "wait_event", "query")
                }
                for s in long[:20]
            ],
            "idle_in_transaction": [
                {k: s[k] for k in ("pid", "usename", "datname", "state", "state_age_s", "xact_age_s", "query")}
                for s in idle_tx[:20]
            ],
            "blocked": [{"pid": s["pid"], "blocked_by": s["blocked_by"], "query": s["query"]} for s in blocked[:20]],
            "findings": findings,
        },
        evidence=list(dict.fromkeys(evidence)),  # no line twice
    )


def postgres_activity_report(dsn: str, *, long_query_s: float, idle_in_transaction_s: float) -> ToolResult:
    where = redact(dsn)
    try:
        snap = snapshot(dsn)
    except psycopg.Error as exc:
        msg = f"PostgreSQL at {where} unreachable: {redact(str(exc)).strip()}"
        return ToolResult(
            status=ToolStatus.SUCCESS,
            summary=msg,
            data={"healthy": False, "server": where, "error": msg, "findings": [finding("critical", msg)]},
            evidence=[msg],
        )
    return build_report(snap, where, long_query_s=long_query_s, idle_in_transaction_s=idle_in_transaction_s)
