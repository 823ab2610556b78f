"""TLS: certificates that expired or do not verify, ours (renewal failing) or a third party's."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    span_text,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network._shared import (
    Failures,
    _base,
    _host,
    _refs,
    _stopped,
    _stopped_finding,
    steady_background,
)
from diagnosis.analyzers.network.dns import _CLUSTER_SUFFIXES
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_CERT_KINDS = {"Certificate", "CertificateRequest", "Order", "Challenge", "Ingress", "Secret", "Gateway"}


def _cert_is_ours(evidence: EvidenceSet, host: str) -> bool:
    """Whether the evidence shows we issue or serve this host's certificate: a cluster-internal name or an IP, or
    a cert-manager Certificate / Ingress / Secret (object or event) named after the host."""
    name = host.split(":")[0].lower()
    if not name or re.fullmatch(r"[\d.]+", name) or "." not in name or name.endswith(_CLUSTER_SUFFIXES):
        return True
    label = name.split(".")[0]
    for ev in evidence.kind("k8s/Event"):
        inv = ev.data.get("involved") or {}
        text = f"{inv.get('name', '')} {ev.data.get('message', '')}".lower()
        if inv.get("kind") in _CERT_KINDS and (name in text or (len(label) >= 3 and label in text)):
            return True
    kinds = {f"k8s/{k}" for k in _CERT_KINDS}
    return any(item.kind in kinds and name in str(item.data).lower() for item in evidence) or (
        _renewed_here(evidence, name) is not None
    )


# an ACME client's log naming the host (certbot's /etc/letsencrypt/live/<host>/, lego, acme.sh): we issue it
_ACME = ("letsencrypt", "certbot", "acme", "lego")
_RENEWED = re.compile(r"renewals? succeeded|\(success\)|Certificate renewed|Cert success", re.I)


def _renewed_here(evidence: EvidenceSet, name: str) -> tuple[bool, EvidenceRef] | None:
    """(renewed?, a reference) when an ACME client's log on our side names the host: the certificate is ours, and
    if it renewed it, the server that still presents the expired one was never reloaded."""
    first: EvidenceRef | None = None
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            low = msg.lower()
            if name not in low or not any(a in low for a in (*_ACME, "renew")):
                continue
            ref = EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200])
            if _RENEWED.search(msg):
                return True, ref
            first = first or ref
    return (False, first) if first else None


# a client that hard-fails revocation checking and cannot reach the CA's OCSP responder (or its CRL): Java's
# "Unable to determine revocation status due to network error", OpenSSL's and Go's OCSP fetch errors
_REVOCATION_UNREACHABLE = re.compile(
    r"Unable to determine revocation status(?: due to network error)?|OCSP (?:responder|request|response)[^\n]{0,60}"
    r"(?:timed? ?out|unreachable|unavailable|failed|error)|could not (?:fetch|retrieve|download) (?:the )?(?:OCSP|CRL)",
    re.I,
)
_OCSP_HOST = re.compile(r"\b((?:ocsp|crl)[\w\-]*\.[\w.\-]+\.[a-z]{2,})\b", re.I)


def _revocation_finding(f: Failures, host: str, callers: str, evidence: EvidenceSet) -> Finding:
    """TLS failing because the client cannot check the certificate's revocation: the CA's OCSP responder (or CRL
    host) is the failing dependency, the certificate and our settings unchanged."""
    responder = next(
        (m[1].lower() for item in evidence for m in [_OCSP_HOST.search(str(item.data)[:20000])] if m is not None),
        None,
    )
    who = responder or "the certificate authority's OCSP responder"
    return Finding(
        analyzer="network_failures",
        domain=Domain.NETWORK,
        role="cause",
        code="revocation_check_unreachable",
        category=Category.DEPENDENCY_FAILURE,
        title=f"TLS to {host}: revocation status cannot be checked ({who}), {len(f.recs)}x",
        mechanism=(
            f"{callers} cannot complete TLS with {host} because it cannot determine the certificate's revocation "
            f"status: {who} does not answer ({len(f.recs)}x {span_text(f.first, f.last)}); with revocation checking "
            "hard-failing, every handshake fails while the certificate itself is valid"
        ),
        object=who,
        score=0.85,
        ts=f.first,
        tags=[f"upstream:{_base(who)}", f"tls:{_base(host)}", *(f"service:{c}" for c in sorted(f.callers))],
        explains=["errors", "http_5xx", "latency", "tls_*"],
        evidence=_refs(f.recs),
        actions=[
            Action(
                description="Ask the OCSP responder directly",
                command=f"curl -sv -m 10 http://{responder or '<ocsp host>'}/",
            ),
            Action(
                description="Check the CA's status page; soft-fail revocation only as an approved exception",
                command="openssl s_client -connect <host>:443 -status </dev/null | grep -A3 'OCSP'",
            ),
        ],
    )


_CLIENT_PEER = re.compile(r"^(?:\d{1,3}\.){3}\d{1,3}:(\d{4,5})$")
EPHEMERAL_PORT = 10000  # a peer's source port this high is a client's, not a server's
PEER_FAILURES_MIN = 3
MANY_CLIENTS = 20  # this many client addresses failing their handshakes: the server's side fails them all


def _background(f: Failures, title: str, mechanism: str) -> Finding:
    """TLS failures that are not what broke now (a few clients' own, a steady trickle): benign, said why."""
    found = _stopped_finding(f, "tls_error_background", title)
    return found.model_copy(update={"title": title, "mechanism": mechanism})


def _tls_findings(tls: dict[str, Failures], now: float | None, evidence: EvidenceSet) -> list[Finding]:
    out = []
    # handshakes that fail with many different client addresses, each once or twice: devices' own clocks or
    # certificates (a server's certificate would fail every client, again and again)
    peers = sum(1 for h in tls if _CLIENT_PEER.match(h))
    for host, f in tls.items():
        peer = _CLIENT_PEER.match(host)
        if (
            peer
            and peers < MANY_CLIENTS  # (every client failing is the server's own certificate)
            and len(f.recs) < PEER_FAILURES_MIN
            and (int(peer.group(1)) >= EPHEMERAL_PORT or peers >= PEER_FAILURES_MIN)
        ):
            out.append(
                _background(
                    f,
                    f"TLS with client {host}: {len(f.recs)} failed handshake(s)",
                    f"one client connection ({host}) failed its TLS handshake {len(f.recs)}x: that client's "
                    "certificate, clock or trust store, not the server's.",
                )
            )
            continue
        if _stopped(f, now):
            out.append(_stopped_finding(f, "tls_error_stopped", f"TLS to {host}"))
            continue
        if steady_background(f):
            out.append(
                _background(
                    f,
                    f"TLS to {host}: a steady trickle of failures ({len(f.recs)}x)",
                    f"TLS to {host} fails {len(f.recs)}x {span_text(f.first, f.last)} at an even, low rate: a "
                    "long-standing failure the incident happens against, not what broke now.",
                )
            )
            continue
        callers = ", ".join(sorted(f.callers)) or "clients"
        revocation = next((r for r in f.recs if _REVOCATION_UNREACHABLE.search(r.msg)), None)
        if revocation is not None and len([r for r in f.recs if _REVOCATION_UNREACHABLE.search(r.msg)]) * 2 >= len(
            f.recs
        ):
            out.append(_revocation_finding(f, host, callers, evidence))
            continue
        expired = f.kind == "expired"
        # a provider's own certificate expiring is the provider failing; ours (or one we could fix) is our setting
        theirs = expired and host != "unknown host" and not _cert_is_ours(evidence, host)
        renewed = _renewed_here(evidence, host.split(":")[0].lower()) if expired and not theirs else None
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="cause",
                code="tls_certificate_expired" if expired else "tls_verification_failed",
                category=Category.DEPENDENCY_FAILURE if theirs else Category.CONFIGURATION_ERROR,
                title=f"TLS to {host}: certificate {'expired' if expired else 'does not verify'} ({len(f.recs)}x)",
                mechanism=(
                    f"{callers} cannot complete TLS with {host}: "
                    + (
                        "its certificate has expired"
                        if expired
                        else "its certificate does not verify (wrong CA, host name or self-signed)"
                    )
                    + f", {len(f.recs)}x {span_text(f.first, f.last)}"
                    + (
                        " - the certificate was renewed here, so the server still presenting the expired one was not "
                        "reloaded (no deploy hook)"
                        if expired and renewed and renewed[0]
                        else ""
                    )
                    + (
                        " - the provider's own certificate (an external host whose certificate nothing here issues "
                        "or serves): the dependency is failing, and the callers are right to refuse it."
                        if theirs
                        else "."
                    )
                ),
                object=f"TLS certificate of {host}",
                score=0.85,
                ts=f.first,
                tags=[f"tls:{_base(host)}", f"upstream:{_base(host)}", *(f"service:{c}" for c in sorted(f.callers))],
                explains=["errors", "http_5xx", "latency"],
                evidence=_refs(f.recs) + ([renewed[1]] if renewed else []),
                actions=[
                    Action(
                        description=f"Show the certificate {host} serves and its dates",
                        command=(
                            f"openssl s_client -connect {_host(host)}:443 -servername {_host(host)} </dev/null "
                            "2>/dev/null | openssl x509 -noout -subject -issuer -dates"
                        ),
                    ),
                    Action(
                        description="cert-manager certificates that are not ready",
                        command="kubectl get certificates -A | grep -v True",
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a chain without its intermediate

# `openssl s_client` against our server: the leaf alone, whose issuer it cannot find (20) and so cannot verify (21)
_LEAF_ONLY = re.compile(r"verify error:num=21:unable to verify the first certificate")
_S_CLIENT = re.compile(r"s_client\b.*?-connect\s+\[?(?P<host>[\w.\-]+)\]?(?::(?P<port>\d+))?")
# clients that do not fetch a missing intermediate themselves (Java, Go, curl, Python) say so
_CLIENT_CHAIN = re.compile(
    r"PKIX path building failed|unable to find valid certification path|unable to get local issuer certificate|"
    r"x509: certificate signed by unknown authority|CERTIFICATE_VERIFY_FAILED|unable to verify the first certificate",
    re.I,
)


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def incomplete_chain(evidence: EvidenceSet) -> list[Finding]:
    """Our server presenting its certificate without the intermediate that links it to a root: `openssl s_client`
    verifies only depth 0 and fails with 21 (unable to verify the first certificate). Browsers fetch the
    intermediate themselves (AIA), so the site looks fine while API clients (Java, Go, curl) fail verification: the
    server's certificate configuration (a cert.pem where fullchain.pem belongs), not the clients."""
    out: list[Finding] = []
    for item in evidence.kind("log"):
        command = str((item.data.get("source") or {}).get("command") or "")
        target = _S_CLIENT.search(command)
        leaf = next((r for r in item.data.get("records") or () if _LEAF_ONLY.search(str(r.get("msg") or ""))), None)
        if not target or leaf is None:
            continue
        host = target["host"].lower()
        clients = [
            (other, r)
            for other in evidence.kind("log")
            if other is not item
            for r in (other.data.get("records") or ())[:20000]
            if _CLIENT_CHAIN.search(str(r.get("msg") or ""))
        ]
        refs = [EvidenceRef(item=item.id, line=leaf.get("line"), value=str(leaf.get("msg")))]
        if clients:
            client, rec = clients[0]
            refs.append(EvidenceRef(item=client.id, line=rec.get("line"), value=str(rec.get("msg") or "")[:300]))
        seen = f"; {len(clients)} client failure(s) to verify it in the other evidence" if clients else ""
        out.append(
            Finding(
                analyzer="incomplete_chain",
                domain=Domain.NETWORK,
                role="cause",
                code="tls_incomplete_chain",
                category=Category.CONFIGURATION_ERROR,
                title=f"{host} serves its certificate without the intermediate",
                mechanism=(
                    f"{host} presents only its own certificate, without the intermediate that links it to a trusted "
                    f"root: openssl verifies depth 0 alone and fails ('{leaf.get('msg')}'){seen}. Browsers fetch the "
                    "intermediate themselves, so the site looks fine, while API clients (Java, Go, curl, Python) "
                    "reject it: the server is configured with the certificate instead of the full chain "
                    "(cert.pem where fullchain.pem belongs)."
                ),
                object=f"TLS certificate chain of {host}",
                score=0.85,
                tags=[f"host:{host}", f"tls:{host}", f"upstream:{host}", f"service:{host.split('.')[0]}"],
                explains=[
                    *("tls_*", "upstream_tls_failure", "errors", "exception", "metric_shift", "alert:*"),
                    *("http_5xx", "throughput_drop"),
                ],
                evidence=refs,
                actions=[
                    Action(
                        description=f"See the chain {host} sends (one certificate means the intermediate is missing)",
                        command=f"openssl s_client -connect {host}:{target['port'] or 443} -servername {host} "
                        "-showcerts </dev/null | grep -E '^ [0-9] s:'",
                    ),
                    Action(
                        description="Serve the full chain (leaf and intermediate) and reload the server",
                        command="# point ssl_certificate at fullchain.pem (not cert.pem); nginx -t && nginx -s reload",
                        kind="write",
                    ),
                ],
            )
        )
    return out
