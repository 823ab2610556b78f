"""Metrics: any metric series (Prometheus, CloudWatch, Performance Insights, host samples).

Per series, in order, the first that applies:
1. saturation: the trailing points at >= 90% of a known limit (percent metrics: 100; memory against the
   container's limit series; file system use against its size; connections against max_connections);
2. trend to exhaustion: a linear trend (r² >= 0.8) that reaches the limit (or zero, for free/available/balance
   series) within 24 hours, with the time to full;
3. step change: a level shift that lasts to the end, at time T (so the reasoning can line it up with changes);
4. anomalies: robust z-scores (the metric_anomalies algorithm, diagnosis.series.robust_scores) with the first
   points of the series never judged (sampling warm-up); a spike that recovered is benign.
Series the database analyzer interprets (RDS storage, replica lag, burst balance, CPU, I/O) are left to it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from diagnosis.analyzers._common import fmt_ts, with_aliases, workload_of_pod
from diagnosis.analyzers._kube import kube_index
from diagnosis.analyzers._kube_pods import quantity
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.database import DB_INTERPRETED, is_db_metric
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    Point,
    anomalies,
    counter_rate,
    human_duration,
    median,
    points_of,
    robust_baseline,
    saturation,
    step_change,
    time_to_exhaustion,
    time_to_reach,
    warmup_points,
)

# Saturated at >= 90% of the limit: past it, memory gets OOM-killed on the next burst, disks fail writes, pools
# cannot grow, and CPU run queues grow.
SATURATED = 0.9
# A trend is worth naming when it reaches the limit within a day (someone must act today).
HORIZON_S = 24 * 3600
TREND_TRAVELLED = 0.1  # a trend has covered this share of the way from its start to the limit (or zero)
# Anomaly score above which a point is anomalous (the metric_anomalies tool's default), and the trailing
# points that must be back to normal for a spike to count as recovered.
ANOMALY_Z = 3.5
# Memory that was already at >= 85% of its limit over the first half of the window is a steady state.
STEADY_HIGH = 0.85
RECOVERED_TAIL = 3

_KIND_PATTERNS = [
    ("cpu", re.compile(r"cpu", re.I)),
    ("memory", re.compile(r"mem(?:ory)?|rss|heap|working[_-]?set|freeablememory", re.I)),
    # Prometheus's remote_storage_* series measure its remote-write queue, not a disk
    ("disk", re.compile(r"filesystem|disk|(?<!remote_)storage|volume|inode", re.I)),
    ("connections", re.compile(r"connections|numbackends|pg_stat_activity_count|clients", re.I)),
    (
        "latency",
        re.compile(r"latenc(?:y|ies)|duration|response_time|_seconds(?:_bucket|_sum)?$|p9\d|responsetime", re.I),
    ),
    # failures, and health counters of a cluster (Kafka under-replicated or offline partitions, unavailable
    # replicas, degraded members): a rise is something failing
    (
        "errors",
        re.compile(
            r"5xx|error|errors|fail|exception|HTTPCode_\w+_5XX|under_?replicated|offline_?partitions|"
            r"unavailable_?replicas|unassigned|degraded|unhealthy|"
            # the share of answers that fell back to nothing useful: searches with no result, offers or features
            # served from the default, a fallback path taken
            r"zero[_-]?results?|no[_-]?results?|empty[_-]?results?|default[_-]?(?:ratio|rate|share)|fallback",
            re.I,
        ),
    ),
    ("restarts", re.compile(r"restart", re.I)),
    (
        "backlog",
        re.compile(
            r"lag|backlog|queue|pending|waiting|throttl|dropped|dlq|dead_letter|watermark_age|"
            r"oldest_unacked|freshness|staleness",
            re.I,
        ),
    ),
]
_FREE = re.compile(r"free|avail|remaining|balance|credit", re.I)
_LIMIT = re.compile(r"limit|max|size_bytes|capacity|total_bytes", re.I)
_PERCENT = re.compile(r"percent|utilization|utilisation|_pct$|usage_ratio|_ratio$|%$", re.I)
# labels that identify the thing a series measures (a limit series pairs with a usage series on these)
_IDENTITY = ("namespace", "pod", "container", "instance", "device", "mountpoint", "node", "datname", "service", "job")


@dataclass
class _Series:
    item: EvidenceItem
    name: str
    labels: dict[str, str]
    points: list[Point]
    kind: str


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def metric_series(evidence: EvidenceSet) -> list[Finding]:
    series = []
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        if is_db_metric(m) and name.lower() in DB_INTERPRETED:
            continue
        pts = points_of(m.data.get("points"))
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        series.append(_Series(m, name, labels, pts, _kind(name, labels)))
    limits = [s for s in series if _LIMIT.search(s.name) and s.points]
    out: list[Finding] = []
    started = _first_seen(series)
    ended = _last_seen(series)
    for s in series:
        if s in limits or not s.points:
            continue
        late = _appeared_failing(s, started, ended)
        if late is not None:
            out += _of_dependency(s, [late])
            continue
        health = _health(s)
        if health is None:
            health = _credits(s)
        if health is None:
            health = _capacity_throttled(s)
        if health is not None:
            out += health
            continue
        if len(s.points) < 3:
            continue
        out += _analyze(s, limits)
    return with_aliases(out)


def _first_seen(series: list[_Series]) -> dict[str, float]:
    """The first timestamp of each metric name over all its series."""
    out: dict[str, float] = {}
    for s in series:
        if s.points:
            out[s.name] = min(out.get(s.name, s.points[0][0]), s.points[0][0])
    return out


def _last_seen(series: list[_Series]) -> dict[str, float]:
    """The last timestamp of each metric name over all its series."""
    out: dict[str, float] = {}
    for s in series:
        if s.points:
            out[s.name] = max(out.get(s.name, s.points[-1][0]), s.points[-1][0])
    return out


GONE_STEPS = 5  # a failure series whose points stop this many steps (and 10 minutes) before its siblings' is over


def _appeared_failing(s: _Series, started: dict[str, float], ended: dict[str, float]) -> Finding | None:
    """A failure count split by result (a resultCode=503 series beside the 200 one) exists only once the failures
    begin: a series of the same metric that starts well after its siblings, all its points failing, is a step from
    nothing, which no single series shows."""
    if s.kind != "errors" or len(s.points) < 2 or any(v <= 0 for _, v in s.points):
        return None
    step = s.points[1][0] - s.points[0][0]
    first = started.get(s.name)
    if first is None or step <= 0 or s.points[0][0] - first < 2 * step:
        return None
    who = _who(s)
    peak = max(range(len(s.points)), key=lambda i: s.points[i][1])
    last = ended.get(s.name, s.points[-1][0])
    if last - s.points[-1][0] >= max(GONE_STEPS * step, 600.0):
        # a sparse failure count (only the non-zero points are exported) that stopped while its siblings go on
        return Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="benign",
            code="spike_recovered",
            category=Category.HEALTHY,
            title=f"{who}: failures from {fmt_ts(s.points[0][0])} to {fmt_ts(s.points[-1][0])}, none since",
            mechanism=(
                f"{who} counted failures only from {fmt_ts(s.points[0][0])} to {fmt_ts(s.points[-1][0])} (peak "
                f"{s.points[peak][1]:.4g}) and none since, while the other series of {s.name} go on to "
                f"{fmt_ts(last)}: a burst that is over."
            ),
            object=who,
            score=0.2,
            ts=s.points[0][0],
            tags=_tags(s),
            evidence=[_ref(s, len(s.points) - 1, s.points[-1][1])],
        )
    return Finding(
        analyzer="metric_series",
        domain=Domain.METRICS,
        role="symptom",
        code=_symptom_code(s),
        category=Category.UNKNOWN,
        title=f"{who} appeared at {fmt_ts(s.points[0][0])} (peak {s.points[peak][1]:.4g})",
        mechanism=(
            f"{who} has no points before {fmt_ts(s.points[0][0])} while the other series of {s.name} go back to "
            f"{fmt_ts(first)}: these failures began then (peak {s.points[peak][1]:.4g})."
        ),
        object=who,
        score=0.5,
        ts=s.points[0][0],
        tags=_tags(s),
        evidence=[_ref(s, 0, s.points[0][1]), _ref(s, peak, s.points[peak][1])],
    )


# ---------------------------------------------------------------- health indicators
# Series whose value is a verdict, not a quantity: AWS status checks (1 = failed), an exporter's health colour
# (1 on the series labelled red), Prometheus' `up` (0 = the target does not answer its scrape).
# (GetMetricData's label may add the instance: "StatusCheckFailed_System i-0a7c3e91f2b45d608")
_STATUS_CHECK = re.compile(r"^StatusCheckFailed(?:_(System|Instance|AttachedEBS))?(?:\s+(?P<inst>i-[0-9a-f]{8,17}))?$")
_HEALTH_NAME = re.compile(r"health|status", re.I)
_BAD_LABEL_VALUES = {"red", "failed", "failure", "down", "unhealthy", "critical", "error"}
_BAD_IN_NAME = re.compile(r"(?:status|health)[._](red|failed|down|unhealthy)$", re.I)
# labels that name a managed cluster or domain (CloudWatch dimensions), before the generic ones
# A datastore exporter's own `<store>_up` (mysqld_exporter's mysql_up, postgres_exporter's pg_up, redis_exporter's
# redis_up ...): 0 while the exporter answers its scrape but cannot reach the store: the store is down, for its
# clients a dependency that failed (what brought it down, a full volume or a node, is on its own objects)
_STORE_UP = re.compile(
    r"^(?P<store>mysql|pg|postgres|redis|mongodb|memcached|rabbitmq|elasticsearch|clickhouse|mssql|oracledb|"
    r"cassandra|zookeeper|nats|etcd)_up$"
)
_ENTITY_LABELS = ("DomainName", "ClusterName", "CacheClusterId", "BrokerName", "ReplicationGroupId", "cluster")


# Credit balances of burstable cloud resources: once spent, the resource is throttled to its baseline (CPU share,
# gp2/st1/sc1 IOPS or throughput). A balance at <= 5% of its most, after it held at least a meaningful amount, is
# empty. RDS instances' balances are the database analyzer's.
_CREDIT_NAME = re.compile(
    r"^(?:CPUCreditBalance|BurstBalance|EBSIOBalance%|EBSByteBalance%)$|credit_?balance|burst_?balance", re.I
)
CREDITS_EMPTY = 0.05


def _credits(s: _Series) -> list[Finding] | None:
    """A burstable instance or volume that spent its credits (None when the series is no credit balance)."""
    if not _CREDIT_NAME.search(s.name) or "surplus" in s.name.lower() or len(s.points) < 2:
        return None
    peak = max(v for _, v in s.points)
    last = s.points[-1][1]
    floor = max(CREDITS_EMPTY * peak, 1.0 if "cpu" in s.name.lower() else 0.0)
    if peak < 10 or last > floor:
        return []
    empty_at = next((t for t, v in s.points if v <= floor), s.points[-1][0])
    lb = s.labels
    cpu = "cpu" in s.name.lower()
    ident = lb.get("InstanceId") or lb.get("VolumeId") or lb.get("instance") or lb.get("volume") or s.item.object
    what = (
        "its CPU is throttled to the instance's baseline share, so everything on it slows down"
        if cpu
        else "the volume is throttled to its baseline IOPS/throughput, so every read and write queues"
    )
    return [
        Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="cause",
            code="cpu_credits_exhausted" if cpu else "burst_balance_exhausted",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{ident} {s.name} spent ({last:g} of a peak {peak:g})",
            mechanism=(
                f"{ident}'s {s.name} fell from {peak:g} to {last:g} (empty since {fmt_ts(empty_at)}): a burstable "
                f"resource out of credits; {what}."
            ),
            object=f"{'CPU credits' if cpu else 'I/O burst credits'} of {ident}",
            score=0.85,
            ts=empty_at,
            tags=[*_tags(s), f"host:{ident}", f"instance:{ident}", f"volume:{ident}"],
            explains=["latency", "cpu_high", "io_high", "errors", "upstream_timeout", "metric_shift", "backlog"],
            evidence=[_ref(s, len(s.points) - 1, last)],
            actions=[
                Action(
                    description="Move off the credit model",
                    command=(
                        f"aws ec2 modify-instance-credit-specification --instance-credit-specifications "
                        f"InstanceId={ident},CpuCredits=unlimited"
                        if cpu
                        else f"aws ec2 modify-volume --volume-id {ident} --volume-type gp3"
                    ),
                    kind="write",
                )
            ],
        )
    ]


# requests a managed store refused for its provisioned capacity: DynamoDB's (Read|Write)ThrottleEvents and
# ThrottledRequests (per table, per global secondary index), Kinesis's (Read|Write)ProvisionedThroughputExceeded
_THROTTLE_NAME = re.compile(
    r"^(?:Read|Write)?ThrottleEvents\b|^ThrottledRequests\b|^(?:Read|Write)ProvisionedThroughputExceeded\b", re.I
)
THROTTLED_MIN = 10  # refused requests in the recent points that make it more than a blip


def _capacity_throttled(s: _Series) -> list[Finding] | None:
    """A store refusing requests for its provisioned capacity, from none to many (None when the series is no
    throttle count)."""
    if not _THROTTLE_NAME.search(s.name) or len(s.points) < 3:
        return None
    values = [v for _, v in s.points]
    third = max(1, len(values) // 3)
    before, recent = values[:third], values[-third:]
    if sum(recent) < THROTTLED_MIN or (before and max(before) > 0.2 * max(recent)):
        return []
    first = next((t for t, v in s.points if v > 0 and t >= s.points[third][0]), s.points[-1][0])
    lb = s.labels
    # a CloudWatch result named by its label: "WriteThrottleEvents shipment-events gsi-carrier-status"
    words = s.name.split()[1:]
    table = lb.get("TableName") or lb.get("StreamName") or lb.get("table") or (words[0] if words else s.item.object)
    index = lb.get("GlobalSecondaryIndexName") or (words[1] if len(words) > 1 else None)
    what = f"{table} index {index}" if index else table
    return [
        Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="cause",
            code="capacity_throttled",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{what}: {s.name} from 0 to {max(recent):g}",
            mechanism=(
                f"{what} refuses requests for its provisioned capacity ({s.name} from none to {max(recent):g} per "
                f"period since {fmt_ts(first)}): the writes or reads it takes outgrew the capacity it has"
                + (" (a global secondary index throttles the table's writes too)" if index else "")
                + ", so callers get throttling errors and retry."
            ),
            object=f"capacity of {what}",
            score=0.8,
            ts=first,
            tags=[*_tags(s), f"table:{table}", *([f"index:{index}"] if index else [])],
            explains=["errors", "http_5xx", "latency", "rate_limited", "metric_shift", "backlog", "alert:*"],
            evidence=[_ref(s, len(s.points) - 1, s.points[-1][1])],
            actions=[
                Action(
                    description=f"The provisioned and consumed capacity of {what}",
                    command=f"aws dynamodb describe-table --table-name {table}",
                ),
                Action(
                    description="Raise its capacity (or turn on auto scaling / on-demand)",
                    command=f"aws dynamodb update-table --table-name {table} --billing-mode PAY_PER_REQUEST",
                    kind="write",
                ),
            ],
        )
    ]


def _failing_since(points: list[Point], failing: Callable[[float], bool]) -> float:
    """When the run of failing values that ends the series began."""
    since = points[-1][0]
    for ts, v in reversed(points):
        if not failing(v):
            break
        since = ts
    return since


def _health(s: _Series) -> list[Finding] | None:
    """Findings for a health-indicator series (an empty list when it is healthy), None when it is not one."""
    m = _STATUS_CHECK.match(s.name)
    bad_label = next((k for k, v in s.labels.items() if v.lower() in _BAD_LABEL_VALUES), None)
    if m:
        failing = s.points[-1][1] >= 1
        kind = m.group(1) or "System"
    elif bad_label and _HEALTH_NAME.search(s.name):
        failing = s.points[-1][1] >= 1
        kind = "health"
    elif (cm := _BAD_IN_NAME.search(s.name)) is not None:
        # CloudWatch puts the colour in the name: AWS/ES ClusterStatus.red, a recorded `cluster_health_red`
        failing = s.points[-1][1] >= 1
        kind = "health"
        bad_label = "status"
        s = _Series(s.item, s.name, {**s.labels, "status": cm.group(1).lower()}, s.points, s.kind)
    elif s.name == "up":
        failing = s.points[-1][1] == 0
        kind = "up"
    elif _STORE_UP.match(s.name):
        failing = s.points[-1][1] == 0 and any(v == 1 for _, v in s.points)
        kind = "up"
        if failing:
            return _store_down(s)
    else:
        return None
    if not failing:
        return []
    since = _failing_since(s.points, (lambda v: v == 0) if kind == "up" else (lambda v: v >= 1))
    ref = _ref(s, len(s.points) - 1, s.points[-1][1])
    lb = s.labels
    if kind in ("System", "Instance", "AttachedEBS"):
        inst = lb.get("InstanceId") or lb.get("instance") or (m and m["inst"]) or s.item.object
        what = {
            "System": (
                "the AWS host or network under it failed (system status check): the instance is "
                "unreachable until it is moved to healthy hardware"
            ),
            "Instance": (
                "the instance itself stopped answering (instance status check: a hung or crashed OS, "
                "exhausted memory, a broken network configuration)"
            ),
            "AttachedEBS": "its attached EBS volumes stopped answering I/O (attached-EBS status check)",
        }[kind]
        return [
            Finding(
                analyzer="metric_series",
                domain=Domain.METRICS,
                role="cause",
                code=f"ec2_status_check_{kind.lower()}",
                category=Category.INFRASTRUCTURE,
                title=f"EC2 {inst} failing {s.name} since {fmt_ts(since)}",
                mechanism=f"EC2 instance {inst} has failed {s.name} since {fmt_ts(since)}: {what}.",
                object=f"EC2 instance {inst}",
                score=0.9 if kind == "System" else 0.75,
                ts=since,
                tags=[*_tags(s), f"host:{inst}", f"instance:{inst}"],
                # a system check failure takes the instance (and its OS check) down with it
                explains=[
                    "process_down",
                    "target_down",
                    "errors",
                    "latency",
                    "connection_refused",
                    "upstream_timeout",
                    "upstream_reset",
                    "pod_restarts",
                    "node_not_ready",
                    "ec2_status_check_instance",
                    "ec2_status_check_attachedebs",
                    "metric_shift",
                ],
                evidence=[ref],
                actions=[
                    Action(
                        description="The instance's status checks and scheduled events",
                        command=f"aws ec2 describe-instance-status --instance-ids {inst} --include-all-instances",
                    ),
                    Action(
                        description="Stop and start it onto healthy hardware (EBS-backed; a reboot is not enough)",
                        command=(
                            f"aws ec2 stop-instances --instance-ids {inst} && aws ec2 wait instance-stopped "
                            f"--instance-ids {inst} && aws ec2 start-instances --instance-ids {inst}"
                        ),
                        kind="write",
                    ),
                ],
            )
        ]
    if kind == "health":
        entity = (
            next((lb[k] for k in _ENTITY_LABELS if lb.get(k)), None)
            or lb.get("service")
            or lb.get("job")
            or lb.get("instance")
            or s.name
        )
        return [
            Finding(
                analyzer="metric_series",
                domain=Domain.METRICS,
                role="cause",
                code="dependency_unhealthy",
                category=Category.DEPENDENCY_FAILURE,
                title=f"{entity} health {bad_label}={lb[bad_label or '']} since {fmt_ts(since)}",
                mechanism=f'{entity} reports itself unhealthy ({s.name}{{{bad_label}="{lb[bad_label or ""]}"}} = 1 since {fmt_ts(since)}): its clients\' requests to it fail.',  # noqa: E501 (an exact command or data line reads better whole)
                object=str(entity),
                score=0.8,
                ts=since,
                tags=[*_tags(s), f"service:{entity}", f"upstream:{entity}"],
                explains=[
                    "errors",
                    "exception",
                    "http_5xx",
                    "latency",
                    "upstream_timeout",
                    "upstream_5xx",
                    "upstream_reset",
                    "metric_shift",
                ],
                evidence=[ref],
                actions=[
                    Action(
                        description=f"{entity}'s own health detail",
                        command=(
                            f"curl -s http://{lb.get('instance', entity)}/_cluster/health?pretty  # or the service's "
                            "health endpoint"
                        ),
                    )
                ],
            )
        ]
    target = lb.get("instance") or lb.get("job") or s.item.object
    return [
        Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="symptom",
            code="target_down",
            category=Category.UNKNOWN,
            title=f"scrape target {target} down since {fmt_ts(since)}",
            mechanism=(
                f"Prometheus cannot scrape {target} (up = 0 since {fmt_ts(since)}): the process, its host "
                "or the network path to it is down."
            ),
            object=f"target {target}",
            score=0.55,
            ts=since,
            tags=_tags(s),
            evidence=[ref],
            needs=[f"logs and host state of {target}"],
        )
    ]


def _store_down(s: _Series) -> list[Finding]:
    """A datastore its exporter cannot reach since the series last read 1."""
    since = _failing_since(s.points, lambda v: v == 0)
    lb = s.labels
    m = _STORE_UP.match(s.name)
    store = {"pg": "postgres"}.get(m["store"], m["store"]) if m else s.name
    target = lb.get("pod") or lb.get("instance") or lb.get("service") or lb.get("job") or s.item.object
    workload = workload_of_pod(lb["pod"]) if lb.get("pod") else target
    where = f"{lb['namespace']}/{target}" if lb.get("namespace") and lb.get("pod") else target
    return [
        Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="cause",
            code="datastore_down",
            category=Category.DEPENDENCY_FAILURE,
            title=f"{store} {where} down since {fmt_ts(since)} ({s.name} = 0)",
            mechanism=(
                f"the {store} server {where} stopped answering its exporter at {fmt_ts(since)} ({s.name} went "
                f"from 1 to 0): its clients' connections are refused or time out, and their pools wait for "
                "connections that never come."
            ),
            object=f"{store} {where}",
            score=0.8,
            ts=since,
            tags=[*_tags(s), f"upstream:{workload}", f"service:{workload}"],
            explains=[
                "errors",
                "exception",
                "http_5xx",
                "latency",
                "connection_refused",
                "upstream_timeout",
                "upstream_5xx",
                "upstream_reset",
                "app_pool_exhausted",
                "db_connection_errors",
                "target_down",
                "metric_shift",
            ],
            evidence=[_ref(s, len(s.points) - 1, s.points[-1][1])],
            actions=[
                Action(
                    description=f"Why {where} is down: its pod state, events and last log lines",
                    command=(
                        f"kubectl -n {lb['namespace']} describe pod {lb['pod']}; kubectl -n {lb['namespace']} logs "
                        f"{lb['pod']} --previous --tail=100"
                        if lb.get("pod") and lb.get("namespace")
                        else f"the {store} server's own log and host state at {target}"
                    ),
                )
            ],
        )
    ]


_STATUS_LABELS = (
    "code",
    "status",
    "status_code",
    "response_code",
    "http_status",
    "status_class",
    "response_code_class",
)
_GRPC_LABELS = ("grpc_code", "grpc_status", "grpc_status_code", "rpc_grpc_status_code", "grpc_response_status")
# the gRPC codes a server or the network fails a call with (not OK, NotFound, InvalidArgument and the like: answers)
_GRPC_FAILED = re.compile(
    r"(?:DeadlineExceeded|DEADLINE_EXCEEDED|Unavailable|UNAVAILABLE|Internal|INTERNAL|Unknown|UNKNOWN|"
    r"ResourceExhausted|RESOURCE_EXHAUSTED|Aborted|ABORTED|DataLoss|DATA_LOSS|Unauthenticated|UNAUTHENTICATED|"
    r"PermissionDenied|PERMISSION_DENIED|Unimplemented|UNIMPLEMENTED|2|4|7|8|10|12|13|14|15|16)$"
)
_OUTCOME_LABELS = frozenset({"responsetype", "result", "outcome", "status", "response_type", "error_type"})
_FAILED_OUTCOME = re.compile(
    r"error|fail|denied|unauthori[sz]ed|forbidden|throttl|timeout|reject|dead_?letter|\bdlq\b|discard|invalid|poison",
    re.I,
)


# a share of something that is not a capacity (approvals, cache hits, defaults, conversions): near 1 is no limit
_USAGE_WORDS = re.compile(r"us(?:e|ed|age)|util|busy|full|fill|capacity|saturat|load|occup|consum|alloc", re.I)


def _business_ratio(s: _Series, name: str) -> bool:
    """A `*_ratio` series of no resource kind whose name says nothing of use (approve_ratio, cache_hit_ratio)."""
    return s.kind == "other" and bool(re.search(r"_ratio$", name, re.I)) and not _USAGE_WORDS.search(name)


def _kind(name: str, labels: dict[str, str]) -> str:
    if labels.get("resource") in ("cpu", "memory"):
        return labels["resource"]
    # a request counter split by status: its 5xx series (and 429, requests refused at a rate limit) counts
    # failures, not traffic
    if any(str(labels.get(k, "")).lower().startswith("5") or labels.get(k) == "429" for k in _STATUS_LABELS):
        return "errors"
    # a gRPC call counter split by status code: its failed codes count failures
    if any(_GRPC_FAILED.match(str(labels.get(k, ""))) for k in _GRPC_LABELS):
        return "errors"
    # a counter split by outcome (Azure Storage's ResponseType, a result or outcome label): its failure series
    if any(_FAILED_OUTCOME.search(str(v)) for k, v in labels.items() if k.lower() in _OUTCOME_LABELS):
        return "errors"
    service = labels.get("service")
    if service and name.startswith(f"{service}_"):
        name = name[len(service) + 1 :]  # post-storage-service_latency-90 measures latency, not storage
    for kind, rx in _KIND_PATTERNS:
        if rx.search(name):
            return kind
    return "other"


_NODE_JOB = re.compile(r"^node(?:[-_]?exporter)?$", re.I)


def _host_cpu_fraction(s: _Series, pts: list[Point]) -> bool:
    """A host's CPU busy share between 0 and 1 (node_exporter's `1 - rate(node_cpu_seconds_total{mode="idle"})`):
    a host series (no pod, no container) from a node exporter, every value a fraction, some above a third."""
    if s.kind != "cpu" or "pod" in s.labels or "container" in s.labels:
        return False
    host = bool(_NODE_JOB.match(s.labels.get("job", ""))) or s.labels.get("instance", "").endswith(":9100")
    values = [v for _, v in pts]
    return host and bool(values) and min(values) >= 0.0 and max(values) <= 1.0 and max(values) > 0.33


def _limit_for(s: _Series, limits: list[_Series]) -> tuple[float, _Series] | None:
    """A limit series of the same kind for the same object: the same pod and container, or the same file
    system, or else agreeing on every identity label both carry (at least one)."""
    best = None
    for lim in limits:
        if lim.kind != s.kind:
            continue
        if "pod" in s.labels and "pod" in lim.labels:
            keys: list[str] = [k for k in ("namespace", "pod", "container") if k in s.labels and k in lim.labels]
        elif "mountpoint" in s.labels and "mountpoint" in lim.labels:
            keys = [k for k in ("instance", "mountpoint", "device") if k in s.labels and k in lim.labels]
        else:
            keys = [k for k in _IDENTITY if k in s.labels and k in lim.labels]
        if keys and all(s.labels[k] == lim.labels[k] for k in keys) and (best is None or len(keys) > best[0]):
            best = (len(keys), lim)
    if best is None:
        return None
    value = best[1].points[-1][1]
    return (value, best[1]) if value > 0 else None


def _analyze(s: _Series, limits: list[_Series]) -> list[Finding]:
    pts = s.points
    name = s.name
    is_counter = name.endswith("_total") or (name.endswith("_count") and s.kind in ("errors", "restarts"))
    if is_counter:
        pts = counter_rate(pts)
        if len(pts) < 3:
            return []
    limit: float | None = None
    limit_ref: EvidenceRef | None = None
    paired = _limit_for(s, limits) if not is_counter else None
    free_like = bool(_FREE.search(name)) and not is_counter
    if paired and free_like and s.kind == "disk":
        # available bytes against the file system's size: judge the used share
        size = paired[0]
        pts = [(t, 100.0 * (1 - v / size)) for t, v in pts]
        limit, free_like = 100.0, False
        limit_ref = EvidenceRef(item=paired[1].item.id, field=f"points.{len(paired[1].points) - 1}", value=size)
    elif paired and not free_like:
        limit = paired[0]
        limit_ref = EvidenceRef(item=paired[1].item.id, field=f"points.{len(paired[1].points) - 1}", value=limit)
    elif not _HIGHER_BETTER.search(name) and (
        (_PERCENT.search(name) and not _business_ratio(s, name))
        or str(s.item.data.get("unit") or "").lower() in ("percent", "%")
    ):
        # (a success or availability share at 100% is the best it can be, not a resource used up)
        top = max(v for _, v in pts)
        limit = 1.0 if top <= 1.0 and re.search(r"ratio", name, re.I) else 100.0
    elif _host_cpu_fraction(s, pts):
        limit = 1.0  # a host's busy share (1 - idle), as node_exporter queries give it: 1.0 is every core busy

    # 1. saturation
    if limit:
        frac = 0.95 if s.kind == "disk" else SATURATED
        sat = saturation(pts, limit, frac, min_points=2)
        if sat:
            return [_saturation_finding(s, pts, limit, sat.since, sat.value, limit_ref)]
    # 2. trend to exhaustion
    if s.kind in ("memory", "disk", "connections", "other") or free_like:
        ttf = time_to_exhaustion(pts) if free_like else (time_to_reach(pts, limit) if limit else None)
        if ttf is not None and 0 < ttf <= HORIZON_S and _travelled(pts, 0.0 if free_like else limit):
            return [_trend_finding(s, pts, ttf, limit, free_like, limit_ref)]
    # 3. a backlog that keeps growing (a consumer that stopped or fell behind: lag rising about as fast as time)
    growing = _growing_backlog(s, pts)
    if growing:
        return [growing]
    # 4. step change
    step = step_change(pts)
    if step and _worse(s, free_like, step.after > step.before):
        return _of_dependency(
            s,
            [
                _step_finding(
                    s, pts, step.ts, step.before, step.after, step.index, is_counter, _failing(s, step.after, limit)
                )
            ],
        )
    # 5. anomalies
    return _of_dependency(s, _anomaly_findings(s, pts, free_like, is_counter, limit))


# labels that name the other side of a call in per-dependency series (Application Insights' dependencies
# `target`, OpenTelemetry's peer.service / server.address, Envoy's upstream cluster)
_TARGET_LABELS = ("target", "dependency", "peer_service", "peer.service", "server_address", "server.address",
                  "upstream", "upstream_cluster", "destination_service", "remote_service")  # fmt: skip


def _of_dependency(s: _Series, found: list[Finding]) -> list[Finding]:
    """Failed calls counted per dependency that rose: that dependency is failing its callers (a cause, named), not
    an anonymous error rate."""
    target = next((str(s.labels[k]) for k in _TARGET_LABELS if s.labels.get(k)), None)
    if target is None or s.kind != "errors":
        return found
    base = target.split("|", 1)[0].strip()
    label = next((p for p in base.split(".") if p not in ("api", "www", "svc", "rest", "gateway")), base)
    out = []
    for f in found:
        if f.role != "symptom":
            out.append(f)
            continue
        out.append(
            f.model_copy(
                update={
                    "role": "cause",
                    "code": "upstream_5xx",
                    "category": Category.DEPENDENCY_FAILURE,
                    "object": f"upstream {base}",
                    "title": f"calls to {base} failing: {f.title}",
                    "mechanism": f"calls to {base} fail more than before: {f.mechanism}",
                    "score": 0.6,
                    "tags": list(dict.fromkeys([*f.tags, f"upstream:{label}", f"service:{label}"])),
                    "explains": ["latency", "errors", "http_5xx", "exception", "metric_shift"],
                }
            )
        )
    return out


# Kinds whose rise is itself a failure signal; resource use that moved but stays below 80% of a known capacity
# (or whose capacity is unknown), and any other quantity (request rates, bytes), is a change worth listing but
# not a failure: benign, so a healthy-but-busy system still reads healthy.
_FAILURE_KINDS = {"latency", "errors", "restarts", "backlog"}
WITHIN_CAPACITY = 0.8


# an error ratio under 1% of requests is the noise every service has (a client's bad request, a deploy's
# drained connection), however far it is from a baseline of zero
ERROR_SHARE_FLOOR = 0.01
_SHARE = re.compile(r"ratio|share|fraction|percent|pct|%", re.I)
_REPLICAS = re.compile(r"replicas|desired_?capacity|instances_?in_?service|GroupInServiceInstances", re.I)
_REPLICA_LAG = re.compile(r"replica(?:tion)?_?lag(?!_?bytes)", re.I)


def _failing(s: _Series, value: float, limit: float | None) -> bool:
    if s.kind == "errors" and _SHARE.search(s.name):
        top = max((v for _, v in s.points), default=0.0)
        percent = "%" in s.name or str(s.item.data.get("unit") or "").lower() in ("percent", "%")
        unit = (
            100.0
            if top > 1.0 or percent or (_PERCENT.search(s.name) and not re.search(r"ratio", s.name, re.I))
            else 1.0
        )
        if value < ERROR_SHARE_FLOOR * unit and top < ERROR_SHARE_FLOOR * unit:
            return False
    if s.kind == "backlog" and _REPLICA_LAG.search(s.name) and max((v for _, v in s.points), default=0.0) < 1.0:
        return False  # a replica under a second behind (in seconds, as RDS and ElastiCache report it) is in sync
    if s.kind in _FAILURE_KINDS:
        return True
    if _REPLICAS.search(s.name):
        return limit is not None and value >= limit  # an autoscaler that scaled out and has room left is working
    return limit is not None and value >= WITHIN_CAPACITY * limit


# ratios where more is better: a cache's hits, a success or availability share, acknowledgements of work done
_HIGHER_BETTER = re.compile(
    r"hit[_-]?(?:ratio|rate|percent|pct)|success[_-]?(?:ratio|rate|percent|pct)|availability|apdex|"
    r"ack(?:nowledge)?d?[_-]?rate|uptime[_-]?(?:percent|pct|ratio)",
    re.I,
)


def _worse(s: _Series, free_like: bool, up: bool) -> bool:
    """Whether the direction of a change is the bad one: up for use, latency and errors; down for free space, a
    cache's hit ratio, a success share."""
    return up != (free_like or bool(_HIGHER_BETTER.search(s.name)))


