"""The investigation contract: evidence items in, findings from analyzers, one Diagnosis out.

Evidence comes from live tools or from an evidence bundle (exports of real tools in their native formats); both
become `EvidenceItem`s, so one set of analyzers serves both. Every claim a Diagnosis makes points at an item
through an `EvidenceRef`; a reference to an item that does not exist is dropped (`EvidenceSet.check`).

Evidence kinds and the shape of `data` (the normalised form every parser and live adapter produces):

| kind | object | data |
| --- | --- | --- |
| `k8s/<Kind>` (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, Node, Service, Endpoints, HorizontalPodAutoscaler, ResourceQuota, PersistentVolumeClaim) | `<Kind>/<namespace>/<name>` (`Node/<name>`) | the native object as kubectl prints it (metadata, spec, status); rebuilt from `kubectl describe` or a `kubectl get` table, it carries `x-opsgraph-from` and only the fields the text shows |
| `k8s/Event` | `<involvedKind>/<namespace>/<name>` | `{type, reason, message, involved: {kind, namespace, name}, count, first_ts, last_ts, source}` (core/v1 and events.k8s.io/v1 alike; ts are epoch seconds) |
| `alert` | `alert/<alertname>` | `{status: firing\|resolved, labels, annotations, starts_at, ends_at, fingerprint, group_key, receiver}` (ts epoch seconds, ends_at None when unset) |
| `log` | the source: `Pod/<ns>/<pod>/<container>`, a file path, `datadog/<service>` | `{records: [{ts, level, msg, line}], source: {...}, truncated: bool}`; level lower-case (error, warn, info, debug, fatal) or None; `line` 1-based in the source |
| `metric` | `metric/<name>{k=v,...}` | `{name, labels, unit, points: [[ts, value], ...], source: prometheus\|cloudwatch\|pi\|host}` (points sorted by ts) |
| `pg/session` | `pid <pid>` | one pg_stat_activity row: `{pid, datname, usename, application_name, client_addr, backend_type, state, wait_event_type, wait_event, xact_start, query_start, state_change, backend_start, query, blocked_by: [pids], captured_at}` (ts epoch seconds; captured_at the export's now()) |
| `pg/lock` | `pid <pid> <mode> on <relation>` | one pg_locks row: `{pid, locktype, relation, mode, granted, waitstart, transactionid}` (relation a name where known, else the oid as text) |
| `pg/settings` | `pg/settings` | `{max_connections, ...}` where known |
| `rds/event` | `rds/<SourceIdentifier>` | `{source_id, source_type, message, categories, ts}` |
| `pi/sql` | `pi/<group>/<statement id>` | a Performance Insights DescribeDimensionKeys entry: `{group: db.sql\|db.sql_tokenized, statement, id, load (AAS), partitions, metric}` |
| `pi/dimension` | `pi/<group>/<key>` | a DescribeDimensionKeys entry grouped by anything but SQL (db.wait_event ...): `{group, dimensions, load, partitions, metric}` |
| `external/status` | `status/<provider>` | a provider's own status (Statuspage, AWS Health): `{provider, domain, indicator, description, components: [{name, status}], failing: [component names], incidents, active_incidents, degraded: bool, source}` |
| `datastore/health` | `elasticsearch/<cluster>` | `_cluster/health`: `{engine, cluster, status: green\|yellow\|red, unassigned_shards, number_of_data_nodes, ...}` |
| `datadog/monitor` | `monitor/<id>` | `{id, name, type, query, state: OK\|Alert\|Warn\|No Data, message, tags, modified_ts}` |
| `host/snapshot` | `host/<name>` | live host_metrics: `{cpu_percent, load, mem_percent, swap_percent, disks: [{mount, percent, free_bytes, inodes_percent}], fds: {used, max}, top: [...]}` |
| `host/resolv` | `resolv.conf <file>` | an /etc/resolv.conf: `{nameservers (in the order they are asked), timeout_s, attempts, lines, command}` |
| `container/state` | `container/<name>` | a Docker container (`docker inspect` / `docker ps`): `{name, image, status, running, restarting, oom_killed, exit_code, error, started_at, finished_at, restart_count, memory_limit_bytes, health, from}` |
| `host/process` | `process/<pattern>` | live process_check: `{pattern, running, pids, ...}` |
| `http/probe` | the URL (redacted) | live http_probe: `{url, status, latency_ms, error, tls_days_left}` |
| `redis/info` | `redis/<host:port>` | live redis_info data |
| `runtime/cpu_profile` | `profile/<host or file>` | a CPU profile: `{tool, samples, frames: [{name, share, callers}], command}` |
| `runtime/heap_histogram` | `heap/<host or file>` | a JVM class histogram: `{classes: [{name, instances, bytes}], total_bytes, live}` |

An item's `ts` is when the evidence was taken (or the newest point in it); `source` names the file or tool it came from.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Category(StrEnum):
    HEALTHY = "healthy"
    RESOURCE_EXHAUSTION = "resource_exhaustion"
    CONFIGURATION_ERROR = "configuration_error"
    CODE_DEFECT = "code_defect"
    DEPENDENCY_FAILURE = "dependency_failure"
    INFRASTRUCTURE = "infrastructure"
    DATA_QUALITY = "data_quality"
    UNKNOWN = "unknown"


class Domain(StrEnum):
    """The specialists of an investigation; every analyzer belongs to one."""

    KUBERNETES = "kubernetes"
    DATABASE = "database"
    HOST = "host"
    NETWORK = "network"  # network and logs share a specialist
    LOGS = "logs"
    METRICS = "metrics"
    ALERTS = "alerts"
    CHANGES = "changes"


class EvidenceItem(BaseModel):
    """One piece of evidence: a Kubernetes object, an alert, a log source, a metric series, a session row..."""

    model_config = ConfigDict(extra="forbid")

    id: str  # stable within an investigation: "<source>#<n>" for bundles, "<node>#<n>" for live tools
    kind: str  # see the table in this module's docstring
    source: str  # file inside the bundle (or tool node) it came from
    object: str  # what it is about, as an operator names it
    ts: float | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class EvidenceRef(BaseModel):
    """A pointer into an evidence item: the field, line or series point that shows a claim, and its value."""

    model_config = ConfigDict(extra="forbid")

    item: str  # EvidenceItem.id
    field: str | None = None  # dotted path inside data ("status.containerStatuses.0.lastState.terminated.reason")
    line: int | None = None  # for logs: the record's line number
    value: Any = None  # what is there, as shown to the operator


class Action(BaseModel):
    """A concrete next step. `kind` write steps run only with a person's approval (remediation)."""

    model_config = ConfigDict(extra="forbid")

    description: str
    command: str  # the exact query, kubectl command or API call
    kind: str = "read"  # read | write
    tool: str | None = None  # an opsgraph tool that does it, when there is one
    args: dict[str, Any] = Field(default_factory=dict)


