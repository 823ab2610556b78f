"""The live PostgreSQL incident end to end: a real server, a session left idle in transaction after an UPDATE,
three writers waiting on its row lock; an operator asks why queries hang, and the answer is a Diagnosis that
names the blocking pid, the relation and "idle in transaction" (REST -> ops graph -> postgres_activity on a
real Celery worker -> evidence items -> analyzers -> reasoning)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness import RedisServer, Service
from tests.toolkit.pg_incident import LockIncident, lock_incident

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.environ.get("OPSGRAPH_TEST_POSTGRES_URL"),
        reason="OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)",
    ),
]


@pytest.fixture(scope="module")
def incident() -> Iterator[LockIncident]:
    with lock_incident(os.environ["OPSGRAPH_TEST_POSTGRES_URL"], waiters=3) as live:
        yield live


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer, incident: LockIncident, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("live"), redis_server.url, "", OPSGRAPH_POSTGRES_DSNS=f'["{incident.url}"]')
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-live")
    yield svc
    svc.stop()


def test_why_queries_hang_names_the_idle_in_transaction_blocker(service: Service, incident: LockIncident) -> None:
    task = service.wait_task(service.submit("why are queries on the database hanging?"), timeout=120)
    assert task["status"] == "succeeded", task
    d = task["answer"]["diagnosis"]
    said = " ".join([d["root_cause"], *d["causal_chain"]])
    assert d["category"] == "code_defect", d  # an application left its transaction open
    assert str(incident.holder_pid) in said and incident.table in said and "idle in transaction" in said
    writes = [a for a in d["actions"] if a["kind"] == "write"]
    assert writes and writes[0]["tool"] == "postgres_terminate_session"
    assert writes[0]["args"]["pid"] == incident.holder_pid
    assert d["root_cause"] in task["answer"]["text"]
    print(task["answer"]["text"])  # what the operator reads (pytest -s shows it)
