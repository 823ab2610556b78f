"""Alerts: what the operator was told. A firing alert is a symptom of the objects its labels name; resolved,
flapping, informational and always-on (Watchdog) alerts are benign. The reasoning links an alert to any cause on
the same objects, so an alert never becomes a root cause by itself."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from diagnosis.analyzers._kube import ref
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, Finding
from diagnosis.timeline import evidence_now, fmt_age, fmt_ts, parse_ts

ALWAYS_ON = frozenset({"watchdog", "deadmansswitch", "infoinhibitor", "heartbeat"})
# capacity-planning alerts (kube-prometheus' overcommit rules): the pods' requests exceed what the cluster could
# still hold with a node gone; a warning about headroom, not a failure of anything
PLANNING = re.compile(r"^Kube(?:CPU|Memory)(?:Quota)?Overcommit$", re.I)
FLAP_EPISODES = 3  # fired and resolved this many times ...
FLAP_MAX_S = 900.0  # ... each time for less than this: noise, not a fault
_SEVERITY = {"critical": 0.8, "page": 0.8, "error": 0.7, "high": 0.7, "warning": 0.6, "warn": 0.6, "medium": 0.5}
# Prometheus scrape jobs that name the exporter, not the service at fault
_EXPORTER_JOBS = frozenset(
    {
        "kube-state-metrics",
        "node-exporter",
        "node",
        "kubelet",
        "cadvisor",
        "apiserver",
        "kubernetes-pods",
        "kubernetes-nodes",
        "kubernetes-service-endpoints",
        "prometheus",
        "alertmanager",
        "blackbox",
        "blackbox-exporter",
    }
)


def alert_tags(labels: dict[str, Any]) -> list[str]:
    """The objects an alert's labels name, as finding tags."""
    ns = str(labels.get("namespace") or labels.get("exported_namespace") or "")
    tags: list[str] = [f"namespace:{ns}"] if ns else []
    pod = labels.get("pod") or labels.get("pod_name") or labels.get("exported_pod")
    if pod:
        tags.append(f"pod:{ns}/{pod}")
        if labels.get("container") and labels["container"] not in ("POD", ""):
            tags.append(f"container:{ns}/{pod}/{labels['container']}")
    for key in ("deployment", "statefulset", "daemonset", "job_name", "cronjob", "workload", "replicaset"):
        if labels.get(key):
            tags.append(f"workload:{ns}/{labels[key]}")
    for key in (
        "service",
        "app",
        "app_kubernetes_io_name",
        "k8s_app",
        "application",
        "service_name",
        "upstream",
        "backend",
        "target_service",
        # a consumer group is the consuming service's name (Kafka lag exporters, Burrow)
        "consumergroup",
        "consumer_group",
    ):
        if labels.get(key):
            tags.append(f"service:{labels[key]}")
    job = labels.get("job")
    if job and str(job) not in _EXPORTER_JOBS:
        tags.append(f"service:{job}")
    for key in ("instance", "host", "hostname"):
        if labels.get(key) and not (key == "instance" and str(job or "") in _EXPORTER_JOBS and pod):
            tags.append(f"host:{labels[key]}")
    for key in ("node", "kubernetes_node", "nodename"):
        if labels.get(key):
            tags.append(f"node:{labels[key]}")
    if labels.get("persistentvolumeclaim"):
        tags.append(f"pvc:{ns}/{labels['persistentvolumeclaim']}")
    for key in ("datname", "database", "db", "dbinstance_identifier", "DBInstanceIdentifier", "db_instance"):
        if labels.get(key):
            tags.append(f"db:{labels[key]}")
    for key in ("mountpoint", "device"):
        if labels.get(key):
            tags.append(f"fs:{labels[key]}")
    return tags


# labels that name the part of an object an alert is about (a file system, a backend, a queue, a certificate, a
# consumer group, a scheduled task): said with the object, so the operator sees which one it was
_DETAIL_LABELS = (
    "mountpoint",
    "volume",
    "certificate",
    "backend",
    "server",
    "queue",
    "consumergroup",
    "topic",
    "dag_id",
    "task_id",
    "app",
    "name",
)


