"""cert-manager: a Certificate that cannot be issued or renewed, and why its ACME challenge fails.

- `certificate_not_renewed` (cause, configuration_error): a Certificate whose Ready condition is False (expired,
  failing) while its ACME Challenges cannot be presented or are refused (a DNS-01 solver whose API token cannot see
  the zone, an HTTP-01 path the ingress does not route, CAA records): the issuer's or solver's configuration is wrong,
  whatever the certificate authority's status. Without a failing challenge in the bundle, a Certificate that
  expired while its renewal keeps failing is still the cause, named with its failed attempts.
"""

from __future__ import annotations

from typing import Any

from diagnosis.analyzers._kube import meta, ref
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, Finding
from diagnosis.timeline import parse_ts


def _ready(item: EvidenceItem) -> dict[str, Any] | None:
    status = item.data.get("status") or {}
    return next((c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("type") == "Ready"), None)


@ANALYZERS.analyzer(domain=Domain.KUBERNETES, reads={"k8s/Certificate", "k8s/Challenge"})
def certificate_not_renewed(evidence: EvidenceSet) -> list[Finding]:
    challenges = list(evidence.kind("k8s/Challenge"))
    out: list[Finding] = []
    for cert in evidence.kind("k8s/Certificate"):
        ready = _ready(cert)
        if not ready or ready.get("status") != "False":
            continue
        md = meta(cert)
        ns, name = str(md.get("namespace") or ""), str(md.get("name") or "")
        status = cert.data.get("status") or {}
        failing = [
            c
            for c in challenges
            if str(meta(c).get("name") or "").startswith(f"{name}-")
            and str(meta(c).get("namespace") or ns) == ns
            and ((c.data.get("status") or {}).get("reason") or (c.data.get("status") or {}).get("state") == "invalid")
        ]
        attempts = status.get("failedIssuanceAttempts")
        if not failing and not attempts:
            continue
        why = str((failing[0].data.get("status") or {}).get("reason") or "") if failing else ""
        expired = str(ready.get("reason") or "") == "Expired"
        refs = [ref(cert, "status.conditions", f"Ready False: {ready.get('reason')} {ready.get('message') or ''}")]
        if failing:
            refs.append(ref(failing[0], "status.reason", why))
        dns = "dns-01" if "_acme-challenge" in why or "Zone" in why else ""
        out.append(
            Finding(
                analyzer="certificate_not_renewed",
                domain=Domain.KUBERNETES,
                role="cause",
                code="certificate_not_renewed",
                category=Category.CONFIGURATION_ERROR,
                title=f"Certificate {ns}/{name} {'expired and ' if expired else ''}cannot be renewed"
                + (f": its ACME challenge fails ({why[:100]})" if why else ""),
                mechanism=(
                    f"cert-manager cannot issue Certificate {ns}/{name} "
                    + (f"({ready.get('message')}) " if ready.get("message") else "")
                    + (
                        f"because its {dns.upper() + ' ' if dns else ''}ACME challenge cannot be completed: "
                        f"{why[:240]}; "
                        "the solver's configuration (its API token's zones and permissions, the DNS zone or the "
                        "HTTP route) is wrong, not the certificate authority"
                        if why
                        else f"after {attempts} failed issuance attempts"
                    )
                    + "."
                ),
                object=f"Certificate {ns}/{name}",
                score=0.85 if why else 0.65,
                ts=parse_ts(ready.get("lastTransitionTime")),
                tags=[
                    f"namespace:{ns}",
                    f"certificate:{name}",
                    f"secret:{ns}/{(cert.data.get('spec') or {}).get('secretName') or name}",
                ],
                explains=["tls_expired", "tls_invalid", "certificate_*", "alert:*", "http_5xx", "errors", "log_errors"],
                evidence=refs,
                actions=[
                    Action(description="Why the challenge fails", command=f"kubectl -n {ns} describe challenges"),
                    Action(
                        description="Check the solver's credentials and the issuer it uses",
                        command=f"kubectl -n {ns} get certificate {name} -o yaml; kubectl describe clusterissuer",
                    ),
                ],
            )
        )
    return out
