"""The live adapter: a read tool's ToolResult.data becomes evidence items (the kinds in diagnosis.model).

Reads plain dicts only (diagnosis never imports tools): the shapes below are those postgres_activity,
log_search, host_metrics, process_check, http_probe and redis_info write. A tool without evidence kinds
(pool_status, metric_anomalies) gives no items; so does a result without the fields an item needs.
Item ids are "<node_id>#<n>", n counting from 1 in the order returned; `source` is the node id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnosis.model import EvidenceItem

Adapter = Callable[[str, dict[str, Any]], list[tuple[str, str, float | None, dict[str, Any]]]]
# each adapter returns (kind, object, ts, data) rows; ids and source are filled in once, below

_PG_SESSION_KEYS = (
    "pid",
    "datname",
    "usename",
    "application_name",
    "client_addr",
    "backend_type",
    "state",
    "wait_event_type",
    "wait_event",
    "xact_start",
    "query_start",
    "state_change",
    "backend_start",
    "query",
    "blocked_by",
    "captured_at",
)
_PG_LOCK_KEYS = ("pid", "locktype", "relation", "mode", "granted", "waitstart")


def _postgres(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    now = data.get("captured_at")
    rows: list[tuple[str, str, float | None, dict[str, Any]]] = []
    settings: dict[str, Any] = {"server": data.get("server")}
    for key, value in (data.get("settings") or {}).items():
        settings[key] = _number(value)
    if data.get("max_connections"):
        settings["max_connections"] = data["max_connections"]
    if "error" in data or "connections" not in data:  # unreachable: what was tried, and why it failed
        settings |= {"reachable": False, "error": data.get("error") or _first_message(data)}
    else:
        settings |= {"reachable": True, "connections": data.get("connections"), "by_state": data.get("by_state")}
    rows.append(("pg/settings", "pg/settings", now, settings))
    for s in data.get("sessions") or []:
        row = {k: s.get(k) for k in _PG_SESSION_KEYS}
        row["blocked_by"] = list(row["blocked_by"] or [])
        # ages as the tool measured them (against the server's now), kept beside the timestamps
        row |= {k: s[k] for k in ("xact_age_s", "state_age_s", "query_age_s") if k in s}
        rows.append(("pg/session", f"pid {s['pid']}", now, row))
    for lk in data.get("locks") or []:
        row = {k: lk.get(k) for k in _PG_LOCK_KEYS}
        row |= {k: lk[k] for k in ("relkind", "transactionid", "page", "tuple") if lk.get(k) is not None}
        target = lk.get("relation") or (
            f"transaction {lk['transactionid']}" if lk.get("transactionid") else lk.get("locktype")
        )
        rows.append(("pg/lock", f"pid {lk['pid']} {lk['mode']} on {target}", now, row))
    return rows


def _logs(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in data.get("records") or []:
        by_file.setdefault(r["file"], []).append(
            {"ts": r.get("ts"), "level": r.get("level"), "msg": r.get("msg", ""), "line": r.get("line")}
        )
    templates: dict[str, list[dict[str, Any]]] = {}
    for t in data.get("templates") or []:
        templates.setdefault(t.get("file", ""), []).append(t)
    truncated = bool(data.get("truncated")) or len(data.get("records") or []) < int(data.get("matches") or 0)
    rows = []
    for path in sorted(by_file, key=lambda p: -len(by_file[p])):
        records = by_file[path]
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        rows.append(
            (
                "log",
                path,
                max(stamps) if stamps else None,
                {
                    "records": records,
                    "source": {
                        "tool": "log_search",
                        "path": path,
                        "pattern": data.get("pattern"),
                        "since_minutes": data.get("since_minutes"),
                        "matches": (data.get("per_file") or {}).get(path, len(records)),
                    },
                    "truncated": truncated,
                    "templates": templates.get(path, []),
                },
            )
        )
    return rows


def _host(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    if "cpu_percent" not in data:
        return []
    host = data.get("host") or "localhost"
    ts = data.get("captured_at")
    memory = data.get("memory") or {}
    snapshot = {
        "cpu_percent": data.get("cpu_percent"),
        "cores": data.get("cores"),
        "load": data.get("load"),
        "mem_percent": memory.get("percent"),
        "mem_available_gb": memory.get("available_gb"),
        "swap_percent": data.get("swap_percent"),
        "disks": [
            {
                "mount": d.get("mount"),
                "device": d.get("device"),
                "fstype": d.get("fstype"),
                "percent": d.get("percent"),
                "free_bytes": d.get("free_bytes"),
                "inodes_percent": d.get("inodes_percent"),
            }
            for d in data.get("disks") or []
        ],
        "fds": data.get("fds"),
        "top": data.get("top_processes") or [],
        "uptime_s": data.get("uptime_s"),
    }
    rows: list[tuple[str, str, float | None, dict[str, Any]]] = [("host/snapshot", f"host/{host}", ts, snapshot)]
    series = data.get("cpu_series") or []
    if series and ts is not None:
        step = float(data.get("cpu_series_step_s") or 0.2)
        points = [[round(ts - (len(series) - 1 - i) * step, 3), v] for i, v in enumerate(series)]
        rows.append(
            (
                "metric",
                f"metric/host_cpu_percent{{host={host}}}",
                ts,
                {
                    "name": "host_cpu_percent",
                    "labels": {"host": host},
                    "unit": "percent",
                    "points": points,
                    "source": "host",
                },
            )
        )
    return rows


def _process(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    if "pattern" not in data:
        return []
    return [
        (
            "host/process",
            f"process/{data['pattern']}",
            None,
            {
                "pattern": data["pattern"],
                "running": data.get("running", data.get("count", 0)),
                "pids": data.get("pids") or [p["pid"] for p in data.get("processes") or []],
                "min_count": data.get("min_count"),
                "healthy": data.get("healthy"),
                "processes": data.get("processes") or [],
            },
        )
    ]


def _http(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    if "url" not in data or data.get("error_code"):  # refused before any call: nothing was observed
        return []
    return [
        (
            "http/probe",
            data["url"],
            None,
            {
                "url": data["url"],
                "status": data.get("status_code"),
                "latency_ms": data.get("latency_ms"),
                "error": data.get("error"),
                "tls_days_left": data.get("tls_days_left"),
                "healthy": data.get("healthy"),
                "address": data.get("address"),
                "redirect": data.get("redirect"),
            },
        )
    ]


def _redis(node_id: str, data: dict[str, Any]) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    if "healthy" not in data:
        return []
    info = {k: v for k, v in data.items() if k != "findings"}
    if not data.get("healthy") and "error" not in info:
        info["error"] = _first_message(data)
    return [("redis/info", f"redis/{data.get('server') or 'default'}", None, info)]


ADAPTERS: dict[str, Adapter] = {
    "postgres_activity": _postgres,
    "log_search": _logs,
    "host_metrics": _host,
    "process_check": _process,
    "http_probe": _http,
    "redis_info": _redis,
}


def items_from_tool_result(node_id: str, tool: str, data: dict[str, Any]) -> list[EvidenceItem]:
    """Evidence items from one tool result's data; [] for a tool that yields no evidence kinds."""
    adapter = ADAPTERS.get(tool)
    if adapter is None or not isinstance(data, dict):
        return []
    return [
        EvidenceItem(id=f"{node_id}#{n}", kind=kind, source=node_id, object=obj, ts=ts, data=payload)
        for n, (kind, obj, ts, payload) in enumerate(adapter(node_id, data), start=1)
    ]


def _number(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def _first_message(data: dict[str, Any]) -> str | None:
    findings = data.get("findings") or []
    return findings[0].get("message") if findings else None
