"""Write tools for PostgreSQL sessions: cancel a session's query, or terminate the session.

Both act on one pid of a configured DSN (OPSGRAPH_POSTGRES_DSNS) and refuse what no approver should be asked
to end: superuser sessions, replication and other non-client backends, and opsgraph's own sessions. The
rules are checked again when the write runs, on fresh state: an approval given minutes earlier does not make a
session that has since changed (or a pid reused by another session, when `backend_start` pins it) a target.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row
from pydantic import Field

from core.logging import redact
from core.settings import Settings
from core.types import Effect, ToolResult, ToolStatus
from tools._registry import CATALOG
from tools._remediation import OPSGRAPH_APPLICATION_NAME, failed, refused
from tools.base import ToolArgs, ToolContext
from tools.pg import mask_query

_SESSION_SQL = """
SELECT a.pid, a.usename, a.application_name, a.client_addr::text AS client_addr, a.client_port, a.datname,
       a.backend_type, a.state, a.wait_event_type, a.wait_event, a.query,
       EXTRACT(EPOCH FROM a.backend_start)::float AS backend_start,
       EXTRACT(EPOCH FROM now() - a.state_change)::float AS state_age_s,
       EXTRACT(EPOCH FROM now() - a.xact_start)::float AS xact_age_s,
       EXTRACT(EPOCH FROM now() - a.query_start)::float AS query_age_s,
       COALESCE(r.rolsuper, false) AS superuser, a.pid = pg_backend_pid() AS is_self
FROM pg_stat_activity a LEFT JOIN pg_roles r ON r.oid = a.usesysid
WHERE a.pid = %s
"""

_LOCKS_HELD_SQL = """
SELECT l.locktype, l.mode, c.relname AS relation, count(*)::int AS n
FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = %s AND l.granted AND l.locktype <> 'virtualxid'
GROUP BY 1, 2, 3 ORDER BY (c.relname IS NULL), c.relname, l.mode LIMIT 20
"""

_WAITING_SQL = """
SELECT pid, usename, state, left(query, 2000) AS query, pg_blocking_pids(pid) AS blocked_by,
       EXTRACT(EPOCH FROM now() - COALESCE(state_change, query_start))::float AS waiting_s
