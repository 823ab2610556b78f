"""HTTP probes of the targets and access logs' 5xx share."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    DNS_NXDOMAIN,
    DNS_TEMPORARY,
    TLS_EXPIRED,
    Rec,
    service_of,
    span_text,
)
from diagnosis.analyzers.network._shared import (
    HTTP_5XX_MIN,
    HTTP_5XX_SHARE,
    STOPPED_AFTER_S,
    TLS_WARN_DAYS,
    _base,
    _refs,
    burst_over,
)
from diagnosis.analyzers.network.extraction import _ACCESS_STATUS, _call_failure
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding


def _probe_findings(evidence: EvidenceSet) -> list[Finding]:
    out = []
    for probe in evidence.kind("http/probe"):
        d = probe.data
        url = str(d.get("url") or probe.object)
        host = re.sub(r"^[a-z]+://", "", url).split("/")[0]
        days = d.get("tls_days_left")
        err = str(d.get("error") or "")
        status = d.get("status")
        tags = [f"upstream:{_base(host)}", f"service:{_base(host)}"]
        if (isinstance(days, int | float) and days <= 0) or TLS_EXPIRED.search(err):
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="tls_certificate_expired",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"TLS certificate of {host} expired",
                    mechanism=(
                        f"the certificate served by {host} has expired (tls_days_left {days}); clients that verify "
                        "it fail."
                    ),
                    object=f"TLS certificate of {host}",
                    score=0.9,
                    ts=probe.ts,
                    tags=[f"tls:{_base(host)}", *tags],
                    explains=["errors", "http_5xx", "probe_failed"],
                    evidence=[
                        EvidenceRef(
                            item=probe.id,
                            field="tls_days_left" if days is not None else "error",
                            value=days if days is not None else err,
                        )
                    ],
                    actions=[
                        Action(
                            description="Confirm the dates",
                            command=(
                                f"openssl s_client -connect {host if ':' in host else host + ':443'} -servername "
                                f"{host.split(':')[0]} </dev/null 2>/dev/null | openssl x509 -noout -dates"
                            ),
                        )
                    ],
                )
            )
        elif isinstance(days, int | float) and days <= TLS_WARN_DAYS:
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="benign",
                    code="tls_expiring_soon",
                    category=Category.HEALTHY,
                    title=f"TLS certificate of {host} expires in {days:g} days",
                    mechanism=f"{host}'s certificate is still valid ({days:g} days left): not failing now, renew it soon.",  # noqa: E501 (an exact command or data line reads better whole)
                    object=f"TLS certificate of {host}",
                    score=0.3,
                    ts=probe.ts,
                    tags=[f"tls:{_base(host)}", *tags],
                    evidence=[EvidenceRef(item=probe.id, field="tls_days_left", value=days)],
                )
            )
        if err and not TLS_EXPIRED.search(err):
            kind = _call_failure(err) or ("dns" if DNS_NXDOMAIN.search(err) or DNS_TEMPORARY.search(err) else "error")
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="cause",
                    code={
                        "refused": "connection_refused",
                        "unreachable": "host_unreachable",
                        "timeout": "upstream_timeout",
                        "dns": "dns_name_not_found",
                    }.get(kind, "probe_failed"),
                    category={"dns": Category.CONFIGURATION_ERROR, "unreachable": Category.INFRASTRUCTURE}.get(
                        kind, Category.DEPENDENCY_FAILURE
                    ),
                    title=f"probe of {url} failed: {err[:80]}",
                    mechanism=f"a probe of {url} failed: {err[:200]}.",
                    object=f"endpoint {url}",
                    score=0.7,
                    ts=probe.ts,
                    tags=tags,
                    explains=["errors", "http_5xx", "latency"],
                    evidence=[EvidenceRef(item=probe.id, field="error", value=err[:300])],
                    actions=[
                        Action(description="Probe it again, verbosely", command=f"curl -sv -m 10 -o /dev/null {url}")
                    ],
                )
            )
        elif isinstance(status, int) and status >= 500:
            out.append(
                Finding(
                    analyzer="network_failures",
                    domain=Domain.NETWORK,
                    role="symptom",
                    code="http_5xx",
                    category=Category.DEPENDENCY_FAILURE,
                    title=f"{url} answers {status}",
                    mechanism=f"{url} answered HTTP {status} to a probe.",
                    object=f"endpoint {url}",
                    score=0.5,
                    ts=probe.ts,
                    tags=tags,
                    evidence=[EvidenceRef(item=probe.id, field="status", value=status)],
                )
            )
    return out


def _access_log_5xx(evidence: EvidenceSet, now: float | None) -> list[Finding]:
    """5xx answers in access logs (nginx/envoy/ALB lines with a status): a symptom of the service behind."""
    out = []
    for item in evidence.kind("log"):
        total = 0
        bad: list[Rec] = []
        statuses: dict[str, int] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "HTTP/" not in msg and "status" not in msg and "code" not in msg:
                continue
            m = _ACCESS_STATUS.search(msg)
            if not m or _call_failure(msg) is not None:
                continue  # (a client's line about a call it made is no answer of its own)
            code = next(g for g in m.groups() if g)
            total += 1
            if code.startswith("5"):
                bad.append(Rec(item, r.get("ts"), msg, r.get("line"), None))
                statuses[code] = statuses.get(code, 0) + 1
        if len(bad) < HTTP_5XX_MIN or len(bad) < HTTP_5XX_SHARE * total:
            continue
        svc = service_of(item) or item.object
        last = max((r.ts for r in bad if r.ts is not None), default=None)
        if now is not None and last is not None and now - last >= STOPPED_AFTER_S:
            continue
        if burst_over(bad):
            continue  # a burst that ended while the log went on (a restart's few seconds of 502s)
        listing = ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items()))
        out.append(
            Finding(
                analyzer="network_failures",
                domain=Domain.NETWORK,
                role="symptom",
                code="http_5xx",
                category=Category.DEPENDENCY_FAILURE,
                title=f"{svc}: {len(bad)} of {total} requests answered 5xx",
                mechanism=(
                    f"{svc} answered {len(bad)} of {total} requests with 5xx ({listing}) {span_text(bad[0].ts, last)}."
                ),
                object=svc,
                score=min(0.8, 0.3 + len(bad) / total),
                ts=bad[0].ts,
                tags=[f"service:{svc}"],
                evidence=_refs(bad),
            )
        )
    return out
