"""postgres_activity: literals masked, the blocking chain from a recorded snapshot, and a real lock incident."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.settings import Settings
from core.types import ToolStatus
from tests.toolkit.pg_incident import lock_incident
from tools import CATALOG, ToolContext
from tools.pg import blocking_graph, build_report, mask_query


def test_query_literals_are_masked_and_text_truncated() -> None:
    sql = "UPDATE users SET email = 'ann@example.com', pw = E'x''y' WHERE id = 42 AND score > -3.5e2 AND t1.c = $1"
    masked = mask_query(sql)
    assert "ann@example.com" not in masked and "42" not in masked and "3.5" not in masked
    assert masked == "UPDATE users SET email = '?', pw = '?' WHERE id = ? AND score > ? AND t1.c = $1"
    assert mask_query("SELECT $body$secret$body$") == "SELECT $$?$$"
    assert len(mask_query("SELECT " + "a, " * 500, limit=100)) == 100


def test_the_blocking_chain_finds_the_root_and_every_session_behind_it() -> None:
    sessions = [
        {"pid": 10, "blocked_by": []},
        {"pid": 11, "blocked_by": [10]},
        {"pid": 12, "blocked_by": [11]},
        {"pid": 13, "blocked_by": [11, 10]},
        {"pid": 20, "blocked_by": []},
    ]
    graph = blocking_graph(sessions)
    assert graph["roots"] == {10: [11, 13, 12]}


def _session(pid: int, state: str, blocked_by: list[int], query: str, xact: float | None, change: float) -> dict:
    return {
        "pid": pid, "datname": "shop", "usename": "app", "application_name": "", "client_addr": "10.0.0.5",
        "backend_type": "client backend", "state": state, "wait_event_type": "Lock" if blocked_by else "Client",
        "wait_event": "transactionid" if blocked_by else "ClientRead", "xact_start": xact, "query_start": change,
        "state_change": change, "backend_start": 0.0, "query": query, "blocked_by": blocked_by,
    }  # fmt: skip


def _lock(pid: int, locktype: str, mode: str, granted: bool, relation: str | None, relkind: str | None) -> dict:
    return {
        "pid": pid, "locktype": locktype, "mode": mode, "granted": granted, "waitstart": None,
        "relation": relation, "relkind": relkind, "transactionid": None, "page": None, "tuple": None,
    }  # fmt: skip


def test_a_recorded_lock_snapshot_names_the_root_blocker_once() -> None:
    now = 1_000_000.0
    snap = {
        "captured_at": now,
        "settings": {"max_connections": "100"},
        "sessions": [
            _session(100, "idle in transaction", [], "UPDATE orders SET qty = 5 WHERE id = 7", now - 300, now - 240),
            *[
                _session(p, "active", [100], "UPDATE orders SET qty = qty + 1 WHERE id = 7", now - 60, now - 60)
                for p in (101, 102, 103, 104, 105, 106, 107)
            ],
        ],
        "locks": [
            _lock(100, "relation", "RowExclusiveLock", True, "orders", "r"),
            _lock(100, "relation", "RowExclusiveLock", True, "orders_pkey", "i"),
            *[_lock(p, "transactionid", "ShareLock", False, None, None) for p in range(101, 108)],
            *[_lock(p, "relation", "RowExclusiveLock", True, "orders", "r") for p in range(101, 108)],
        ],
    }
    r = build_report(snap, "postgresql://app:***@db/shop")
    root = r.data["blocking"]["roots"][0]
    assert (root["pid"], root["state"], root["relation"], root["mode"], root["waiting"]) == (
        100, "idle in transaction", "orders", "RowExclusiveLock", 7
    )  # fmt: skip
    critical = [f["message"] for f in r.data["findings"] if f["severity"] == "critical"]
    assert len(critical) == 1 and "idle in transaction for 4 min" in critical[0] and "7 session(s)" in critical[0]
    assert "qty = ?" in critical[0] and "qty = 5" not in str(r.data)
    assert len(r.evidence) == len(set(r.evidence))  # no line twice


@pytest.mark.skipif(not os.environ.get("OPSGRAPH_TEST_POSTGRES_URL"), reason="OPSGRAPH_TEST_POSTGRES_URL is not set")
def test_a_live_lock_incident_names_the_idle_transaction_that_blocks_three_writers(tmp_path: Path) -> None:
    with lock_incident(os.environ["OPSGRAPH_TEST_POSTGRES_URL"], settle_s=0.2) as incident:
        settings = Settings(var_dir=tmp_path, postgres_dsns=[SecretStr(incident.url)])
        r = CATALOG.get("postgres_activity").run({}, ToolContext(settings=settings))
        assert r.status == ToolStatus.SUCCESS
        roots = r.data["blocking"]["roots"]
        assert len(roots) == 1
        root = roots[0]
        assert root["pid"] == incident.holder_pid
        assert root["state"] == "idle in transaction" and root["state_age_s"] > 0
        assert root["relation"] == "orders" and root["mode"] == "RowExclusiveLock"
        assert root["waiting"] == 3 and root["waiters"] == incident.waiter_pids
        assert any(k.startswith("ShareLock on transactionid") for k in root["waiting_for"])
        assert "qty = qty + ?" in root["query"] and "41" not in root["query"]
        critical = [f["message"] for f in r.data["findings"] if f["severity"] == "critical"]
        assert len(critical) == 1
        assert f"pid {incident.holder_pid} (idle in transaction" in critical[0] and "on orders" in critical[0]
        assert "3 session(s) wait" in critical[0]
        pids = {s["pid"] for s in r.data["sessions"]}
        assert {incident.holder_pid, *incident.waiter_pids} <= pids
        assert any(lk["relation"] == "orders" and lk["pid"] == incident.holder_pid for lk in r.data["locks"])
        assert r.data["healthy"] is False and len(r.evidence) == len(set(r.evidence))
