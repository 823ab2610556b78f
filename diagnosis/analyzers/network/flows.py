"""Connections a firewall rejects: VPC flow logs that REJECT some sources' connections to a destination port that
other sources reach (ACCEPT). The destination is up; a security group or network ACL leaves those sources out, so
their connections time out (a firewall drops, it does not refuse): the rule's configuration error, named after the
security group whose rules for that port do not cover the rejected sources when the bundle holds it."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts

MIN_REJECTED = 3  # rejected flow records from the left-out sources: one is a scanner's probe


def _covered(source: str, cidrs: list[str]) -> bool:
    try:
        addr = ipaddress.ip_address(source)
        return any(addr in ipaddress.ip_network(c, strict=False) for c in cidrs)
    except ValueError:
        return False


def _group_for(evidence: EvidenceSet, port: int, sources: list[str]) -> tuple[EvidenceItem, list[str]] | None:
    """The security group with rules for the port that admit none of the rejected sources: (group, its CIDRs)."""
    for sg in evidence.kind("aws/security-group"):
        rules = [
            r
            for r in sg.data.get("ingress") or ()
            if r.get("protocol") in ("-1", "tcp", "6")
            and (
                r.get("from") is None or int(r["from"]) <= port <= int(r.get("to") if r.get("to") is not None else port)
            )
        ]
        cidrs = [c for r in rules for c in r.get("cidrs") or ()]
        if rules and cidrs and not any(_covered(s, cidrs) for s in sources):
            return sg, cidrs
    return None


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"net/flows", "aws/security-group"})
def rejected_flows(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("net/flows"):
        flows: list[dict[str, Any]] = item.data.get("flows") or []
        by_target: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for f in flows:
            by_target[(f["dst"], f["dport"])][f["action"]].append(f)
        for (dst, port), actions in by_target.items():
            rejected, accepted = actions.get("REJECT", []), actions.get("ACCEPT", [])
            if not accepted or sum(f["records"] for f in rejected) < MIN_REJECTED:
                continue  # nothing reaches it (it may be down), or a stray probe
            left_out = sorted({f["src"] for f in rejected} - {f["src"] for f in accepted})
            if not left_out:
                continue
            first = min(f["first"] for f in rejected if f["src"] in left_out)
            reached = sorted({f["src"] for f in accepted})
            group = _group_for(evidence, port, left_out)
            rule = (
                f"security group {group[0].data.get('name')} admits port {port} only from {', '.join(group[1])}"
                if group
                else "a security group or network ACL on the way leaves them out"
            )
            refs = [EvidenceRef(item=item.id, field="flows", value=f"REJECT {left_out[0]} -> {dst}:{port}")]
            if group:
                refs.append(EvidenceRef(item=group[0].id, field="ingress", value=", ".join(group[1])))
            out.append(
                Finding(
                    analyzer="rejected_flows",
                    domain=Domain.NETWORK,
                    role="cause",
                    code="flows_rejected",
                    category=Category.CONFIGURATION_ERROR,
                    title=f"connections from {len(left_out)} source(s) to {dst}:{port} rejected by the firewall",
                    mechanism=(
                        f"the flow logs REJECT connections to {dst}:{port} from {', '.join(left_out[:4])}"
                        + (" and more" if len(left_out) > 4 else "")
                        + f" since {fmt_ts(first)}, while {', '.join(reached[:3])} reach it: {rule}, so those "
                        "sources' connections are dropped and time out although the destination is up."
                    ),
                    object=f"security group {group[0].data.get('name')}" if group else f"firewall rules to {dst}",
                    score=0.85 if group else 0.75,
                    ts=first,
                    tags=[f"upstream:{dst}", f"host:{dst}", *(f"host:{s}" for s in left_out[:10])]
                    + ([f"sg:{group[0].data.get('name')}"] if group else []),
                    explains=[
                        *("upstream_timeout", "connection_refused", "upstream_reset", "db_connection_errors"),
                        *("errors", "latency", "http_5xx", "probe_*", "alert:*", "metric_shift"),
                    ],
                    evidence=refs,
                    actions=[
                        Action(
                            description=f"The rules that decide who reaches port {port} of {dst}",
                            command="aws ec2 describe-security-groups --group-ids <sg-id> --query "
                            "'SecurityGroups[].IpPermissions'",
                        ),
                        Action(
                            description=f"Admit the new sources' subnet on port {port}",
                            command="aws ec2 authorize-security-group-ingress --group-id <sg-id> --protocol tcp "
                            f"--port {port} --cidr <subnet of {left_out[0]}>",
                            kind="write",
                        ),
                    ],
                )
            )
    return out
