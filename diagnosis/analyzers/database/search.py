"""A search cluster's own health (Elasticsearch / OpenSearch `_cluster/health`)."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding

# ---------------------------------------------------------------- a search cluster's own health


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"datastore/health"})
def datastore_health(evidence: EvidenceSet) -> list[Finding]:
    """`_cluster/health` of Elasticsearch / OpenSearch: red is primary shards unassigned (searches and writes to
    them fail), a failing datastore its clients see; yellow is replicas unassigned (redundancy lost, data served);
    green is a healthy cluster, said so that a search outage is looked for elsewhere."""
    out: list[Finding] = []
    for item in evidence.kind("datastore/health"):
        d = item.data
        cluster, status = str(d.get("cluster") or item.object), str(d.get("status") or "")
        unassigned = d.get("unassigned_shards")
        shards = f"{unassigned} shards unassigned" if unassigned else "no shard unassigned"
        nodes = f"{d.get('number_of_data_nodes')} data nodes" if d.get("number_of_data_nodes") is not None else ""
        said = ", ".join(filter(None, [shards, nodes]))
        base: dict[str, Any] = {
            "analyzer": "datastore_health",
            "domain": Domain.DATABASE,
            "object": f"{d.get('engine') or 'search'} cluster {cluster}",
            "tags": [f"service:{cluster}", f"upstream:{cluster}", f"db:{cluster}"],
            "ts": item.ts,
            "evidence": [EvidenceRef(item=item.id, field="status", value=status)]
            + ([EvidenceRef(item=item.id, field="unassigned_shards", value=unassigned)] if unassigned else []),
        }
        if status == "red":
            out.append(
                Finding(
                    **base,
                    role="cause",
                    code="search_cluster_red",
                    category=Category.DEPENDENCY_FAILURE,
                    score=0.55,
                    title=f"search cluster {cluster} is red ({said})",
                    mechanism=f"cluster {cluster} reports red: primary shards are unassigned ({said}), so searches "
                    "and writes that reach them fail for every client of the cluster",
                    explains=["errors", "http_5xx", "latency", "upstream_5xx", "exception"],
                    needs=[f"GET _cluster/allocation/explain on {cluster}: why its shards are not assigned"],
                )
            )
        elif status == "yellow":
            out.append(
                Finding(
                    **base,
                    role="symptom",
                    code="search_cluster_yellow",
                    category=Category.UNKNOWN,
                    score=0.3,
                    title=f"search cluster {cluster} is yellow ({said})",
                    mechanism=f"cluster {cluster} reports yellow: replica shards are unassigned ({said}); every "
                    "primary is served, redundancy is lost",
                )
            )
        elif status == "green":
            out.append(
                Finding(
                    **base,
                    role="benign",
                    code="search_cluster_green",
                    category=Category.HEALTHY,
                    score=0.2,
                    title=f"search cluster {cluster} is green",
                    mechanism=f"cluster {cluster} reports green: every shard is assigned ({said})",
                )
            )
    return out


# ---------------------------------------------------------------- why a shard is unassigned

# deciders that say NO because of how the cluster is configured, not because a node is short of something
_SETTING_DECIDERS = {
    "awareness": "shard allocation awareness (cluster.routing.allocation.awareness.attributes)",
    "filter": "an allocation filter (index.routing.allocation.* / cluster.routing.allocation.*)",
    "enable": "allocation disabled (cluster.routing.allocation.enable)",
    "data_tier": "the index's tier preference (index.routing.allocation.include._tier_preference)",
    "shards_limit": "a shards-per-node limit (index.routing.allocation.total_shards_per_node)",
    "node_shutdown": "a node shutdown registration",
}
# what a shard with nowhere to go explains: the cluster red, its clients' failures, the full disks beside it
_SHARDLESS_EFFECTS = ["errors", "http_5xx", "latency", "upstream_5xx", "exception", "search_cluster_*",
                      "broker_resource_alarm", "disk_*", "storage_*", "alert:*"]  # fmt: skip
_SETTING_NAME = re.compile(r"\[((?:cluster|index)\.routing\.allocation\.[\w.]+)(?:=([^\]]*))?\]")


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"search/allocation"})
def shard_allocation(evidence: EvidenceSet) -> list[Finding]:
    """`_cluster/allocation/explain` for an unassigned shard: the deciders that refused it, node by node. When
    every node is refused for disk (the high watermark), the cluster is out of disk. When nodes with room are
    refused by a setting (awareness attribute the nodes lack, a filter, allocation disabled), that setting is the
    cause and the full disks of the other nodes follow from it: shards could not move to the new space."""
    out: list[Finding] = []
    for item in evidence.kind("search/allocation"):
        d = item.data
        if d.get("can_allocate") not in ("no", "throttled", "") or not d.get("decisions"):
            continue
        by_decider: dict[str, list[tuple[int, int, str]]] = {}
        for i, n in enumerate(d["decisions"]):
            for j, x in enumerate(n.get("deciders") or ()):
                if x.get("decision") == "NO" and x.get("decider") != "same_shard":
                    by_decider.setdefault(x["decider"], []).append((i, j, str(n.get("node") or "")))
        if not by_decider:
            continue
        setting = next((k for k in _SETTING_DECIDERS if k in by_decider), None)
        disk = by_decider.get("disk_threshold", [])
        kind = "primary" if d.get("primary") else "replica"
        shard = f"{kind} shard {d.get('index')}[{d.get('shard')}]"
        nodes = sorted({node for refused in by_decider.values() for _, _, node in refused})
        tags = [f"index:{d.get('index')}", *(f"node:{n}" for n in nodes)]
        tags += [f"node:{dec.get('node_id')}" for dec in d["decisions"] if dec.get("node_id")]
        base: dict[str, Any] = {"analyzer": "shard_allocation", "domain": Domain.DATABASE, "ts": item.ts, "tags": tags}
        if setting is not None:
            rows = by_decider[setting]
            i, j, _ = rows[0]
            text = d["decisions"][i]["deciders"][j]["explanation"]
            named = _SETTING_NAME.search(text)
            blocked = sorted({n for _, _, n in rows})
            also = f"; the other {len(disk)} nodes are above the disk high watermark" if disk else ""
            attrs = sorted({f"{k}={a}" for n in d["decisions"] if n.get("node") in blocked
                            for k, a in (n.get("attributes") or {}).items()})  # fmt: skip
            if attrs:
                also = f" (those nodes carry {', '.join(attrs[:4])}){also}"
            out.append(
                Finding(
                    **{**base, "ts": None},  # the setting was in force before this shard needed a home
                    role="cause",
                    code=f"allocation_{setting}",
                    category=Category.CONFIGURATION_ERROR,
                    score=0.85,
                    title=f"{shard} refused by {setting} on {', '.join(blocked[:4])}",
                    mechanism=(
                        f"the {shard} cannot be allocated: {_SETTING_DECIDERS[setting]} refuses it on "
                        f"{', '.join(blocked[:6])} ('{text[:200]}'){also}, so the nodes with room take no shards"
                        + (f" ({named.group(1)}{'=' + named.group(2) if named.group(2) else ''})" if named else "")
                        + "."
                    ),
                    object=f"{setting} setting for {shard}",
                    explains=_SHARDLESS_EFFECTS,
                    evidence=[
                        EvidenceRef(item=item.id, field=f"decisions.{i}.deciders.{j}.explanation", value=text[:200]),
                        *(
                            [
                                EvidenceRef(
                                    item=item.id,
                                    field=f"decisions.{disk[0][0]}.deciders.{disk[0][1]}.decider",
                                    value="disk_threshold",
                                )
                            ]
                            if disk
                            else []
                        ),
                    ],
                    actions=[
                        Action(description="The attributes each node carries", command="GET _cat/nodeattrs?v"),
                        Action(
                            description="The allocation settings in force",
                            command="GET _cluster/settings?include_defaults=true&filter_path=**.routing.allocation",
                        ),
                        Action(
                            description="Retry allocation once the setting or the nodes agree",
                            command="POST _cluster/reroute?retry_failed=true",
                            kind="write",
                        ),
                    ],
                )
            )
        elif disk and len({n for _, _, n in disk}) == len(d["decisions"]):
            i, j, _ = disk[0]
            text = d["decisions"][i]["deciders"][j]["explanation"]
            out.append(
                Finding(
                    **base,
                    role="cause",
                    code="allocation_disk_full",
                    category=Category.RESOURCE_EXHAUSTION,
                    score=0.8,
                    title=f"{shard} has no node under the disk watermark ({len(disk)} nodes)",
                    mechanism=f"the {shard} cannot be allocated: every data node ({len(disk)}) is above the disk "
                    f"high watermark ('{text[:160]}'): the cluster is out of disk.",
                    object=f"disk of the data nodes for {shard}",
                    explains=_SHARDLESS_EFFECTS,
                    evidence=[
                        EvidenceRef(item=item.id, field=f"decisions.{i}.deciders.{j}.explanation", value=text[:200])
                    ],
                    actions=[
                        Action(description="Disk use per data node", command="GET _cat/allocation?v"),
                        Action(
                            description="Delete or shrink old indices, or add data nodes",
                            command="DELETE <old-index>",
                            kind="write",
                        ),
                    ],
                )
            )
    return out
