"""Telemetry, policies, tuning and schedules on real parts: the API, a Celery worker, a real Redis, SQLite, and two
celery beat schedulers racing for the same slots."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from core import keys
from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration
TUNING_EVERY_S = 2


@pytest.fixture(scope="module")
def service(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = Service(
        tmp_path_factory.mktemp("tuning"),
        redis_server.url,
        OPSGRAPH_TUNING_INTERVAL_S=str(TUNING_EVERY_S),
        OPSGRAPH_TUNING_WINDOW_S="600",
        OPSGRAPH_TUNER_TRIALS="3",
        OPSGRAPH_POLICY_REFRESH_S="0.5",
    )
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-a")
    yield svc
    svc.stop()


def test_a_policy_change_over_rest_is_validated_versioned_live_at_once_and_rolled_back(service: Service) -> None:
    first = service.get("/v1/policies/current").json()
    assert first["version"] >= 1 and first["author"] == "settings"
    bad = service.client_put(
        "/v1/policies", json={"policy": {"scheduling": {"hedge_factor": 0, "nope": 1}}, "reason": "x"}
    )
    assert bad.status_code == 422
    err = bad.json()["error"]
    assert err["code"] == "policy_invalid" and len(err["details"]) == 2
    unknown = service.client_put("/v1/policies", json={"policy": {}, "reason": "x", "extra": 1})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_field"
    body = {"scheduling": {"tools": {"chaos_sleep": {"soft_timeout_s": 0.5, "retries": 0}}}}
    changed = service.client_put("/v1/policies", json={"policy": body, "reason": "sleepers are stuck", "actor": "ana"})
    assert changed.status_code == 200, changed.text
    (audited,) = service.get("/v1/audit", params={"action": "policy.put"}).json()["entries"]
    assert audited["target"] == str(changed.json()["version"]) and audited["details"]["reason"] == "sleepers are stuck"
    v = changed.json()["version"]
    # the release loop in the running API reads the new version: the node times out at 0.5 s, no restart
    plan = {"nodes": [{"id": "s", "tool": "chaos_sleep", "args": {"seconds": 20}}]}
    task = service.wait_task(service.submit("a slow sleep", plan=plan), timeout=60)
    (run,) = task["node_runs"]
    assert run["status"] == "failed" and "timed out after 0.5s" in run["error"]
    back = service.post(f"/v1/policies/rollback/{first['version']}", json={"reason": "undo"})
    assert back.status_code == 200 and back.json()["rollback_of"] == first["version"]
    history = service.get("/v1/policies/history").json()["versions"]
    assert [h["version"] for h in history[:2]] == [v + 1, v]
    assert history[1]["actor"] == "ana" and history[1]["reason"] == "sleepers are stuck"
    assert service.post("/v1/policies/rollback/999").status_code == 404


def test_metrics_and_the_summary_show_what_ran(service: Service) -> None:
    plan = {"nodes": [{"id": "a", "tool": "chaos_sleep", "args": {"seconds": 0.1}}]}
    assert service.wait_task(service.submit("a short sleep", plan=plan))["status"] == "succeeded"
    summary = service.get("/v1/telemetry/summary?window=600&all_tenants=true").json()
    sleeps = [t for t in summary["tools"] if t["tool"] == "chaos_sleep" and t["pool"] == "cpu"]
    assert sleeps and sleeps[0]["outcomes"].get("succeeded", 0) >= 1 and sleeps[0]["run_s"]["p95"] is not None
    assert summary["tasks"]["count"] >= 1 and summary["pools"]["cpu"]["queue_wait_s"]["count"] >= 1
    assert service.get("/v1/telemetry/summary?window=-5").status_code == 422
    text = service.get("/metrics").text
    for name in (
        'opsgraph_node_attempts_total{outcome="succeeded",pool="cpu",tool="chaos_sleep"}',
        'opsgraph_node_run_seconds_bucket{le="+Inf",pool="cpu",tool="chaos_sleep"}',
        "opsgraph_node_queue_wait_seconds_count",
        'opsgraph_tasks_total{outcome="succeeded"}',
        "opsgraph_policy_version ",
        'opsgraph_workers{pool="cpu"} 1.0',
    ):
        assert name in text, name


def test_a_tuning_run_over_rest_reports_its_findings_and_decision(service: Service) -> None:
    resp = service.post("/v1/tuning/run")
    assert resp.status_code == 202
    run_id = resp.json()["id"]
    run = wait_until(
        lambda: (r := service.get(f"/v1/tuning/runs/{run_id}").json())["status"] in ("done", "failed") and r,
        120,
        "the tuning run",
    )
    assert run["status"] == "done", run
    assert run["decision"] in ("kept", "applied", "waiting")
    assert "findings" in run["report"] and run["report"]["rationale"]
    # the list carries what an applied run changed (nothing when it kept the policy)
    (listed,) = [r for r in service.get("/v1/tuning/runs").json()["runs"] if r["id"] == run_id]
    assert listed["changes"] == ((run["report"].get("applied") or {}).get("changes"))
    assert (listed["changes"] is not None) == (run["decision"] == "applied")
    assert service.get("/v1/tuning/runs/nope").status_code == 404


def test_schedules_are_created_validated_paused_and_deleted(service: Service) -> None:
    task = {"goal": "nightly capacity report"}
    bad_cron = service.post("/v1/schedules", json={"name": "n", "cron": "61 * * * *", "task": task})
    assert bad_cron.status_code == 422 and "cron" in bad_cron.json()["error"]["message"]
    bad_tz = service.post(
        "/v1/schedules", json={"name": "n", "cron": "0 2 * * *", "timezone": "Mars/Base", "task": task}
    )
    assert bad_tz.status_code == 422 and "timezone" in bad_tz.json()["error"]["message"]
    ok = service.post(
        "/v1/schedules", json={"name": "nightly-ops", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "task": task}
    )
    assert ok.status_code == 201, ok.text
    assert (
        service.post("/v1/schedules", json={"name": "nightly-ops", "cron": "0 2 * * *", "task": task}).status_code
        == 409
    )
    names = [s["name"] for s in service.get("/v1/schedules").json()["schedules"]]
    assert "nightly-ops" in names and "nightly-capacity-report" in names  # the settings' own entry too
    assert service.post("/v1/schedules/nightly-ops/pause").json()["paused"] is True
    assert service.post("/v1/schedules/nightly-ops/resume").json()["paused"] is False
    assert service.client_delete("/v1/schedules/nightly-ops").status_code == 204
    assert service.get("/v1/schedules/nightly-ops").status_code == 404
    # every change is in the audit log, newest first, with who did it and from where
    entries = service.get("/v1/audit", params={"action": "schedule."}).json()["entries"]
    assert [e["action"] for e in entries] == [
        "schedule.delete",
        "schedule.resume",
        "schedule.pause",
        "schedule.create",
    ]
    assert {e["target"] for e in entries} == {"nightly-ops"} and {e["tenant"] for e in entries} == {"default"}
    assert entries[0]["actor"]["name"] == "test harness" and entries[0]["client"] == "127.0.0.1"


def test_two_schedulers_fire_the_tuner_once_per_interval(service: Service) -> None:
    def scheduled_runs() -> list[dict]:
        return [r for r in service.get("/v1/tuning/runs?limit=500").json()["runs"] if r["trigger"] == "schedule"]

    service.redis.delete(keys.DUPLICATE_SLOTS)
    service.workers["sched-a"] = service._spawn("sched-a", "scheduler")
    service.workers["sched-b"] = service._spawn("sched-b", "scheduler")
    started = time.monotonic()
    wait_until(lambda: len(scheduled_runs()) >= 1, 60, "the first scheduled tuning run")
    first = time.monotonic()
    time.sleep(5 * TUNING_EVERY_S)
    runs = scheduled_runs()
    elapsed = time.monotonic() - first
    duplicates = int(service.redis.get(keys.DUPLICATE_SLOTS) or 0)
    for name in ("sched-a", "sched-b"):
        service.kill_worker(name)
    # one scheduler fires; the other stands by (no slot fired twice, not even refused by the database)
    assert duplicates == 0
    expected = elapsed / TUNING_EVERY_S
    assert expected - 2 <= len(runs) <= expected + 2, (len(runs), elapsed, time.monotonic() - started)
    leaders = [
        name for name in ("sched-a", "sched-b") if "scheduler leads" in (service.workdir / f"{name}.log").read_text()
    ]
    assert len(leaders) == 1, leaders
