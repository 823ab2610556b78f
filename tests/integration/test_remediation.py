"""Remediation behind a person's approval, on real servers: the API and a Celery worker as processes, a real
PostgreSQL lock incident, a second Redis server as the target of Redis writes.

The live incident end to end: diagnose -> remediate -> pending approval (the session still alive, the writers
still waiting) -> a key without the approve scope refused -> approve -> the session gone, the writers through,
the answer verified. Then, with plans a person submits: four-eyes, a restart while waiting, reject, expiry."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.harness import ROOT, RedisServer, Service, wait_until
from tests.toolkit.pg_incident import LockIncident, lock_incident

pytestmark = [pytest.mark.integration]

TENANT = "shop"
PG = os.environ.get("OPSGRAPH_TEST_POSTGRES_URL", "")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The Redis server remediation may change (never opsgraph's own)."""
    server = RedisServer(tmp_path_factory.mktemp("target-redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def incident() -> Iterator[LockIncident | None]:
    if not PG:
        yield None
        return
    with lock_incident(PG, waiters=3) as live:
        yield live


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer,
    target: RedisServer,
    incident: LockIncident | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    env = {"OPSGRAPH_REDIS_WRITE_URLS": f'["{target.url}"]', "OPSGRAPH_APPROVAL_FOUR_EYES": "true"}
    if incident is not None:
        env["OPSGRAPH_POSTGRES_DSNS"] = f'["{incident.url}"]'
    svc = Service(tmp_path_factory.mktemp("remediation"), redis_server.url, "", **env)
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-remediation")
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def keys(service: Service) -> dict[str, dict[str, str]]:
    """An operator (asks, cannot approve), an approver, and a lead who may do both (four-eyes stops them
    approving their own request)."""
    return {
        name: service.bearer(service.create_key(TENANT, scopes, name=name))
        for name, scopes in {
            "operator": ["operate"],
            "approver": ["approve"],
            "lead": ["operate", "approve"],
        }.items()
    }


def _submit(service: Service, who: dict[str, str], goal: str, **body: Any) -> str:
    resp = service.post("/v1/tasks", json={"goal": goal, **body}, headers=who)
    assert resp.status_code == 202, resp.text
    task_id = str(resp.json()["id"])
    service.tenant_of[task_id] = TENANT
    return task_id


def _pending(service: Service, task_id: str, who: dict[str, str]) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        resp = service.get(f"/v1/approvals?status=pending&task_id={task_id}", headers=who)
        assert resp.status_code == 200, resp.text
        items = resp.json()["approvals"]
        return items[0] if items else None

    approval: dict[str, Any] = wait_until(found, 90, f"an approval request of task {task_id}", interval=0.25)
    return approval


def _decide(service: Service, approval_id: str, verb: str, who: dict[str, str], reason: str) -> Any:
    return service.post(f"/v1/approvals/{approval_id}/{verb}", json={"reason": reason}, headers=who)


def _cli(service: Service, who: dict[str, str], *argv: str) -> str:
    key = who["Authorization"].removeprefix("Bearer ")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        env={**service.env, "OPSGRAPH_API_KEY": key},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _event_types(service: Service, task_id: str) -> list[str]:
    with sqlite3.connect(service.workdir / "var" / "opsgraph.db") as db:
        rows = db.execute("SELECT type FROM events WHERE task_id = ? ORDER BY seq", (task_id,)).fetchall()
    return [r[0] for r in rows]


@pytest.mark.skipif(not PG, reason="OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)")
def test_live_lock_incident_is_fixed_after_approval_and_verified(
    service: Service, incident: LockIncident, keys: dict[str, dict[str, str]]
) -> None:
    diagnosed = service.wait_task(
        _submit(service, keys["operator"], "why are queries on the database hanging?"), timeout=120
    )
    assert diagnosed["answer"]["diagnosis"]["category"] == "code_defect", diagnosed["answer"]["diagnosis"]

    resp = service.post(f"/v1/tasks/{diagnosed['id']}/remediate", json={}, headers=keys["operator"])
    assert resp.status_code == 202, resp.text
    fix_id = resp.json()["id"]
    service.tenant_of[fix_id] = TENANT

    approval = _pending(service, fix_id, keys["approver"])
    assert approval["tool"] == "postgres_terminate_session" and approval["args"]["pid"] == incident.holder_pid
    assert approval["args"]["backend_start"], approval  # pinned by the preview: a reused pid is refused
    assert str(incident.holder_pid) in approval["preview"]["summary"], approval["preview"]
    assert "idle in transaction" in approval["reason"] and approval["may_decide"] is True
    assert service.task(fix_id)["status"] == "waiting_approval"
    # nothing was written while the request waits: the session and its waiters are still there
    assert incident.session_alive(incident.holder_pid) and not incident.writers_finished()

    refused = _decide(service, approval["id"], "approve", keys["operator"], "looks right")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden", refused.text

    approved = _decide(service, approval["id"], "approve", keys["approver"], "holder is a stuck admin session")
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved" and "approver" in approved.json()["decided_by"]

    task = service.wait_task(fix_id, timeout=120)
    assert task["status"] == "succeeded", task
    report = task["answer"]["remediation"]
    assert report["verified"] is True and report["outcome"] == "fixed", json.dumps(task["answer"], indent=1)[:8000]
    assert task["answer"]["text"].startswith("**Remediation**: Fixed and verified"), task["answer"]["text"]
    assert not incident.session_alive(incident.holder_pid)
    wait_until(incident.writers_finished, 30, "the writers to get the lock and commit")
    types = _event_types(service, fix_id)
    for wanted in ("approval.requested", "approval.decided", "remediation.verified"):
        assert wanted in types, types
    assert types.index("approval.decided") < types.index("remediation.verified")
    print(task["answer"]["text"])  # what the operator reads (pytest -s shows it)


def _wipe_plan() -> dict[str, Any]:
    return {"nodes": [{"id": "wipe", "tool": "redis_delete_keys", "args": {"pattern": "session:*"}}]}


def test_a_persons_plan_is_gated_four_eyes_holds_and_a_restart_keeps_the_request(
    service: Service, target: RedisServer, keys: dict[str, dict[str, str]]
) -> None:
    client = redis.Redis.from_url(target.url)
    client.mset({f"session:{i}": "x" for i in range(5)})
    task_id = _submit(service, keys["lead"], "clear the stale sessions", plan=_wipe_plan())
    approval = _pending(service, task_id, keys["lead"])
    assert approval["preview"]["status"] == "success" and "5" in approval["preview"]["summary"], approval
    assert approval["may_decide"] is False  # four-eyes: the lead asked for it
    own = _decide(service, approval["id"], "approve", keys["lead"], "mine")
    assert own.status_code == 403 and own.json()["error"]["code"] == "four_eyes", own.text
    assert client.dbsize() == 5

    service.kill_api()  # the service restarts while the task waits
    service.start_api()
    assert service.task(task_id)["status"] == "waiting_approval"
    again = _pending(service, task_id, keys["approver"])
    assert again["id"] == approval["id"]  # the same request, not a second one
    time.sleep(6)  # a few scans of the restarted runner: the task keeps waiting, nothing is written
    assert client.dbsize() == 5 and service.task(task_id)["status"] == "waiting_approval"

    assert _decide(service, approval["id"], "approve", keys["approver"], "sessions are stale").status_code == 200
    task = service.wait_task(task_id, timeout=90)
    assert task["status"] == "succeeded", task
    assert client.dbsize() == 0
    runs = [r for r in task["node_runs"] if r["node_id"] == "wipe"]
    assert [r["status"] for r in runs] == ["succeeded"], runs
    closed = _decide(service, approval["id"], "reject", keys["approver"], "too late")
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "approval_closed"


def test_a_rejected_write_is_skipped_and_the_answer_says_why(
    service: Service, target: RedisServer, keys: dict[str, dict[str, str]]
) -> None:
    client = redis.Redis.from_url(target.url)
    before = client.config_get("timeout")["timeout"]
    plan = {"nodes": [{"id": "tune", "tool": "redis_config_set", "args": {"parameter": "timeout", "value": "7"}}]}
    task_id = _submit(service, keys["operator"], "set the redis idle timeout", plan=plan)
    approval = _pending(service, task_id, keys["approver"])
    # the approver works from the CLI: lists what waits, then rejects with a reason
    listed = _cli(service, keys["approver"], "approvals", "list")
    assert approval["id"] in listed and "would set timeout" in listed, listed
    said = _cli(service, keys["approver"], "approvals", "reject", approval["id"], "--reason", "not during the sale")
    assert "rejected by" in said and "not during the sale" in said, said
    task = service.wait_task(task_id, timeout=90)
    assert client.config_get("timeout")["timeout"] == before
    skipped = [r for r in task["node_runs"] if r["node_id"] == "tune"]
    assert [r["status"] for r in skipped] == ["skipped"], skipped
    assert "rejected" in skipped[0]["error"] and "not during the sale" in skipped[0]["error"]
    assert "not during the sale" in task["answer"]["text"], task["answer"]["text"]


def test_an_expired_request_skips_the_write(
    service: Service, target: RedisServer, keys: dict[str, dict[str, str]]
) -> None:
    client = redis.Redis.from_url(target.url)
    client.set("session:keep", "1")
    task_id = _submit(service, keys["operator"], "clear the sessions", plan=_wipe_plan())
    approval = _pending(service, task_id, keys["approver"])
    # time passes: the request's expiry is moved into the past in the service's own database
    with sqlite3.connect(service.workdir / "var" / "opsgraph.db") as db:
        db.execute("UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, approval["id"]))
    late = _decide(service, approval["id"], "approve", keys["approver"], "too late")
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_closed", late.text
    task = service.wait_task(task_id, timeout=90)
    assert client.exists("session:keep")
    skipped = [r for r in task["node_runs"] if r["node_id"] == "wipe"]
    assert [r["status"] for r in skipped] == ["skipped"] and "expired" in skipped[0]["error"], skipped
    assert service.get(f"/v1/approvals/{approval['id']}", headers=keys["approver"]).json()["status"] == "expired"
