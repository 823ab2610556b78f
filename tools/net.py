"""HTTP endpoints: status, latency, TLS expiry. Only targets listed in settings.http_targets are called.

A call is checked where it lands, not where its name says: the host name is resolved, each address is checked
against the targets (names, IPs, CIDRs, each optionally with a port) and against the link-local and cloud
metadata ranges, and the connection is pinned to the address that passed (no second lookup an attacker's DNS
could answer differently). Redirects are reported, never followed. The body is streamed and capped.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from pydantic import Field

from core.logging import redact
from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never called unless an IP or CIDR entry in the targets names them: instance metadata services hand out
# cloud credentials to whoever asks from the machine.
FORBIDDEN_NETWORKS: list[IPNetwork] = [
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # IPv4 link-local: AWS/GCP/Azure/OpenStack metadata at 169.254.169.254
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::254/128",  # AWS metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "168.63.129.16/32",  # Azure wire server
    )
]


class HttpProbeArgs(ToolArgs):
    url: str = Field(min_length=8, max_length=2048, pattern=r"^https?://", description="http(s) URL to call.")
    timeout_s: float = Field(5.0, gt=0, le=60)
    expect_status: int | None = Field(None, ge=100, le=599, description="Status that counts as healthy.")
    slow_ms: float = Field(1000.0, gt=0, description="Latency above this is reported as slow.")


@dataclass(frozen=True)
class Target:
    """One entry of OPSGRAPH_HTTP_TARGETS: a host name, or an IP network, with an optional port."""

    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None
    wildcard: bool = False

    @classmethod
    def parse(cls, entry: str) -> Target:
        entry = entry.strip().lower()
        if entry == "*":
            return cls(wildcard=True)
        try:
            return cls(network=ipaddress.ip_network(entry, strict=False))
        except ValueError:
            pass
        host, port = entry, None
        if entry.startswith("["):  # [v6]:port
            host, _, rest = entry[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
        elif entry.count(":") == 1:
            head, _, tail = entry.partition(":")
            if tail.isdigit():
                host, port = head, int(tail)
        try:
            return cls(network=ipaddress.ip_network(host, strict=False), port=port)
        except ValueError:
            return cls(name=host.rstrip("."), port=port)

    def covers_port(self, port: int) -> bool:
        return self.port is None or self.port == port


class TargetRefused(Exception):
    """Why a URL may not be called."""


@dataclass(frozen=True)
class CheckedTarget:
    host: str
    port: int
    address: str  # the address the connection is pinned to


def _normalise(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [_normalise(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"{host} does not resolve: {exc}") from None
    seen: list[IPAddress] = []
    for info in infos:
        addr = _normalise(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
        if addr not in seen:
            seen.append(addr)
    return seen


def check_target(host: str, port: int, allowed: list[str]) -> CheckedTarget:
    """The address to connect to for host:port, if the targets allow it; else TargetRefused saying why."""
    host = host.lower().rstrip(".")
    targets = [Target.parse(a) for a in allowed]
    by_name = any(t.wildcard or (t.name == host and t.covers_port(port)) for t in targets)
    reasons = []
    for addr in _resolve(host, port):
        explicit = [
            t for t in targets if t.network is not None and addr in t.network and t.covers_port(port)
        ]  # an IP or CIDR entry names this address
        if any(addr in net for net in FORBIDDEN_NETWORKS) and not any(t.network.prefixlen > 0 for t in explicit):  # type: ignore[union-attr]
            reasons.append(f"{addr} is link-local or a cloud metadata address (allow it with an IP entry)")
            continue
        if by_name or explicit:
            return CheckedTarget(host=host, port=port, address=str(addr))
        reasons.append(f"{host}:{port} ({addr}) is not in OPSGRAPH_HTTP_TARGETS")
    raise TargetRefused("; ".join(reasons) or f"{host} has no address")


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def check_url(url: str, allowed: list[str]) -> CheckedTarget:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused(f"{redact(url)} is not an http(s) URL with a host")
    try:
        port = parts.port or _default_port(parts.scheme)
    except ValueError:
        raise TargetRefused(f"{redact(url)} has an invalid port") from None
    return check_target(parts.hostname, port, allowed)


def host_allowed(url: str, allowed: list[str]) -> bool:
    try:
        check_url(url, allowed)
    except TargetRefused:
        return False
    return True


def _pinned(url: str, target: CheckedTarget) -> tuple[str, str]:
    """The URL with its host replaced by the checked address (credentials dropped), and the Host header."""
    parts = urlsplit(url)
    ip = ipaddress.ip_address(target.address)
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    default = target.port == _default_port(parts.scheme)
    host_header = parts.hostname or target.host
    if ":" in host_header:
        host_header = f"[{host_header}]"
    if not default:
        host_header += f":{target.port}"
    netloc = f"{literal}:{target.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), host_header


def _days_left(not_after: datetime) -> float:
    return (not_after - datetime.now(tz=UTC)).total_seconds() / 86400


def _tls_days_from_response(resp: httpx.Response) -> float | None:
    stream = resp.extensions.get("network_stream")
    ssl_object = stream.get_extra_info("ssl_object") if stream is not None else None
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    not_after = cert.get("notAfter") if cert else None
    if not not_after:
        return None
    return _days_left(datetime.fromtimestamp(ssl.cert_time_to_seconds(str(not_after)), tz=UTC))


def _tls_days_unverified(target: CheckedTarget, sni: str, timeout: float) -> float | None:
    """Days left on a certificate the verified handshake refused (expired, wrong name): read it without trust."""
    try:
        from cryptography import x509
    except ImportError:  # the days stay unknown; the refusal itself is reported
        return None
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((target.address, target.port), timeout=timeout) as sock,
        ctx.wrap_socket(sock, server_hostname=sni) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if not der:
        return None
    return _days_left(x509.load_der_x509_certificate(der).not_valid_after_utc)


@CATALOG.tool(args=HttpProbeArgs, timeout_s=70, cost_hint_s=0.5)
def http_probe(args: HttpProbeArgs, ctx: ToolContext) -> ToolResult:
    """Call an HTTP(S) endpoint once: status code, latency, and for https the days until its certificate expires."""
    shown = redact(args.url)
    try:
        target = check_url(args.url, ctx.settings.http_targets)
    except TargetRefused as exc:
        return ToolResult(
            status=ToolStatus.ERROR,
            summary=f"refused {shown}: {exc}; add it to OPSGRAPH_HTTP_TARGETS to probe it",
            data={"url": shown, "error_code": "target_not_allowed"},
        )
    pinned, host_header = _pinned(args.url, target)
    https = urlsplit(args.url).scheme == "https"
    cap = ctx.settings.http_max_body_bytes
    started = time.perf_counter()
    tls_days: float | None = None
    body_bytes = 0
    truncated = False
    try:
        # trust_env=False: a proxy from the environment would connect somewhere other than the checked address
        with (
            httpx.Client(timeout=args.timeout_s, follow_redirects=False, verify=True, trust_env=False) as client,
            client.stream(
                "GET",
                pinned,
                headers={"host": host_header, "user-agent": "opsgraph-http-probe/0.2"},
                extensions={"sni_hostname": target.host} if https else {},
            ) as resp,
        ):
            if https:
                tls_days = _tls_days_from_response(resp)
            for chunk in resp.iter_raw():
                body_bytes += len(chunk)
                if body_bytes >= cap:  # stop reading: what is left of the body is never fetched
                    truncated, body_bytes = True, min(body_bytes, cap)
                    break
    except httpx.HTTPError as exc:
        elapsed = (time.perf_counter() - started) * 1000
        error = redact(f"{type(exc).__name__}: {exc}")
        msg = f"{shown} unreachable after {elapsed:.0f} ms: {error}"
        data: dict[str, Any] = {"url": shown, "address": target.address, "healthy": False, "error": error}
        findings = [finding("critical", msg)]
        if https and "CERTIFICATE_VERIFY_FAILED" in str(exc):
            try:
                tls_days = _tls_days_unverified(target, target.host, args.timeout_s)
            except (OSError, ssl.SSLError, ValueError):
                tls_days = None
            if tls_days is not None:
                data["tls_days_left"] = round(tls_days, 2)
                if tls_days < 0:
                    findings.append(
                        finding("critical", f"certificate of {target.host} expired {-tls_days:.1f} days ago")
                    )
                elif tls_days < 14:
                    findings.append(finding("warn", f"certificate of {target.host} expires in {tls_days:.1f} days"))
        data["findings"] = findings
        return ToolResult(status=ToolStatus.SUCCESS, summary=msg, data=data, evidence=[msg])
    latency_ms = (time.perf_counter() - started) * 1000
    status_code = resp.status_code
    healthy = status_code == args.expect_status if args.expect_status else status_code < 400
    redirect: dict[str, Any] | None = None
    findings = []
    if resp.is_redirect and "location" in resp.headers:
        location = urljoin(args.url, resp.headers["location"])
        redirect = {"location": redact(location), "allowed": host_allowed(location, ctx.settings.http_targets)}
        if not redirect["allowed"]:
            findings.append(finding("warn", f"{shown} redirects to {redirect['location']}, outside the targets"))
    if not healthy:
        findings.append(finding("critical", f"{shown} answered {status_code}"))
    elif latency_ms > args.slow_ms:
        findings.append(finding("warn", f"{shown} slow: {latency_ms:.0f} ms"))
    else:
        findings.append(finding("ok", f"{shown} answered {status_code} in {latency_ms:.0f} ms"))
    if tls_days is not None and tls_days < 14:
        findings.append(finding("critical" if tls_days < 3 else "warn", f"certificate expires in {tls_days:.1f} days"))
    summary = f"{shown} -> {status_code} in {latency_ms:.0f} ms" + (
        f", certificate {tls_days:.0f} days left" if tls_days is not None else ""
    )
    return ToolResult(
        status=ToolStatus.SUCCESS,
        summary=summary,
        data={
            "url": shown,
            "address": target.address,
            "status_code": status_code,
            "latency_ms": round(latency_ms, 2),
            "healthy": healthy,
            "tls_days_left": None if tls_days is None else round(tls_days, 2),
            "body_bytes": body_bytes,
            "body_truncated": truncated,
            "redirect": redirect,
            "findings": findings,
        },
        evidence=[f"GET {shown}: HTTP {status_code}, {latency_ms:.0f} ms, {body_bytes} bytes read"],
    )
