"""A host's network interface taking errors: receive or transmit errors (CRC, frame, FIFO) or drops rising on one
node's interface while the others' stay clean. Every connection through that interface stalls on retransmits, so
the pods on that node answer slowly to everyone: an infrastructure cause (a cable, optic, switch port or NIC),
whichever service the operator noticed first.

Read from node_exporter's `node_network_{receive,transmit}_{errs,drop}_total` (or a rate of them, under whatever
name the export gave it), labelled with the node (`nodename`, `node`, `instance`) and the device.
"""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    Rec,
    host_of_kernel_file,
    records_with,
    ref_of,
    service_of,
    span_text,
    workload_of_pod,
)
from diagnosis.analyzers._kube import kube_index
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import Point, counter_rate, median, points_of
from diagnosis.timeline import fmt_ts

_NIC_ERRORS = re.compile(
    r"(?:receive|transmit|rx|tx)[_-]?(?:errs|errors|crc|frame|fifo|drop|dropped)|nic[_-]?errors|interface[_-]?errors",
    re.I,
)
_RETRANS = re.compile(r"retrans", re.I)
_VIRTUAL = re.compile(r"^(?:lo|docker\d*|veth\w*|cali\w*|cilium\w*|flannel\w*|cni\d*|tun\w*|vxlan\w*|kube-\w+)$")
# what a host's faulty wire explains in everything that goes through it
_WIRE_EFFECTS = (
    *("latency", "upstream_timeout", "upstream_reset", "errors", "http_5xx", "exception", "metric_shift"),
    *("alert:*", "probe_*"),
)
ERRORS_PER_S = 1.0  # a physical interface's errors run at 0: this many a second, sustained, is a fault
OTHERS_SHARE = 0.1  # the other nodes' interfaces at most this share of the faulty one's rate
MIN_POINTS = 6


def _node_of(labels: dict[str, str]) -> str | None:
    for key in ("nodename", "node", "kubernetes_node", "hostname", "host"):
        if labels.get(key):
            return labels[key]
    instance = labels.get("instance", "")
    return instance.rsplit(":", 1)[0] if instance else None


def _rates(m: EvidenceItem) -> list[Point]:
    pts = points_of(m.data.get("points"))
    name = str(m.data.get("name") or m.object)
    return counter_rate(pts) if name.endswith("_total") else pts


def _counters(evidence: EvidenceSet, node: str, device: str) -> tuple[EvidenceItem, str, int] | None:
    """The interface's largest error counter in saved `ethtool -S` / `ip -s link` output from that host (CRC and
    frame errors first: they name the wire)."""
    best: tuple[tuple[bool, int], EvidenceItem, str, int] | None = None
    for nic in evidence.kind("host/nic"):
        d = nic.data
        if d.get("host") != node or (device and d.get("device") not in (device, None)):
            continue
        for name, value in (d.get("counters") or {}).items():
            if isinstance(value, int) and value > 0:
                key = (bool(re.search(r"crc|frame|align", name)), value)
                if best is None or key > best[0]:
                    best = (key, nic, str(name), value)
    return (best[1], best[2], best[3]) if best else None


_MEMBER = re.compile(r"^(?P<cluster>[a-z][a-z\-]*[a-z])-\d{1,2}$")