def _tags(s: _Series) -> list[str]:
    lb = s.labels
    tags = [f"metric:{s.name}"]
    if lb.get("pod"):
        ns = lb.get("namespace", "default")
        tags += [f"pod:{ns}/{lb['pod']}", f"service:{workload_of_pod(lb['pod'])}"]
    for key in ("service", "app", "job", "app_kubernetes_io_name", "deployment", "FunctionName"):
        if lb.get(key):  # a Lambda function (CloudWatch's FunctionName dimension) is a service too
            tags.append(f"service:{lb[key]}")
            break
    if lb.get("instance"):
        tags.append(f"host:{lb['instance'].rsplit(':', 1)[0]}")
    if lb.get("host"):
        tags.append(f"host:{lb['host']}")
    if lb.get("node"):
        tags.append(f"node:{lb['node']}")
    if lb.get("mountpoint"):
        tags.append(f"fs:{lb['mountpoint']}")
    for key in ("DBInstanceIdentifier", "DBClusterIdentifier"):
        if lb.get(key):
            tags.append(f"db:{lb[key]}")
    return list(dict.fromkeys(tags))


def _who(s: _Series) -> str:
    lb = s.labels
    parts = [
        f"{k}={lb[k]}"
        for k in ("namespace", "pod", "container", "instance", "mountpoint", "service", "job", "DBInstanceIdentifier")
        if lb.get(k)
    ]
    return f"{s.name}{{{', '.join(parts)}}}" if parts else s.name


