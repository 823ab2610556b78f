"""An application at its own capacity (a worker pool or queue full), told from one waiting on slow calls."""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import (
    KUBE_QUOTA,
    NET_TIMEOUT,
    now_of,
    object_tags,
    quota_detail,
    service_of,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import APP_CAPACITY, CAPACITY_MIN, STOPPED_AFTER_S
from diagnosis.analyzers.remote_fs import file_server_stalled_by
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

# a client printing its settings at start-up ("ConsumerConfig values: ... max.poll.interval.ms = 300000"): a name,
# not an event
_CONFIG_DUMP = re.compile(r"\b(?:Consumer|Producer|Admin|Streams)Config values:|\bconfig(?:uration)? values:", re.I)


_SUBNET = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}/\d{1,2}\b")


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def app_capacity(evidence: EvidenceSet) -> list[Finding]:
    """A service whose worker or thread pool is full (requests rejected or queued), or a Kafka consumer whose
    processing outlasts max.poll.interval.ms (evicted from its group, rebalancing, lag growing)."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits: dict[str, list[dict[str, Any]]] = {}
        for r in item.data.get("records") or ():
            m = APP_CAPACITY.search(msg := str(r.get("msg") or ""))
            if m and not _CONFIG_DUMP.search(msg, 0, 200):
                hits.setdefault("poll" if m["poll"] else "lease" if m["lease"] else "pool", []).append(r)
        for kind, recs in hits.items():
            last = max((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            if len(recs) < CAPACITY_MIN or (now is not None and last is not None and now - last >= STOPPED_AFTER_S):
                continue
            first = min((r["ts"] for r in recs if isinstance(r.get("ts"), int | float)), default=None)
            waiting = kind == "pool" and (
                _waits_on_calls(item, first)
                or _workers_wait_in_calls(evidence, first)
                or file_server_stalled_by(evidence, first)
            )
            who = service_of(item) or item.object
            sample = " ".join(str(recs[0].get("msg") or "").split())[:200]
            if kind == "poll":
                what = (
                    f"{who}'s consumer takes longer between polls than max.poll.interval.ms: the broker evicts it "
                    "from its group, the group rebalances and its partitions' lag grows"
                )
                title = f"{who}: consumer exceeds max.poll.interval.ms ({len(recs)}x)"
            elif kind == "lease":
                subnet = next((s.group(0) for r in recs if (s := _SUBNET.search(str(r.get("msg") or "")))), None)
                what = (
                    f"{who} has no address left to lease{f' in subnet {subnet}' if subnet else ''}: every address of "
                    "the pool is leased (more clients than addresses, or leases too long for the turnover), so new "
                    "clients get no address and cannot join the network"
                )
                title = f"{who}: DHCP pool{f' {subnet}' if subnet else ''} exhausted ({len(recs)}x)"
            else:
                what = f"{who}'s worker/thread pool is exhausted: requests are rejected or queue"
                title = f"{who}: worker/thread pool exhausted ({len(recs)}x)"
            if waiting:
                what += ": its threads are held by calls that time out, which began first"
            out.append(
                Finding(
                    analyzer="app_capacity",
                    domain=Domain.LOGS,
                    # a pool full of threads waiting on a slow dependency is that dependency's symptom
                    role="symptom" if waiting else "cause",
                    code={"poll": "consumer_too_slow", "lease": "dhcp_pool_exhausted"}.get(kind, "app_pool_exhausted"),
                    category=Category.UNKNOWN if waiting else Category.RESOURCE_EXHAUSTION,
                    title=title,
                    mechanism=f"{what}: '{sample}' x{len(recs)} {span_text(first, last)}.",
                    object=who,
                    score=0.75,
                    ts=first,
                    tags=object_tags(item, service_of(item)),
                    explains=[
                        "errors",
                        "latency",
                        "http_5xx",
                        "backlog",
                        "queue_backlog",
                        "metric_shift",
                        "upstream_timeout",
                        "exception",
                        "probe_*",
                    ],
                    evidence=[
                        EvidenceRef(item=item.id, line=r.get("line"), value=str(r.get("msg"))[:300]) for r in recs[:2]
                    ],
                    actions=[
                        Action(
                            description="See the rejections and the pool or consumer settings around them",
                            command=f"grep -n -E 'max.poll|rejected|busy|max_children' <{item.object} log>",
                        )
                    ],
                )
            )
    return with_aliases(out)


def _waits_on_calls(item: EvidenceItem, pool_first: float | None) -> bool:
    """Whether the same log shows outbound calls timing out (3+) from before its pool filled up."""
    stamps = [
        r["ts"]
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float)
        and NET_TIMEOUT.search(msg := str(r.get("msg") or ""))
        and not APP_CAPACITY.search(msg)  # gunicorn's own "WORKER TIMEOUT" is the pool, not a call
    ]
    return len(stamps) >= CAPACITY_MIN and (pool_first is None or min(stamps) <= pool_first)


def _workers_wait_in_calls(evidence: EvidenceSet, pool_first: float | None) -> bool:
    """Whether a slow log (PHP-FPM's) shows the pool's workers stuck in a client library's call (a database, a
    cache, an HTTP API), 3+ times, from before the pool filled up: they wait on that server, they do not work."""
    stamps = [
        r.get("ts")
        for item in evidence.kind("log")
        if (item.data.get("source") or {}).get("export") == "php-fpm-slowlog"
        for r in item.data.get("records") or ()
        if "waiting on a call in" in str(r.get("msg") or "")
    ]
    known = [t for t in stamps if isinstance(t, int | float)]
    return len(stamps) >= CAPACITY_MIN and (pool_first is None or not known or min(known) <= pool_first + 60)


# --- a quota that refused what a deploy or job asked for, as a tool printed it ----------------------------------

# a cloud refusing capacity past the account's quota (AWS, GCP, Azure)
_CLOUD_QUOTA = re.compile(
    r"\b(?:VcpuLimitExceeded|InstanceLimitExceeded|You have requested more (?:vCPU|instances?)[^.\n]{0,40} than your "
    r"current (?:vCPU |instance )?limit|QUOTA_EXCEEDED|Quota '[\w\-]+' exceeded|QuotaExceeded|"
    r"Operation could not be completed as it results in exceeding approved \w+ quota)\b"
)
# a multi-tenant backend (Mimir, Cortex, Loki, Tempo) refusing our tenant's writes past its per-tenant limit
_TENANT_LIMIT = re.compile(
    r"per-(?:user|tenant) (?:series|streams?|metadata|exemplars?|traces?) limit of [\d.]+\w* exceeded|"
    r"err-mimir-(?:max-series-per-user|max-series-per-metric|ingestion-rate|max-global-series-per-user)\b|"
    r"(?:Maximum active stream|ingestion rate|per-user traces?) limit (?:of [\d.]+\w* )?(?:exceeded|reached)|"
    r"max(?:imum)? (?:global )?series per (?:user|tenant|metric) (?:limit )?(?:of [\d.]+ )?(?:exceeded|reached)",
    re.I,
)
# a storage quota that refuses more writes: a backup repository's (borg --storage-quota), a user's or project's
# disk quota (EDQUOT), a bucket's or volume's
_STORAGE_QUOTA = re.compile(
    r"\b(?:storage|disk|space|repository|repo|bucket|volume|user|project) quota(?: \([^)]{0,24}\))? "
    r"(?:has been |is |was )?(?:exceeded|reached|full)|\bDisk quota exceeded\b|\bEDQUOT\b",
    re.I,
)
# a cluster at its own object limit: Elasticsearch/OpenSearch refusing a new index past cluster.max_shards_per_node
# times its data nodes ("this cluster currently has [2999]/[3000] maximum shards open")
_CLUSTER_LIMIT = re.compile(
    r"this cluster currently has \[\d+\]/\[\d+\] maximum (?:normal |frozen )?shards open|"
    r"maximum (?:normal )?shards open\b"
)
_TENANT = re.compile(r"\b(?:user|tenant|org_id|orgID|X-Scope-OrgID)[=:] ?\"?(?P<t>[\w.\-]{2,60})")
_QUOTA_HINT = re.compile(
    r"uota|UOTA|LimitExceeded|requested more|imit of|limit exceeded|limit reached|err-mimir|shards open"
)
_NS_IN_MSG = re.compile(r"\b(?:-n|--namespace)[ =]([a-z0-9][a-z0-9\-]*)|\bnamespace[ =\"':]+([a-z0-9][a-z0-9\-]*)")


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def quota_refused(evidence: EvidenceSet) -> list[Finding]:
    """A quota that refused a deploy's or a job's pods or instances, read from whatever log printed the refusal
    (a CI job that listed the events, a GitOps controller, an autoscaler): the refusal itself is decisive, once
    is enough, unless the log went on for long after it without another."""
    now = now_of(evidence)
    out: list[Finding] = []
    for item in evidence.kind("log"):
        recs = item.data.get("records") or ()
        # (the cheap test first: this reads every line of every log)
        maybe = [(r, msg) for r in recs if _QUOTA_HINT.search(msg := str(r.get("msg") or ""))]
        hits = [(r, m) for r, msg in maybe if (m := KUBE_QUOTA.search(msg))]
        cloud = [(r, m) for r, msg in maybe if (m := _CLOUD_QUOTA.search(msg))]
        tenant = [(r, m) for r, msg in maybe if (m := _TENANT_LIMIT.search(msg) or _STORAGE_QUOTA.search(msg))]
        tenant += [(r, m) for r, msg in maybe if (m := _CLUSTER_LIMIT.search(msg))]
        for found, kube in ((hits, True), (cloud, False), (tenant, None)):
            if not found:
                continue
            stamps = [r["ts"] for r, _ in found if isinstance(r.get("ts"), int | float)]
            last = max(stamps, default=None)
            if now is not None and last is not None and now - last >= 6 * STOPPED_AFTER_S:
                continue
            r, m = found[-1]
            msg = " ".join(str(r.get("msg") or "").split())
            if kube:
                ns = next((g for mm in _NS_IN_MSG.finditer(msg) for g in mm.groups() if g), None)
                name = f"ResourceQuota {ns + '/' if ns else ''}{m['quota']}"
                what = f"{name} is used up{quota_detail(m)}, so the pods asked for are refused at admission"
                tags = [f"quota:{ns + '/' if ns else ''}{m['quota']}"]
                command = f"kubectl describe resourcequota {m['quota']}" + (f" -n {ns}" if ns else "")
            elif kube is None:
                who_t = _TENANT.search(msg)
                storage = _STORAGE_QUOTA.search(msg) is not None and _TENANT_LIMIT.search(msg) is None
                shards = _CLUSTER_LIMIT.search(msg) is not None
                name = (
                    "the search cluster's shard limit (cluster.max_shards_per_node times its data nodes)"
                    if shards
                    else f"the storage quota of {service_of(item) or item.object}"
                    if storage
                    else f"tenant {who_t['t']}'s limit"
                    if who_t
                    else "the tenant's limit"
                )
                what = (
                    f"{name} is reached ({m.group(0)[:80]}), so no new index (a new day's) can be created and the "
                    "writes for it are refused, however much disk the cluster has free"
                    if shards
                    else f"{name} is reached ({m.group(0)[:80]}), so the writes past it are refused while the store "
                    "itself has room"
                    if storage
                    else f"{name} at the backend it writes to is reached ({m.group(0)[:80]}), so the backend refuses "
                    "the new data past it (new series, streams or samples) while what it already holds goes on"
                )
                tags = [f"quota:{'shards' if shards else who_t['t'] if who_t else 'tenant'}"]
                command = (
                    "curl -s 'localhost:9200/_cluster/stats?filter_path=indices.shards.total'; "
                    "curl -s 'localhost:9200/_cluster/settings?include_defaults"
                    "&filter_path=*.cluster.max_shards_per_node'"
                    " (delete or shrink old indices, or raise cluster.max_shards_per_node)"
                    if shards
                    else "du -sh <the repository or volume>; prune old data, or raise the quota where it is set"
                    if storage
                    else "raise the tenant's limit in the backend's runtime overrides (or cut the data sent)"
                )
            else:
                name = f"cloud quota ({m.group(0)[:60]})"
                what = f"the account's {name} is reached, so the capacity asked for is refused"
                tags = ["quota:cloud"]
                command = "check the service quota in the cloud console and request an increase"
            who = service_of(item) or item.object
            out.append(
                Finding(
                    analyzer="quota_refused",
                    domain=Domain.LOGS,
                    role="cause",
                    code="quota_exceeded",
                    category=Category.RESOURCE_EXHAUSTION,
                    title=f"{name} refused what was asked for ({len(found)}x in {who})",
                    mechanism=f"{what}: '{msg[:240]}' x{len(found)} {span_text(min(stamps, default=None), last)}.",
                    object=name,
                    # an autoscaler refused more machines often only wanted them because something else is
                    # wrong (a stuck step): alone, weak; with what it explains on its own objects, it stands
                    score=0.85 if kube or kube is None else 0.45,
                    ts=min(stamps, default=None),
                    tags=[*tags, *object_tags(item, service_of(item))],
                    explains=[
                        "deploy_failed",
                        "rollout_stuck",
                        "replicas_unavailable",
                        "job_failed",
                        "errors",
                        "recent_deploy",
                        "pod_create_refused",
                        "alert:*",
                    ],
                    evidence=[EvidenceRef(item=item.id, line=r.get("line"), value=msg[:300]) for r, _ in found[-2:]],
                    actions=[Action(description="Show the quota's usage against its limits", command=command)],
                )
            )
    return out
