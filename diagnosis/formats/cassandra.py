"""Cassandra as an operator pastes it from a shell: `nodetool status` (a `cassandra/node` item per node: its
datacenter, Up/Down and Normal/Leaving/Joining/Moving state, address, rack) and `cqlsh` keyspace definitions
(`DESCRIBE KEYSPACE` / `CREATE KEYSPACE ... WITH replication = {...}`, or a `system_schema.keyspaces` result
table): a `cassandra/keyspace` item per keyspace with its replication map. One file may hold both."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_DATACENTER = re.compile(r"^Datacenter:\s*(?P<dc>\S+)\s*$")
_NODE = re.compile(
    r"^(?P<status>[UD])(?P<state>[NLJM])\s+(?P<addr>[\d.:a-fA-F]+)\s+(?P<load>[\d.]+\s*\w+|\?)\s+.*?"
    r"(?P<host_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?\s+(?P<rack>\S+)\s*$"
)
_CREATE = re.compile(
    r"CREATE KEYSPACE (?:IF NOT EXISTS )?\"?(?P<name>\w+)\"? WITH replication = (?P<map>\{[^}]*\})", re.I
)
_ROW = re.compile(r"^\s*(?P<name>\w+)\s*\|\s*(?P<map>\{.*'class'.*\})\s*$")


def _replication(text: str) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def detect(doc: Document) -> bool:
    head = doc.text[:20000]
    return bool(
        re.search(r"^Datacenter:\s*\S+\s*$", head, re.M) and re.search(r"^[UD][NLJM]\s+\d", head, re.M)
    ) or bool(_CREATE.search(head) or re.search(r"^\s*\w+\s*\|\s*\{'class': '[\w.]*Strategy'", head, re.M))


@FORMATS.format("cassandra", shapes={"text"}, detect=detect, order=18)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    dc: str | None = None
    nodes: dict[str, dict[str, Any]] = {}
    keyspaces: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(doc.lines(), 1):
        if m := _DATACENTER.match(line.strip()):
            dc = m["dc"]
            continue
        if dc and (m := _NODE.match(line.strip())):
            nodes.setdefault(
                m["addr"],
                {"datacenter": dc, "address": m["addr"], "up": m["status"] == "U", "state": m["state"],
                 "rack": m["rack"], "host_id": m["host_id"], "line": n},
            )  # fmt: skip
            continue
        for rx in (_CREATE, _ROW):
            if (m := rx.search(line)) and (rep := _replication(m["map"])) is not None:
                keyspaces.setdefault(m["name"], {"keyspace": m["name"], "replication": rep, "line": n})
    for addr, node in nodes.items():
        yield ctx.item(doc.path, "cassandra/node", f"cassandra/{node['datacenter']}/{addr}", node, None)
    for name, ks in keyspaces.items():
        yield ctx.item(doc.path, "cassandra/keyspace", f"keyspace/{name}", ks, None)