def alert_object(labels: dict[str, Any]) -> str:
    """The object an alert is about, from its labels: the Kubernetes object, node, instance, database or job it names,
    then the parts of it it names (mountpoint, backend, queue ...)."""
    ns = labels.get("namespace")
    primary = ""
    for key in ("pod", "deployment", "statefulset", "daemonset", "job_name", "service", "persistentvolumeclaim"):
        if labels.get(key):
            primary = f"{key} {ns + '/' if ns else ''}{labels[key]}"
            break
    else:
        for key in ("node", "instance", "datname", "dbinstance_identifier", "job"):
            if labels.get(key):
                primary = f"{key} {labels[key]}"
                break
    named = primary.split(" ", 1)[-1]
    details = [
        f"{key} {labels[key]}"
        for key in _DETAIL_LABELS
        if labels.get(key) and str(labels[key]) not in named and str(labels[key]) != labels.get("alertname")
    ]
    if not primary:
        if details:
            primary, details = details[0], details[1:]
        elif ns:
            primary = f"namespace {ns}"
        else:
            return str(labels.get("alertname") or "alert")
    return primary + (f" ({', '.join(details[:2])})" if details else "")


def _needs(labels: dict[str, Any]) -> list[str]:
    ns = labels.get("namespace")
    out: list[str] = []
    if labels.get("pod"):
        out.append(f"status, events and logs of Pod {ns}/{labels['pod']}")
    for key in ("deployment", "statefulset", "service", "job_name"):
        if labels.get(key):
            out.append(f"the {key} {ns}/{labels[key]}: its pods, events and logs")
    if labels.get("instance") or labels.get("node"):
        out.append(f"host metrics and logs of {labels.get('node') or labels.get('instance')}")
    if labels.get("datname") or labels.get("dbinstance_identifier"):
        out.append(
            f"database sessions, locks and metrics of {labels.get('datname') or labels.get('dbinstance_identifier')}"
        )
    return out or [f"evidence about what alert {labels.get('alertname')} measures (its metric series, logs)"]


def _group_key(item: EvidenceItem) -> str:
    d = item.data
    labels = d.get("labels") or {}
    return str(d.get("fingerprint") or sorted((str(k), str(v)) for k, v in labels.items()))


