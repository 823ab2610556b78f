"""AWS network exports: VPC flow logs and security groups.

- VPC flow log records in the default format (version 2: `version account-id interface-id srcaddr dstaddr srcport
  dstport protocol packets bytes start end action log-status`), with or without that header line, as S3 or
  CloudWatch Logs deliver them -> one `net/flows` item per file: the flows grouped by source, destination, port and
  action (ACCEPT or REJECT), with their packets and first and last times.
- `aws ec2 describe-security-groups` -> `aws/security-group` per group: its name, id and ingress rules (port range,
  protocol, CIDRs, the groups it admits).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_FLOW = re.compile(
    r"^(?P<version>\d+) (?P<account>\d+|-) (?P<eni>eni-[0-9a-f]+|-) (?P<src>[\d.:a-f]+|-) (?P<dst>[\d.:a-f]+|-) "
    r"(?P<sport>\d+|-) (?P<dport>\d+|-) (?P<proto>\d+|-) (?P<packets>\d+|-) (?P<bytes>\d+|-) (?P<start>\d+) "
    r"(?P<end>\d+) (?P<action>ACCEPT|REJECT|-) (?P<status>OK|NODATA|SKIPDATA)\s*$"
)


def _flow_lines(doc: Document) -> Iterator[tuple[int, re.Match[str]]]:
    for n, line in enumerate(doc.lines(), 1):
        m = _FLOW.match(line.strip())
        if m:
            yield n, m


def detect_flow_log(doc: Document) -> bool:
    head = doc.text[:4000]
    if "srcaddr" in head and "dstaddr" in head and "action" in head:
        return True
    lines = [line for line in head.splitlines()[:20] if line.strip()]
    return len(lines) >= 3 and sum(bool(_FLOW.match(line.strip())) for line in lines) * 2 >= len(lines)


@FORMATS.format("vpc-flow-log", shapes={"text"}, detect=detect_flow_log, order=18)
def parse_flow_log(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    flows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for n, m in _flow_lines(doc):
        if m["action"] == "-" or m["src"] == "-":
            continue
        key = (m["src"], m["dst"], m["dport"], m["action"])
        f = flows.setdefault(
            key,
            {"src": m["src"], "dst": m["dst"], "dport": int(m["dport"]), "action": m["action"], "records": 0,
             "packets": 0, "first": float(m["start"]), "last": float(m["end"]), "line": n},
        )  # fmt: skip
        f["records"] += 1
        f["packets"] += int(m["packets"]) if m["packets"].isdigit() else 0
        f["first"] = min(f["first"], float(m["start"]))
        f["last"] = max(f["last"], float(m["end"]))
    if not flows:
        return
    data = {"flows": sorted(flows.values(), key=lambda f: f["first"])}
    yield ctx.item(doc.path, "net/flows", f"flows/{doc.path}", data, max(f["last"] for f in flows.values()))


def _security_groups(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, dict) or not isinstance(value.get("SecurityGroups"), list):
        return None
    groups = [g for g in value["SecurityGroups"] if isinstance(g, dict) and "GroupId" in g]
    return groups if groups or not value["SecurityGroups"] else None


@FORMATS.format("security-groups", shapes={"json"}, detect=lambda d: _security_groups(d.value) is not None, order=30)
def parse_security_groups(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for g in _security_groups(doc.value) or []:
        rules = []
        for p in g.get("IpPermissions") or ():
            if not isinstance(p, dict):
                continue
            rules.append(
                {
                    "protocol": str(p.get("IpProtocol")),
                    "from": p.get("FromPort"),
                    "to": p.get("ToPort"),
                    "cidrs": [str(r.get("CidrIp")) for r in p.get("IpRanges") or () if r.get("CidrIp")],
                    "groups": [str(r.get("GroupId")) for r in p.get("UserIdGroupPairs") or () if r.get("GroupId")],
                }
            )
        name = str(g.get("GroupName") or g["GroupId"])
        data = {"name": name, "id": str(g["GroupId"]), "vpc": g.get("VpcId"), "ingress": rules}
        yield ctx.item(doc.path, "aws/security-group", f"sg/{name}", data)
