"""Settings that reference a secret store the platform could not resolve (App Service Key Vault references): the
application starts with the literal reference, or nothing, in place of the secret, and fails wherever it uses it
(a connection string that does not parse, a key the other side refuses). A configuration error named after the
setting and the store, with the platform's own reason (AccessToKeyVaultDenied, SecretNotFound, VaultNotFound)."""

from __future__ import annotations

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
