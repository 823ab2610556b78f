"""Load balancers: every backend of a pool failing the balancer's own health probe leaves the pool empty, and the
balancer answers 502/503 for all of it. Why the probe fails decides the category:

- `lb_probe_path_missing` (configuration_error): the probe gets 404 (or another 4xx): the path or host it asks for
  does not exist on the application, which serves its real traffic fine; the probe configuration is wrong.
- `lb_backends_unhealthy` (symptom): a 5xx, a timeout or a refused connection: the application (or what its health
  endpoint checks) is failing; its own evidence says why.
"""

from __future__ import annotations

from collections import defaultdict

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

_EFFECTS = ["http_5xx", "errors", "latency", "upstream_5xx", "upstream_timeout", "connection_refused", "metric_shift"]


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"lb/target"})
def balancer_backends(evidence: EvidenceSet) -> list[Finding]:
    pools: dict[tuple[str, str], list[EvidenceItem]] = defaultdict(list)
    for t in evidence.kind("lb/target"):
        pools[(str(t.data.get("balancer")), str(t.data.get("pool")))].append(t)
    out: list[Finding] = []
    for (balancer, pool), targets in pools.items():
        bad = [t for t in targets if t.data.get("health") not in ("healthy", "up", "")]
        if not bad or len(bad) < len(targets):
            continue  # some backends still serve: the pool is not empty
        codes = {t.data.get("probe_status") for t in bad}
        refs = [EvidenceRef(item=t.id, field="reason", value=str(t.data.get("reason"))[:300]) for t in bad[:3]]
        refs += [EvidenceRef(item=bad[0].id, field="health", value=bad[0].data.get("health"))]
        names = ", ".join(str(t.data.get("target")) for t in bad[:4])
        tags = [f"service:{pool}", f"upstream:{pool}", f"lb:{balancer}"]
        if len(codes) == 1 and isinstance(code := next(iter(codes)), int) and 400 <= code < 500:
            out.append(
                Finding(
                    analyzer="balancer_backends",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="lb_probe_path_missing",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"{balancer}: health probe of pool {pool} gets {code}, every backend marked unhealthy",
                    mechanism=(
                        f"{balancer}'s health probe of backend pool {pool} gets HTTP {code} from every backend "
                        f"({names}): the path or host the probe asks for does not exist on the application, so the "
                        "balancer marks them all unhealthy and answers 502 for the pool although the backends serve. "
                        "The probe's configuration is wrong (its path, host header or expected codes)."
                    ),
                    object=f"health probe of {balancer}/{pool}",
                    score=0.85,
                    tags=tags,
                    explains=_EFFECTS,
                    evidence=refs,
                    actions=[
                        Action(
                            description="Compare the probe's path with what the application serves",
                            command="az network application-gateway probe list -g <rg> --gateway-name "
                            f"{balancer} -o table   # or: aws elbv2 describe-target-groups",
                        )
                    ],
                )
            )
            continue
        out.append(
            Finding(
                analyzer="balancer_backends",
                domain=Domain.NETWORK,
                role="symptom",
                code="lb_backends_unhealthy",
                category=Category.UNKNOWN,
                title=f"{balancer}: every backend of pool {pool} unhealthy",
                mechanism=f"{balancer} marks every backend of pool {pool} unhealthy ({names}: "
                f"{str(bad[0].data.get('reason'))[:160]}), so it has nowhere to send the pool's requests.",
                object=f"pool {balancer}/{pool}",
                score=0.6,
                tags=tags,
                evidence=refs,
                needs=[f"the health endpoint and logs of the backends of {pool}"],
            )
        )
    return out
