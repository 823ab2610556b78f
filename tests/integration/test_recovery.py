"""Redis killed and restarted empty (no persistence) mid-task: queues, heartbeats and flags are gone, the
database is not. Every node still ends; nothing waits for the one-hour visibility timeout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture()
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


def test_a_redis_restart_loses_no_node(own_redis: RedisServer, tmp_path: Path) -> None:
    # three messages beyond the one slot go to the broker, so the restart really drops queued messages
    policy = {"requeue_after_s": 3.0, "oversubscribe": 3}
    svc = Service(tmp_path, own_redis.url, OPSGRAPH_SCHEDULING_POLICY=json.dumps(policy), OPSGRAPH_CPU_CONCURRENCY="1")
    try:
        svc.start_api()
        svc.start_worker("cpu", "cpu-r")
        # one slot: "running" holds it while the others wait on the broker
        # ("running" is the shortest, so srpt releases it first and the others are behind it on the broker)
        nodes = [{"id": "running", "tool": "chaos_sleep", "args": {"seconds": 2}}]
        nodes += [{"id": f"q{i}", "tool": "chaos_sleep", "args": {"seconds": 2.5 + i / 1000}} for i in range(3)]
        nodes.append({"id": "after", "tool": "chaos_sleep", "args": {"seconds": 0.1}, "depends_on": ["q0"]})
        task_id = svc.submit("survive redis", plan={"nodes": nodes})
        svc.wait_node_started(task_id, "running")
        own_redis.restart()
        task = svc.wait_task(task_id, timeout=120)
        assert task["status"] == "succeeded", (
            task["error"],
            [(r["node_id"], r["attempt"], r["status"], r["error"]) for r in task["node_runs"]],
        )
        by_node: dict[str, list[dict]] = {}
        for r in task["node_runs"]:
            by_node.setdefault(r["node_id"], []).append(r)
        assert set(by_node) == {"running", "q0", "q1", "q2", "after"}
        for node_id, attempts in by_node.items():
            assert sum(r["status"] == "succeeded" for r in attempts) == 1, (node_id, attempts)
        # the worker never died: an empty Redis (no heartbeat keys yet) must not make its attempts "lost"
        assert all(r["status"] != "lost" for r in task["node_runs"]), task["node_runs"]
        # the messages the restart dropped were sent again (same attempt, so at most one start each)
        text = svc.get(f"/v1/tasks/{task_id}/events").text
        queued = [json.loads(line[6:])["data"] for line in text.splitlines() if '"node.queued"' in line]
        sends = [(q["node_id"], q["attempt"]) for q in queued]
        assert any(sends.count(s) > 1 for s in set(sends)), sends
        # the worker came back to the new Redis by itself
        wait_until(lambda: svc.redis.exists("opsgraph:worker:cpu-r@test"), 10, "the worker's heartbeat")
    finally:
        svc.stop()
