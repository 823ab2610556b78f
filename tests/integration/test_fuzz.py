"""Schemathesis over every operation of the live API's OpenAPI document, with a fixed seed and a bounded
budget: no server error, no broken event stream, every response as the document says (status, content type,
headers, body schema), and invalid input refused with a 4xx.

The figures (operations, cases, failures) are written to the test's log and to FUZZ_REPORT when that variable
names a file."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.harness import RedisServer, Service

pytestmark = pytest.mark.integration

SEED = 1212
EXAMPLES_PER_MODE = int(os.environ.get("OPSGRAPH_FUZZ_EXAMPLES", "20"))  # per operation, positive and negative
STREAM_READ_S = 1.5  # how long an open event stream is read before the client leaves
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EVENTS = ("GET", "/v1/tasks/{task_id}/events")


@pytest.fixture(scope="module")
def service(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # the API alone: fuzzed tasks stay queued and cost no worker time; tuning runs kept small and capped
    svc = Service(
        tmp_path_factory.mktemp("fuzz"),
        redis_server.url,
        OPSGRAPH_TUNER_TRIALS="1",
        OPSGRAPH_TUNER_SEEDS="2",
        OPSGRAPH_MAX_QUEUED_TUNING_RUNS="2",
        OPSGRAPH_MAX_EVENT_STREAMS_PER_KEY="4",
    )
    svc.redis.flushdb()
    svc.start_api()
    yield svc
    svc.stop()


def _read_stream(case: Case, base: str, headers: dict[str, str]) -> tuple[int, str | None]:
    """Call the event stream; if it opens (200), read it for a while as a browser would. Returns the status and
    a failure, if any: a stream that sent 200 and then broke, or a refusal not documented."""
    kwargs = case.as_transport_kwargs(base_url=base, headers=headers)
    resp = requests.request(**kwargs, stream=True, timeout=(5, STREAM_READ_S))
    try:
        if resp.status_code != 200:
            case.validate_response(resp, checks=CHECKS)
            return resp.status_code, None
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            return 200, f"a 200 stream with content type {resp.headers.get('content-type')!r}"
        started = time.monotonic()
        first = b""
        try:
            for chunk in resp.iter_content(chunk_size=None):
                first = first or chunk
                if time.monotonic() - started > STREAM_READ_S:
                    break
        except requests.exceptions.ConnectionError as exc:
            if "Read timed out" not in str(exc):  # quiet and open is fine; cut off is not
                return 200, f"stream broke after 200: {type(exc).__name__}: {exc}"
        except requests.exceptions.ChunkedEncodingError as exc:
            return 200, f"stream broke after 200: {exc}"
        if first and not first.startswith(b"retry:"):
            return 200, f"a stream that does not start with its retry hint: {first[:80]!r}"
        return 200, None
    finally:
        resp.close()


def test_every_operation_holds_under_fuzzing(service: Service) -> None:
    schema = schemathesis.openapi.from_url(f"{service.base}/openapi.json")
    real_task = service.submit("check disk usage on this machine")
    operations = [result.ok() for result in schema.get_all_operations()]
    cases: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    failures: list[dict[str, Any]] = []
    started = time.monotonic()

    def fuzz(operation: Any, mode: GenerationMode) -> None:
        label = f"{operation.method.upper()} {operation.path}"
        checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

        @seed(SEED)
        @settings(
            max_examples=EXAMPLES_PER_MODE,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],  # no shrinking: every failure is kept as met
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Case) -> None:
            cases[label] += 1
            try:
                if (operation.method.upper(), operation.path) == EVENTS:
                    if case.path_parameters and cases[label] % 2 == 0:
                        case.path_parameters["task_id"] = real_task  # every other case on a live stream
                    status, problem = _read_stream(case, service.base, service.headers)
                    statuses[status] += 1
                    if problem:
                        failures.append({"operation": label, "mode": mode.value, "failure": problem})
                    return
                response = case.call(base_url=service.base, headers=service.headers, timeout=30)
                statuses[response.status_code] += 1
                applied = checks
                if operation.path == "/readyz":
                    # no worker runs here: 503 with the readiness body is the documented answer, still checked
                    # against the document like any other
                    applied = [c for c in checks if c is not not_a_server_error]
                    if response.status_code >= 500:
                        statuses[response.status_code] -= 1
                        statuses[-response.status_code] += 1  # kept apart from server errors in the figures
                case.validate_response(response, checks=applied)
            except (Exception, BaseExceptionGroup) as exc:  # a failed check: recorded, fuzzing goes on
                failures.append(
                    {
                        "operation": label,
                        "mode": mode.value,
                        "failure": f"{type(exc).__name__}: {str(exc)[:600]}",
                        "curl": case.as_curl_command(),
                    }
                )

        try:
            run()
        except Unsatisfiable:  # nothing to make invalid (an operation without parameters): no negative cases
            assert mode is GenerationMode.NEGATIVE, label

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode)

    figures = {
        "seed": SEED,
        "operations": len(operations),
        "cases": sum(cases.values()),
        "failures": len(failures),
        "server_errors": sum(n for s, n in statuses.items() if s >= 500),
        "readyz_not_ready_503": statuses.pop(-503, 0),
        "statuses": {str(s): n for s, n in sorted(statuses.items())},
        "seconds": round(time.monotonic() - started, 1),
    }
    print("fuzz figures:", json.dumps(figures))
    if os.environ.get("FUZZ_REPORT"):
        with open(os.environ["FUZZ_REPORT"], "w") as f:
            json.dump({**figures, "failed": failures}, f, indent=2)
    assert len(operations) >= 25, "the document lost operations"
    assert all(cases[f"{o.method.upper()} {o.path}"] > 0 for o in operations)
    assert failures == [], json.dumps(failures[:10], indent=2)
    assert figures["server_errors"] == 0
