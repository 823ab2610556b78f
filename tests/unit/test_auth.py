"""Authentication and authorisation on the real dependencies, error handlers and middleware, in-process: API keys
on a real SQLite store, OIDC tokens from a local issuer serving its JWKS over HTTP, the Host allowlist and
headers, the acting tenant, the audit log, the first-run key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from core.apikeys import KeyBook, parse_key, write_secret_file
from core.audit import query
from core.db import ApiKeyRow, Store
from core.errors import UserError
from core.settings import Settings
from services.api.auth import Authenticator, Principal
from services.api.deps import Admin, Operator, Reader, Tenant, audit
from services.api.errors import install_error_handlers
from services.api.security import BrowserDefenceMiddleware, console_csp, host_name
from services.launcher import ensure_admin_key
from tests.toolkit.oidc_issuer import LocalIssuer


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(var_dir=tmp_path / "var", database_url="", _env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def store(settings: Settings) -> Store:
    return Store.from_settings(settings)


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    server = LocalIssuer()
    yield server
    server.stop()


def make_app(settings: Settings, store: Store) -> FastAPI:
    """The product's auth pieces on a small app (the full app also starts the orchestrator and its pools)."""
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(BrowserDefenceMiddleware, allowed_hosts=settings.host_allowlist)
    app.state.authenticator = Authenticator(settings, KeyBook(store))
    app.state.ctx = SimpleNamespace(store=store, settings=settings)

    @app.get("/read")
    def read(p: Reader, tenant: Tenant) -> dict[str, Any]:
        return {"id": p.id, "tenant": tenant, "scopes": sorted(p.scopes), "via": p.via}

    @app.post("/operate")
    def operate(_: Operator) -> dict[str, Any]:
        return {"ok": True}

    @app.put("/admin")
    def admin(p: Admin, request: Request) -> dict[str, Any]:
        audit(request, p, "policy.put", target="7", details={"reason": "test"})
        return {"ok": True, "seen": request.state.principal.id}

    return app


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# keys