FROM pg_stat_activity WHERE cardinality(pg_blocking_pids(pid)) > 0
"""


def _postgres_configured(settings: Settings) -> str | None:
    return None if settings.postgres_dsns else "no DSN configured: set OPSGRAPH_POSTGRES_DSNS='[\"postgresql://...\"]'"


class PostgresSessionArgs(ToolArgs):
    pid: int = Field(gt=0, lt=2**31, description="The backend pid (pg_stat_activity.pid).")
    database: str | None = Field(
        None, max_length=128, description="Name of a configured DSN's database; empty means the first DSN."
    )
    backend_start: float | None = Field(
        None, description="The session's backend_start (epoch s) from the preview: refuse if the pid now is another."
    )


def _dsn_for(settings: Settings, database: str | None) -> str | None:
    dsns = [d.get_secret_value() for d in settings.postgres_dsns]
    if database:
        dsns = [d for d in dsns if urlsplit(d).path.lstrip("/") == database]
    return dsns[0] if dsns else None


def _connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    # the application_name marks this connection as opsgraph's, so no opsgraph tool ever picks it as a target
    return psycopg.connect(
        dsn,
        connect_timeout=5,
        autocommit=True,
        row_factory=dict_row,
        application_name=f"{OPSGRAPH_APPLICATION_NAME}-remediation",
    )


def _refusal(session: dict[str, Any], args: PostgresSessionArgs) -> str | None:
    """Why this session must not be ended by opsgraph, or None."""
    if session["is_self"]:
        return f"pid {args.pid} is this tool's own session"
    if session["backend_type"] != "client backend":
        kind = session["backend_type"] or "unknown"
        return f"pid {args.pid} is a {kind} backend, not a client session (replication and system ones are off limits)"
    if session["superuser"]:
        return f"pid {args.pid} belongs to superuser {session['usename']!r}"
    if (session["application_name"] or "").startswith(OPSGRAPH_APPLICATION_NAME):
        return f"pid {args.pid} is opsgraph's own session ({session['application_name']})"
    if args.backend_start is not None and abs((session["backend_start"] or 0) - args.backend_start) > 0.001:
        return f"pid {args.pid} is now a different session than the one approved (its backend_start changed)"
    return None


def _describe_session(conn: psycopg.Connection[dict[str, Any]], session: dict[str, Any]) -> dict[str, Any]:
    """The session as the approver sees it: who, from where, since when, what it runs, holds and blocks."""
    held = conn.execute(_LOCKS_HELD_SQL, (session["pid"],)).fetchall()
    blocked = _blocked_behind(conn.execute(_WAITING_SQL).fetchall(), session["pid"])
    client = session["client_addr"] or "local socket"
    if session["client_addr"] and session["client_port"]:
        client = f"{session['client_addr']}:{session['client_port']}"
    return {
        "pid": session["pid"],
        "user": session["usename"],
        "application": session["application_name"],
        "client": client,
        "database": session["datname"],
        "state": session["state"],
        "state_age_s": _round(session["state_age_s"]),
        "xact_age_s": _round(session["xact_age_s"]),
        "query_age_s": _round(session["query_age_s"]),
        "wait": f"{session['wait_event_type']}:{session['wait_event']}" if session["wait_event_type"] else None,
        "backend_start": session["backend_start"],
        "query": mask_query(session["query"] or ""),
        "locks_held": [
            {"lock": r["locktype"], "mode": r["mode"], "relation": r["relation"], "count": r["n"]} for r in held
        ],
        "blocks": [
            {
                "pid": r["pid"],
                "user": r["usename"],
                "state": r["state"],
                "waiting_s": _round(r["waiting_s"]),
                "directly": session["pid"] in r["blocked_by"],
                "query": mask_query(r["query"] or "", 160),
            }
            for r in blocked
        ],
    }


def _blocked_behind(waiting: list[dict[str, Any]], pid: int) -> list[dict[str, Any]]:
    """Every session waiting on this one, directly or through another waiter: behind a row lock, the first
    writer waits on the holder and the next ones on the first writer's tuple lock, yet ending the holder
    releases them all."""
    behind: dict[int, dict[str, Any]] = {}
    frontier = {pid}
    while frontier:
        nxt = {r["pid"] for r in waiting if r["pid"] not in behind and frontier & set(r["blocked_by"])}
        behind |= {r["pid"]: r for r in waiting if r["pid"] in nxt}
        frontier = nxt - {pid}
    return sorted(behind.values(), key=lambda r: r["pid"])[:20]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _session_line(d: dict[str, Any]) -> str:
    """'pid 4711 (app@orders from 10.0.0.5:5100, app billing) idle in transaction for 240s, transaction open
    240s, holds RowExclusiveLock on orders, blocks 3 sessions'"""
    age = f" for {d['state_age_s']:.0f}s" if d["state_age_s"] is not None else ""
    xact = f", transaction open {d['xact_age_s']:.0f}s" if d["xact_age_s"] is not None else ""
    relations = sorted({f"{lk['mode']} on {lk['relation']}" for lk in d["locks_held"] if lk["relation"]})
    holds = f", holds {', '.join(relations[:4])}" if relations else ""
    blocks = f", blocks {len(d['blocks'])} session(s) ({', '.join(str(b['pid']) for b in d['blocks'][:5])})"
    app = f", app {d['application']}" if d["application"] else ""
    return (
        f"pid {d['pid']} ({d['user']}@{d['database']} from {d['client']}{app}) {d['state']}{age}{xact}{holds}"
        + (blocks if d["blocks"] else "")
        + (f"; query: {d['query'][:120]}" if d["query"] else "")
    )


def _load(args: PostgresSessionArgs, ctx: ToolContext) -> tuple[str, str | None]:
    dsn = _dsn_for(ctx.settings, args.database)
    if dsn is None:
        return "", f"no configured DSN for database {args.database!r}"
    return dsn, None


def _preview_session(args: PostgresSessionArgs, ctx: ToolContext, verb: str) -> ToolResult:
    dsn, missing = _load(args, ctx)
    if missing:
        return failed(missing, "not_found")
    try:
        with _connect(dsn) as conn:
            session = conn.execute(_SESSION_SQL, (args.pid,)).fetchone()
            if session is None:
                return failed(f"no session with pid {args.pid} on {redact(dsn)}", "not_found", pid=args.pid)
            if reason := _refusal(session, args):
                return refused(f"{verb} refused: {reason}", pid=args.pid)
            detail = _describe_session(conn, session)
    except psycopg.Error as exc:
        return failed(f"PostgreSQL at {redact(dsn)} unreachable: {redact(str(exc)).strip()}", "unreachable")
    if verb == "cancel" and session["state"] != "active":
        return refused(
            f"cancel refused: pid {args.pid} is {session['state']}, not running a query (nothing to cancel; "
            "postgres_terminate_session ends the session and rolls back its transaction)",
            session=detail,
        )
    action = "cancel the running query of" if verb == "cancel" else "terminate (and roll back the open transaction of)"
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=f"would {action} {_session_line(detail)}",
        # pin: arguments the approval adds, so the write refuses a pid that is another session by then
        data={
            "action": verb,
            "target": redact(dsn),
            "session": detail,
            "pin": {"backend_start": detail["backend_start"]},
        },
    )