class Finding(BaseModel):
    """What an analyzer saw: a symptom or a cause candidate, with the evidence that shows it.

    `tags` name the objects it concerns ("pod:shop/checkout-7d9f", "service:checkout", "pid:4711",
    "relation:orders", "node:ip-10-0-1-5", "db:orders-prod", "host:web-1", "fs:/var"); the reasoning links a
    cause to the symptoms it explains through shared tags and through `explains` (symptom codes such as
    "pod_restarts", "http_5xx", "latency", "db_waits", "connections_high", "cpu_high", "alert:<alertname>").
    """

    model_config = ConfigDict(extra="forbid")

    analyzer: str
    domain: Domain
    role: str  # "cause" | "symptom" | "benign" (a red herring or a recovered / old signal, kept for ruled_out)
    code: str  # machine-readable kind of finding: "oom_killed", "image_pull_error", "idle_in_transaction" ...
    category: Category  # the root-cause category this finding would give if it were the root cause
    title: str  # short: "checkout-api/app OOMKilled (exit 137) 5 times"
    mechanism: str  # one sentence naming the exact object and the mechanism
    object: str  # the exact object: "Pod shop/checkout-7d9f container app", "pid 4711", "relation orders"
    score: float = Field(0.5, ge=0, le=1)  # how strongly the evidence supports it
    ts: float | None = None  # when it began, where known (causes precede their symptoms)
    tags: list[str] = Field(default_factory=list)
    explains: list[str] = Field(default_factory=list)  # symptom codes this cause would explain
    evidence: list[EvidenceRef] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    needs: list[str] = Field(default_factory=list)  # evidence that would confirm it ("logs of Pod shop/x")


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim: str
    refs: list[EvidenceRef]


class RuledOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alternative: str
    why: str
    refs: list[EvidenceRef] = Field(default_factory=list)


class Diagnosis(BaseModel):
    """The result of every investigation. `text` is Markdown, as an operator reads it."""

    model_config = ConfigDict(extra="forbid")

    category: Category
    root_cause: str
    confidence: float = Field(ge=0, le=1)
    causal_chain: list[str] = Field(default_factory=list)  # from the cause to the symptom the operator saw
    evidence: list[Claim] = Field(default_factory=list)
    ruled_out: list[RuledOut] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    text: str = ""
    other_causes: list[str] = Field(default_factory=list)  # independent simultaneous faults, each named
    missing: list[str] = Field(default_factory=list)  # what evidence would decide (always set for unknown)
    checked: list[str] = Field(default_factory=list)  # what was looked at (said for healthy)
    findings: list[Finding] = Field(default_factory=list)
    ignored: list[dict[str, str]] = Field(default_factory=list)  # bundle files in no known format: {path, reason}
    errors: list[dict[str, str]] = Field(default_factory=list)  # malformed files: {path, error}
    source: str = "rules"  # rules | llm
