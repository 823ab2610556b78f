"""The whole path on real parts: REST -> LangGraph -> Celery workers on a real Redis -> SQLite or PostgreSQL.

Each module run starts its own redis-server, API process and workers (two cpu, one gpu), once per backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    redis_server_db = redis_server.url  # every module flushes: no queue or heartbeat survives from another
    svc = Service(tmp_path_factory.mktemp("svc"), redis_server_db, database_url)
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-a")
    svc.start_worker("cpu", "cpu-b")
    svc.start_worker("gpu", "gpu-a")
    yield svc
    svc.stop()


def latest_runs(task: dict) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for r in task["node_runs"]:
        if r["node_id"] not in latest or r["attempt"] > latest[r["node_id"]]["attempt"]:
            latest[r["node_id"]] = r
    return latest


def test_readyz_reports_database_redis_and_both_pools(service: Service) -> None:
    # ready once the model is in memory too (loaded in the background at start)
    body = wait_until(lambda: (b := service.get("/readyz").json())["ready"] and b, 60, "the API to be ready")
    assert body["checks"]["embedder"]["ok"] is True
    assert set(body["checks"]["pools"]["cpu"]["workers"]) == {"cpu-a@test", "cpu-b@test"}
    assert body["checks"]["pools"]["gpu"]["workers"] == ["gpu-a@test"]


def test_example_request_runs_on_cpu_and_gpu_pools_and_answers_with_evidence(service: Service) -> None:
    goal = f"check the health of this machine and of {service.base}/healthz"
    task = service.wait_task(service.submit(goal))
    assert task["status"] == "succeeded", task
    assert task["plan"]["playbook"] == "host-health"
    runs = latest_runs(task)
    assert {r["queue"] for r in runs.values()} == {"cpu", "gpu"}
    for r in runs.values():
        assert r["status"] == "succeeded"
        assert r["worker"].endswith("@test")
        assert r["queue_wait_s"] is not None and r["run_s"] is not None
    assert runs["cpu_spikes"]["worker"] == "gpu-a@test"
    assert runs["probe-1"]["result"]["data"]["status_code"] == 200
    # the anomaly scan received the CPU series the host_metrics node measured
    assert runs["cpu_spikes"]["result"]["data"]["points"] == len(runs["metrics"]["result"]["data"]["cpu_series"])
    answer = task["answer"]
    assert {f["node_id"] for f in answer["findings"]} >= {"metrics", "cpu_spikes", "probe-1"}
    probe = next(f for f in answer["findings"] if f["node_id"] == "probe-1")
    assert any("HTTP 200" in e for e in probe["evidence"])


def test_events_are_stored_in_order_and_the_stream_resumes_after_last_event_id(service: Service) -> None:
    task_id = service.submit("is redis ok")
    service.wait_task(task_id)
    with service.stream(f"/v1/tasks/{task_id}/events") as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        text = "".join(resp.iter_text())
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    types = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert ids == list(range(1, len(ids) + 1))
    assert types[0] == "task.created" and "plan.ready" in types and "task.answer" in types and types[-1] == "end"
    assert types.count("node.finished") == 2
    stored = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    per_node = [e for e in stored if "seq" in e]  # the closing "end" event is not a stored event
    for node_id in {e["data"]["node_id"] for e in per_node if "node_id" in e["data"]}:
        order = [e["type"] for e in per_node if e["data"].get("node_id") == node_id]
        assert order == ["node.ready", "node.queued", "node.started", "node.finished"], order
    resumed_from = ids[len(ids) // 2]
    with service.stream(f"/v1/tasks/{task_id}/events", headers={"Last-Event-ID": str(resumed_from)}) as resp:
        again = [int(line[4:]) for line in "".join(resp.iter_text()).splitlines() if line.startswith("id: ")]
    assert again == ids[ids.index(resumed_from) + 1 :]


def test_bad_input_is_refused_with_a_code(service: Service) -> None:
    r = service.post("/v1/tasks", content=b"{not json", headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_json")
    r = service.post("/v1/tasks", json={"goal": "x", "colour": "red"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "unknown_field")
    r = service.post("/v1/tasks", json={"goal": ""})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request")
    r = service.post("/v1/tasks", json={"goal": "x", "inputs": {"blob": "a" * 100_000}})
    assert (r.status_code, r.json()["error"]["code"]) == (413, "body_too_large")
    r = service.get("/v1/tasks/00000000-0000-0000-0000-000000000000")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    cyclic = {
        "nodes": [
            {"id": "a", "tool": "redis_info", "depends_on": ["b"]},
            {"id": "b", "tool": "redis_info", "depends_on": ["a"]},
        ]
    }
    r = service.post("/v1/tasks", json={"goal": "cyclic", "plan": cyclic})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "plan_invalid")
    assert "cycle" in r.json()["error"]["message"]
    r = service.post("/v1/tasks", json={"goal": "g", "plan": {"nodes": [{"id": "a", "tool": "rm_rf"}]}})
    assert r.status_code == 422 and "unknown tool 'rm_rf'" in r.json()["error"]["message"]
    r = service.post(
        "/v1/tasks",
        json={"goal": "g", "plan": {"nodes": [{"id": "a", "tool": "http_probe", "args": {"url": 5}}]}},
    )
    assert r.status_code == 422 and "argument url" in r.json()["error"]["message"]
    r = service.get("/v1/tasks/x/events", headers={"Last-Event-ID": "abc"})
    assert r.status_code == 404
    done = service.wait_task(service.submit("is redis ok"))
    r = service.post(f"/v1/tasks/{done['id']}/cancel")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "conflict")
    # nothing invalid was stored as a task
    goals = [t["goal"] for t in service.get("/v1/tasks?limit=200").json()["tasks"]]
    assert "cyclic" not in goals


def test_a_worker_killed_mid_node_loses_nothing_the_node_reruns_elsewhere(service: Service) -> None:
    plan = {
        "nodes": [
            {"id": "slow", "tool": "chaos_sleep", "args": {"seconds": 4}},
            {"id": "after", "tool": "redis_info", "depends_on": ["slow"]},
        ]
    }
    task_id = service.submit("sleep then check redis", plan=plan)
    first = service.wait_node_started(task_id, "slow")
    victim = first["worker"]
    service.kill_worker(victim)
    task = service.wait_task(task_id, timeout=120)
    assert task["status"] == "succeeded", task
    slow = [r for r in task["node_runs"] if r["node_id"] == "slow"]
    assert [r["status"] for r in slow] == ["lost", "succeeded"]
    assert slow[0]["worker"] == victim and slow[1]["worker"] != victim
    assert latest_runs(task)["after"]["status"] == "succeeded"
    # bring the pool back to two workers for the tests after this one
    service.start_worker("cpu", victim.split("@")[0] + "-2")


def test_a_node_that_kills_its_worker_every_time_fails_with_a_reason(service: Service) -> None:
    plan = {"nodes": [{"id": "boom", "tool": "chaos_crash_worker"}, {"id": "fine", "tool": "redis_info"}]}
    task = service.wait_task(service.submit("crash", plan=plan), timeout=180)
    runs = latest_runs(task)
    assert runs["boom"]["status"] == "failed"
    assert "poison" in runs["boom"]["error"]
    assert runs["fine"]["status"] == "succeeded"
    total_starts = sum(r["deliveries"] for r in task["node_runs"] if r["node_id"] == "boom")
    assert total_starts <= 4  # the limit (3) plus the start that found it exceeded
    assert task["status"] == "succeeded"  # on_failure=continue: the rest of the answer still stands
    assert any(f["node_id"] == "boom" for f in task["answer"]["failed_nodes"])


def test_the_api_killed_mid_task_is_resumed_by_the_next_api(service: Service) -> None:
    plan = {
        "nodes": [
            {"id": "first", "tool": "chaos_sleep", "args": {"seconds": 3}},
            {"id": "second", "tool": "redis_info", "depends_on": ["first"]},
        ]
    }
    task_id = service.submit("survive a restart", plan=plan)
    service.wait_node_started(task_id, "first")
    service.kill_api()
    service.start_api()
    task = service.wait_task(task_id, timeout=120)
    assert task["status"] == "succeeded", task
    attempts = [r for r in task["node_runs"] if r["node_id"] == "first"]
    assert len(attempts) == 1, attempts  # in flight across the restart, not released twice
    assert latest_runs(task)["second"]["status"] == "succeeded"
    types = [e for e in service.get(f"/v1/tasks/{task_id}/events").text.splitlines() if e.startswith("event: ")]
    assert types.count("event: plan.ready") == 1


def test_cancel_stops_a_running_node_cooperatively(service: Service) -> None:
    plan = {
        "nodes": [
            {"id": "long", "tool": "chaos_sleep", "args": {"seconds": 60}},
            {"id": "later", "tool": "redis_info", "depends_on": ["long"]},
        ]
    }
    task_id = service.submit("long wait", plan=plan)
    service.wait_node_started(task_id, "long")
    r = service.post(f"/v1/tasks/{task_id}/cancel")
    assert r.status_code == 202
    task = wait_until(
        lambda: (t := service.task(task_id)) and latest_runs(t)["long"]["status"] == "cancelled" and t,
        20,
        "the running node to stop",
    )
    assert task["status"] == "cancelled"
    assert "later" not in latest_runs(task) or latest_runs(task)["later"]["status"] != "succeeded"


def test_log_search_stays_inside_its_roots_and_finds_errors(service: Service, tmp_path: Path) -> None:
    root = Path(json.loads(service.env["OPSGRAPH_LOG_ROOTS"])[0])
    root.mkdir(exist_ok=True)
    log = root / "app.log"
    from datetime import datetime

    now = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    log.write_text(f"{now} INFO ok\n{now} ERROR db timeout\n  at frame 1\n{now} ERROR db timeout\n")
    plan = {
        "nodes": [
            {"id": "inside", "tool": "log_search", "args": {"path": str(root), "pattern": "ERROR"}},
            {"id": "outside", "tool": "log_search", "args": {"path": "/etc", "pattern": "root"}},
        ]
    }
    task = service.wait_task(service.submit("logs", plan=plan))
    runs = latest_runs(task)
    assert runs["inside"]["result"]["data"]["matches"] == 2
    assert runs["outside"]["status"] == "failed"
    assert runs["outside"]["result"]["data"]["error_code"] == "target_not_allowed"


def test_a_scheduled_run_becomes_a_normal_task_that_the_api_picks_up(service: Service) -> None:
    from celery import Celery

    celery = Celery(broker=service.env["OPSGRAPH_REDIS_URL"])
    celery.send_task("opsgraph.submit_scheduled", args=["hourly-redis", "is redis ok", {}], queue="cpu")

    def scheduled() -> dict | None:
        tasks = service.get("/v1/tasks?limit=200").json()["tasks"]
        return next((t for t in tasks if t["source"] == "schedule" and t["status"] == "succeeded"), None)

    task = wait_until(scheduled, 60, "the scheduled task to run")
    assert task["goal"] == "is redis ok"
    assert service.task(task["id"])["plan"]["playbook"] == "redis-health"


def test_a_task_without_a_valid_plan_fails_with_an_answer_and_its_stream_ends(service: Service) -> None:
    task_id = service.submit("anything", inputs={"playbook": "no-such-playbook"})
    task = service.wait_task(task_id)
    assert task["status"] == "failed" and task["node_runs"] == []
    assert task["answer"]["headline"] == "no valid plan: unknown playbook 'no-such-playbook'"
    with service.stream(f"/v1/tasks/{task_id}/events") as resp:
        types = [line[7:] for line in "".join(resp.iter_text()).splitlines() if line.startswith("event: ")]
    assert "plan.rejected" in types and types[-1] == "end"


def test_a_repeated_request_is_served_from_the_cache_with_the_hit_in_its_events(service: Service) -> None:
    first = service.wait_task(service.submit("is redis ok", tenant="cache-a"))
    assert first["status"] == "succeeded" and first["node_runs"]
    repeat_id = service.submit("is redis ok?", tenant="cache-a")
    repeat = service.wait_task(repeat_id)
    assert repeat["status"] == "succeeded"
    assert repeat["node_runs"] == []  # nothing ran: the answer came from the cache
    assert repeat["answer"]["from_cache"]["cached_request"] == "is redis ok"
    assert repeat["answer"]["headline"] == first["answer"]["headline"]
    events = [e for e in service.get(f"/v1/tasks/{repeat_id}/events").text.splitlines() if e.startswith("data: ")]
    lookups = [json.loads(e[6:])["data"] for e in events if '"cache.lookup"' in e]
    assert lookups and lookups[0]["hit"] is True and lookups[0]["kind"] == "answer"
    # another tenant asking the same never sees tenant cache-a's answer
    other = service.wait_task(service.submit("is redis ok", tenant="cache-b"))
    assert other["node_runs"] and "from_cache" not in other["answer"]
    stats = service.get("/v1/cache/stats", params={"tenant": "cache-a"}).json()["categories"]["health"]
    assert stats["hits"] >= 1 and stats["entries"]["answer"] == 1
    # invalidating the entity the answer is about drops it
    r = service.client_delete("/v1/cache", params={"tenant": "cache-a", "entity": "redis"})
    assert r.status_code == 200 and r.json()["removed"] == 4  # the answer, the plan and both tool results
    again = service.wait_task(service.submit("is redis ok", tenant="cache-a"))
    assert again["node_runs"] and "from_cache" not in again["answer"]
    r = service.client_delete("/v1/cache", params={"tenant": "not a tenant"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


def test_memory_search_finds_playbooks_by_meaning_and_cached_requests(service: Service) -> None:
    r = service.get("/v1/memory/search", params={"q": "are our web pages answering", "layer": "semantic"})
    assert r.status_code == 200 and r.json()["results"][0]["playbook"] == "endpoint-health"
    service.wait_task(service.submit("nightly capacity report", tenant="search-t"))
    r = service.get("/v1/memory/search", params={"q": "capacity report", "layer": "cache", "tenant": "search-t"})
    assert {e["kind"] for e in r.json()["results"]} >= {"answer", "plan"}
    assert service.get("/v1/memory/search", params={"q": "x", "layer": "working"}).status_code == 422


def test_finished_tasks_become_episodes_that_later_answers_cite_and_plans_reuse(service: Service) -> None:
    first = service.wait_task(service.submit("check the health of orders-api", tenant="epi", inputs={}))
    assert first["status"] == "succeeded"
    r = service.post(f"/v1/tasks/{first['id']}/feedback", json={"helpful": True, "note": "spot on"})
    assert r.status_code == 200
    found = service.get("/v1/memory/search", params={"q": "orders-api health", "layer": "episodic", "tenant": "epi"})
    assert found.json()["results"][0]["task_id"] == first["id"]
    assert found.json()["results"][0]["feedback"]["helpful"] is True
    # the cache is cleared, so the second task plans again: from the similar successful episode
    assert service.client_delete("/v1/cache", params={"tenant": "epi"}).status_code == 200
    second = service.wait_task(service.submit("check the health of orders-api", tenant="epi"))
    assert second["plan"]["source"] == "episode"
    assert [i["task_id"] for i in second["answer"]["similar_incidents"]] == [first["id"]]
    # another tenant has no such memory
    other = service.wait_task(service.submit("check the health of orders-api", tenant="epi-other"))
    assert other["plan"]["source"] == "playbook" and other["answer"]["similar_incidents"] == []
    assert (
        service.post("/v1/tasks/00000000-0000-0000-0000-000000000000/feedback", json={"helpful": True}).status_code
        == 404
    )


def test_facts_recorded_over_rest_are_cited_in_answers_and_contradictions_close_them(service: Service) -> None:
    body = {"subject": "ledger-api", "predicate": "depends_on", "object": "postgres-main", "tenant": "facts-t"}
    r = service.post("/v1/memory/facts", json=body)
    assert r.status_code == 201 and r.json()["closed"] == []
    r = service.post("/v1/memory/facts", json={**body, "object": "postgres-replica", "source": "person:ops"})
    assert [c["object"] for c in r.json()["closed"]] == ["postgres-main"]
    task = service.wait_task(service.submit("is ledger-api running", tenant="facts-t"))
    assert [f["text"] for f in task["answer"]["known_facts"]] == ["ledger-api depends on postgres-replica"]
    history = service.get("/v1/memory/facts", params={"subject": "ledger-api", "tenant": "facts-t"}).json()["facts"]
    assert [(f["object"], f["current"]) for f in history] == [("postgres-main", False), ("postgres-replica", True)]
    bad = service.post("/v1/memory/facts", json={"subject": "x", "predicate": "drop;table", "object": "y"})
    assert bad.status_code == 422


def test_an_idempotent_read_is_reused_within_its_ttl_and_runs_nowhere(service: Service) -> None:
    plan = {
        "nodes": [
            {"id": "r", "tool": "redis_info"},
            {"id": "p", "tool": "process_check", "args": {"name": "redis-server"}},
        ]
    }
    first = service.wait_task(service.submit("redis twice", plan=plan, tenant="tools-t"))
    assert {r["queue"] for r in first["node_runs"]} == {"cpu"}
    # a caller-written plan is category "request": its answer is never cached, but its reads may be reused
    second = service.wait_task(service.submit("redis twice again", plan=plan, tenant="tools-t"))
    runs = latest_runs(second)
    assert {r["queue"] for r in runs.values()} == {"cache"} and all(r["worker"] is None for r in runs.values())
    assert runs["r"]["result"]["data"]["version"] == latest_runs(first)["r"]["result"]["data"]["version"]
    assert "from_cache" in runs["r"]["result"]
    other = service.wait_task(service.submit("redis twice", plan=plan, tenant="tools-u"))
    assert {r["queue"] for r in other["node_runs"]} == {"cpu"}  # never another tenant's result
