"""Settings that reference a secret store the platform could not resolve (App Service Key Vault references): the
application starts with the literal reference, or nothing, in place of the secret, and fails wherever it uses it
(a connection string that does not parse, a key the other side refuses). A configuration error named after the
setting and the store, with the platform's own reason (AccessToKeyVaultDenied, SecretNotFound, VaultNotFound)."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import now_of, object_tags, records_with, ref_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_RESOLVED = {"resolved", "ok", "succeeded", "initialized"}


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"config/reference"})
def unresolved_secret_references(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("config/reference"):
        d = item.data
        status = str(d.get("status") or "")
        if not status or status.lower() in _RESOLVED:
            continue
        name, app, store = str(d.get("name")), d.get("app") or "the app", d.get("store") or "its secret store"
        reason = str(d.get("details") or "").strip()
        out.append(
            Finding(
                analyzer="unresolved_secret_references",
                domain=Domain.CHANGES,
                role="cause",
                code="secret_reference_unresolved",
                category=Category.CONFIGURATION_ERROR,
                title=f"setting {name} of {app} does not resolve: {status} ({store})",
                mechanism=(
                    f"{app}'s setting {name} references a secret in {store} ({d.get('reference')}) that the platform "
                    f"could not resolve: {status}" + (f" ('{reason[:160]}')" if reason else "") + "; the app runs "
                    "with the literal reference in its place and fails wherever it uses it."
                ),
                object=f"setting {name}",
                score=0.85,
                tags=[f"service:{app}", f"config:{name}", f"vault:{store}"],
                explains=["errors", "exception", "http_5xx", "crash_*", "db_connection_errors", "access_denied*"],
                evidence=[EvidenceRef(item=item.id, field="status", value=status)],
                actions=[
                    Action(
                        description=f"Which vault and identity {name} uses, and why it does not resolve",
                        command=f"az webapp config appsettings list -n {app} -g <resource-group> --query "
                        f"\"[?name=='{name}']\"",
                    ),
                    Action(
                        description=f"Point {name} at the right vault (mark it a deployment slot setting so a swap "
                        "does not carry it), or grant the app's identity get on the secret",
                        command=f"az webapp config appsettings set -n {app} -g <resource-group> --slot-settings "
                        f"{name}=<reference to the production vault>",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- the secrets backend sealed

# Vault answering 503 "Vault is sealed" to its clients (a vault-agent renewing leases, an app reading secrets): no
# secret can be read and no lease renewed until it is unsealed, so dynamic database credentials expire under their
# clients and logins start failing. For the clients a dependency that failed; a seal that ended is over.
_SEALED = re.compile(r"\bVault is sealed\b", re.I)
SEALED_MIN = 3
SEALED_QUIET_S = 900.0


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def secrets_backend_sealed(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    hits = [r for r in records_with(evidence, ("sealed", "Sealed")) if _SEALED.search(r.msg)]
    if len(hits) < SEALED_MIN:
        return []
    stamps = [r.ts for r in hits if r.ts is not None]
    first, last = (min(stamps), max(stamps)) if stamps else (None, None)
    if now is not None and last is not None and now - last > SEALED_QUIET_S:
        return []  # sealed, then unsealed: over
    clients = sorted({service_of(r.item) or r.item.object for r in hits})
    return [
        Finding(
            analyzer="secrets_backend_sealed",
            domain=Domain.NETWORK,
            role="cause",
            code="vault_sealed",
            category=Category.DEPENDENCY_FAILURE,
            title=f"Vault is sealed: {', '.join(clients[:3])} cannot read secrets or renew leases ({len(hits)}x)",
            mechanism=(
                f"Vault answers 'Vault is sealed' to {', '.join(clients[:3])} ({len(hits)}x {span_text(first, last)}): "
                "no secret can be read and no lease renewed until it is unsealed, so the dynamic credentials its "
                "clients hold expire and their logins to the databases those credentials open start failing."
            ),
            object="Vault (sealed)",
            score=0.85,
            ts=first,
            # the pods whose agents were refused: their applications' failed logins are its effect
            tags=list(
                dict.fromkeys(
                    [
                        *(f"service:{c}" for c in clients),
                        *(t for r in hits for t in object_tags(r.item)),
                        "upstream:vault",
                    ]
                )
            ),
            explains=[
                "access_denied",
                "auth_failed*",
                "credential*",
                "errors",
                "exception",
                "http_5xx",
                "app_pool_exhausted",
                "crash_*",
                "alert:*",
            ],
            evidence=[ref_of(hits[0]), ref_of(hits[-1])],
            actions=[
                Action(description="Vault's seal status", command="vault status"),
                Action(
                    description="Unseal it (with the unseal keys or the auto-unseal KMS)",
                    command="vault operator unseal",
                    kind="write",
                ),
            ],
        )
    ]
