"""A search cluster's own health (Elasticsearch / OpenSearch `_cluster/health`)."""

from __future__ import annotations

from typing import Any

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Category, Domain, EvidenceRef, Finding

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
