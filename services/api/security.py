"""Browser-facing defences: a Host allowlist (a DNS-rebinding page reaches 127.0.0.1 under its own name, and is
refused) and security headers on every answer. Credentials travel only in the Authorization header, which a
page on another origin cannot make a browser send without a CORS preflight, and opsgraph answers no CORS."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.errors import error_body

SECURITY_HEADERS = [
    # API answers are data, never a document: nothing in them may run or be framed (the console sets its own)
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


# FastAPI's /docs and /redoc pages load their script from a CDN and start it inline; they hold no data (calls
# made from them need a key pasted into them), so they get a policy that allows just that, and are never framed
DOCS_CSP = (
    b"default-src 'none'; script-src 'unsafe-inline' https://cdn.jsdelivr.net; "
    b"style-src 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
    b"img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly; font-src https://fonts.gstatic.com; "
    b"connect-src 'self'; worker-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DOCS_PATHS = {"/docs", "/redoc", "/docs/oauth2-redirect"}


def console_csp(html: str) -> str:
    """The console's own policy: its inline script allowed by hash (so an injected script would not run), its
    inline styles, fetches to its own origin only, never framed."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
        for m in re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    )
    return (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def host_name(header: str) -> str:
    """The host of a Host header, without its port: 'example.com:8000' -> 'example.com', '[::1]:8000' -> '::1'."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class BrowserDefenceMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: set[str]) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.allowed = {host_name(h) for h in allowed_hosts if h != "*"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if not self.any_host and host_name(host) not in self.allowed:
            await self._refuse(send, host)
            return

        docs = scope.get("path") in DOCS_PATHS

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                if docs and b"content-security-policy" not in present:
                    message["headers"] = [*message.get("headers", []), (b"content-security-policy", DOCS_CSP)]
                    present.add(b"content-security-policy")
                message["headers"] = [
                    *message.get("headers", []),
                    *[(k, v) for k, v in SECURITY_HEADERS if k not in present],
                ]
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _refuse(self, send: Send, host: str) -> None:
        message = f"Host {host[:100]!r} is not served here; add it to OPSGRAPH_ALLOWED_HOSTS if it is yours"
        body = json.dumps(error_body("host_not_allowed", message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": [*headers, *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": body})
