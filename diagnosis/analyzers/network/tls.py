"""TLS: certificates that expired or do not verify, ours (renewal failing) or a third party's."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    span_text,
)
from diagnosis.analyzers.network._shared import Failures, _base, _host, _refs, _stopped, _stopped_finding
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


def _tls_findings(tls: dict[str, Failures], now: float | None, evidence: EvidenceSet) -> list[Finding]:
    out = []
    for host, f in tls.items():
        if _stopped(f, now):
            out.append(_stopped_finding(f, "tls_error_stopped", f"TLS to {host}"))
            continue
        callers = ", ".join(sorted(f.callers)) or "clients"
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