def _ref(s: _Series, index: int, value: float) -> EvidenceRef:
    # the index is into the item's own points (rates and derived series keep the same order and end)
    raw = s.item.data.get("points") or []
    i = min(max(index, 0), len(raw) - 1) if raw else 0
    return EvidenceRef(item=s.item.id, field=f"points.{i}", value=round(value, 4))


_SYMPTOM_CODE = {
    "cpu": "cpu_high",
    "memory": "memory_high",
    "connections": "connections_high",
    "latency": "latency",
    "errors": "errors",
    "restarts": "pod_restarts",
    "disk": "disk_high",
}


GROWING_STEPS = 0.8  # share of a backlog's last points that rise
GROWING_FACTOR = 3.0  # and it ends at least this many times where its rise began


def _growing_backlog(s: _Series, pts: list[Point]) -> Finding | None:
    """A backlog (lag, queue depth, watermark age) rising without a pause over its last points: what consumes it
    stopped or fell behind, and it is still falling behind now."""
    if s.kind != "backlog" or len(pts) < 6:
        return None
    tail = pts[-max(6, len(pts) // 3) :]
    rises = sum(1 for (_, a), (_, b) in itertools.pairwise(tail) if b > a)
    if rises < GROWING_STEPS * (len(tail) - 1) or tail[-1][1] <= tail[0][1]:
        return None
    # where the rise began: the last point before which the series did not rise
    i = len(pts) - len(tail)
    while i > 0 and pts[i][1] > pts[i - 1][1]:
        i -= 1
    since, first = pts[i][0], pts[i][1]
    if pts[-1][1] < GROWING_FACTOR * max(first, 1e-9):
        return None
    rate = (pts[-1][1] - first) / max(pts[-1][0] - since, 1.0)
    who = _who(s)
    return Finding(
        analyzer="metric_series",
        domain=Domain.METRICS,
        role="symptom",
        code=_symptom_code(s),
        category=Category.UNKNOWN,
        title=f"{who} growing since {fmt_ts(since)} ({first:.4g} -> {pts[-1][1]:.4g})",
        mechanism=(
            f"{who} has risen without a pause since {fmt_ts(since)}, from {first:.4g} to {pts[-1][1]:.4g} "
            f"({rate:.3g} per second): what consumes it stopped or fell behind and is still falling behind."
        ),
        object=who,
        score=0.55,
        ts=since,
        tags=_tags(s),
        evidence=[_ref(s, i, first), _ref(s, len(pts) - 1, pts[-1][1])],
    )


def _symptom_code(s: _Series) -> str:
    if s.kind == "errors" and (
        re.search(r"5xx|5\d\d", s.name) or re.match(r"5", s.labels.get("code", s.labels.get("status", "")))
    ):
        return "http_5xx"
    return _SYMPTOM_CODE.get(s.kind, "metric_shift")


def _saturation_finding(
    s: _Series, pts: list[Point], limit: float, since: float, value: float, limit_ref: EvidenceRef | None
) -> Finding:
    who = _who(s)
    pct = 100.0 * value / limit
    refs = [_ref(s, len(pts) - 1, value), *([limit_ref] if limit_ref else [])]
    over = f"{value:.4g} of its limit {limit:.4g}" if limit != 100.0 else f"{value:.0f}%"
    if s.kind not in ("memory", "disk"):
        # busy CPU, many connections and a full queue are effects of something (a query, a blocked pool, a consumer
        # that stopped): symptoms
        return Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="symptom",
            code=_symptom_code(s) if s.kind != "other" else "saturation",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{who} saturated ({pct:.0f}% of limit) since {fmt_ts(since)}",
            mechanism=f"{who} has been at {over} since {fmt_ts(since)}.",
            object=who,
            score=0.55,
            ts=since,
            tags=_tags(s),
            evidence=refs,
        )
    steady = s.kind == "memory" and median([v for _, v in pts[: max(1, len(pts) // 2)]]) >= STEADY_HIGH * limit
    if steady:
        return Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="benign",
            code="memory_high_steady",
            category=Category.HEALTHY,
            title=f"{who}: memory steady at {pct:.0f}% of its limit",
            mechanism=f"{who} has stayed near {over} ({pct:.0f}%) throughout: a steady state (heap or cache sized "
            "to the limit), not a change.",
            object=who,
            score=0.2,
            ts=since,
            tags=_tags(s),
            evidence=refs,
        )
    code = {"memory": "memory_near_limit", "disk": "disk_full"}[s.kind]
    what = {"memory": "memory", "disk": "file system"}[s.kind]
    return Finding(
        analyzer="metric_series",
        domain=Domain.METRICS,
        role="cause",
        code=code,
        category=Category.RESOURCE_EXHAUSTION,
        title=f"{who}: {what} at {pct:.0f}% of its limit",
        mechanism=(
            f"{who} has been at {over} ({pct:.0f}%) since {fmt_ts(since)}: "
            + ("the next allocation burst is OOM-killed." if s.kind == "memory" else "writes fail once it is full.")
        ),
        object=who,
        score=0.8,
        ts=since,
        tags=_tags(s),
        explains=["memory_high", "pod_restarts", "latency", "errors"]
        if s.kind == "memory"
        else ["errors", "disk_full", "disk_high", "pod_restarts"],
        evidence=refs,
        actions=_resource_actions(s),
    )


def _travelled(pts: list[Point], target: float | None) -> bool:
    """Whether the series has covered enough of the way to its target for a straight line to say when it gets
    there: 25.1 GB free falling to 24.2 GB is a wobble of 3%, not memory running out in two hours."""
    if target is None:
        return False
    start, last = pts[0][1], pts[-1][1]
    return abs(start - target) > 0 and abs(last - start) / abs(start - target) >= TREND_TRAVELLED


def _trend_finding(
    s: _Series, pts: list[Point], ttf: float, limit: float | None, free_like: bool, limit_ref: EvidenceRef | None
) -> Finding:
    who = _who(s)
    start, last = pts[0][1], pts[-1][1]
    target = "zero" if free_like else f"its limit {limit:.4g}"
    return Finding(
        analyzer="metric_series",
        domain=Domain.METRICS,
        role="cause",
        code="trend_to_exhaustion",
        category=Category.RESOURCE_EXHAUSTION,
        title=f"{who} reaches {target} in ~{human_duration(ttf)}",
        mechanism=(
            f"{who} moved steadily from {start:.4g} to {last:.4g} between {fmt_ts(pts[0][0])} and "
            f"{fmt_ts(pts[-1][0])}; "
            f"at this rate it reaches {target} in about {human_duration(ttf)} (at {fmt_ts(pts[-1][0] + ttf)})."
        ),
        object=who,
        score=0.7 if ttf <= 6 * 3600 else 0.5,
        ts=pts[0][0],
        tags=_tags(s),
        explains=[_symptom_code(s)],
        evidence=[_ref(s, 0, start), _ref(s, len(pts) - 1, last), *([limit_ref] if limit_ref else [])],
        actions=_resource_actions(s),
    )


def _step_finding(
    s: _Series,
    pts: list[Point],
    ts: float,
    before: float,
    after: float,
    index: int,
    is_counter: bool,
    failing: bool = True,
) -> Finding:
    who = _who(s) + (" (rate)" if is_counter else "")
    return Finding(
        analyzer="metric_series",
        domain=Domain.METRICS,
        role="symptom" if failing else "benign",
        code=_symptom_code(s) if failing else "shift_within_capacity",
        category=Category.UNKNOWN if failing else Category.HEALTHY,
        title=f"{who} stepped from {before:.4g} to {after:.4g} at {fmt_ts(ts)}",
        mechanism=(
            f"{who} shifted from about {before:.4g} to about {after:.4g} at {fmt_ts(ts)} and stayed "
            "there: something changed at that time."
        ),
        object=who,
        score=0.5,
        ts=ts,
        tags=_tags(s),
        evidence=[
            _ref(s, index + (1 if is_counter else 0), after),
            _ref(s, max(0, index - 1 + (1 if is_counter else 0)), before),
        ],
    )


def _anomaly_findings(
    s: _Series, pts: list[Point], free_like: bool, is_counter: bool, limit: float | None = None
) -> list[Finding]:
    found = [
        a
        for a in anomalies(pts, ANOMALY_Z)
        if _worse(s, free_like, a.value > robust_baseline([v for _, v in pts]).median)
    ]
    if not found:
        return []
    who = _who(s) + (" (rate)" if is_counter else "")
    off = 1 if is_counter else 0
    skip = warmup_points(len(pts))
    base = robust_baseline([v for _, v in pts[skip:]])
    tail = pts[-RECOVERED_TAIL:]
    recovered = all(abs(base.z(v)) <= ANOMALY_Z for _, v in tail) and found[-1].index < len(pts) - RECOVERED_TAIL
    peak = max(found, key=lambda a: a.score)
    if recovered:
        return [
            Finding(
                analyzer="metric_series",
                domain=Domain.METRICS,
                role="benign",
                code="spike_recovered",
                category=Category.HEALTHY,
                title=f"{who}: short spike at {fmt_ts(peak.ts)}, recovered",
                mechanism=(
                    f"{who} spiked to {peak.value:.4g} at {fmt_ts(peak.ts)} ({len(found)} point(s), baseline "
                    f"{base.median:.4g}) "
                    f"and is back to {tail[-1][1]:.4g}: a transient, not a current fault."
                ),
                object=who,
                score=0.2,
                ts=found[0].ts,
                tags=_tags(s),
                evidence=[_ref(s, peak.index + off, peak.value), _ref(s, len(pts) - 1 + off, tail[-1][1])],
            )
        ]
    failing = _failing(s, pts[-1][1], limit)
    return [
        Finding(
            analyzer="metric_series",
            domain=Domain.METRICS,
            role="symptom" if failing else "benign",
            code=_symptom_code(s) if failing else "shift_within_capacity",
            category=Category.UNKNOWN if failing else Category.HEALTHY,
            title=f"{who} anomalous since {fmt_ts(found[0].ts)} (peak {peak.value:.4g}, z {peak.score})",
            mechanism=(
                f"{who} left its baseline ({base.median:.4g}) at {fmt_ts(found[0].ts)}: {len(found)} "
                f"anomalous point(s), peak {peak.value:.4g}, and has not recovered."
            ),
            object=who,
            score=0.45,
            ts=found[0].ts,
            tags=_tags(s),
            evidence=[_ref(s, peak.index + off, peak.value), _ref(s, len(pts) - 1 + off, pts[-1][1])],
        )
    ]


def _resource_actions(s: _Series) -> list[Action]:
    lb = s.labels
    if s.kind == "memory" and lb.get("pod"):
        ns = lb.get("namespace", "default")
        return [
            Action(
                description="Memory use against limits now",
                command=(
                    f"kubectl top pod {lb['pod']} -n {ns} --containers; kubectl get pod {lb['pod']} -n {ns} -o "
                    f"jsonpath='{{.spec.containers[*].resources}}'"
                ),
            )
        ]
    if s.kind == "disk":
        mount = lb.get("mountpoint", "/")
        return [
            Action(
                description=f"What fills {mount}",
                command=f"df -h {mount}; sudo du -xh --max-depth=2 {mount} 2>/dev/null | sort -rh | head -20",
            )
        ]
    return [
        Action(
            description=f"The series over the last hours ({s.name})",
            command=(
                f"curl -sG $PROM/api/v1/query_range --data-urlencode 'query={s.name}' --data-urlencode "
                "start=$(date -d -6hours +%s) --data-urlencode end=$(date +%s) --data-urlencode step=60"
            ),
        )
    ]


# ---------------------------------------------------------------- CPU throttling (cgroup CFS quota)
# A container at its CPU limit is throttled: the kernel stops it for the rest of each 100 ms period once it has
# used its quota, so requests stall although the node has idle CPU. Read from cAdvisor's counters
# (container_cpu_cfs_throttled_periods_total / container_cpu_cfs_periods_total) or a recorded ratio of them.
THROTTLED_SHARE = 0.25  # a quarter of the periods throttled, over the trailing points, is a latency cause
_THROTTLED = re.compile(r"cfs_throttled|cpu[_ -]throttl|^throttled[_ ]periods", re.I)
_PERIODS = re.compile(r"cfs_periods", re.I)


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def cpu_throttling(evidence: EvidenceSet) -> list[Finding]:
    periods: dict[tuple[str, str, str], EvidenceItem] = {}
    throttled: list[EvidenceItem] = []
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        if _THROTTLED.search(name):
            throttled.append(m)
        elif _PERIODS.search(name):
            periods[_pod_key(m)] = m
    out: list[Finding] = []
    for m in throttled:
        name = str(m.data.get("name") or m.object)
        pts = points_of(m.data.get("points"))
        if len(pts) < 2:
            continue
        pair = periods.get(_pod_key(m))
        if name.endswith("_total") and pair is not None:
            share = _counter_share(pts, points_of(pair.data.get("points")))
        elif "ratio" in name.lower() or max(v for _, v in pts) <= 1.0:
            tail = [v for _, v in pts[-3:]]
            share = sorted(tail)[len(tail) // 2]
        else:
            continue
        if share is None or share < THROTTLED_SHARE:
            continue
        labels = m.data.get("labels") or {}
        ns, pod, container = _pod_key(m) if labels.get("pod") else _pod_of_service(evidence, m)
        service = str(labels.get("service") or "")
        if not pod and not service:
            continue
        limit, limit_ref = _cpu_limit(evidence, ns, pod, container) if pod else (None, None)
        since = next((t for t, v in pts if v >= THROTTLED_SHARE), pts[-1][0])
        where = (
            f"container {container} of pod {ns}/{pod}"
            if container and pod
            else f"pod {ns}/{pod}"
            if pod
            else f"service {service}"
        )
        lim = f" at its CPU limit {limit}" if limit else " at its CPU limit"
        refs = [EvidenceRef(item=m.id, field=f"points.{len(pts) - 1}", value=round(pts[-1][1], 4))]
        if limit_ref:
            refs.append(limit_ref)
        out.append(
            Finding(
                analyzer="cpu_throttling",
                domain=Domain.METRICS,
                role="cause",
                code="cpu_throttled",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{where} CPU-throttled {share:.0%} of periods{lim}",
                mechanism=(
                    f"{where} is throttled by its cgroup CPU quota{lim}: {share:.0%} of CFS periods throttled "
                    f"since {fmt_ts(since)}, so requests stall waiting for CPU time even though the node may be idle."
                ),
                object=where,
                score=0.8,
                ts=since,
                tags=[f"pod:{ns}/{pod}", f"service:{workload_of_pod(pod)}"] if pod else [f"service:{service}"],
                explains=[*_CAPPED_EFFECTS, "pod_restarts"],
                evidence=refs,
                actions=[
                    Action(
                        description="CPU use against the limit, per container",
                        command=f"kubectl top pod {pod} -n {ns} --containers",
                    ),
                    _raise_cpu_limit(ns, pod or service, container),
                ],
            )
        )
    return with_aliases(out)


# A container whose CPU use rose to its CPU limit (and was well under it before) is capped by its quota: the same
# stall as throttling, read from the usage series (cores, or a rate of container_cpu_usage_seconds_total) against
# the pod's declared limit when no throttling series was exported.
AT_LIMIT = 0.9
UNDER_LIMIT_BEFORE = 0.7


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric", "k8s/Pod"})
def container_cpu_at_limit(evidence: EvidenceSet) -> list[Finding]:
    if not evidence.kind("k8s/Pod"):
        return []
    throttled = {_pod_key(m)[:2] for m in evidence.kind("metric") if _THROTTLED.search(str(m.data.get("name") or ""))}
    out: list[Finding] = []
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        ns, pod, container = _pod_key(m) if (m.data.get("labels") or {}).get("pod") else _pod_of_service(evidence, m)
        if not pod or (ns, pod) in throttled or _kind(name, m.data.get("labels") or {}) != "cpu":
            continue
        if _THROTTLED.search(name) or _PERIODS.search(name) or _LIMIT.search(name) or _PERCENT.search(name):
            continue
        raw = points_of(m.data.get("points"))
        pts = counter_rate(raw) if name.endswith("_total") else raw
        if len(pts) < 6:
            continue
        limit_text, limit_ref = _cpu_limit(evidence, ns, pod, container)
        limit = quantity(limit_text) if limit_text else None
        if not limit or limit_ref is None:
            continue
        head = median([v for _, v in pts[: len(pts) // 3]])
        tail = median([v for _, v in pts[-3:]])
        if tail < AT_LIMIT * limit or head >= UNDER_LIMIT_BEFORE * limit:
            continue
        since = next((t for t, v in pts if v >= AT_LIMIT * limit), pts[-1][0])
        where = f"container {container} of pod {ns}/{pod}" if container else f"pod {ns}/{pod}"
        out.append(
            Finding(
                analyzer="container_cpu_at_limit",
                domain=Domain.METRICS,
                role="cause",
                code="cpu_at_limit",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"{where} CPU at its limit {limit_text} since {fmt_ts(since)}",
                mechanism=(
                    f"{where} rose from {head:.3g} to {tail:.3g} CPU cores, its limit {limit_text}, at "
                    f"{fmt_ts(since)}: the CFS quota caps it, so its requests queue for CPU time and every caller "
                    "waits on it."
                ),
                object=where,
                score=0.75,
                ts=since,
                tags=[f"pod:{ns}/{pod}", f"service:{workload_of_pod(pod)}"],
                explains=[*_CAPPED_EFFECTS, "alert:*"],
                evidence=[
                    EvidenceRef(item=m.id, field=f"points.{len(raw) - 1}", value=round(raw[-1][1], 4)),
                    limit_ref,
                ],
                actions=[
                    Action(
                        description="What runs in the container and what it uses",
                        command=f"kubectl top pod {pod} -n {ns} --containers; kubectl exec -n {ns} {pod} "
                        f"{'-c ' + container + ' ' if container else ''}-- ps -eo pid,etime,pcpu,args",
                    ),
                    _raise_cpu_limit(ns, pod, container),
                ],
            )
        )
    return with_aliases(out)


# what a container capped by its CPU quota explains: its own slowness and its callers'
_CAPPED_EFFECTS = ["latency", "http_5xx", "errors", "upstream_timeout", "probe_*", "cpu_high", "metric_shift",
                   "backlog", "queue_backlog"]  # fmt: skip


def _raise_cpu_limit(ns: str, pod: str, container: str) -> Action:
    return Action(
        description="Raise the CPU limit (or remove it and keep the request)",
        command=f"kubectl set resources deployment/{workload_of_pod(pod)} -n {ns} "
        f"{'-c ' + container + ' ' if container else ''}--limits=cpu=<more>",
        kind="write",
    )


def _pod_of_service(evidence: EvidenceSet, m: EvidenceItem) -> tuple[str, str, str]:
    """A series labelled only with its service (carts_cpu) speaks for a pod of that workload, where one is exported."""
    service = str((m.data.get("labels") or {}).get("service") or "")
    for p in evidence.kind("k8s/Pod") if service else ():
        _, ns, name = p.object.split("/", 2)
        if workload_of_pod(name) == service:
            return ns, name, ""
    return "", "", ""


def _pod_key(m: EvidenceItem) -> tuple[str, str, str]:
    lb = m.data.get("labels") or {}
    return (str(lb.get("namespace") or "default"), str(lb.get("pod") or ""), str(lb.get("container") or ""))


def _counter_share(throttled: list[Point], periods: list[Point]) -> float | None:
    """Throttled periods over all periods between the last few samples (counters: increases, not values)."""
    if len(throttled) < 2 or len(periods) < 2:
        return None
    k = min(4, len(throttled), len(periods))
    dt = throttled[-1][1] - throttled[-k][1]
    dp = periods[-1][1] - periods[-k][1]
    return dt / dp if dp > 0 and dt >= 0 else None


def _cpu_limit(evidence: EvidenceSet, ns: str, pod: str, container: str) -> tuple[str | None, EvidenceRef | None]:
    pods = [p for p in evidence.kind("k8s/Pod") if p.object == f"Pod/{ns}/{pod}"]
    # a sibling of the same workload declares the same limit when the throttled pod itself was not exported
    workload = workload_of_pod(pod)
    pods += [p for p in evidence.kind("k8s/Pod") if workload_of_pod(p.object.rsplit("/", 1)[-1]) == workload]
    for p in pods:
        for i, c in enumerate(((p.data.get("spec") or {}).get("containers")) or ()):
            if container and c.get("name") != container:
                continue
            cpu = ((c.get("resources") or {}).get("limits") or {}).get("cpu")
            if cpu:
                return str(cpu), EvidenceRef(item=p.id, field=f"spec.containers.{i}.resources.limits.cpu", value=cpu)
    return None, None


# ---------------------------------------------------------------- CPU stolen by the hypervisor

# A VM whose vCPUs wait for the physical CPU (`steal`: node_exporter's mode="steal", vmstat's st, CloudWatch's
# CPUSteal): the host under it is overcommitted or failing, so everything on the VM stalls (GC pauses whose wall time
# far exceeds their CPU time, timeouts, probes) while its own CPU use looks low. Infrastructure, named by the VM.
STEAL_HIGH = 0.2  # of the CPU's time, recently ...
STEAL_BASE = 0.05  # ... after a baseline under this


def _steal_share(s: _Series) -> list[Point] | None:
    if "steal" not in s.name.lower() and s.labels.get("mode") != "steal":
        return None
    if len(s.points) < 6:
        return None
    scale = 100.0 if max(v for _, v in s.points) > 1.0 else 1.0
    return [(t, v / scale) for t, v in s.points]


@ANALYZERS.analyzer(domain=Domain.HOST, reads={"metric"})
def cpu_steal(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        s = _Series(m, name, labels, points_of(m.data.get("points")), "cpu")
        pts = _steal_share(s)
        if pts is None:
            continue
        third = max(2, len(pts) // 3)
        base = median([v for _, v in pts[:third]])
        recent = median([v for _, v in pts[-5:]])
        if recent < STEAL_HIGH or base >= STEAL_BASE:
            continue
        since = next((t for t, v in pts if v >= STEAL_HIGH / 2), pts[0][0])
        node = labels.get("node") or labels.get("nodename") or labels.get("instance", "").rsplit(":", 1)[0] or m.object
        short = node.split(".", 1)[0]
        pods = [(ns, p) for ns, p, _ in kube_index(evidence).pods_by_node.get(node, [])] or [
            (ns, p) for ns, p, _ in kube_index(evidence).pods_by_node.get(short, [])
        ]
        on_it = f"; on it: {', '.join(p for _, p in pods[:4])}" if pods else ""
        out.append(
            Finding(
                analyzer="cpu_steal",
                domain=Domain.HOST,
                role="cause",
                code="cpu_steal",
                category=Category.INFRASTRUCTURE,
                title=f"{short}: the hypervisor steals {recent:.0%} of its CPU (was {base:.0%})",
                mechanism=(
                    f"{short}'s vCPUs wait for the physical CPU {recent:.0%} of the time since {fmt_ts(since)} (steal, "
                    f"{base:.0%} before): the host under the VM is overcommitted or degraded, so everything on it "
                    "stalls (long GC pauses with little CPU used, slow requests, timeouts) while its own CPU use "
                    f"looks low{on_it}. Move the workloads off it (cordon and drain, or stop and start the VM on "
                    "another host)."
                ),
                object=f"node {short}",
                score=0.8,
                ts=since,
                tags=[f"node:{node}", f"host:{node}", f"host:{short}", *(f"pod:{ns}/{p}" for ns, p in pods)],
                explains=[
                    "latency",
                    "errors",
                    "upstream_timeout",
                    "probe_*",
                    "cpu_*",
                    "gc_*",
                    "metric_shift",
                    "alert:*",
                ],
                evidence=[_ref(s, len(s.points) - 1, s.points[-1][1])],
                actions=[
                    Action(description="Steal on the VM now", command=f"ssh {short} mpstat 1 5  # %steal"),
                    Action(
                        description="Move its pods off it",
                        command=(
                            f"kubectl cordon {node} && kubectl drain {node} --ignore-daemonsets --delete-emptydir-data"
                        ),
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)


# ---------------------------------------------------------------- a series that counts bad records, risen from zero

# A series named for bad records a service receives (NaN or null features, invalid or malformed records, parse or
# schema errors) that was about zero and rose to a real share or count and stays there: the data it is fed went
# bad. A rejection or NaN counter says why more plainly than the error rates it drives.
_BAD_RECORDS = re.compile(
    r"(?:^|[_.\-])(?:nan|null|invalid|malformed|parse_?(?:error|failure)s?|schema_?(?:error|violation|mismatch)s?|"
    r"corrupt\w*|bad_?records?|validation_?(?:error|failure)s?)(?:$|[_.\-])",
    re.I,
)
# ... or a series of rejected or dropped records whose reason label names bad values ("coordinate_out_of_range")
_REJECTS = re.compile(r"reject|drop|discard|invalid|skipp|dead_?letter|quarantin", re.I)
_BAD_REASON = re.compile(
    r"out_?of_?range|invalid|malformed|unparse?able|parse|schema|\bnan\b|null|corrupt|bad_?(?:format|value)|"
    r"too_?(?:large|long|big)|negative|wrong_?(?:type|unit)",
    re.I,
)
_REASON_LABELS = ("reason", "error", "cause", "error_type", "type", "code", "rule")
BAD_RECORDS_BEFORE = 0.01  # of the series' top: "about zero" before it rose
BAD_RECORDS_SHARE = 0.05  # a ratio that rose past 5% (a count: any that stays up)


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def bad_record_series(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    seen: set[str] = set()
    for m in evidence.kind("metric"):
        name = str(m.data.get("name") or m.object)
        labels = {str(k): str(v) for k, v in (m.data.get("labels") or {}).items()}
        reason = next((labels[k] for k in _REASON_LABELS if _BAD_REASON.search(labels.get(k, ""))), None)
        key = f"{name}{{{reason}}}" if reason else name
        if not (_BAD_RECORDS.search(name) or (reason and _REJECTS.search(name))) or key in seen:
            continue
        pts = points_of(m.data.get("points"))
        if name.endswith("_total"):
            pts = counter_rate(pts)
        if len(pts) < 6:
            continue
        top = max(v for _, v in pts)
        ratio = bool(re.search(r"ratio|rate|share|fraction|pct|percent", name, re.I)) and top <= 1.0
        if top <= 0 or (ratio and top < BAD_RECORDS_SHARE):
            continue
        rise = next(i for i, (_, v) in enumerate(pts) if v > 0.5 * top)
        head = [v for _, v in pts[:rise]]
        tail = [v for _, v in pts[-max(3, len(pts) // 5) :]]
        if len(head) < max(3, len(pts) // 10) or max(head) > BAD_RECORDS_BEFORE * top or min(tail) < 0.5 * top:
            continue  # it was there all along, or it came and went
        since = pts[rise][0]
        s = _Series(m, name, labels, pts, "other")
        who = _who(s)
        who += f" (reason {reason})" if reason and reason not in who else ""
        seen.add(key)
        out.append(
            Finding(
                analyzer="bad_record_series",
                domain=Domain.METRICS,
                role="cause",
                code="bad_data",
                category=Category.DATA_QUALITY,
                title=f"{who} rose from zero to {tail[-1]:.3g} at {fmt_ts(since)}",
                mechanism=(
                    f"{who} counts bad records (NaN, null, invalid or unparseable values) in what the service is "
                    f"fed: about zero before, {tail[-1]:.3g} since {fmt_ts(since)} and staying there - the data "
                    "it receives went bad at that time (a producer or an upstream job changed what it sends)"
                ),
                object=who,
                score=0.6,
                ts=since,
                tags=_tags(s),
                explains=["errors", "metric_shift", "shift_within_capacity", "latency", "alert:*"],
                evidence=[_ref(s, len(pts) - 1, tail[-1])],
                actions=[
                    Action(
                        description="Find which input carries the bad values (the producer, file or partition "
                        "that arrived at that time)",
                        command=f'curl -s "$PROM/api/v1/query_range?query={name}&start={since - 3600:.0f}&end='
                        f'{since + 3600:.0f}&step=60"   # then read the records that arrived at that time',
                    )
                ],
            )
        )
    return out