def _end_session(args: PostgresSessionArgs, ctx: ToolContext, verb: str) -> ToolResult:
    """Check the rules on fresh state, send the cancel or terminate, and report what changed."""
    dsn, missing = _load(args, ctx)
    if missing:
        return failed(missing, "not_found")
    where = redact(dsn)
    try:
        with _connect(dsn) as conn:
            session = conn.execute(_SESSION_SQL, (args.pid,)).fetchone()
            if session is None:
                return failed(f"no session with pid {args.pid} on {redact(dsn)}", "not_found", pid=args.pid)
            if reason := _refusal(session, args):
                return refused(f"{verb} refused: {reason}", pid=args.pid)
            before = _describe_session(conn, session)
            if verb == "cancel":
                if session["state"] != "active":
                    return refused(f"cancel refused: pid {args.pid} is {session['state']}, not running a query")
                sent = conn.execute("SELECT pg_cancel_backend(%s) AS ok", (args.pid,)).fetchone()
            elif conn.info.server_version >= 140000:  # waits (up to 5 s) for the backend to exit
                sent = conn.execute("SELECT pg_terminate_backend(%s, 5000) AS ok", (args.pid,)).fetchone()
            else:
                sent = conn.execute("SELECT pg_terminate_backend(%s) AS ok", (args.pid,)).fetchone()
            if not (sent and sent["ok"]):
                return failed(f"PostgreSQL did not accept the {verb} of pid {args.pid}", "not_done", session=before)
            after = _after(conn, args.pid, verb)
    except psycopg.Error as exc:
        return failed(f"{verb} of pid {args.pid} on {where} failed: {redact(str(exc)).strip()}", "run_error")
    if verb == "terminate":
        if after is not None:
            return failed(f"pid {args.pid} was signalled but is still there ({after['state']})", "not_done")
        summary = f"terminated pid {args.pid} on {where}; {len(before['blocks'])} blocked session(s) released"
    else:
        state = after["state"] if after else "gone"
        summary = f"cancelled the query of pid {args.pid} on {where}; the session is now {state}"
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "action": verb,
            "pid": args.pid,
            "before": before,
            "after": None if after is None else {"state": after["state"], "query": mask_query(after["query"])},
        },
        evidence=[f"{verb} pid {args.pid} on {where}: before: {_session_line(before)}"],
    )


def _after(conn: psycopg.Connection[dict[str, Any]], pid: int, verb: str) -> dict[str, Any] | None:
    """The session's row once the signal took effect (None: gone), or as it is after 5 s: a backend acts on a
    cancel or terminate at its next interrupt check, not at once."""
    deadline = time.monotonic() + 5
    while True:
        row = conn.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        settled = row is None or (verb == "cancel" and row["state"] != "active")
        if settled or time.monotonic() > deadline:
            return row
        time.sleep(0.05)


def _preview_cancel(args: PostgresSessionArgs, ctx: ToolContext) -> ToolResult:
    return _preview_session(args, ctx, "cancel")


def _preview_terminate(args: PostgresSessionArgs, ctx: ToolContext) -> ToolResult:
    return _preview_session(args, ctx, "terminate")


@CATALOG.tool(
    args=PostgresSessionArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=30,
    cost_hint_s=0.3,
    prerequisites=[_postgres_configured],
    preview_fn=_preview_cancel,
)
def postgres_cancel_query(args: PostgresSessionArgs, ctx: ToolContext) -> ToolResult:
    """Cancel the query a PostgreSQL session is running (pg_cancel_backend); the session stays connected.

    Refuses superuser, replication/system and opsgraph's own sessions, and sessions running no query."""
    return _end_session(args, ctx, "cancel")


@CATALOG.tool(
    args=PostgresSessionArgs,
    effect=Effect.WRITE,
    idempotent=False,
    timeout_s=30,
    cost_hint_s=0.5,
    prerequisites=[_postgres_configured],
    preview_fn=_preview_terminate,
)
def postgres_terminate_session(args: PostgresSessionArgs, ctx: ToolContext) -> ToolResult:
    """Terminate a PostgreSQL session (pg_terminate_backend): its open transaction rolls back, its locks go.

    Refuses superuser, replication/system and opsgraph's own sessions."""
    return _end_session(args, ctx, "terminate")
