"""Scheduling on real parts: retries with backoff, timeouts, hedges, batches, DAG changes and placement,
through the REST API, a real Redis and real Celery workers, under a policy given in the environment."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration

POLICY = {
    "retries": 2,
    "backoff_base_s": 0.3,
    "backoff_max_s": 2.0,
    "backoff_jitter": 0.2,
    "hedge_min_samples": 4,
    "hedge_min_s": 0.5,
    "hedge_factor": 1.5,
    "batch_window_s": 0.4,
    "max_batch": 8,
    "tools": {"chaos_sleep": {"soft_timeout_s": 1.0, "retries": 1}},
}


@pytest.fixture(scope="module")
def service(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("sched"), redis_server.url, OPSGRAPH_SCHEDULING_POLICY=json.dumps(POLICY))
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-a")  # no gpu worker: gpu tools must overflow to cpu
    yield svc
    svc.stop()


def runs_of(task: dict, node_id: str) -> list[dict]:
    return sorted((r for r in task["node_runs"] if r["node_id"] == node_id), key=lambda r: r["attempt"])


def events(service: Service, task_id: str) -> list[dict]:
    text = service.get(f"/v1/tasks/{task_id}/events").text
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and '"seq"' in line]


def test_a_transient_failure_is_retried_with_growing_backoff_until_it_succeeds(service: Service) -> None:
    plan = {"nodes": [{"id": "f", "tool": "chaos_flaky", "args": {"key": "retry-ok", "fail_times": 2}}]}
    task_id = service.submit("flaky", plan=plan)
    task = service.wait_task(task_id)
    assert task["status"] == "succeeded", task
    assert [r["status"] for r in runs_of(task, "f")] == ["failed", "failed", "succeeded"]
    retries = [e["data"] for e in events(service, task_id) if e["type"] == "node.retry"]
    assert [r["retry"] for r in retries] == [1, 2]
    # exponential with +-20% jitter: 0.3 s then 0.6 s
    assert 0.24 <= retries[0]["delay_s"] <= 0.36 and 0.48 <= retries[1]["delay_s"] <= 0.72
    second, third = runs_of(task, "f")[1:]
    assert -0.01 <= retries[1]["delay_s"] - (third["not_before"] - third["created_at"]) < 0.5
    assert third["started_at"] >= third["not_before"]  # the release loop held it for its backoff
    assert second["started_at"] >= second["not_before"]


def test_retries_end_with_a_clear_final_error_and_permanent_errors_are_not_retried(service: Service) -> None:
    plan = {
        "nodes": [
            {"id": "always", "tool": "chaos_flaky", "args": {"key": "retry-never", "fail_times": 9}},
            {"id": "perm", "tool": "chaos_flaky", "args": {"key": "perm", "fail_times": 1, "transient": False}},
        ]
    }
    task = service.wait_task(service.submit("failing", plan=plan))
    assert [r["status"] for r in runs_of(task, "always")] == ["failed"] * 3  # 1 + 2 retries
    assert runs_of(task, "always")[-1]["error"] == "call 3 failed"
    assert [r["status"] for r in runs_of(task, "perm")] == ["failed"]


def test_a_soft_timeout_from_the_policy_stops_the_tool_and_counts_as_transient(service: Service) -> None:
    plan = {"nodes": [{"id": "s", "tool": "chaos_sleep", "args": {"seconds": 30}}]}
    task = service.wait_task(service.submit("too slow", plan=plan), timeout=60)
    attempts = runs_of(task, "s")
    assert [r["status"] for r in attempts] == ["failed", "failed"]  # the tool's override: 1 retry
    assert all("timed out after 1s" in r["error"] for r in attempts)
    assert all(r["run_s"] < 10 for r in attempts)


def test_a_gpu_tool_overflows_to_cpu_when_no_gpu_worker_is_alive(service: Service) -> None:
    plan = {"nodes": [{"id": "a", "tool": "metric_anomalies", "args": {"series": [1, 1, 1, 1, 50, 1, 1]}}]}
    task = service.wait_task(service.submit("scan", plan=plan))
    assert task["status"] == "succeeded", task
    assert runs_of(task, "a")[0]["pool"] == "cpu"


def test_a_result_grows_the_dag_and_cancels_a_pending_node_and_a_bad_change_is_refused(service: Service) -> None:
    plan = {
        "nodes": [
            {
                "id": "probe",
                "tool": "chaos_follow_up",
                "args": {
                    "add": [{"id": "logs", "tool": "chaos_flaky", "args": {"key": "grown", "fail_times": 0}}],
                    "cancel": ["later"],
                },
            },
            {"id": "wait", "tool": "chaos_sleep", "args": {"seconds": 0.5}},
            {"id": "later", "tool": "redis_info", "depends_on": ["wait"]},
            {
                "id": "bad",
                "tool": "chaos_follow_up",
                "args": {"add": [{"id": "x", "tool": "no_such_tool"}]},
                "depends_on": ["wait"],
            },
        ]
    }
    task_id = service.submit("grow", plan=plan)
    task = service.wait_task(task_id)
    assert task["status"] == "succeeded", task
    assert runs_of(task, "probe.logs")[0]["status"] == "succeeded"
    assert runs_of(task, "later")[0]["status"] == "skipped"
    assert "cancelled by probe" in runs_of(task, "later")[0]["error"]
    assert "bad.x" not in {r["node_id"] for r in task["node_runs"]}
    evs = events(service, task_id)
    changed = [e["data"] for e in evs if e["type"] == "plan.changed"]
    assert changed[0]["added"] == ["probe.logs"] and changed[0]["cancelled"] == ["later"]
    refused = [e["data"] for e in evs if e["type"] == "plan.rejected"]
    assert refused and refused[0]["source"] == "bad" and "no_such_tool" in json.dumps(refused[0]["reasons"])
    assert any(n["node_id"] == "probe.logs" for n in task["answer"]["nodes"])  # the answer reads the grown plan


def test_calls_of_a_batchable_tool_arriving_together_run_as_one_batch(service: Service) -> None:
    plan = {"nodes": [{"id": f"e{i}", "tool": "chaos_batch_echo", "args": {"value": i}} for i in range(5)]}
    task = service.wait_task(service.submit("batch", plan=plan))
    assert task["status"] == "succeeded", task
    runs = [runs_of(task, f"e{i}")[0] for i in range(5)]
    assert len({r["batch_id"] for r in runs}) == 1 and runs[0]["batch_id"]
    assert [r["result"]["data"]["value"] for r in runs] == list(range(5))
    assert {r["result"]["data"]["batch_size"] for r in runs} == {5}


def test_a_straggler_is_hedged_on_another_worker_and_the_loser_is_cancelled(service: Service) -> None:
    # teach the cost model the tool's normal run time on the fast worker alone
    warm = {"nodes": [{"id": f"w{i}", "tool": "chaos_slow_worker", "args": {"seconds": 0.2}} for i in range(6)]}
    assert service.wait_task(service.submit("warm", plan=warm))["status"] == "succeeded"
    service.start_worker("cpu", "cpu-slow", OPSGRAPH_TEST_SLOW_S="20")
    time.sleep(1.5)  # the release loop reads heartbeats once a second: let it count the new worker's two slots
    # four slots in all, each worker prefetching at most two: at least two of these land on the slow worker
    plan = {"nodes": [{"id": f"n{i}", "tool": "chaos_slow_worker", "args": {"seconds": 0.2}} for i in range(6)]}
    task_id = service.submit("hedge", plan=plan)
    task = service.wait_task(task_id, timeout=60)
    assert task["status"] == "succeeded", task
    hedged = [e["data"] for e in events(service, task_id) if e["type"] == "node.hedged"]
    assert hedged, "no node was hedged"
    twins_won = 0
    for h in hedged:
        attempts = runs_of(task, h["node_id"])
        brief = [(r["attempt"], r["status"], r["worker"], r["hedge_of"], r["error"]) for r in attempts]
        assert len(attempts) == 2, brief  # one hedge per straggler, never two
        original = next(r for r in attempts if r["attempt"] == h["of_attempt"])
        twin = next(r for r in attempts if r["attempt"] == h["attempt"])
        assert original["worker"] == "cpu-slow@test" and twin["worker"] == "cpu-a@test", attempts
        assert twin["hedge_of"] == original["id"]
        # exactly one attempt decides the node; the other was stopped
        assert sorted(r["status"] for r in (original, twin)) in (["cancelled", "succeeded"], ["lost", "succeeded"]), (
            brief
        )
        if twin["status"] == "succeeded":
            twins_won += 1
            # the loser was cancelled cooperatively: its worker stops at its next check, long before 20 s
            wait_until(
                lambda o=original: service.redis.exists(f"opsgraph:cancel-run:{o['id']}"), 5, "the loser's cancel flag"
            )
    assert twins_won >= 1, hedged