def test_a_key_is_shown_once_and_only_its_hash_is_kept(store: Store) -> None:
    book = KeyBook(store)
    issued = book.create("acme", ["read", "operate"], name="ci")
    key_id, secret = parse_key(issued.token)  # type: ignore[misc]
    assert key_id == issued.row.id and len(secret) >= 40
    with store.session() as s:
        row = s.get(ApiKeyRow, key_id)
        assert row is not None and secret not in row.secret_sha256 and len(row.secret_sha256) == 64
    assert book.verify(issued.token) is not None
    assert book.verify(issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")) is None  # wrong secret
    assert book.verify(f"og_{'0' * 16}_{secret}") is None  # unknown id
    assert book.verify("og_nonsense") is None and book.verify("") is None


def test_keys_refuse_bad_scopes_and_tenants(store: Store) -> None:
    book = KeyBook(store)
    with pytest.raises(UserError, match="scopes"):
        book.create("acme", ["root"])
    with pytest.raises(UserError, match="scopes"):
        book.create("acme", [])
    with pytest.raises(UserError, match="tenant"):
        book.create("a b", ["read"])


def test_a_revoked_key_is_refused_at_once_and_an_expired_one_after_its_time(store: Store) -> None:
    book = KeyBook(store)
    issued = book.create("acme", ["read"])
    assert book.verify(issued.token) is not None
    book.revoke(issued.row.id)
    assert book.verify(issued.token) is None
    short = book.create("acme", ["read"], expires_in_s=60)
    assert book.verify(short.token) is not None
    assert book.verify(short.token, now=time.time() + 61) is None


def test_scopes_imply_what_the_table_says() -> None:
    def p(*scopes: str) -> Principal:
        return Principal("k", "n", "t", frozenset(scopes))

    assert p("admin").allows("read") and p("admin").allows("operate") and p("admin").allows("approve")
    assert p("operate").allows("read") and not p("operate").allows("admin") and not p("operate").allows("approve")
    assert p("approve").allows("read") and not p("approve").allows("operate")
    assert p("read").allows("read") and not p("read").allows("operate")


# the API's dependencies


def test_no_or_a_bad_credential_is_401_with_a_challenge(settings: Settings, store: Store) -> None:
    client = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    for headers in ({}, {"Authorization": "Basic dXNlcjpwYXNz"}, bearer("og_0123456789abcdef_" + "x" * 43)):
        r = client.get("/read", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["www-authenticate"].startswith("Bearer")
    # a key in a cookie or the query string is not a credential
    issued = KeyBook(store).create("acme", ["read"])
    assert client.get(f"/read?access_token={issued.token}").status_code == 401
    client.cookies.set("token", issued.token)
    assert client.get("/read").status_code == 401


def test_a_read_key_cannot_operate_and_an_operate_key_cannot_administer(settings: Settings, store: Store) -> None:
    client = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    book = KeyBook(store)
    reader = book.create("acme", ["read"]).token
    operator = book.create("acme", ["operate"]).token
    admin = book.create("ops", ["admin"], name="root key").token
    assert client.get("/read", headers=bearer(reader)).json()["tenant"] == "acme"
    r = client.post("/operate", headers=bearer(reader))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert client.post("/operate", headers=bearer(operator)).status_code == 200
    assert client.put("/admin", headers=bearer(operator)).status_code == 403
    r = client.put("/admin", headers=bearer(admin))
    assert r.status_code == 200 and r.json()["seen"] == parse_key(admin)[0]  # type: ignore[index]
    (entry,) = query(store, action="policy.put")
    assert (entry.actor_name, entry.tenant, entry.target, entry.client) == ("root key", "ops", "7", "testclient")
    assert entry.details == {"reason": "test"}


def test_only_an_admin_may_act_for_another_tenant(settings: Settings, store: Store) -> None:
    client = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    book = KeyBook(store)
    reader = book.create("acme", ["read", "operate"]).token
    admin = book.create("ops", ["admin"]).token
    assert client.get("/read", headers=bearer(admin)).json()["tenant"] == "ops"
    assert client.get("/read", headers={**bearer(admin), "X-Opsgraph-Tenant": "acme"}).json()["tenant"] == "acme"
    assert client.get("/read?tenant=acme", headers=bearer(admin)).json()["tenant"] == "acme"
    assert client.get("/read?tenant=acme", headers=bearer(reader)).json()["tenant"] == "acme"  # its own
    r = client.get("/read", headers={**bearer(reader), "X-Opsgraph-Tenant": "ops"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert client.get("/read?tenant=ops", headers=bearer(reader)).status_code == 403


def test_a_key_revoked_while_in_use_is_refused_on_its_next_request(settings: Settings, store: Store) -> None:
    client = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    issued = KeyBook(store).create("acme", ["read"])
    assert client.get("/read", headers=bearer(issued.token)).status_code == 200
    KeyBook(store).revoke(issued.row.id)
    assert client.get("/read", headers=bearer(issued.token)).status_code == 401


def test_a_foreign_host_is_refused_and_every_answer_has_the_security_headers(settings: Settings, store: Store) -> None:
    client = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    r = client.get("/read", headers={"Host": "evil.example:8000"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "host_not_allowed"
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost"):
        r = client.get("/read", headers={"Host": host})
        assert r.status_code == 401, host  # past the Host check, refused for want of a credential
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert "access-control-allow-origin" not in r.headers
    # FastAPI's docs page may load its script from its CDN, and is still never framed
    docs = client.get("/docs")
    assert docs.status_code == 200 and "https://cdn.jsdelivr.net" in docs.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in docs.headers["content-security-policy"]
    # no CORS: a preflight from a web page gets no permission
    r = client.options("/read", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers


def test_host_names_and_the_console_policy() -> None:
    assert host_name("Example.com:8000") == "example.com" and host_name("[::1]:80") == "::1"
    assert host_name("::1") == "::1" and host_name("127.0.0.1") == "127.0.0.1"
    csp = console_csp("<p>x</p><script>alert(1)</script>")
    assert "'sha256-" in csp and "unsafe-inline" not in csp.split("style-src")[0]


# OIDC


def oidc_settings(settings: Settings, issuer: LocalIssuer) -> Settings:
    return settings.model_copy(
        update={"oidc_issuer": issuer.issuer, "oidc_audience": issuer.audience, "oidc_jwks_url": issuer.jwks_url}
    )


def test_an_oidc_token_from_the_issuer_carries_its_tenant_and_scopes(
    settings: Settings, store: Store, issuer: LocalIssuer
) -> None:
    client = TestClient(make_app(oidc_settings(settings, issuer), store), base_url="http://127.0.0.1:8000")
    token = issuer.token(tenant="acme", scope="openid read operate", sub="ana")
    r = client.get("/read", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json() == {"id": "oidc:ana", "tenant": "acme", "scopes": ["operate", "read"], "via": "oidc"}
    assert client.post("/operate", headers=bearer(token)).status_code == 200
    assert client.put("/admin", headers=bearer(token)).status_code == 403
    listed = issuer.token(tenant="acme", scope=["read"])  # a list claim works too
    assert client.get("/read", headers=bearer(listed)).status_code == 200


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"lifetime_s": -120}, "expired"),
        ({"aud": "another-service"}, "audience"),
        ({"iss": "https://issuer.example"}, "issuer"),
        ({"tenant": None}, "tenant"),  # no tenant claim
    ],
)
def test_an_oidc_token_that_is_expired_for_another_audience_or_issuer_is_refused(
    settings: Settings, store: Store, issuer: LocalIssuer, claims: dict[str, Any], why: str
) -> None:
    client = TestClient(make_app(oidc_settings(settings, issuer), store), base_url="http://127.0.0.1:8000")
    base = {"tenant": "acme", "scope": "read"}
    r = client.get("/read", headers=bearer(issuer.token(**{**base, **claims})))
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert why in r.json()["error"]["message"].lower()


def test_an_oidc_token_signed_by_another_key_or_without_scopes_is_refused(
    settings: Settings, store: Store, issuer: LocalIssuer
) -> None:
    client = TestClient(make_app(oidc_settings(settings, issuer), store), base_url="http://127.0.0.1:8000")
    forged = issuer.token(
        tenant="acme", scope="admin", key=rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    assert client.get("/read", headers=bearer(forged)).status_code == 401
    r = client.get("/read", headers=bearer(issuer.token(tenant="acme", scope="openid profile")))
    assert r.status_code == 403
    # without OIDC configured a JWT is not a credential at all
    plain = TestClient(make_app(settings, store), base_url="http://127.0.0.1:8000")
    assert plain.get("/read", headers=bearer(issuer.token(tenant="acme", scope="read"))).status_code == 401


# first run


def test_the_first_run_admin_key_is_kept_0600_and_reused_until_it_is_revoked(settings: Settings) -> None:
    said: list[str] = []
    first = ensure_admin_key(settings, said.append)
    path = settings.admin_key_file
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip() == first
    assert said and "first run" in said[0] and first not in said[0]  # the key is printed in the URL, not here
    assert ensure_admin_key(settings, said.append) == first and len(said) == 1
    book = KeyBook(Store.from_settings(settings))
    row = book.verify(first)
    assert row is not None and row.scopes == ["admin"] and row.tenant == "default"
    book.revoke(row.id)
    second = ensure_admin_key(settings, said.append)
    assert second != first and "no longer valid" in said[-1]


def test_secret_files_are_written_0600_even_over_an_open_file(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text("old")
    path.chmod(0o644)
    write_secret_file(path, "og_x")
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text() == "og_x\n"
