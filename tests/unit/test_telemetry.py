"""Telemetry: attempts and task ends recorded with the state change, aggregates on known events, rollups."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from core.db import Store, TelemetryMinuteRow, TelemetryRow
from core.settings import Settings
from core.telemetry import Telemetry
from core.types import NodeStatus, TaskStatus


@pytest.fixture
def store(database_url: str, tmp_path) -> Iterator[Store]:
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    with s.session() as sess:  # the PostgreSQL database lives for the module: each test starts with no telemetry
        sess.execute(sa.delete(TelemetryRow))
        sess.execute(sa.delete(TelemetryMinuteRow))
    yield s
    s.engine.dispose()


def _node(tool: str, pool: str, run_s: float, *, ts: float, outcome: str = "succeeded", wait_s: float = 0.1,
          worker: str = "w1") -> dict:  # fmt: skip
    return {"kind": "node", "name": tool, "pool": pool, "run_s": run_s, "wait_s": wait_s, "outcome": outcome,
            "worker": worker, "ts": ts, "task_id": "t", "node_id": f"n{ts}"}  # fmt: skip


def test_an_attempt_and_a_task_are_recorded_with_their_state_change(store: Store) -> None:
    task = store.create_task("check the host")
    run = store.create_node_run(task.id, "cpu", tool="host_metrics", args={}, pool="cpu", queue="cpu")
    store.mark_nodes_queued([run.id], queued_at=run.created_at)
    store.start_node_run(run.id, "w1@test")
    assert store.finish_node_run(run.id, NodeStatus.SUCCEEDED, result={})
    assert not store.finish_node_run(run.id, NodeStatus.FAILED, error="late")  # a duplicate records nothing
    store.set_task_status(task.id, TaskStatus.SUCCEEDED)
    store.set_task_status(task.id, TaskStatus.FAILED)  # already ended: no second task row
    with store.session() as s:
        rows = s.scalars(sa.select(TelemetryRow).where(TelemetryRow.task_id == task.id)).all()
    nodes = [r for r in rows if r.kind == "node"]
    tasks = [r for r in rows if r.kind == "task"]
    assert len(nodes) == 1 and len(tasks) == 1
    assert nodes[0].name == "host_metrics" and nodes[0].pool == "cpu" and nodes[0].worker == "w1@test"
    assert nodes[0].outcome == "succeeded" and nodes[0].attempt == 1
    assert nodes[0].wait_s is not None and nodes[0].run_s is not None
    assert tasks[0].outcome == "succeeded" and tasks[0].data["attempts"] == 1
    assert set(tasks[0].data["compute_s"]) == {"cpu"}


def test_a_timeout_is_its_own_outcome(store: Store) -> None:
    task = store.create_task("t")
    run = store.create_node_run(task.id, "a", tool="log_search", args={}, pool="cpu", queue="cpu")
    store.start_node_run(run.id, "w")
    store.finish_node_run(run.id, NodeStatus.FAILED, error="log_search timed out after 5s")
    summary = Telemetry(store).summary(60)
    (tool,) = summary["tools"]
    assert tool["outcomes"] == {"timeout": 1} and tool["timeout_rate"] == 1.0 and tool["error_rate"] == 1.0


def test_aggregates_on_known_events(store: Store) -> None:
    tel = Telemetry(store)
    now = 10_000.0
    runs = [0.1 * k for k in range(1, 21)]  # 0.1 .. 2.0
    tel.record_many(_node("http_probe", "cpu", r, ts=now - 30, wait_s=r / 10) for r in runs)
    tel.record_many(
        [
            _node("http_probe", "cpu", 5.0, ts=now - 20, outcome="timeout"),
            _node("http_probe", "cpu", 0.3, ts=now - 20, outcome="failed"),
            _node("metric_anomalies", "gpu", 0.5, ts=now - 10, wait_s=2.0),
            {"kind": "cache", "name": "health", "hit": True, "run_s": 0.002, "ts": now - 5},
            {"kind": "cache", "name": "health", "hit": False, "run_s": 0.004, "ts": now - 5},
            {"kind": "cache", "name": "health", "hit": False, "run_s": 0.003, "ts": now - 5},
            {"kind": "cache", "name": "diagnose", "hit": True, "run_s": 0.002, "ts": now - 5},
            {"kind": "task", "outcome": "succeeded", "run_s": 4.0, "cost": 0.01, "ts": now - 3,
             "data": {"compute_s": {"cpu": 100.0, "gpu": 10.0}}},
            {"kind": "task", "outcome": "failed", "run_s": 8.0, "cost": 0.0, "ts": now - 2, "data": {"compute_s": {}}},
            {"kind": "llm", "name": "gpt-x", "outcome": "ok", "tokens_in": 1000, "tokens_out": 200, "cost": 0.01,
             "run_s": 1.2, "ts": now - 3},
            _node("http_probe", "cpu", 99.0, ts=now - 4000),  # outside the window
        ]
    )  # fmt: skip
    s = tel.summary(3600, end=now, prices={"cpu": 0.001, "gpu": 0.01})
    probe = next(t for t in s["tools"] if t["tool"] == "http_probe")
    assert probe["attempts"] == 22
    assert probe["run_s"]["p50"] == pytest.approx(1.0)  # nearest rank: the 11th of 22 (0.3 twice)
    assert probe["run_s"]["p95"] == pytest.approx(2.0)
    assert probe["run_s"]["p99"] == pytest.approx(5.0)
    assert probe["error_rate"] == pytest.approx(2 / 22, abs=1e-6)
    assert probe["timeout_rate"] == pytest.approx(1 / 22, abs=1e-6)
    assert s["pools"]["gpu"]["queue_wait_s"]["p95"] == 2.0
    assert s["cache"]["health"] == {**s["cache"]["health"], "lookups": 3, "hits": 1, "hit_rate": pytest.approx(1 / 3)}
    assert s["cache"]["diagnose"]["hit_rate"] == 1.0
    assert s["tasks"]["count"] == 2 and s["tasks"]["error_rate"] == 0.5
    assert s["tasks"]["flow_s"]["p50"] == 4.0 and s["tasks"]["flow_s"]["p99"] == 8.0
    # (llm 0.01 + cpu 100 s x 0.001 + gpu 10 s x 0.01) / 2 tasks
    assert s["tasks"]["cost_per_task"] == pytest.approx((0.01 + 0.1 + 0.1) / 2)
    assert s["llm"]["gpt-x"]["tokens_in"] == 1000 and s["llm"]["gpt-x"]["cost"] == 0.01


def test_old_raw_rows_roll_up_per_minute_and_aggregates_still_count_them(store: Store) -> None:
    tel = Telemetry(store)
    now = 1_000_000.0
    old = now - 7200
    tel.record_many(_node("host_metrics", "cpu", 0.2 + 0.01 * k, ts=old + k) for k in range(30))
    tel.record_many(
        [{"kind": "task", "outcome": "succeeded", "run_s": 3.0, "ts": old, "data": {"compute_s": {"cpu": 2}}}]
    )
    tel.record_many(_node("host_metrics", "cpu", 0.3, ts=now - 10) for _ in range(5))
    before = tel.summary(10_000, end=now)
    out = tel.rollup(raw_retention_s=3600, rollup_retention_s=86_400, now=now)
    assert out["rolled_up"] == 31
    assert tel.rollup(raw_retention_s=3600, rollup_retention_s=86_400, now=now)["rolled_up"] == 0
    with store.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(TelemetryRow)) == 5
        minutes = s.scalars(sa.select(TelemetryMinuteRow)).all()
    assert sum(m.count for m in minutes) == 31
    after = tel.summary(10_000, end=now)
    (b,), (a,) = before["tools"], after["tools"]
    assert a["attempts"] == b["attempts"] == 35
    assert a["run_s"]["mean"] == pytest.approx(b["run_s"]["mean"])
    assert a["run_s"]["p50"] == pytest.approx(b["run_s"]["p50"], rel=0.5)  # from the histogram now
    assert after["tasks"]["count"] == 1 and after["tasks"]["compute_s"] == {"cpu": 2.0}
    # rollups past their own retention go
    assert tel.rollup(raw_retention_s=3600, rollup_retention_s=60, now=now)["dropped_minutes"] == len(minutes)


def test_totals_for_metrics_count_every_row_into_histograms_without_keeping_values(store: Store) -> None:
    tel = Telemetry(store)
    tel.record_many(_node("http_probe", "cpu", r, ts=100.0 + r) for r in (0.004, 0.3, 0.3, 7.0))
    acc = tel.totals()
    run = acc.tools[("http_probe", "cpu")]["run"]
    assert run.values is None and run.count == 4 and run.total == pytest.approx(7.604)
    assert sum(run.hist) == 4 and run.hist[-1] == 0  # 7 s falls in the 10 s bucket, nothing above 1800 s
    assert 5.0 < run.quantile(0.99) <= 10.0  # interpolated within its bucket