def _member_of(host: str) -> list[str]:
    """A host named as a numbered member of a cluster (kafka-3, es-data-1) serves that cluster: its callers' failures
    name the cluster ("kafka"), so the host's fault is tagged with it."""
    m = _MEMBER.match(host.split(".", 1)[0].lower())
    return [f"service:{m['cluster']}"] if m else []


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"metric", "k8s/Pod", "host/nic"})
def interface_errors(evidence: EvidenceSet) -> list[Finding]:
    errors: dict[tuple[str, str], tuple[EvidenceItem, list[Point]]] = {}
    retrans: dict[str, tuple[EvidenceItem, list[Point]]] = {}
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        node = _node_of(labels)
        if node is None:
            continue
        if _NIC_ERRORS.search(name):
            device = labels.get("device") or labels.get("interface") or ""
            if _VIRTUAL.match(device):
                continue  # the pods' virtual interfaces drop by policy; the wire is the physical one
            pts = _rates(m)
            if len(pts) >= MIN_POINTS:
                key = (node, device)
                if key not in errors or median([v for _, v in pts]) > median([v for _, v in errors[key][1]]):
                    errors[key] = (m, pts)
        elif _RETRANS.search(name):
            pts = _rates(m)
            if len(pts) >= MIN_POINTS:
                retrans[node] = (m, pts)
    if not errors:
        return []
    tails = {k: median([v for _, v in pts[-max(3, len(pts) * 3 // 10) :]]) for k, (_, pts) in errors.items()}
    out: list[Finding] = []
    for (node, device), (item, pts) in errors.items():
        tail = tails[(node, device)]
        head = median([v for _, v in pts[: max(2, len(pts) * 4 // 10)]])
        if tail < ERRORS_PER_S or head > tail / 4:
            continue  # not rising: an old counter's steady trickle or nothing at all
        if any(n != node and t > OTHERS_SHARE * tail for (n, _), t in tails.items()):
            continue  # every node's interface at once is the network, not this host's interface
        onset = next((t for t, v in pts if v >= tail / 2), pts[-1][0])
        last = len(item.data.get("points") or []) - 1
        refs = [EvidenceRef(item=item.id, field=f"points.{last}", value=round(tail, 3))]
        retrans_txt = ""
        if node in retrans:
            r_item, r_pts = retrans[node]
            r_head = median([v for _, v in r_pts[: max(2, len(r_pts) * 4 // 10)]])
            r_tail = median([v for _, v in r_pts[-max(3, len(r_pts) * 3 // 10) :]])
            if r_tail > 2 * max(r_head, 1e-9):
                retrans_txt = f"; its TCP retransmits rose {r_head:.3g} -> {r_tail:.3g}/s with them"
                refs.append(EvidenceRef(item=r_item.id, field=f"points.{len(r_pts) - 1}", value=round(r_pts[-1][1], 3)))
        counters = _counters(evidence, node, device)
        if counters:
            nic, counter, count = counters
            retrans_txt += f"; its counters show {counter} {count}"
            refs.append(EvidenceRef(item=nic.id, field=f"counters.{counter}", value=count))
        pods = [(ns, p) for ns, p, _ in kube_index(evidence).pods_by_node.get(node, [])]
        where = f"{device} on node {node}" if device else f"the network interface of node {node}"
        on_it = f"; the pods on it ({', '.join(f'{ns}/{p}' for ns, p in pods[:5])}) answer slowly" if pods else ""
        out.append(
            Finding(
                analyzer="interface_errors",
                domain=Domain.NETWORK,
                role="cause",
                code="interface_errors",
                category=Category.INFRASTRUCTURE,
                title=f"{where} takes {tail:.3g} errors/s (other nodes' interfaces clean)",
                mechanism=(
                    f"{where} takes {tail:.3g} receive/transmit errors a second since {fmt_ts(onset)} (before "
                    f"{head:.3g}) while the other nodes' interfaces stay clean{retrans_txt}: a faulty cable, optic, "
                    f"switch port or NIC corrupts frames, so every connection through it stalls on retransmits"
                    f"{on_it}."
                ),
                object=f"network interface {where}",
                score=0.8,
                ts=onset,
                tags=[f"node:{node}", f"host:{node}", *_member_of(node)]
                + [f"pod:{ns}/{p}" for ns, p in pods]
                + sorted({f"service:{workload_of_pod(p)}" for _, p in pods}),
                explains=list(_WIRE_EFFECTS),
                evidence=refs,
                actions=[
                    Action(
                        description=f"The interface's error counters on {node} (CRC and frame errors point at the "
                        "cable, optic or switch port)",
                        command=f"ssh {node} 'ip -s link show {device or ''}; sudo ethtool -S {device or '<nic>'} | "
                        'grep -iE "err|crc|drop"\'',
                    ),
                    Action(
                        description=f"Move the workloads off {node} while the link is repaired",
                        command=f"kubectl cordon {node} && kubectl drain {node} --ignore-daemonsets "
                        "--delete-emptydir-data",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# --- the link itself: a NIC whose link keeps going down, or whose wire-error counters climb between two readings

# the kernel's drivers ("mlx5_core 0000:3b:00.0 ens1f0: Link down", "e1000e: eno1 NIC Link is Down", "ixgbe ...
# eth2: NIC Link is Down"), bonding ("link status definitely down for interface eno2")
_LINK_DOWN = re.compile(
    r"\b(?P<dev>(?:eth|ens|eno|enp|em|p\d+p|bond|ib)[\w.\-]*):? (?:NIC )?Link (?:is )?[Dd]own\b|"
    r"link status definitely down for interface (?P<dev2>[\w.\-]+)|"
    # an InfiniBand or Ethernet port that lost its carrier ("IPoIB: ib0: lost carrier", "eth0: carrier lost")
    r"\b(?P<dev3>(?:eth|ens|eno|enp|em|ib)[\w.\-]*): (?:lost carrier|carrier lost)\b|"
    # a switch's own syslog (Cisco IOS/NX-OS, Arista EOS): "%LINEPROTO-5-UPDOWN: Line protocol on Interface
    # Ethernet49/1 (spine-01 Ethernet14/1), changed state to down"
    r"%(?:LINEPROTO|LINK|ETHPORT)-\d-(?:UPDOWN|IF_DOWN\w*): (?:Line protocol on )?Interface (?P<dev4>[\w/.\-]+)"
    r"(?: \((?P<peer>[^)]{0,60})\))?,? (?:changed )?state to down"
)
_SWITCH_PORT = re.compile(r"(?:Ethernet|GigabitEthernet|TenGigabitEthernet|FortyGigE|HundredGigE|Eth|Gi|Te|Et)\d")


def _switch_port_actions(switch: str, port: str) -> list[Action]:
    name = port.split(" ", 1)[0]
    return [
        Action(
            description=f"The port's optic levels and error counters on {switch}",
            command=f"ssh {switch} 'show interfaces {name} transceiver; show interfaces {name} counters errors'",
        ),
        Action(
            description="Drain the port (its traffic moves to the other uplinks) while the optic or cable is replaced",
            command=f"ssh {switch} 'configure; interface {name}; shutdown'",
            kind="write",
        ),
    ]


# the device a switch's syslog line comes from: "leaf-r14 Ebra: %LINEPROTO-5-UPDOWN: ..."
_SWITCH_HOST = re.compile(r"^(?P<host>[A-Za-z][\w.\-]*) \w+(?:\[\d+\])?: %")
FLAPS_MIN = 3  # downs of one link before it reads as flapping (one down is a reboot or a re-cabling)
_WIRE_COUNTER = re.compile(r"crc|frame|align|symbol|fcs|pcs|link_down_events", re.I)


def _host_of(item: EvidenceItem, hosts: set[str]) -> str:
    """The host a log or a saved session comes from: a known node or host its name or command names."""
    where = " ".join(str(x) for x in (item.object, item.source, (item.data.get("source") or {}).get("command", "")))
    named = next((h for h in sorted(hosts, key=len, reverse=True) if h and h in where), "")
    # a kernel log saved under its machine's name: "cn117-dmesg.txt", "dmesg-web-1", "db02.syslog"
    return named or host_of_kernel_file(item) or service_of(item) or ""


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"log", "host/nic", "k8s/Node"})
def link_failing(evidence: EvidenceSet) -> list[Finding]:
    """A physical link that keeps going down (FLAPS_MIN downs), or whose CRC/symbol/frame counters climbed between
    two readings: a cable, optic, switch port or NIC failing under one host, whatever its services show."""
    hosts = {str((n.data.get("metadata") or {}).get("name") or "") for n in evidence.kind("k8s/Node")}
    hosts |= {str(n.data.get("host") or "") for n in evidence.kind("host/nic")}
    downs: dict[tuple[str, str], list[Rec]] = {}
    for rec in records_with(evidence, ("Link", "link status", "carrier", "UPDOWN", "IF_DOWN")):
        if m := _LINK_DOWN.search(rec.msg):
            switch = _SWITCH_HOST.match(rec.msg) if m["dev4"] else None
            host = switch["host"] if switch else _host_of(rec.item, hosts)
            dev = m["dev"] or m["dev2"] or m["dev3"] or m["dev4"]
            if m["peer"]:  # a switch port names its far end: the link is both
                dev = f"{dev} (to {m['peer']})"
            downs.setdefault((host, dev), []).append(rec)
    climbing: dict[tuple[str, str], tuple[EvidenceItem, str, int, int]] = {}
    readings: dict[tuple[str, str, str], list[EvidenceItem]] = {}  # one file's readings of one NIC, in its order
    for nic in evidence.kind("host/nic"):
        key3 = (nic.source, str(nic.data.get("host") or ""), str(nic.data.get("device") or ""))
        readings.setdefault(key3, []).append(nic)
    for nics in readings.values():
        nic = nics[-1]
        before = nics[0].data.get("counters") if len(nics) > 1 else nic.data.get("first_counters")
        before, after = before or {}, nic.data.get("counters") or {}
        grew = [
            (k, before[k], v) for k, v in after.items() if _WIRE_COUNTER.search(k) and k in before and v > before[k]
        ]
        if grew:
            name, a, b = max(grew, key=lambda g: g[2] - g[1])
            host = str(nic.data.get("host") or _host_of(nic, hosts))
            climbing[(host, str(nic.data.get("device") or ""))] = (nic, name, a, b)
    out: list[Finding] = []
    for key in set(climbing) | {k for k, recs in downs.items() if len(recs) >= FLAPS_MIN}:
        host, dev = key
        recs = sorted(downs.get(key, []), key=lambda r: r.ts or 0)
        parts, refs = [], []
        if len(recs) >= FLAPS_MIN:
            parts.append(f"its link went down {len(recs)} times {span_text(recs[0].ts, recs[-1].ts)}")
            refs += [ref_of(recs[0]), ref_of(recs[-1])]
        if key in climbing:
            nic, name, a, b = climbing[key]
            parts.append(f"its {name} counter climbed from {a} to {b} between two readings")
            refs.append(EvidenceRef(item=nic.id, field=f"counters.{name}", value=b))
        pods = [(ns, p) for ns, p, _ in kube_index(evidence).pods_by_node.get(host, [])]
        where = f"{dev} on {host}" if host else dev
        out.append(
            Finding(
                analyzer="link_failing",
                domain=Domain.NETWORK,
                role="cause",
                code="link_failing",
                category=Category.INFRASTRUCTURE,
                title=f"the link of {where} is failing ({'; '.join(parts)})",
                mechanism=(
                    f"the network link of {where} is failing: {'; '.join(parts)}. A faulty cable, optic, switch "
                    f"port or NIC drops and corrupts frames, so every connection through it stalls, resets or "
                    f"times out, whichever service on {host or 'the host'} the callers see failing."
                ),
                object=f"network link {where}",
                score=0.85,
                ts=recs[0].ts if recs else None,
                tags=[f"node:{host}", f"host:{host}", f"instance:{host}", *_member_of(host)]
                + [f"pod:{ns}/{p}" for ns, p in pods]
                + sorted({f"service:{workload_of_pod(p)}" for _, p in pods}),
                # (a file server "not responding" to this host's kernel, when this host's own link flaps)
                explains=[
                    *_WIRE_EFFECTS,
                    "connection_refused",
                    "host_unreachable",
                    "packet_loss",
                    "file_server_unresponsive",
                ],
                evidence=refs,
                actions=_switch_port_actions(host, dev)
                if _SWITCH_PORT.match(dev)
                else [
                    Action(
                        description=f"The link's state changes and wire errors on {host} and on its switch port",
                        command=f'ssh {host} \'dmesg -T | grep -i "{dev}"; sudo ethtool -S {dev} | '
                        "grep -iE \"crc|symbol|link_down\"'  # and the switch port's transceiver Rx power",
                    ),
                    Action(
                        description=f"Take {host} out of service while the optic, cable or port is replaced",
                        command=f"kubectl cordon {host} && kubectl drain {host} --ignore-daemonsets",
                        kind="write",
                    ),
                ],
            )
        )
    return out
