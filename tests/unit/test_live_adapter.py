"""diagnosis.live: real tool results become evidence items the analyzers and the reference check can use."""

from __future__ import annotations

import ast
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.settings import Settings
from diagnosis import EvidenceRef, EvidenceSet
from diagnosis.live import items_from_tool_result
from tests.toolkit.pg_incident import lock_incident
from tools import CATALOG, ToolContext
from tools.pg import build_report


def _run(tool: str, args: dict, settings: Settings) -> dict:
    return CATALOG.get(tool).run(args, ToolContext(settings=settings)).data


def test_log_search_results_become_one_log_item_per_file_with_line_references(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    now = datetime.now()
    (logs / "orders.log").write_text(
        "".join(
            f"{now - timedelta(seconds=60 - i):%Y-%m-%d %H:%M:%S} ERROR orders-api upstream payments-api "
            f"timed out after 5000ms\n"
            for i in range(20)
        )
    )
    (logs / "other.log").write_text(f"{now:%Y-%m-%d %H:%M:%S} WARN cache refused connection\n")
    data = _run("log_search", {"path": str(logs)}, Settings(var_dir=tmp_path, log_roots=[logs]))
    items = items_from_tool_result("logs", "log_search", data)
    assert [(i.id, i.kind, i.object) for i in items] == [
        ("logs#1", "log", str(logs / "orders.log")),
        ("logs#2", "log", str(logs / "other.log")),
    ]
    orders = items[0]
    assert len(orders.data["records"]) == 20 and orders.data["records"][0]["level"] == "error"
    assert orders.data["templates"][0]["count"] == 20 and orders.data["truncated"] is False
    assert orders.ts == max(r["ts"] for r in orders.data["records"])
    evidence = EvidenceSet(items)
    assert evidence.check(EvidenceRef(item="logs#1", line=20))
    assert not evidence.check(EvidenceRef(item="logs#1", line=21))


def test_host_metrics_becomes_a_snapshot_and_a_cpu_series(tmp_path: Path) -> None:
    data = _run("host_metrics", {"sample_seconds": 0.4}, Settings(var_dir=tmp_path))
    items = items_from_tool_result("metrics", "host_metrics", data)
    snapshot, series = items
    assert snapshot.kind == "host/snapshot" and snapshot.object == f"host/{os.uname().nodename}"
    assert {"cpu_percent", "load", "mem_percent", "swap_percent", "disks", "fds", "top"} <= snapshot.data.keys()
    assert {"mount", "percent", "free_bytes", "inodes_percent"} <= snapshot.data["disks"][0].keys()
    assert series.kind == "metric" and series.data["name"] == "host_cpu_percent" and series.data["source"] == "host"
    points = series.data["points"]
    assert len(points) == 2 and points[0][0] < points[1][0] and points[1][1] == data["cpu_series"][1]
    assert EvidenceSet(items).check(EvidenceRef(item="metrics#1", field="disks.0.percent"))


def test_process_http_and_redis_results_become_their_items(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path, http_targets=["127.0.0.1"])
    proc = items_from_tool_result("proc", "process_check", _run("process_check", {"name": "no-such-xyz"}, settings))
    assert proc[0].kind == "host/process" and proc[0].object == "process/no-such-xyz"
    assert proc[0].data["running"] == 0 and proc[0].data["pids"] == []
    probe = _run("http_probe", {"url": "http://user:hunter2@127.0.0.1:9/health"}, settings)
    http = items_from_tool_result("probe", "http_probe", probe)
    assert http[0].kind == "http/probe" and http[0].data["status"] is None and "ConnectError" in http[0].data["error"]
    assert "hunter2" not in http[0].model_dump_json()
    refused = _run("http_probe", {"url": "http://169.254.169.254/"}, settings)
    assert items_from_tool_result("probe", "http_probe", refused) == []  # nothing was observed
    redis_data = _run("redis_info", {"url": "redis://:pw@127.0.0.1:9/0"}, settings)
    redis_items = items_from_tool_result("redis", "redis_info", redis_data)
    assert redis_items[0].kind == "redis/info" and redis_items[0].object == "redis/127.0.0.1:9"
    assert redis_items[0].data["healthy"] is False and "unreachable" in redis_items[0].data["error"]
    assert items_from_tool_result("pools", "pool_status", {"pools": {}}) == []


def test_an_unreachable_postgres_is_a_settings_item_saying_so(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path, postgres_dsns=[SecretStr("postgresql://app:hunter2@127.0.0.1:9/shop")])
    items = items_from_tool_result("pg", "postgres_activity", _run("postgres_activity", {}, settings))
    assert [i.kind for i in items] == ["pg/settings"]
    assert items[0].data["reachable"] is False and "hunter2" not in items[0].model_dump_json()


def _check_lock_items(items: list, holder: int, waiters: list[int]) -> None:
    evidence = EvidenceSet(items)
    sessions = {i.data["pid"]: i for i in evidence.kind("pg/session")}
    assert sessions[holder].data["state"] == "idle in transaction" and sessions[holder].object == f"pid {holder}"
    assert all(holder in sessions[w].data["blocked_by"] or sessions[w].data["blocked_by"] for w in waiters)
    assert {"xact_start", "state_change", "captured_at", "wait_event_type"} <= sessions[holder].data.keys()
    locks = evidence.kind("pg/lock")
    held = [i for i in locks if i.data["pid"] == holder and i.data["relation"] == "orders"]
    assert held and held[0].object == f"pid {holder} RowExclusiveLock on orders" and held[0].data["granted"]
    assert any(not i.data["granted"] for i in locks)
    assert evidence.kind("pg/settings")[0].data["max_connections"] > 0
    ref = EvidenceRef(item=sessions[holder].id, field="state", value="idle in transaction")
    assert evidence.check(ref)


def test_a_recorded_postgres_snapshot_becomes_session_lock_and_settings_items() -> None:
    now = 1_700_000_000.0
    base = {"datname": "shop", "usename": "app", "application_name": "", "client_addr": None,
            "backend_type": "client backend", "backend_start": now - 900}  # fmt: skip
    snap = {
        "captured_at": now,
        "settings": {"max_connections": "100"},
        "sessions": [
            {
                **base,
                "pid": 1,
                "state": "idle in transaction",
                "wait_event_type": "Client",
                "wait_event": "ClientRead",
                "xact_start": now - 300,
                "query_start": now - 290,
                "state_change": now - 290,
                "query": "UPDATE orders SET qty = 3 WHERE id = 7",
                "blocked_by": [],
            },
            *[
                {
                    **base,
                    "pid": p,
                    "state": "active",
                    "wait_event_type": "Lock",
                    "wait_event": "transactionid",
                    "xact_start": now - 60,
                    "query_start": now - 60,
                    "state_change": now - 60,
                    "query": "UPDATE orders SET qty = qty + 1 WHERE id = 7",
                    "blocked_by": [1],
                }
                for p in (2, 3, 4)
            ],
        ],
        "locks": [
            {
                "pid": 1,
                "locktype": "relation",
                "mode": "RowExclusiveLock",
                "granted": True,
                "waitstart": None,
                "relation": "orders",
                "relkind": "r",
                "transactionid": None,
                "page": None,
                "tuple": None,
            },
            *[
                {
                    "pid": p,
                    "locktype": "transactionid",
                    "mode": "ShareLock",
                    "granted": False,
                    "waitstart": now - 60,
                    "relation": None,
                    "relkind": None,
                    "transactionid": "900",
                    "page": None,
                    "tuple": None,
                }
                for p in (2, 3, 4)
            ],
        ],
    }
    data = build_report(snap, "postgresql://app:***@db/shop").data
    items = items_from_tool_result("pg", "postgres_activity", data)
    assert [i.id for i in items][:2] == ["pg#1", "pg#2"]
    _check_lock_items(items, 1, [2, 3, 4])
    assert "qty = 3" not in str([i.data for i in items])  # literals stay masked


@pytest.mark.skipif(not os.environ.get("OPSGRAPH_TEST_POSTGRES_URL"), reason="OPSGRAPH_TEST_POSTGRES_URL is not set")
def test_a_live_lock_incident_becomes_session_and_lock_items(tmp_path: Path) -> None:
    with lock_incident(os.environ["OPSGRAPH_TEST_POSTGRES_URL"]) as incident:
        settings = Settings(var_dir=tmp_path, postgres_dsns=[SecretStr(incident.url)])
        items = items_from_tool_result("pg", "postgres_activity", _run("postgres_activity", {}, settings))
        _check_lock_items(items, incident.holder_pid, incident.waiter_pids)


def test_diagnosis_imports_only_core_and_itself() -> None:
    root = Path(__file__).parents[2] / "diagnosis"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in {"tools", "agents", "workers", "services", "memory"}, f"{path}: imports {name}"
