"""Who may do what, on a real API process: scopes, revocation at once, OIDC tokens from a local issuer the test
starts, the Host allowlist and headers, and the CLI's keys and its one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import ROOT, RedisServer, Service
from tests.toolkit.oidc_issuer import LocalIssuer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    server = LocalIssuer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer, database_url: str, issuer: LocalIssuer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("auth"), redis_server.url, database_url, **issuer.env())
    svc.redis.flushdb()
    svc.start_api()
    yield svc
    svc.stop()


def cli(service: Service, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env={**service.env, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_read_key_cannot_submit_and_an_operate_key_cannot_change_policy(service: Service) -> None:
    reader = service.bearer(service.create_key("acme", ["read"]))
    operator = service.bearer(service.create_key("acme", ["operate"]))
    r = service.post("/v1/tasks", json={"goal": "is redis ok"}, headers=reader)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert service.get("/v1/tasks", headers=reader).status_code == 200
    assert service.post("/v1/tasks", json={"goal": "is redis ok"}, headers=operator).status_code == 202
    r = service.client_put("/v1/policies", json={"policy": {}, "reason": "mine now"}, headers=operator)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert service.post("/v1/policies/rollback/1", headers=operator).status_code == 403
    assert service.post("/v1/tuning/run", headers=operator).status_code == 403
    assert service.client_delete("/v1/cache", headers=operator).status_code == 403
    assert service.get("/v1/audit", headers=operator).status_code == 403
    assert service.get("/v1/keys", headers=operator).status_code == 403
    assert service.get("/metrics", headers=operator).status_code == 403
    assert service.get("/metrics").status_code == 200  # the harness's admin


def test_a_revoked_key_is_refused_at_once_over_rest_and_from_the_cli(service: Service) -> None:
    created = service.post("/v1/keys", json={"tenant": "acme", "scopes": ["read"], "name": "to revoke"}).json()
    key = service.bearer(created["token"])
    assert service.get("/v1/tasks", headers=key).status_code == 200
    assert service.post(f"/v1/keys/{created['id']}/revoke").json()["state"] == "revoked"
    r = service.get("/v1/tasks", headers=key)
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthenticated")
    # the keys CLI works on the database directly: the running API refuses the key on its next request
    token = service.cli_create_key("acme", ["read"], name="cli made")
    assert service.get("/v1/tasks", headers=service.bearer(token)).status_code == 200
    key_id = token.split("_")[1]
    listed = cli(service, "keys", "list")
    assert key_id in listed.stdout and token.split("_", 2)[2] not in listed.stdout  # never the secret
    assert cli(service, "keys", "revoke", key_id).returncode == 0
    assert service.get("/v1/tasks", headers=service.bearer(token)).status_code == 401
    # both revocations are in the audit log, without the key
    entries = service.get("/v1/audit", params={"action": "key.revoke"}).json()["entries"]
    assert {e["target"] for e in entries} >= {created["id"], key_id}
    assert {e["actor"]["via"] for e in entries} == {"key", "cli"}
    assert token not in service.get("/v1/audit").text and created["token"] not in service.get("/v1/audit").text


def test_the_cli_sends_its_key_and_says_in_one_line_when_it_has_none_or_it_is_refused(service: Service) -> None:
    done = cli(service, "status", "nope", OPSGRAPH_API_KEY=service.admin_key)
    assert done.returncode == 1 and done.stderr.strip() == "error: not_found: no task with id 'nope'"
    missing = cli(service, "status", "x")  # no OPSGRAPH_API_KEY, no key file in this var dir
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "no API key" in missing.stderr
    refused = cli(service, "status", "x", OPSGRAPH_API_KEY="og_0123456789abcdef_" + "A" * 43)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "refused the key" in refused.stderr
    bad = cli(service, "keys", "create", "--tenant", "acme", "--scope", "root")
    assert bad.returncode == 1 and "scopes must be among" in bad.stderr
    login = cli(service, "login", service.admin_key)
    assert login.returncode == 0, login.stderr
    key_file = service.workdir / "var" / "cli.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert cli(service, "status", "x").stderr.strip() == "error: not_found: no task with id 'x'"


def test_an_oidc_token_is_a_credential_and_an_expired_one_is_refused(service: Service, issuer: LocalIssuer) -> None:
    token = issuer.token(tenant="acme", scope="read operate", sub="ana")
    r = service.post("/v1/tasks", json={"goal": "is redis ok"}, headers=service.bearer(token))
    assert r.status_code == 202, r.text
    task = service.get(f"/v1/tasks/{r.json()['id']}", headers=service.bearer(token)).json()
    assert task["tenant"] == "acme"
    expired = issuer.token(tenant="acme", scope="read", lifetime_s=-120)
    r = service.get("/v1/tasks", headers=service.bearer(expired))
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthenticated") and "expired" in r.text
    other_aud = issuer.token(tenant="acme", scope="read", aud="someone-else")
    assert service.get("/v1/tasks", headers=service.bearer(other_aud)).status_code == 401
    other_iss = issuer.token(tenant="acme", scope="read", iss="https://login.example")
    assert service.get("/v1/tasks", headers=service.bearer(other_iss)).status_code == 401


def test_a_foreign_host_is_refused_and_the_console_and_api_send_security_headers(service: Service) -> None:
    r = httpx.get(f"{service.base}/v1/tasks", headers={**service.headers, "Host": "rebind.attacker.example"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "host_not_allowed")
    assert httpx.get(f"{service.base}/healthz", headers={"Host": "rebind.attacker.example"}).status_code == 400
    page = httpx.get(f"{service.base}/")
    assert page.status_code == 200 and "#token=" in page.text  # the page reads its token from the fragment
    assert "'sha256-" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
    api = service.get("/v1/tasks")
    assert api.headers["x-content-type-options"] == "nosniff" and "set-cookie" not in api.headers
    assert "access-control-allow-origin" not in api.headers
    preflight = httpx.options(
        f"{service.base}/v1/tasks",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
