"""Packets lost on the way to one target: ping runs that lose a share of their packets to it while reaching the
others from the same place without loss. The path to that target (its pod's network, its node's interface) is
the fault; its callers' deadlines and retransmits are the symptoms."""

from __future__ import annotations

from diagnosis.analyzers._common import workload_of_pod
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.network.extraction import _ip_owners
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

LOSS_PCT = 5.0  # a ping run losing at least this share of its packets is a lossy path (healthy paths lose 0)
CLEAN_PCT = 1.0  # a run losing at most this is a clean path
MIN_LOST = 2  # one packet lost in a short run (1 of 5) is noise, not a lossy path


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"net/ping"})
def packet_loss(evidence: EvidenceSet) -> list[Finding]:
    runs = evidence.kind("net/ping")
    if not runs:
        return []
    owners = _ip_owners(evidence)
    clean = [r for r in runs if float(r.data.get("loss_pct") or 0.0) <= CLEAN_PCT]
    out: list[Finding] = []
    for r in runs:
        d = r.data
        loss = float(d.get("loss_pct") or 0.0)
        if loss < LOSS_PCT or loss >= 100.0:
            continue  # 100% is unreachable (a firewall, a host down): not a lossy path
        lost = int(d.get("sent") or 0) - int(d.get("received") or 0)
        if 0 <= lost < MIN_LOST and d.get("sent"):
            continue
        target = str(d["target"])
        ns, pod, services = owners.get(target, ("", "", []))
        who = f"{target} (pod {ns}/{pod})" if pod else target
        names = [workload_of_pod(pod)] if pod else []
        tags = [f"upstream:{target}", f"instance:{target}", *(f"pod:{ns}/{pod}" for _ in [0] if pod)]
        tags += [t for n in [*names, *services] for t in (f"service:{n}", f"upstream:{n}")]
        others = sorted({str(c.data["target"]) for c in clean if c.data.get("target") != target})
        contrast = f"; from the same place {', '.join(others[:3])} answered every packet" if others else ""
        out.append(
            Finding(
                analyzer="packet_loss",
                domain=Domain.NETWORK,
                role="cause",
                code="packet_loss",
                category=Category.INFRASTRUCTURE,
                title=f"{loss:.0f}% packet loss to {who}",
                mechanism=(
                    f"ping to {who} lost {d.get('sent', 0) - d.get('received', 0)} of {d.get('sent')} packets "
                    f"({loss:.0f}% packet loss){contrast}: the network path to it drops packets, so calls to it "
                    "stall on TCP retransmits and run past their deadlines."
                ),
                object=f"network path to {who}",
                score=0.85 if others else 0.7,
                ts=r.ts,
                tags=tags,
                explains=[
                    "upstream_timeout",
                    "upstream_reset",
                    "latency",
                    "errors",
                    "http_5xx",
                    "exception",
                    "probe_*",
                    "alert:*",
                    "metric_shift",
                ],
                evidence=[EvidenceRef(item=r.id, field="loss_pct", value=loss)]
                + [EvidenceRef(item=c.id, field="loss_pct", value=c.data.get("loss_pct")) for c in clean[:1]],
                actions=[
                    Action(
                        description=f"Interface drops and errors where {target} lives",
                        command=(
                            f"kubectl exec -n {ns} {pod} -- cat /proc/net/dev" if pod else f"ssh {target} ip -s link"
                        ),
                    ),
                    Action(description="Where the loss starts on the path", command=f"mtr -rwc 100 {target}"),
                ],
            )
        )
    return out