@ANALYZERS.analyzer(domain=Domain.ALERTS, reads={"alert", "datadog/monitor"})
def alertmanager_alerts(evidence: EvidenceSet) -> list[Finding]:
    now = evidence_now(evidence)
    episodes: dict[str, list[EvidenceItem]] = defaultdict(list)
    for item in evidence.kind("alert"):
        episodes[_group_key(item)].append(item)
    out: list[Finding] = []
    for items in episodes.values():
        # one episode notified firing and then resolved: the resolved notification is its latest state
        items.sort(key=lambda i: (parse_ts(i.data.get("starts_at")) or 0.0, i.data.get("status") == "resolved"))
        latest = items[-1]
        d = latest.data
        labels = d.get("labels") or {}
        annotations = d.get("annotations") or {}
        name = str(labels.get("alertname") or latest.object.removeprefix("alert/"))
        severity = str(labels.get("severity") or "").lower()
        starts = parse_ts(d.get("starts_at"))
        ends = parse_ts(d.get("ends_at"))
        obj = alert_object(labels)
        tags = alert_tags(labels)
        summary = str(annotations.get("summary") or annotations.get("description") or annotations.get("message") or "")
        refs = [ref(latest, "status", d.get("status")), ref(latest, "labels.alertname", name)]
        if summary:
            key = next(k for k in ("summary", "description", "message") if annotations.get(k))
            refs.append(ref(latest, f"annotations.{key}", summary))
        base: dict[str, Any] = {"analyzer": "alertmanager_alerts", "domain": Domain.ALERTS, "object": obj, "tags": tags}
        # resolved, flapping and informational alerts are all a healthy signal on the same alert
        benign: dict[str, Any] = {
            **base,
            "role": "benign",
            "code": f"alert:{name}",
            "category": Category.HEALTHY,
            "ts": starts,
            "evidence": refs,
        }
        if name.lower() in ALWAYS_ON:
            continue  # fires by design to prove the alerting pipeline works
        if d.get("status") == "resolved":
            lasted = f" after {fmt_age(ends - starts)}" if ends and starts else ""
            out.append(
                Finding(
                    **benign,
                    title=f"alert {name} on {obj} resolved at {fmt_ts(ends)}",
                    mechanism=f"a recovered signal: alert {name} resolved{lasted} and has not fired again",
                )
            )
            continue
        resolved = [i for i in items if i.data.get("status") == "resolved"]
        short = [
            i
            for i in resolved
            if (parse_ts(i.data.get("ends_at")) or 0) - (parse_ts(i.data.get("starts_at")) or 0) < FLAP_MAX_S
        ]
        # flapping: short episodes so far, and the current one no longer than they were (one that has fired for
        # an hour after a few flaps is a real fault now)
        current_short = now is None or starts is None or now - starts < FLAP_MAX_S
        if len(resolved) >= FLAP_EPISODES - 1 and len(short) == len(resolved) and current_short:
            out.append(
                Finding(
                    **benign,
                    title=f"alert {name} on {obj} flapping ({len(items)} episodes)",
                    mechanism=f"a flapping alert: {name} fired and resolved {len(resolved)} times, each for under "
                    f"{fmt_age(FLAP_MAX_S)}; its threshold sits on the metric's normal variation",
                    actions=[
                        Action(
                            description="Silence the flapping alert while its threshold is fixed",
                            kind="write",
                            command=f"amtool silence add alertname={name} --duration=2h",
                            tool="alertmanager_silence",
                            args={"matchers": {"alertname": name}, "duration": "2h"},
                        )
                    ],
                )
            )
            continue
        if PLANNING.match(name):
            out.append(
                Finding(
                    **benign,
                    title=f"capacity-planning alert {name} on {obj}",
                    mechanism=(
                        f"alert {name} says the pods' requests exceed what the cluster could hold with one node "
                        "less: a warning about headroom, not a failure"
                    ),
                )
            )
            continue
        if severity in ("info", "none", "informational"):
            out.append(
                Finding(
                    **benign,
                    title=f"informational alert {name} on {obj}",
                    mechanism=f"alert {name} is informational (severity {severity}), not a failure",
                )
            )
            continue
        since = f" since {fmt_ts(starts)}" if starts else ""
        age = f" ({fmt_age(now - starts)} before the evidence ends)" if now and starts else ""
        out.append(
            Finding(
                **base,
                role="symptom",
                code=f"alert:{name}",
                category=Category.UNKNOWN,
                score=_SEVERITY.get(severity, 0.6),
                ts=starts,
                evidence=refs,
                needs=_needs(labels),
                title=f"alert {name} firing for {obj}{since}" + (f" ({severity})" if severity else ""),
                mechanism=f"alert {name} fires for {obj}{since}{age}: {summary or 'no summary'}",
            )
        )
    for item in evidence.kind("datadog/monitor"):
        d = item.data
        state = str(d.get("state") or "")
        if state not in ("Alert", "Warn"):
            continue
        tags = [str(t) for t in d.get("tags") or () if ":" in str(t)]
        name = str(d.get("name") or item.object)
        out.append(
            Finding(
                analyzer="alertmanager_alerts",
                domain=Domain.ALERTS,
                role="symptom",
                code=f"alert:{name}",
                category=Category.UNKNOWN,
                score=0.7 if state == "Alert" else 0.5,
                object=item.object,
                tags=tags,
                ts=parse_ts(d.get("modified_ts")),
                evidence=[ref(item, "state", state)],
                title=f"Datadog monitor {name} in {state}",
                mechanism=f"monitor {name} is in {state}: {d.get('query') or ''}",
                needs=[f"the series and logs behind monitor {name}"],
            )
        )
    return out
