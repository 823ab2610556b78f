"""AWS exports as the CLI and SDKs print them.

- CloudWatch GetMetricData responses (MetricDataResults: Id, Label, Timestamps newest first, Values), with or
  without the request beside them (MetricDataQueries: Id -> MetricStat.Metric name, namespace, dimensions).
  The request is paired with a response in the same folder whose file name shares its stem ("cpu.request.json"
  beside "cpu.json"), else the only request holding every Id the response has; without one, a series is named
  by its Label (or Id). GetMetricStatistics responses (Label, Datapoints) are read too.
- RDS DescribeEvents responses -> `rds/event` (an empty `{"Events": []}` is read as no events).
- CloudWatch DescribeAlarmHistory -> `alert` per episode in ALARM, as Alertmanager alerts are.
- Performance Insights GetResourceMetrics (MetricList) -> `metric` with source "pi"; DescribeDimensionKeys (Keys)
  grouped by db.sql or db.sql_tokenized -> `pi/sql`, by any other group (db.wait_event, db.user ...) ->
  `pi/dimension` {group, dimensions, load, partitions}.
- ECS DescribeServices (`aws ecs describe-services`): each service's events and deployments -> the `log` of
  `ecs/<service>` (a failure event, "unable to place a task ... ResourceInitializationError", is an error record).
- ECS DescribeTasks (`aws ecs describe-tasks`): each task's containers -> `container/state`, as docker inspect gives.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, FormatError, ParseContext, metric_object
from diagnosis.model import EvidenceItem

# CloudWatch responses carry no unit; the well-known RDS and EC2 metrics have fixed ones
CLOUDWATCH_UNITS = {
    "CPUUtilization": "percent", "FreeStorageSpace": "bytes", "FreeableMemory": "bytes", "SwapUsage": "bytes",
    "DatabaseConnections": "count", "ReadIOPS": "count/second", "WriteIOPS": "count/second",
    "ReadLatency": "seconds", "WriteLatency": "seconds", "ReplicaLag": "seconds", "DiskQueueDepth": "count",
    "TransactionLogsDiskUsage": "bytes", "TransactionLogsGeneration": "bytes/second",
    "MaximumUsedTransactionIDs": "count", "BurstBalance": "percent", "CPUCreditBalance": "count",
    "ReadThroughput": "bytes/second", "WriteThroughput": "bytes/second", "NetworkReceiveThroughput": "bytes/second",
    "NetworkTransmitThroughput": "bytes/second", "OldestReplicationSlotLag": "bytes", "DBLoad": "sessions",
    "EBSIOBalance%": "percent", "EBSByteBalance%": "percent", "StatusCheckFailed": "count",
}  # fmt: skip
STATS = ("Average", "Maximum", "Minimum", "Sum", "SampleCount")
_NAME_NOISE = re.compile(r"[-_.]?(request|req|query|queries|response|resp|result|results|input|output)$")


def _points(timestamps: list[Any], values: list[Any]) -> list[list[float]]:
    points = []
    for t, v in zip(timestamps, values, strict=False):
        ts = parse_ts(t)
        if ts is not None and isinstance(v, int | float) and math.isfinite(v):
            points.append([ts, float(v)])
    points.sort()  # AWS returns the newest first
    return points


# --- CloudWatch GetMetricData ---------------------------------------------------------------------------


def _is_query(q: Any) -> bool:
    return isinstance(q, dict) and "Id" in q and ("MetricStat" in q or "Expression" in q)


def _cw_queries(v: Any) -> list[Any] | None:
    """The queries of a GetMetricData request: the --cli-input-json document, or the bare list given to
    `aws cloudwatch get-metric-data --metric-data-queries file://queries.json`."""
    if isinstance(v, dict) and isinstance(v.get("MetricDataQueries"), list) and "MetricDataResults" not in v:
        return list(v["MetricDataQueries"])
    if isinstance(v, list) and v and all(map(_is_query, v)):
        return v
    return None


def _is_cw_request(v: Any) -> bool:
    return _cw_queries(v) is not None


def _is_cw_response(v: Any) -> bool:
    results = v.get("MetricDataResults") if isinstance(v, dict) else None
    return isinstance(results, list) and all(isinstance(r, dict) and "Id" in r for r in results)


def _base(stem: str) -> str:
    return _NAME_NOISE.sub("", stem.lower())


@FORMATS.format("cloudwatch-request", shapes={"json"}, detect=lambda d: _is_cw_request(d.value), order=30)
def parse_cw_request(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    queries: dict[str, dict[str, Any]] = {}
    for q in _cw_queries(doc.value) or []:
        if not isinstance(q, dict) or "Id" not in q:
            raise FormatError("MetricDataQueries entry without an Id")
        stat = q.get("MetricStat") or {}
        metric = stat.get("Metric") or {}
        dims = {str(d.get("Name")): str(d.get("Value")) for d in metric.get("Dimensions") or [] if isinstance(d, dict)}
        queries[q["Id"]] = {
            "name": metric.get("MetricName") or q.get("Label") or q["Id"],
            "namespace": metric.get("Namespace"),
            "dimensions": dims,
            "stat": stat.get("Stat"),
            "unit": stat.get("Unit"),
            "expression": q.get("Expression"),
        }
    ctx.shared.setdefault("cloudwatch_requests", []).append((doc.folder, _base(doc.stem), queries))
    return iter(())


@FORMATS.format("cloudwatch", shapes={"json"}, detect=lambda d: _is_cw_response(d.value), order=30)
def parse_cw_response(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    results = []
    for r in doc.value["MetricDataResults"]:
        ts, values = r.get("Timestamps") or [], r.get("Values") or []
        if len(ts) != len(values):
            raise FormatError(f"MetricDataResults {r['Id']}: {len(ts)} Timestamps but {len(values)} Values")
        results.append((r["Id"], r.get("Label"), _points(ts, values)))
    pending = ctx.shared.setdefault("cloudwatch_responses", [])
    if not pending:
        ctx.deferred.append(_cw_items)  # the request may be a file read later
    pending.append((doc.path, doc.folder, _base(doc.stem), results))
    return iter(())


def _pick_request(
    requests: list[tuple[str, str, dict[str, Any]]], folder: str, base: str, ids: set[str]
) -> dict[str, Any] | None:
    if len(requests) == 1 and ids <= requests[0][2].keys():
        return requests[0][2]
    same_name = [q for f, b, q in requests if f == folder and b == base]
    if len(same_name) == 1:
        return same_name[0]
    covering = [q for f, _, q in requests if ids <= q.keys()]
    nearby = [q for f, _, q in requests if f == folder and ids <= q.keys()]
    for choice in (nearby, covering):
        if len(choice) == 1:
            return choice[0]
    return None


def _cw_items(ctx: ParseContext) -> Iterator[EvidenceItem]:
    requests = ctx.shared.get("cloudwatch_requests", [])
    for path, folder, base, results in ctx.shared.get("cloudwatch_responses", []):
        queries = _pick_request(requests, folder, base, {r[0] for r in results}) or {}
        for rid, label, points in results:
            q = queries.get(rid)
            if q:
                name = q["name"]
                labels = dict(q["dimensions"])
                labels.update({k: q[k] for k in ("namespace", "stat") if q[k]})
                unit = (q["unit"] or "").lower() or CLOUDWATCH_UNITS.get(name)
            else:
                name = label or rid
                labels = {"id": rid}
                unit = CLOUDWATCH_UNITS.get(name)
            data = {"name": name, "labels": labels, "unit": unit, "points": points, "source": "cloudwatch"}
            if labels.get("FunctionName"):  # names the function of an export's unnamed Lambda streams
                ctx.shared.setdefault("lambda_functions", set()).add(labels["FunctionName"].split(":")[0])
            yield ctx.item(path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)


# --- CloudWatch GetMetricStatistics ---------------------------------------------------------------------


def _is_cw_statistics(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("Datapoints"), list) and "Label" in v


@FORMATS.format("cloudwatch-statistics", shapes={"json"}, detect=lambda d: _is_cw_statistics(d.value), order=30)
def parse_cw_statistics(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    datapoints = [d for d in doc.value["Datapoints"] if isinstance(d, dict)]
    stat = next((s for s in STATS if any(s in d for d in datapoints)), None)
    name = str(doc.value["Label"] or doc.stem)
    points = _points([d.get("Timestamp") for d in datapoints], [d.get(stat) if stat else None for d in datapoints])
    unit = next((d["Unit"].lower() for d in datapoints if d.get("Unit")), None) or CLOUDWATCH_UNITS.get(name)
    labels = {"stat": stat} if stat else {}
    data = {"name": name, "labels": labels, "unit": unit, "points": points, "source": "cloudwatch"}
    yield ctx.item(doc.path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)


# --- RDS DescribeEvents ---------------------------------------------------------------------------------


def _is_rds_events(v: Any) -> bool:
    events = v.get("Events") if isinstance(v, dict) else None
    return (
        isinstance(events, list)
        and bool(events)
        and all(isinstance(e, dict) and "SourceIdentifier" in e and "Message" in e for e in events)
    )


@FORMATS.format("rds-events", shapes={"json"}, detect=lambda d: _is_rds_events(d.value), order=30)
def parse_rds_events(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for e in doc.value["Events"]:
        data = {
            "source_id": e["SourceIdentifier"],
            "source_type": e.get("SourceType"),
            "message": e["Message"],
            "categories": list(e.get("EventCategories") or []),
            "ts": parse_ts(e.get("Date")),
        }
        yield ctx.item(doc.path, "rds/event", f"rds/{e['SourceIdentifier']}", data, data["ts"])


# --- Performance Insights -------------------------------------------------------------------------------


def _is_pi_metrics(v: Any) -> bool:
    metrics = v.get("MetricList") if isinstance(v, dict) else None
    return isinstance(metrics, list) and all(isinstance(m, dict) and "Key" in m for m in metrics)


@FORMATS.format("pi-metrics", shapes={"json"}, detect=lambda d: _is_pi_metrics(d.value), order=30)
def parse_pi_metrics(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    identifier = doc.value.get("Identifier")
    for m in doc.value["MetricList"]:
        key = m["Key"] if isinstance(m["Key"], dict) else {}
        name = key.get("Metric")
        if not name:
            raise FormatError("MetricList entry whose Key has no Metric")
        labels = {str(k): str(v) for k, v in (key.get("Dimensions") or {}).items()}
        if identifier:
            labels["identifier"] = str(identifier)
        dps = [d for d in m.get("DataPoints") or [] if isinstance(d, dict)]
        points = _points([d.get("Timestamp") for d in dps], [d.get("Value") for d in dps])
        unit = "aas" if str(name).startswith("db.load") else None
        data = {"name": name, "labels": labels, "unit": unit, "points": points, "source": "pi"}
        yield ctx.item(doc.path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)


def _is_pi_keys(v: Any) -> bool:
    keys = v.get("Keys") if isinstance(v, dict) else None
    return (
        isinstance(keys, list)
        and bool(keys)
        and all(isinstance(k, dict) and isinstance(k.get("Dimensions"), dict) and "Total" in k for k in keys)
    )


def _group_of(dims: dict[str, Any]) -> str:
    names = list(dims)
    for group in ("db.sql_tokenized", "db.sql"):
        if any(n.startswith(group + ".") for n in names):
            return group
    return names[0].rsplit(".", 1)[0] if names else "unknown"


@FORMATS.format("pi-dimension-keys", shapes={"json"}, detect=lambda d: _is_pi_keys(d.value), order=30)
def parse_pi_keys(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    v = doc.value
    partition_keys = [p.get("Dimensions") or {} for p in v.get("PartitionKeys") or [] if isinstance(p, dict)]
    end = parse_ts(v.get("AlignedEndTime"))
    metric = v.get("Metric") or "db.load.avg"  # the response does not repeat the request's Metric
    for key in v["Keys"]:
        dims = key["Dimensions"]
        group = _group_of(dims)
        raw_parts = key.get("Partitions") or []
        partitions = (
            [{"dimensions": pk, "value": val} for pk, val in zip(partition_keys, raw_parts, strict=False)]
            if partition_keys
            else list(raw_parts)
        )
        load = float(key["Total"]) if isinstance(key["Total"], int | float) else None
        if group in ("db.sql", "db.sql_tokenized"):
            statement = dims.get(f"{group}.statement") or ""
            sid = (
                dims.get(f"{group}.id")
                or dims.get(f"{group}.db_id")
                or hashlib.sha1(statement.encode(), usedforsecurity=False).hexdigest()[:12]
            )
            data = {
                "group": group,
                "statement": statement,
                "id": sid,
                "load": load,
                "partitions": partitions,
                "metric": metric,
            }
            yield ctx.item(doc.path, "pi/sql", f"pi/{group}/{sid}", data, end)
        else:
            value = next(iter(dims.values()), "")
            data = {"group": group, "dimensions": dims, "load": load, "partitions": partitions, "metric": metric}
            yield ctx.item(doc.path, "pi/dimension", f"pi/{group}/{value}", data, end)


# --- EC2 DescribeVolumeStatus / DescribeInstanceStatus ------------------------------------------------------


def _is_status_list(v: Any) -> bool:
    if not isinstance(v, dict):
        return False
    for key in ("VolumeStatuses", "InstanceStatuses"):
        rows = v.get(key)
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            return True
    return False


def _checks(block: Any) -> tuple[str | None, dict[str, str]]:
    """{Status, Details: [{Name, Status}]} -> (status, {name: status})."""
    if not isinstance(block, dict):
        return None, {}
    details = {
        str(d.get("Name")): str(d.get("Status"))
        for d in block.get("Details") or []
        if isinstance(d, dict) and d.get("Name")
    }
    status = block.get("Status")
    return (str(status) if status is not None else None), details


@FORMATS.format("ec2-status", shapes={"json"}, detect=lambda d: _is_status_list(d.value), order=30)
def parse_ec2_status(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """EC2 health checks of volumes and instances -> `aws/status` {resource, resource_type, status, checks,
    events, actions, az}; `checks` maps "<scope>.<name>" (volume.io-performance, system.reachability) to its status.
    """
    for key, rtype, id_key in (
        ("VolumeStatuses", "volume", "VolumeId"),
        ("InstanceStatuses", "instance", "InstanceId"),
    ):
        for row in doc.value.get(key) or []:
            if not isinstance(row, dict) or not row.get(id_key):
                continue
            checks: dict[str, str] = {}
            statuses: list[str] = []
            blocks = (
                [("volume", row.get("VolumeStatus"))]
                if rtype == "volume"
                else [("system", row.get("SystemStatus")), ("instance", row.get("InstanceStatus"))]
            )
            for scope, block in blocks:
                status, details = _checks(block)
                if status:
                    statuses.append(status)
                checks.update({f"{scope}.{name}": s for name, s in details.items()})
            for att in row.get("AttachmentStatuses") or []:
                if isinstance(att, dict) and att.get("IoPerformance"):
                    checks[f"attachment.{att.get('InstanceId', '?')}.io-performance"] = str(att["IoPerformance"])
            events = [
                {
                    "type": str(e.get("EventType") or e.get("Code") or ""),
                    "description": str(e.get("Description") or ""),
                    "not_before": parse_ts(e.get("NotBefore")),
                    "not_after": parse_ts(e.get("NotAfter")),
                }
                for e in row.get("Events") or []
                if isinstance(e, dict)
            ]
            worst = next((s for s in ("impaired", "failed", "insufficient-data", "warning") if s in statuses), None)
            data = {
                "resource": str(row[id_key]),
                "resource_type": rtype,
                "status": worst or (statuses[0] if statuses else None),
                "checks": checks,
                "events": events,
                "actions": [str(a.get("Code") or "") for a in row.get("Actions") or [] if isinstance(a, dict)],
                "az": row.get("AvailabilityZone"),
                "state": (row.get("InstanceState") or {}).get("Name")
                if isinstance(row.get("InstanceState"), dict)
                else None,
            }
            starts = [float(t) for e in events if isinstance(t := e["not_before"], int | float)]
            yield ctx.item(doc.path, "aws/status", f"{rtype}/{row[id_key]}", data, min(starts) if starts else None)


# --- CloudWatch DescribeAlarmHistory --------------------------------------------------------------------

# the alarm's configuration (ConfigurationUpdate items) names its metric; these dimensions become alert labels
_ALARM_LABELS = {"MetricName": "metric", "Namespace": "namespace_aws"}


def _is_alarm_history(v: Any) -> bool:
    items = v.get("AlarmHistoryItems") if isinstance(v, dict) else None
    return isinstance(items, list) and all(
        isinstance(i, dict) and "AlarmName" in i and "HistoryItemType" in i for i in items
    )


def _history_data(raw: Any) -> dict[str, Any]:
    """HistoryData is a JSON document serialised into a string (the CLI prints it so)."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _alarm_labels(name: str, config: dict[str, Any]) -> dict[str, str]:
    labels = {"alertname": name, "source": "cloudwatch"}
    for key, label in _ALARM_LABELS.items():
        if config.get(key):
            labels[label] = str(config[key])
    for dim in config.get("Dimensions") or []:
        if isinstance(dim, dict) and dim.get("Name") and dim.get("Value") is not None:
            labels[str(dim["Name"])] = str(dim["Value"])
    return labels


