"""Two keepalived (VRRP) routers that both hold MASTER for one instance: each stopped hearing the other's
adverts, so both claim the virtual IP and clients' flows flip between them (split brain). A firewall change on
them shortly before (VRRP is IP protocol 112 to 224.0.0.18, which a default-drop input chain refuses) makes it a
configuration error; without one it is the network between them (infrastructure)."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import fmt_ts, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_STATE = re.compile(
    r"(?:^|\s)(?P<host>[\w.\-]+) Keepalived_vrrp\[\d+\]: \(?(?P<inst>[\w.\-]+)\)? "
    r"Entering (?P<state>MASTER|BACKUP|FAULT) STATE"
)
_FIREWALL = re.compile(r"nftables|iptables|firewalld|\bufw\b|base_firewall|security group|nft -f", re.I)
FIREWALL_WINDOW_S = 30 * 60


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def vrrp_split_brain(evidence: EvidenceSet) -> list[Finding]:
    last: dict[str, dict[str, tuple[str, float, str, int | None, str]]] = {}
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            ts = r.get("ts")
            if "Keepalived" in msg and isinstance(ts, int | float) and (m := _STATE.search(msg)):
                prev = last.setdefault(m["inst"], {}).get(m["host"])
                if prev is None or ts >= prev[1]:
                    last[m["inst"]][m["host"]] = (m["state"], float(ts), item.id, r.get("line"), msg[:200])
    if not any(sum(1 for s in hosts.values() if s[0] == "MASTER") >= 2 for hosts in last.values()):
        return []
    firewall = [  # read only when there is a split to explain
        (float(r["ts"]), item.id, r.get("line"), str(r.get("msg"))[:200])
        for item in evidence.kind("log")
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float) and _FIREWALL.search(str(r.get("msg") or ""))
    ]
    out: list[Finding] = []
    for inst, hosts in last.items():
        masters = sorted(((h, s) for h, s in hosts.items() if s[0] == "MASTER"), key=lambda hs: hs[1][1])
        if len(masters) < 2:
            continue
        since = masters[-1][1][1]  # the second MASTER made it a split
        change = next((f for f in reversed(firewall) if 0 <= since - f[0] <= FIREWALL_WINDOW_S), None)
        names = ", ".join(h for h, _ in masters)
        refs = [EvidenceRef(item=s[2], line=s[3], value=s[4]) for _, s in masters[:2]]
        if change:
            refs.append(EvidenceRef(item=change[1], line=change[2], value=change[3]))
        out.append(
            Finding(
                analyzer="vrrp_split_brain",
                domain=Domain.NETWORK,
                role="cause",
                code="vrrp_split_brain",
                category=Category.CONFIGURATION_ERROR if change else Category.INFRASTRUCTURE,
                title=f"VRRP instance {inst}: {names} are all MASTER (split brain)",
                mechanism=(
                    f"{names} each hold MASTER for VRRP instance {inst} (the last since {fmt_ts(since)}): they no "
                    "longer hear each other's adverts, so both claim the virtual IP and clients' connections flip "
                    "between them and are reset"
                    + (
                        f"; a firewall change on them at {fmt_ts(change[0])} ('{change[3][:120]}') is what stopped "
                        "the adverts (VRRP is IP protocol 112 to 224.0.0.18)."
                        if change
                        else "; the network between them drops the adverts."
                    )
                ),
                object=f"VRRP instance {inst} on {names}",
                score=0.85,
                ts=since,
                tags=[*(f"host:{h}" for h, _ in masters), f"vrrp:{inst}"],
                explains=[
                    "errors",
                    "upstream_reset",
                    "upstream_timeout",
                    "http_5xx",
                    "latency",
                    "probe_*",
                    "alert:*",
                    "metric_shift",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description="Does the input chain accept VRRP?", command="nft list ruleset | grep -n -i vrrp"
                    ),
                    Action(
                        description="Accept VRRP from the peer and restart keepalived",
                        command="nft add rule inet filter input ip protocol vrrp accept",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)
