"""Limits and the fuzz findings of issue 12, on the live API: rate limits with Retry-After, caps (schedules,
queued tuning runs, open event streams), bounded reads, and bad input that once broke the API."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration

WRITES_PER_MINUTE = 40
READS_PER_MINUTE = 80


@pytest.fixture(scope="module")
def service(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # the API alone: tasks stay queued (no worker), which keeps their event streams open
    svc = Service(
        tmp_path_factory.mktemp("limits"),
        redis_server.url,
        OPSGRAPH_RATE_LIMIT_WRITES=f"{WRITES_PER_MINUTE}/minute",
        OPSGRAPH_RATE_LIMIT_READS=f"{READS_PER_MINUTE}/minute",
        OPSGRAPH_MAX_SCHEDULES_PER_TENANT="3",
        OPSGRAPH_MAX_QUEUED_TUNING_RUNS="2",
        OPSGRAPH_MAX_EVENT_STREAMS_PER_KEY="2",
        OPSGRAPH_TELEMETRY_SUMMARY_MAX_WINDOW_S="86400",
        OPSGRAPH_TUNER_TRIALS="1",
        OPSGRAPH_TUNER_SEEDS="2",
    )
    svc.redis.flushdb()
    svc.start_api()
    yield svc
    svc.stop()


def _code(resp: httpx.Response) -> str:
    return str(resp.json()["error"]["code"])


async def _burst(base: str, method: str, path: str, n: int, headers: dict[str, str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        return list(await asyncio.gather(*(client.request(method, path, headers=headers, json={}) for _ in range(n))))


def test_a_burst_over_the_write_limit_gets_429_with_retry_after_and_reads_go_on(service: Service) -> None:
    # a key of its own (a bucket of its own); before authentication, so it works with or without it
    key = {"Authorization": f"Bearer burst-{uuid.uuid4().hex}"}
    answers = asyncio.run(_burst(service.base, "POST", "/v1/tasks", WRITES_PER_MINUTE + 20, key))
    limited = [r for r in answers if r.status_code == 429]
    assert len(answers) - len(limited) == WRITES_PER_MINUTE
    assert len(limited) == 20
    for r in limited:
        assert _code(r) == "rate_limited"
        assert 1 <= int(r.headers["Retry-After"]) <= 60
    # reads are a budget of their own
    assert service.get("/v1/tools", headers=key).status_code != 429
    # another key is not affected
    other = {"Authorization": f"Bearer other-{uuid.uuid4().hex}"}
    assert service.post("/v1/tasks", json={}, headers=other).status_code != 429


def test_probes_are_never_limited(service: Service) -> None:
    key = {"Authorization": f"Bearer probe-{uuid.uuid4().hex}"}
    answers = asyncio.run(_burst(service.base, "GET", "/healthz", READS_PER_MINUTE + 10, key))
    assert {r.status_code for r in answers} == {200}


def test_a_chunked_body_over_the_limit_gets_413(service: Service) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"goal": "'
        for _ in range(64):
            yield b"x" * 16_384
        yield b'"}'

    resp = service.post("/v1/tasks", content=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and _code(resp) == "body_too_large"


def test_a_body_that_is_not_utf8_gets_400_invalid_json(service: Service) -> None:
    resp = service.post("/v1/tasks", content=b'{"goal": "\xff\xfe"}', headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and _code(resp) == "invalid_json"


@pytest.mark.parametrize(
    "body",
    [
        {"goal": "check", "inputs": {"n": 2**64}},
        {"goal": "check", "inputs": {"deep": [{"n": -(2**63) - 1}]}},
        {"goal": "check", "plan": {"nodes": [{"id": "a", "tool": "disk_usage", "args": {"n": 2**70}}]}},
    ],
)
def test_an_integer_over_64_bits_is_refused_at_validation(service: Service, body: dict) -> None:
    resp = service.post("/v1/tasks", json=body)
    assert resp.status_code == 422 and _code(resp) == "invalid_request", resp.text
    assert "64-bit" in resp.json()["error"]["message"]


def test_event_resume_points_past_any_sequence_are_refused_before_the_stream(service: Service) -> None:
    task_id = service.submit("check disk usage")
    for params, headers in [
        ({"after": str(2**64)}, {}),
        ({"after": str(2**63)}, {}),
        ({}, {"Last-Event-ID": str(2**64)}),
        ({}, {"Last-Event-ID": "²".encode("latin-1")}),  # str.isdigit() says yes; int() says no
    ]:
        resp = service.get(f"/v1/tasks/{task_id}/events", params=params, headers=headers)
        assert resp.status_code == 422, (params, headers, resp.status_code)
        assert resp.headers["content-type"].startswith("application/json")


def test_open_event_streams_are_capped_per_key(service: Service) -> None:
    task_id = service.submit("check disk usage")
    url = f"{service.base}/v1/tasks/{task_id}/events"
    with httpx.Client(timeout=30, headers=service.headers_for(task_id)) as client:
        with client.stream("GET", url) as first, client.stream("GET", url) as second:
            assert first.status_code == second.status_code == 200
            third = client.get(url)
            assert third.status_code == 429 and _code(third) == "too_many_streams"
            assert int(third.headers["Retry-After"]) >= 1

        # both closed: their slots are free again as soon as the API notices the disconnects
        def reopened() -> bool:
            with client.stream("GET", url) as again:
                return again.status_code == 200

        wait_until(reopened, 10, "a stream slot to be freed", interval=0.2)


def test_schedules_are_capped(service: Service) -> None:
    made = []
    for i in range(4):
        body = {"name": f"cap-{i}", "cron": "0 3 * * *", "task": {"goal": "nightly disk report"}}
        made.append(service.post("/v1/schedules", json=body))
    assert [r.status_code for r in made[:3]] == [201, 201, 201]
    assert made[3].status_code == 409 and _code(made[3]) == "schedule_limit"
    assert service.client_delete("/v1/schedules/cap-0").status_code == 204
    again = service.post("/v1/schedules", json={"name": "cap-9", "cron": "0 3 * * *", "task": {"goal": "x"}})
    assert again.status_code == 201


def test_a_bad_cron_is_422_invalid_request_even_at_the_cap(service: Service) -> None:
    resp = service.post("/v1/schedules", json={"name": "bad", "cron": "61 * * * * *", "task": {"goal": "x"}})
    assert resp.status_code == 422 and _code(resp) == "invalid_request"


def test_queued_tuning_runs_are_capped(service: Service) -> None:
    """A concurrent burst: the runner drains the queue meanwhile, so how many are refused varies (the cap
    itself is tested deterministically in tests/unit/test_limits.py); what may not vary is the answer."""
    answers = asyncio.run(_burst(service.base, "POST", "/v1/tuning/run", 12, service.headers))
    assert {r.status_code for r in answers} <= {202, 429}
    for r in answers:
        if r.status_code == 429:
            assert _code(r) == "tuning_queue_full" and int(r.headers["Retry-After"]) >= 1
    queued = [r for r in service.get("/v1/tuning/runs").json()["runs"] if r["status"] == "queued"]
    assert len(queued) <= 2


def test_the_summary_window_is_bounded(service: Service) -> None:
    assert service.get("/v1/telemetry/summary", params={"window": 3600}).status_code == 200
    resp = service.get("/v1/telemetry/summary", params={"window": 2 * 86_400})
    assert resp.status_code == 422 and _code(resp) == "invalid_request"


def test_metrics_carry_http_and_process_metrics(service: Service) -> None:
    service.get("/v1/tools")
    text = service.get("/metrics").text
    assert 'opsgraph_http_requests_total{method="GET",route="/v1/tools",status="200"}' in text
    assert "opsgraph_http_request_duration_seconds_bucket" in text
    assert 'route="/v1/tasks/{task_id}/events"' in text  # templates, never raw ids
    assert "process_resident_memory_bytes" in text
    assert "opsgraph_policy_version" in text


def test_every_refusal_is_documented(service: Service) -> None:
    doc = service.get("/openapi.json").json()
    ops = doc["paths"]
    assert {"409", "429"} <= set(ops["/v1/schedules"]["post"]["responses"])
    assert "429" in ops["/v1/tuning/run"]["post"]["responses"]
    assert {"404", "422", "429"} <= set(ops["/v1/tasks/{task_id}/events"]["get"]["responses"])
    assert {"400", "413", "422", "429"} <= set(ops["/v1/tasks"]["post"]["responses"])