@FORMATS.format("cloudwatch-alarm-history", shapes={"json"}, detect=lambda d: _is_alarm_history(d.value), order=30)
def parse_alarm_history(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """`aws cloudwatch describe-alarm-history` -> `alert` items, one per episode in ALARM: firing while the alarm
    is still in ALARM, resolved at the StateUpdate that took it back out (to OK or INSUFFICIENT_DATA)."""
    by_alarm: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for entry in doc.value["AlarmHistoryItems"]:
        ts = parse_ts(entry.get("Timestamp"))
        name = str(entry["AlarmName"])
        hist = _history_data(entry.get("HistoryData"))
        if entry["HistoryItemType"] == "ConfigurationUpdate":
            alarm = hist.get("updatedAlarm") or hist.get("originalAlarm")
            if isinstance(alarm, dict) and name not in configs:
                configs[name] = alarm
        elif entry["HistoryItemType"] == "StateUpdate" and ts is not None:
            by_alarm.setdefault(name, []).append((ts, {**entry, "_data": hist}))
    for name, updates in by_alarm.items():
        updates.sort(key=lambda u: u[0])  # AWS returns the newest first
        labels = _alarm_labels(name, configs.get(name, {}))
        fingerprint = hashlib.sha1(f"cloudwatch/{name}".encode(), usedforsecurity=False).hexdigest()[:16]
        open_at: tuple[float, dict[str, Any]] | None = None
        for ts, entry in updates:
            new = get_state(entry["_data"], "newState")
            old = get_state(entry["_data"], "oldState")
            if new == "ALARM" and open_at is None:
                open_at = (ts, entry)
            elif new != "ALARM" and (open_at is not None or old == "ALARM"):
                start = open_at or (None, entry)  # the history began while the alarm was already in ALARM
                yield _alarm_item(doc, ctx, name, labels, fingerprint, start[1], start[0], ts, entry)
                open_at = None
        if open_at is not None:
            yield _alarm_item(doc, ctx, name, labels, fingerprint, open_at[1], open_at[0], None, None)


def get_state(hist: dict[str, Any], key: str) -> str | None:
    state = hist.get(key)
    value = state.get("stateValue") if isinstance(state, dict) else None
    return str(value).upper() if value else None


def _alarm_item(
    doc: Document,
    ctx: ParseContext,
    name: str,
    labels: dict[str, str],
    fingerprint: str,
    opened: dict[str, Any],
    starts: float | None,
    ends: float | None,
    closed: dict[str, Any] | None,
) -> EvidenceItem:
    new_state = opened["_data"].get("newState") if starts is not None else None
    reason = new_state.get("stateReason") if isinstance(new_state, dict) else None
    summary = str(opened.get("HistorySummary") or f"alarm {name} in ALARM")
    # the state reason says what crossed which threshold: the line an operator reads first
    annotations = {"summary": str(reason or summary), "history_summary": summary}
    if closed is not None:
        back = closed["_data"].get("newState")
        if isinstance(back, dict) and back.get("stateReason"):
            annotations["resolved_reason"] = str(back["stateReason"])
    data = {
        "status": "resolved" if ends is not None else "firing",
        "labels": labels,
        "annotations": annotations,
        "starts_at": starts,
        "ends_at": ends,
        "fingerprint": fingerprint,
        "group_key": None,
        "receiver": None,
    }
    return ctx.item(doc.path, "alert", f"alert/{name}", data, ends if ends is not None else starts)


# --- DescribeEvents with nothing in it ------------------------------------------------------------------


def _is_empty_events(v: Any) -> bool:
    """RDS (and ElastiCache, Redshift, DMS) DescribeEvents answer `{"Events": []}` when nothing happened in the
    window asked for: a real answer (no failover, no maintenance), not an unknown file."""
    return isinstance(v, dict) and v.get("Events") == [] and set(v) <= {"Events", "Marker", "NextToken"}


@FORMATS.format("aws-events-empty", shapes={"json"}, detect=lambda d: _is_empty_events(d.value), order=30)
def parse_empty_events(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    return iter(())


# --- ECS services -------------------------------------------------------------------------------------------

# an ECS service event that reports a failure ("was unable to place a task", "failed container health checks",
# "port 8080 is unhealthy in target-group", "deployment failed")
# ("has stopped 4 running tasks" is a scale-in or a deployment replacing them: not a failure)
_ECS_FAILED = re.compile(
    r"unable to|failed|unhealthy|error|(?<!has )stopped(?! \d+ running tasks?:)|denied|not found", re.I
)


def _ecs_list(v: Any, key: str, ident: str, listed: str) -> list[dict[str, Any]] | None:
    """The objects of an ECS describe-* response (`services`, `tasks`), each with its id and a list field."""
    found = v.get(key) if isinstance(v, dict) else None
    if (
        isinstance(found, list)
        and found
        and all(isinstance(o, dict) and ident in o and isinstance(o.get(listed), list) for o in found)
    ):
        return found
    return None


def _ecs_services(v: Any) -> list[dict[str, Any]] | None:
    return _ecs_list(v, "services", "serviceName", "events")


@FORMATS.format("ecs-services", shapes={"json"}, detect=lambda d: _ecs_services(d.value) is not None, order=30)
def parse_ecs_services(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """`aws ecs describe-services`: each service's event messages and its deployments (task definition, rollout
    state, running and failed tasks), as the `log` of `ecs/<service>`."""
    for svc in _ecs_services(doc.value) or []:
        records: list[dict[str, Any]] = []
        for e in svc["events"]:
            if isinstance(e, dict) and isinstance(e.get("message"), str):
                level = "error" if _ECS_FAILED.search(e["message"]) else "info"
                records.append({"ts": parse_ts(e.get("createdAt")), "level": level, "msg": e["message"]})
        for d in svc.get("deployments") or []:
            if not isinstance(d, dict):
                continue
            task_def = str(d.get("taskDefinition") or "").rsplit("/", 1)[-1]
            failed = int(d.get("failedTasks") or 0)
            msg = (
                f"deployment {d.get('id', '')} of {task_def} ({d.get('status', '')}) rollout "
                f"{d.get('rolloutState', 'unknown')}: running {d.get('runningCount')} of {d.get('desiredCount')}, "
                f"{failed} failed tasks"
            ) + (f": {d['rolloutStateReason']}" if d.get("rolloutStateReason") else "")
            ts = parse_ts(d.get("updatedAt") or d.get("createdAt"))
            records.append({"ts": ts, "level": "error" if failed else "info", "msg": msg})
        records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0))
        for n, r in enumerate(records, 1):
            r["line"] = n
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        data = {
            "records": records,
            "source": {"path": doc.path, "export": "ecs", "service": svc["serviceName"]},
            "truncated": False,
        }
        yield ctx.item(doc.path, "log", f"ecs/{svc['serviceName']}", data, max(stamps) if stamps else None)


# --- ECS tasks ----------------------------------------------------------------------------------------------


def _ecs_tasks(v: Any) -> list[dict[str, Any]] | None:
    return _ecs_list(v, "tasks", "taskArn", "containers")


_ECS_OOM = re.compile(r"OutOfMemory|killed due to memory usage", re.I)


def _mib_bytes(v: Any) -> int | None:
    return int(v) << 20 if isinstance(v, int | str) and str(v).isdigit() and int(v) > 0 else None


@FORMATS.format("ecs-tasks", shapes={"json"}, detect=lambda d: _ecs_tasks(d.value) is not None, order=30)
def parse_ecs_tasks(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """`aws ecs describe-tasks`: each task's containers as `container/state` (the shape docker inspect gives): its
    exit code, the reason ECS stopped it (`OutOfMemoryError: Container killed due to memory usage` is an OOM kill;
    `CannotPullContainerError` a start error) and its memory limit (the container's, else the task's)."""
    for task in _ecs_tasks(doc.value) or []:
        task_id = str(task.get("taskArn") or "").rsplit("/", 1)[-1][:8]
        stopped, started = parse_ts(task.get("stoppedAt")), parse_ts(task.get("startedAt"))
        for c in task["containers"]:
            if not isinstance(c, dict):
                continue
            reason = str(c.get("reason") or "")
            code = c.get("exitCode")
            status = str(c.get("lastStatus") or task.get("lastStatus") or "")
            name = f"{c.get('name') or 'container'}-{task_id}"
            data = {
                "name": name,
                "image": c.get("image"),
                "status": status.lower(),
                "running": status == "RUNNING",
                "restarting": False,
                "oom_killed": bool(_ECS_OOM.search(reason)),
                "exit_code": code if isinstance(code, int) else None,
                "error": (reason or None) if not isinstance(code, int) and not _ECS_OOM.search(reason) else None,
                "started_at": started,
                "finished_at": stopped,
                "restart_count": 0,
                "memory_limit_bytes": _mib_bytes(c.get("memory")) or _mib_bytes(task.get("memory")),
                "health": None,
                "from": "ecs describe-tasks",
                "service": str(task.get("group") or "").removeprefix("service:") or c.get("name"),
                "task": {"group": task.get("group"), "stopped_reason": task.get("stoppedReason")},
            }
            yield ctx.item(doc.path, "container/state", f"container/{name}", data, stopped or started)
