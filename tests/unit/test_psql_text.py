"""pg_stat_activity, pg_locks and settings pasted from a psql terminal: aligned tables, wrapped values, expanded
records and SHOW, read like the CSV and JSON exports."""

from __future__ import annotations

import shutil
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.postgres import psql_tables
from diagnosis.investigate import investigate
from diagnosis.model import Category

DATA = Path(__file__).resolve().parent.parent / "data" / "psql"


def test_a_psql_session_is_read_into_sessions_locks_and_settings(tmp_path: Path) -> None:
    shutil.copy(DATA / "psql-session.txt", tmp_path / "terminal-paste.md")  # by content, whatever its name
    ev = load_bundle(tmp_path)
    assert not ev.errors and not ev.ignored
    sessions = {i.data["pid"]: i.data for i in ev.kind("pg/session")}
    assert sessions[30412]["state"] == "idle in transaction"
    assert sessions[30502]["blocked_by"] == [30412, 30477, 30481]
    locks = [i.data for i in ev.kind("pg/lock")]
    assert {"pid": 30477, "mode": "ShareLock", "granted": False}.items() <= next(
        lock for lock in locks if lock["pid"] == 30477 and lock["locktype"] == "transactionid"
    ).items()
    settings = [i.data for i in ev.kind("pg/settings")]
    assert settings == [{"max_connections": 200}]  # SELECT now() is not a setting


def test_the_psql_session_names_the_blocker_the_relation_and_idle_in_transaction(tmp_path: Path) -> None:
    shutil.copy(DATA / "psql-session.txt", tmp_path / "psql-session.txt")
    diagnosis = investigate(load_bundle(tmp_path), "why are checkouts hanging?")
    assert diagnosis.category == Category.CODE_DEFECT
    for word in ("30412", "stock_levels", "idle in transaction"):
        assert word in diagnosis.root_cause


def test_wrapped_values_and_expanded_records() -> None:
    aligned = (
        "  pid  |          query           |        state\n"
        "-------+--------------------------+---------------------\n"
        " 48211 | UPDATE inventory        +| idle in transaction\n"
        "       |    SET reserved = 1     +|\n"
        "       |  WHERE sku_id = 7        |\n"
        " 48230 | SELECT 1 | 2             | active\n"
        "(2 rows)\n"
    )
    (rows,) = psql_tables(aligned)
    assert rows[0] == {
        "pid": "48211",
        "query": "UPDATE inventory\nSET reserved = 1\nWHERE sku_id = 7",
        "state": "idle in transaction",
    }
    assert len(rows) == 2
    expanded = (
        "-[ RECORD 1 ]----+------------------------------\n"
        "pid              | 48211\n"
        "state            | idle in transaction\n"
        "query            | UPDATE inventory            +\n"
        "                 | SET reserved = 1\n"
        "-[ RECORD 2 ]----+------------------------------\n"
        "pid              | 48230\n"
        "state            | active\n"
        "query            | SELECT 1\n"
    )
    (records,) = psql_tables(expanded)
    assert records == [
        {"pid": "48211", "state": "idle in transaction", "query": "UPDATE inventory\nSET reserved = 1"},
        {"pid": "48230", "state": "active", "query": "SELECT 1"},
    ]


def test_markdown_tables_and_prose_with_pipes_are_not_psql(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("| step | owner |\n| --- | --- |\n| restart pid 4 | alice |\n")
    (tmp_path / "app.log").write_text("2026-11-17T10:00:00Z ERROR state | pid | query failed\n")
    ev = load_bundle(tmp_path)
    assert not ev.kind("pg/")
