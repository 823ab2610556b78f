"""HTTP endpoints: status, latency, TLS expiry. Only hosts listed in settings.http_targets are called."""

from __future__ import annotations

import socket
import ssl
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding


class HttpProbeArgs(ToolArgs):
    url: str = Field(min_length=8, max_length=2048, pattern=r"^https?://", description="http(s) URL to call.")
    timeout_s: float = Field(5.0, gt=0, le=60)
    expect_status: int | None = Field(None, ge=100, le=599, description="Status that counts as healthy.")
    slow_ms: float = Field(1000.0, gt=0, description="Latency above this is reported as slow.")


def host_allowed(url: str, allowed: list[str]) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return "*" in allowed or host in {a.lower() for a in allowed}


def _tls_days_left(host: str, port: int, timeout: float) -> float | None:
    ctx = ssl.create_default_context()
    with (
        socket.create_connection((host, port), timeout=timeout) as sock,
        ctx.wrap_socket(sock, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert()
    not_after = cert.get("notAfter") if cert else None
    if not not_after:
        return None
    expires = datetime.fromtimestamp(ssl.cert_time_to_seconds(str(not_after)), tz=UTC)
    return (expires - datetime.now(tz=UTC)).total_seconds() / 86400


@CATALOG.tool(args=HttpProbeArgs, timeout_s=70, cost_hint_s=0.5)
def http_probe(args: HttpProbeArgs, ctx: ToolContext) -> ToolResult:
    """Call an HTTP(S) endpoint once: status code, latency, and for https the days until its certificate expires."""
    if not host_allowed(args.url, ctx.settings.http_targets):
        return ToolResult(
            status=ToolStatus.ERROR,
            summary=f"{urlsplit(args.url).hostname} is not in OPSGRAPH_HTTP_TARGETS; add it to probe it",
            data={"url": args.url, "error_code": "target_not_allowed"},
        )
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=args.timeout_s, follow_redirects=False, verify=True) as client:
            resp = client.get(args.url, headers={"user-agent": "opsgraph-http-probe/0.1"})
    except httpx.HTTPError as exc:
        elapsed = (time.perf_counter() - started) * 1000
        msg = f"{args.url} unreachable after {elapsed:.0f} ms: {type(exc).__name__}: {exc}"
        return ToolResult(
            status=ToolStatus.SUCCESS,
            summary=msg,
            data={
                "url": args.url,
                "healthy": False,
                "error": str(exc),
                "findings": [finding("critical", msg)],
            },
            evidence=[msg],
        )
    latency_ms = (time.perf_counter() - started) * 1000
    healthy = resp.status_code == args.expect_status if args.expect_status else resp.status_code < 400
    findings = []
    if not healthy:
        findings.append(finding("critical", f"{args.url} answered {resp.status_code}"))
    elif latency_ms > args.slow_ms:
        findings.append(finding("warn", f"{args.url} slow: {latency_ms:.0f} ms"))
    else:
        findings.append(finding("ok", f"{args.url} answered {resp.status_code} in {latency_ms:.0f} ms"))
    tls_days: float | None = None
    parts = urlsplit(args.url)
    if parts.scheme == "https" and parts.hostname:
        try:
            tls_days = _tls_days_left(parts.hostname, parts.port or 443, args.timeout_s)
        except (OSError, ssl.SSLError) as exc:
            findings.append(finding("warn", f"TLS check failed: {exc}"))
        if tls_days is not None and tls_days < 14:
            findings.append(
                finding("critical" if tls_days < 3 else "warn", f"certificate expires in {tls_days:.1f} days")
            )
    summary = f"{args.url} -> {resp.status_code} in {latency_ms:.0f} ms" + (
        f", certificate {tls_days:.0f} days left" if tls_days is not None else ""
    )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "url": args.url,
            "status_code": resp.status_code,
            "latency_ms": round(latency_ms, 2),
            "healthy": healthy,
            "tls_days_left": tls_days,
            "body_bytes": len(resp.content),
            "findings": findings,
        },
        evidence=[f"GET {args.url}: HTTP {resp.status_code}, {latency_ms:.0f} ms, {len(resp.content)} bytes"],
    )
