"""Cassandra: a keyspace whose replication names a datacenter the ring does not have. NetworkTopologyStrategy
places replicas only in the datacenters it names, spelled as the snitch reports them (`nodetool status`'s
"Datacenter:"); a name the ring lacks ('eu_central' for 'eu-central') gets no replica, so every read and write of
that keyspace fails as Unavailable ("0 alive") at any consistency level, whatever the state of the nodes."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import log_records, ref_of, service_of
from diagnosis.analyzers.database._shared import Context
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

_UNAVAILABLE = re.compile(
    r"UnavailableException|Not enough replicas available|Cannot achieve consistency level|NoHostAvailable", re.I
)
_STRATEGY_KEYS = {"class", "replication_factor"}


def _keyspaces(ctx: Context) -> list[Finding]:
    nodes = ctx.evidence.kind("cassandra/node")
    datacenters = sorted({str(n.data.get("datacenter")) for n in nodes if n.data.get("datacenter")})
    if not datacenters:
        return []
    out: list[Finding] = []
    seen: set[str] = set()
    for ks in ctx.evidence.kind("cassandra/keyspace"):
        name = str(ks.data.get("keyspace") or "")
        rep = ks.data.get("replication") or {}
        if name in seen or "NetworkTopologyStrategy" not in str(rep.get("class", "")):
            continue
        seen.add(name)
        named = [dc for dc in rep if dc not in _STRATEGY_KEYS]
        missing = [dc for dc in named if dc not in datacenters]
        if not missing:
            continue
        placed = [dc for dc in named if dc in datacenters]
        errors = [
            r for r in log_records(ctx.evidence) if _UNAVAILABLE.search(r.msg) and re.search(rf"\b{name}\b", r.msg)
        ] or [r for r in log_records(ctx.evidence) if _UNAVAILABLE.search(r.msg)]
        clients = sorted({s for r in errors if (s := service_of(r.item))})
        close = {m: next((dc for dc in datacenters if re.sub(r"[-_.]", "", dc) == re.sub(r"[-_.]", "", m)), None)
                 for m in missing}  # fmt: skip
        spelled = "; ".join(f"'{m}' is not a datacenter" + (f" ('{c}' is)" if c else "") for m, c in close.items())
        effect = (
            "no replica anywhere: every read and write of it fails as Unavailable (0 alive)"
            if not placed
            else f"its replicas exist only in {', '.join(placed)}; queries at LOCAL consistency from the other "
            "datacenter fail as Unavailable"
        )
        refs = [EvidenceRef(item=ks.id, line=ks.data.get("line"), value=f"{name}: {rep}")]
        refs += [ref_of(r) for r in errors[:2]]
        fixed = ", ".join(f"'{close.get(dc) or dc}': '{rep[dc]}'" for dc in named)
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="keyspace_unknown_datacenter",
                category=Category.CONFIGURATION_ERROR,
                title=f"keyspace {name} replicates to a datacenter the ring does not have ({', '.join(missing)})",
                mechanism=(
                    f"keyspace {name} uses NetworkTopologyStrategy with {', '.join(missing)}, but the ring's "
                    f"datacenters are {', '.join(datacenters)} ({spelled}): {effect}"
                    + (f"; {', '.join(clients)} logged {len(errors)} such failures" if errors else "")
                    + "."
                ),
                object=f"keyspace {name}",
                score=0.9,
                tags=[f"db:{name}", f"keyspace:{name}", *(f"service:{c}" for c in clients)],
                explains=["errors", "exception", "http_5xx", "db_connection_errors", "upstream_*", "latency"],
                evidence=refs,
                actions=[
                    Action(description="The ring's datacenter names", command="nodetool status | grep Datacenter"),
                    Action(
                        description=f"Replicate {name} to the datacenters as the snitch names them, then repair it",
                        command=f"cqlsh -e \"ALTER KEYSPACE {name} WITH replication = {{'class': "
                        f"'NetworkTopologyStrategy', {fixed}}};\" && nodetool repair -full {name}",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# reads that scan more tombstones than the server allows (aborted) or warns about
_TOMBSTONES = re.compile(
    r"Scanned over (?P<n>\d+) tombstones (?:during query|in) '?(?:SELECT .*? FROM )?(?P<t>[\w.]+)|"
    r"Read \d+ live rows and (?P<n2>\d+) tombstone cells for query SELECT .*? FROM (?P<t2>[\w.]+)|"
    r"TombstoneOverwhelmingException|TOMBSTONE_OVERWHELMING",
    re.I,
)
TOMBSTONE_ABORTS = 3  # aborted reads (or warnings) that make it the cause


def _tombstones(ctx: Context) -> list[Finding]:
    """Reads of one table aborted (or slowed) by the tombstones they scan: the application deletes, overwrites with
    nulls or re-inserts rows of that table far more than it reads them, so each read walks dead cells until the
    server gives up. A data-model or code defect (often a release that changed how it writes), not node capacity."""
    hits: dict[str, list] = {}
    for r in log_records(ctx.evidence):
        if "tombstone" not in r.msg.lower() and "TOMBSTONE" not in r.msg:
            continue
        m = _TOMBSTONES.search(r.msg)
        if m:
            table = m["t"] or m["t2"] or "?"
            hits.setdefault(table, []).append(r)
    out: list[Finding] = []
    for table, recs in hits.items():
        aborted = [r for r in recs if "Scanned over" in r.msg or "Overwhelming" in r.msg or "OVERWHELMING" in r.msg]
        if len(aborted) < TOMBSTONE_ABORTS and len(recs) < 2 * TOMBSTONE_ABORTS:
            continue
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="cause",
                code="tombstone_overwhelming",
                category=Category.CODE_DEFECT,
                title=f"reads of {table} scan too many tombstones ({len(aborted)} aborted, {len(recs)} in all)",
                mechanism=(
                    f"reads of {table} walk through tens of thousands of tombstones ('{recs[0].msg.strip()[:160]}'); "
                    f"{len(aborted)} were aborted at the tombstone limit: the application deletes, nulls or re-inserts "
                    "that table's rows far more than it reads them (a write pattern or data model that leaves dead "
                    "cells until gc_grace_seconds passes), so its reads fail whatever the nodes' capacity."
                ),
                object=f"table {table}",
                score=0.8 if len(aborted) >= TOMBSTONE_ABORTS else 0.6,
                ts=min((r.ts for r in recs if r.ts is not None), default=None),
                tags=[f"table:{table}", *{f"service:{s}" for r in recs if (s := service_of(r.item))}],
                explains=[
                    "errors",
                    "exception",
                    "latency",
                    "db_errors",
                    "upstream_*",
                    "metric_shift",
                    "alert:*",
                    "gc_pause",
                    "log_errors",
                ],
                evidence=[ref_of(r) for r in recs[:3]],
                actions=[
                    Action(description="Tombstones per read of the table", command=f"nodetool tablestats {table}"),
                    Action(
                        description="Find the write path that deletes or nulls those rows (a recent release?)",
                        command="git log -p -S 'DELETE FROM' -- <service>",
                    ),
                ],
            )
        )
    return out
