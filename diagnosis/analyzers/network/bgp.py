"""A router or switch that dropped out of the routed network: its BGP sessions went down together. Routers log each
neighbour's session state (FRR/Quagga and Cisco `%ADJCHANGE: neighbor 10.1.0.9(leaf-b2) ... Down Hold Timer
Expired`, BIRD `bgp_leaf: State changed to down`, Junos `bgp_peer_mgmt ... changed state from Established to
Idle`). One device is the failure when its neighbours all lose it (hold timers expiring on several peers), or
when it reports losing many neighbours at once itself ("Interface down"): a switch that reset, lost power or
its links, and everything behind it (the nodes of its rack, the pods on them) became unreachable. That is
infrastructure, and the timeouts to the addresses behind it are its symptoms. A device whose sessions all came back
is a failure that is over; one flapping session is a peer's own problem, not a device down."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from diagnosis.analyzers._common import (
    Rec,
    fmt_ts,
    now_of,
    records_with,
    ref_of,
    service_of,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import ENDED_LONG_AGO_S
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

_FRR = re.compile(
    r"ADJCHANGE: neighbor (?P<ip>[\da-fA-F.:]+)(?:\((?P<name>[\w.\-]+)\))?(?: vpn vrf \S+| in vrf \S+)? "
    r"(?P<state>Up|Down)\b(?P<why>[^\n]{0,60})"
)
_BIRD = re.compile(r"\b(?P<name>[\w.\-]+): (?:State changed to (?P<state>down|up|start)|BGP session closed)", re.I)
_JUNOS = re.compile(
    r"BGP peer (?P<ip>[\da-fA-F.:]+)(?: \((?P<name>[^)]+)\))?[^\n]{0,60}? changed state from "
    r"(?P<from>\w+) to (?P<to>\w+)"
)
# the device that logged the line: a syslog host before its level and program ("leaf-b2 NOTICE bgp#bgpd[41]:")
_OBSERVER = re.compile(r"^(?P<host>[A-Za-z][\w.\-]*) (?:[A-Z]{3,8} )?[\w#\-/.]+(?:\[\d+\])?: ")
_HINTS = ("ADJCHANGE", "State changed to", "BGP session closed", "changed state from")
# a device's own reset: a hardware watchdog, a kernel stuck, a fresh boot
_RESET = re.compile(
    r"watchdog (?:expired|reset)|Hardware watchdog|soft lockup|reboot cause|reboot-cause|Linux version \d", re.I
)
TOGETHER_S = 120  # sessions lost within this of each other went down together
MIN_LOST = 3  # neighbours lost at once by one device, or observers of one device going down


@dataclass
class _Change:
    ts: float
    observer: str
    peer: str
    up: bool
    why: str
    rec: Rec


def _changes(evidence: EvidenceSet) -> list[_Change]:
    out: list[_Change] = []
    for rec in records_with(evidence, _HINTS):
        if rec.ts is None:
            continue
        o = _OBSERVER.match(rec.msg)
        src = rec.item.data.get("source")
        host = src.get("host") if isinstance(src, dict) else None
        observer = o["host"] if o else host or service_of(rec.item) or rec.item.object
        if m := _FRR.search(rec.msg):
            peer, up, why = m["name"] or m["ip"], m["state"] == "Up", m["why"].strip()
        elif m := _JUNOS.search(rec.msg):
            peer, up, why = m["name"] or m["ip"], m["to"].lower() == "established", f"{m['from']} -> {m['to']}"
        elif m := _BIRD.search(rec.msg):
            peer, up, why = m["name"], (m["state"] or "").lower() == "up", rec.msg.strip()[:60]
        else:
            continue
        out.append(_Change(float(rec.ts), str(observer), str(peer), up, why, rec))
    out.sort(key=lambda c: c.ts)
    return out


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log"})
def routing_device_down(evidence: EvidenceSet) -> list[Finding]:
    changes = _changes(evidence)
    downs = [c for c in changes if not c.up]
    if len(downs) < 2:
        return []
    now = now_of(evidence)
    # each device's evidence of being down: neighbours it lost at once, observers that lost it
    lost_by: dict[str, list[_Change]] = defaultdict(list)
    seen_down_by: dict[str, list[_Change]] = defaultdict(list)
    for c in downs:
        seen_down_by[c.peer].append(c)
        lost_by[c.observer].append(c)
    scores: dict[str, tuple[int, list[_Change]]] = {}
    for dev in {*lost_by, *seen_down_by}:
        own = lost_by.get(dev, [])
        together = [c for c in own if c.ts - own[0].ts <= TOGETHER_S] if own else []
        lost_peers = {c.peer for c in together}
        observers = {c.observer for c in seen_down_by.get(dev, [])}
        score = (len(lost_peers) if len(lost_peers) >= MIN_LOST else 0) + 2 * len(observers)
        if len(lost_peers) >= MIN_LOST or len(observers) >= 2 or (observers and lost_peers):
            scores[dev] = (score, [*together, *seen_down_by.get(dev, [])])
    if not scores:
        return []
    dev, (_, recs) = max(scores.items(), key=lambda kv: kv[1][0])
    recs.sort(key=lambda c: c.ts)
    first = recs[0].ts
    peers = sorted({c.peer for c in recs if c.observer == dev} | {c.observer for c in recs if c.peer == dev})
    # back when every session it lost came up again after the last down
    ups = [c for c in changes if c.up and c.ts >= first and (c.peer == dev or c.observer == dev)]
    back = ups[-1].ts if ups and {c.peer for c in ups} | {c.observer for c in ups} >= set(peers) else None
    over = back is not None and now is not None and now - back >= ENDED_LONG_AGO_S
    reset = next(
        (
            r
            for r in records_with(evidence, ("watchdog", "lockup", "reboot", "Linux version"))
            if _RESET.search(r.msg) and (dev in r.msg or dev in (r.item.object or ""))
        ),
        None,
    )
    why = next((c.why for c in recs if c.why), "")
    lost = ", ".join(peers[:8]) + (f" and {len(peers) - 8} more" if len(peers) > 8 else "")
    mech = (
        f"{dev} dropped out of the routed network at {fmt_ts(first)}: its BGP sessions with {lost} went down "
        f"together{f' ({why})' if why else ''}"
        + (f"; the device itself reset ('{reset.msg.strip()[:140]}')" if reset else "")
        + ", so the hosts and addresses routed through it were unreachable"
        + (f" until its sessions came back at {fmt_ts(back)}" if back is not None else "")
        + "."
    )
    refs = [ref_of(c.rec) for c in recs[:4]] + ([ref_of(reset)] if reset else [])
    return with_aliases(
        [
            Finding(
                analyzer="routing_device_down",
                domain=Domain.NETWORK,
                role="benign" if over else "cause",
                code="routing_device_down_over" if over else "routing_device_down",
                category=Category.HEALTHY if over else Category.INFRASTRUCTURE,
                title=f"{dev}: BGP sessions with {len(peers)} neighbour(s) down {span_text(first, back)}",
                mechanism=mech,
                object=f"network device {dev}",
                score=0.85 if reset or len(peers) >= MIN_LOST else 0.7,
                ts=first,
                tags=[f"host:{dev}", *(f"host:{p}" for p in peers[:20])],
                explains=[
                    "upstream_timeout",
                    "connection_refused",
                    "unreachable",
                    "host_unreachable*",
                    "node_not_ready",
                    "node_*",
                    "http_5xx",
                    "upstream_5xx",
                    "errors",
                    "latency",
                    "probe_*",
                    "alert:*",
                    "host_hardware_error",
                    "exception",
                ],
                evidence=refs,
                actions=[
                    Action(
                        description=f"Session states and uptime on {dev} and its neighbours",
                        command=f"ssh {dev} 'show ip bgp summary; show reboot-cause; show logging | tail -200'",
                    )
                ],
            )
        ]
    )
