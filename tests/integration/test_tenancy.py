"""Adversarial tenancy over every route of the live OpenAPI document, on a real API, worker, Redis and database.

(a) Every route but /healthz and /readyz answers 401 without a credential (and with a forged one): a route added
    without an auth dependency fails here.
(b) With two tenants' keys, every route with a path id owned by tenant A answers 404 to tenant B (an admin of B
    included: acting for its own tenant, it sees none of A's things), and every list shows B none of A's things.
    Global, admin-only routes (policies, tuning, keys, audit) are listed in GLOBAL: non-admins get 403 there.
    A new route with a path id must either be tenant-checked or be added to GLOBAL deliberately.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import RedisServer, Service, wait_until

pytestmark = pytest.mark.integration

PUBLIC = {"/healthz", "/readyz"}
# routes about the whole service, not a tenant's things: admin-only, by design
GLOBAL = re.compile(r"^/v1/(policies|tuning|keys|audit)(/|$)")
# the marker every thing of tenant A carries; B must never see it
MARK = "alpha7f3"
# minimal valid bodies and queries, so a refusal is about tenancy, not validation
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/tasks"): {"goal": "is redis ok"},
    ("post", "/v1/tasks/{task_id}/feedback"): {"helpful": False},
    ("post", "/v1/memory/facts"): {"subject": "beta-svc", "predicate": "depends_on", "object": "x"},
    ("post", "/v1/schedules"): {"name": "beta-sched", "cron": "0 3 * * *", "task": {"goal": "is redis ok"}},
    ("put", "/v1/policies"): {"policy": {}, "reason": "tenancy test"},
    ("post", "/v1/keys"): {"tenant": "beta", "scopes": ["read"]},
    ("post", "/v1/approvals/{approval_id}/approve"): {"reason": "tenancy test"},
    ("post", "/v1/approvals/{approval_id}/reject"): {"reason": "tenancy test"},
    ("post", "/v1/tasks/{task_id}/remediate"): {},
}
LIST_QUERIES: dict[str, list[dict[str, str]]] = {
    "/v1/memory/search": [{"q": f"is redis ok {MARK}", "layer": layer} for layer in ("semantic", "episodic", "cache")],
    "/v1/memory/facts": [{"subject": f"{MARK}-svc"}],
    "/v1/telemetry/summary": [{"window": "3600"}],
}


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("tenancy"), redis_server.url, database_url)
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-a")
    yield svc
    svc.stop()


def operations(service: Service) -> list[tuple[str, str]]:
    doc = service.get("/openapi.json").json()
    return [(method, path) for path, item in doc["paths"].items() for method in item if method != "parameters"]


def fill(path: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "1"), path)


def call(service: Service, method: str, path: str, key: str | None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method.upper(), service.base + path, headers=headers, timeout=30, **kw)


def test_every_route_but_health_refuses_a_caller_without_a_valid_credential(service: Service) -> None:
    ops = operations(service)
    forged = "og_0123456789abcdef_" + "A" * 43
    checked = 0
    for method, path in ops:
        if path in PUBLIC:
            assert call(service, method, path, None).status_code in (200, 503)
            continue
        url = fill(path, {})
        for key in (None, forged):
            r = call(service, method, url, key, json=BODIES.get((method, path)))
            assert r.status_code == 401, (method, path, key is not None, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] == "unauthenticated" and r.headers["www-authenticate"]
        checked += 1
    # routes kept out of the document are covered too
    assert call(service, "get", "/metrics", None).status_code == 401
    print(f"\nanonymous and forged credentials: {checked} operations of {len(ops)} refused with 401 (+ /metrics)")
    assert checked >= 30 and checked == len(ops) - len(PUBLIC)


def test_tenant_b_sees_and_touches_none_of_tenant_as_things(service: Service) -> None:
    a_admin = service.create_key("alpha", ["admin"], name="alpha admin")
    a_user = service.create_key("alpha", ["read", "operate", "approve"], name="alpha user")
    b_user = service.create_key("beta", ["read", "operate", "approve"], name="beta user")
    b_admin = service.create_key("beta", ["admin"], name="beta admin")
    a_key_id = a_user.split("_")[1]

    # tenant A's things: a finished task (episode, cache entries, telemetry), a fact, a schedule
    r = call(service, "post", "/v1/tasks", a_user, json={"goal": f"is redis ok {MARK}"})
    assert r.status_code == 202, r.text
    task_id = r.json()["id"]
    wait_until(
        lambda: call(service, "get", f"/v1/tasks/{task_id}", a_user).json()["status"] in ("succeeded", "failed"),
        120,
        "tenant A's task",
        interval=0.5,
    )
    fact = {"subject": f"{MARK}-svc", "predicate": "depends_on", "object": f"{MARK}-db"}
    assert call(service, "post", "/v1/memory/facts", a_user, json=fact).status_code == 201
    sched = {"name": f"{MARK}-sched", "cron": "0 4 * * *", "task": {"goal": f"report {MARK}"}}
    assert call(service, "post", "/v1/schedules", a_admin, json=sched).status_code == 201
    run = call(service, "post", "/v1/tuning/run", a_admin).json()["id"]
    # a write waiting for A's approval (the test toolkit's write tool touches nothing real)
    write_plan = {"nodes": [{"id": "w", "tool": "chaos_restart", "args": {"service": f"{MARK}-svc"}}]}
    r = call(service, "post", "/v1/tasks", a_user, json={"goal": f"restart {MARK}-svc", "plan": write_plan})
    assert r.status_code == 202, r.text
    gated = r.json()["id"]
    approval_id = wait_until(
        lambda: [
            a["id"]
            for a in call(service, "get", "/v1/approvals", a_user, params={"task_id": gated}).json()["approvals"]
        ],
        60,
        "tenant A's approval request",
        interval=0.25,
    )[0]
    ids = {
        "task_id": task_id,
        "name": f"{MARK}-sched",
        "version": "1",
        "run_id": run,
        "key_id": a_key_id,
        "approval_id": approval_id,
    }
    a_secrets = [task_id, MARK]

    cache_query = {"q": f"is redis ok {MARK}", "layer": "cache"}
    a_cached = {
        e["id"] for e in call(service, "get", "/v1/memory/search", a_user, params=cache_query).json()["results"]
    }

    # telemetry summaries are per tenant: B has run nothing yet
    summary_a = call(service, "get", "/v1/telemetry/summary", a_user).json()
    summary_b = call(service, "get", "/v1/telemetry/summary", b_user).json()
    assert summary_a["tasks"]["count"] == 1 and summary_b["tasks"]["count"] == 0

    ops = operations(service)
    owned, lists, writes, global_ops = 0, 0, 0, 0
    for method, path in ops:
        if path in PUBLIC:
            continue
        body = BODIES.get((method, path))
        if GLOBAL.match(path):
            global_ops += 1
            r = call(service, method, fill(path, ids), b_user, json=body)
            assert r.status_code == 403, (method, path, r.status_code, r.text[:200])
            continue
        if "{" in path:
            owned += 1
            url = fill(path, ids)
            if method == "get":  # A itself reaches it: the id is real
                with httpx.stream("GET", service.base + url, headers={"Authorization": f"Bearer {a_admin}",
                                  "X-Opsgraph-Tenant": "alpha"}, timeout=30) as mine:  # fmt: skip
                    assert mine.status_code == 200, (path, mine.status_code)
            for key in (b_user, b_admin):
                r = call(service, method, url, key, json=body)
                allowed = (404,) if key == b_admin else (403, 404)  # a missing scope may answer first
                assert r.status_code in allowed, (method, path, r.status_code, r.text[:200])
                if r.status_code == 404:  # the same answer as for an id that never existed
                    assert r.json()["error"]["code"] == "not_found"
                    assert "tenant" not in r.text and "alpha" not in r.text.replace(MARK, "")
            continue
        if method != "get":  # a write without a path id acts on B's own tenant, never on A's
            writes += 1
            for key in (b_user, b_admin):
                r = call(service, method, path, key, json=body)
                assert r.status_code < 500 and r.status_code != 422, (method, path, r.status_code, r.text[:200])
            continue
        if method == "get":
            lists += 1
            for params in LIST_QUERIES.get(path, [{}]):
                for key in (b_user, b_admin):
                    r = call(service, method, path, key, params=params)
                    assert r.status_code in (200, 403), (path, params, r.status_code, r.text[:200])
                    for secret in a_secrets:
                        assert secret not in r.text, (path, params, secret)
    print(f"\ntenancy: {owned} operations with a path id refused to tenant B (404), {lists} lists show B nothing "
          f"of A, {writes} writes act on B's tenant only, {global_ops} global operations admin-only "
          "(403 to B's user key)")  # fmt: skip
    assert owned >= 7 and lists >= 6

    # A still has everything B tried to touch, and its lists show it (the checks above could not pass vacuously)
    assert call(service, "get", f"/v1/tasks/{task_id}", a_user).json()["status"] != "cancelled"
    after = {e["id"] for e in call(service, "get", "/v1/memory/search", a_user, params=cache_query).json()["results"]}
    assert a_cached and after == a_cached  # B's DELETE /v1/cache left A's entries alone
    assert task_id in call(service, "get", "/v1/tasks", a_user).text
    assert f"{MARK}-sched" in call(service, "get", "/v1/schedules", a_admin).text
    assert f"{MARK}-db" in call(service, "get", "/v1/memory/facts", a_user, params={"subject": f"{MARK}-svc"}).text
    # a non-admin cannot name another tenant; an admin can, explicitly
    named = {"Authorization": f"Bearer {b_user}", "X-Opsgraph-Tenant": "alpha"}
    assert httpx.get(f"{service.base}/v1/tasks/{task_id}", headers=named, timeout=30).status_code == 403
    assert call(service, "post", "/v1/tasks", b_user, json={"goal": "x", "tenant": "alpha"}).status_code == 403
    acting = {"Authorization": f"Bearer {b_admin}", "X-Opsgraph-Tenant": "alpha"}
    assert httpx.get(f"{service.base}/v1/tasks/{task_id}", headers=acting, timeout=30).status_code == 200
