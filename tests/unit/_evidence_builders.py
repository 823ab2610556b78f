"""Evidence items in the contract shapes (diagnosis/model.py), built in code for the analyzer tests."""

from __future__ import annotations

from typing import Any

from diagnosis.evidence import EvidenceSet
from diagnosis.model import EvidenceItem, Finding

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20Z: every scenario happens after it


class Builder:
    def __init__(self) -> None:
        self.items: list[EvidenceItem] = []

    def _add(self, kind: str, obj: str, data: dict[str, Any], ts: float | None = None, source: str = "bundle") -> str:
        item_id = f"{source}#{len(self.items) + 1}"
        self.items.append(EvidenceItem(id=item_id, kind=kind, source=source, object=obj, ts=ts, data=data))
        return item_id

    def log(self, obj: str, lines: list[tuple[float, str | None, str]], **source: Any) -> str:
        records = [{"ts": ts, "level": lvl, "msg": msg, "line": i + 1} for i, (ts, lvl, msg) in enumerate(lines)]
        return self._add(
            "log", obj, {"records": records, "source": source, "truncated": False}, ts=lines[-1][0] if lines else None
        )

    def metric(
        self,
        name: str,
        points: list[tuple[float, float]],
        labels: dict[str, str] | None = None,
        source: str = "prometheus",
        unit: str | None = None,
    ) -> str:
        labels = labels or {}
        obj = f"metric/{name}{{{','.join(f'{k}={v}' for k, v in labels.items())}}}"
        return self._add(
            "metric",
            obj,
            {"name": name, "labels": labels, "unit": unit, "points": [list(p) for p in points], "source": source},
            ts=points[-1][0] if points else None,
        )

    def session(
        self,
        pid: int,
        state: str,
        *,
        query: str = "",
        app: str = "shop",
        db: str = "shop",
        blocked_by: list[int] | None = None,
        xact_start: float | None = None,
        query_start: float | None = None,
        state_change: float | None = None,
        captured_at: float,
        wait_event_type: str | None = None,
        backend_type: str = "client backend",
    ) -> str:
        data = {
            "pid": pid,
            "datname": db,
            "usename": "app",
            "application_name": app,
            "client_addr": "10.0.0.9",
            "backend_type": backend_type,
            "state": state,
            "wait_event_type": wait_event_type,
            "wait_event": None,
            "xact_start": xact_start,
            "query_start": query_start,
            "state_change": state_change,
            "backend_start": T0,
            "query": query,
            "blocked_by": blocked_by or [],
            "captured_at": captured_at,
        }
        return self._add("pg/session", f"pid {pid}", data, ts=captured_at)

    def lock(self, pid: int, relation: str | None, mode: str, granted: bool, locktype: str = "relation") -> str:
        return self._add(
            "pg/lock",
            f"pid {pid} {mode} on {relation}",
            {
                "pid": pid,
                "locktype": locktype,
                "relation": relation,
                "mode": mode,
                "granted": granted,
                "waitstart": None,
            },
        )

    def settings(self, **values: Any) -> str:
        return self._add("pg/settings", "pg/settings", dict(values))

    def rds_event(self, source_id: str, message: str, ts: float, categories: list[str] | None = None) -> str:
        return self._add(
            "rds/event",
            f"rds/{source_id}",
            {
                "source_id": source_id,
                "source_type": "db-instance",
                "message": message,
                "categories": categories or [],
                "ts": ts,
            },
            ts=ts,
        )

    def pi_sql(self, statement: str, sql_id: str, load: float, group: str = "db.sql_tokenized") -> str:
        return self._add(
            "pi/sql",
            f"pi/{group}/{sql_id}",
            {
                "group": group,
                "statement": statement,
                "id": sql_id,
                "load": load,
                "partitions": None,
                "metric": "db.load.avg",
            },
        )

    def host(self, name: str, ts: float, **data: Any) -> str:
        return self._add("host/snapshot", f"host/{name}", data, ts=ts)

    def process(self, pattern: str, running: bool, ts: float) -> str:
        return self._add(
            "host/process", f"process/{pattern}", {"pattern": pattern, "running": running, "pids": []}, ts=ts
        )

    def probe(self, url: str, ts: float, **data: Any) -> str:
        return self._add("http/probe", url, {"url": url, **data}, ts=ts)

    def event(self, kind: str, ns: str, name: str, reason: str, message: str, ts: float, type_: str = "Warning") -> str:
        data = {
            "type": type_,
            "reason": reason,
            "message": message,
            "involved": {"kind": kind, "namespace": ns, "name": name},
            "count": 1,
            "first_ts": ts,
            "last_ts": ts,
            "source": "kubelet",
        }
        return self._add("k8s/Event", f"{kind}/{ns}/{name}", data, ts=ts)

    def raw(self, kind: str, obj: str, data: dict[str, Any], ts: float | None = None) -> str:
        return self._add(kind, obj, data, ts=ts)

    def set(self) -> EvidenceSet:
        return EvidenceSet(self.items)


def series(start: float, step: float, values: list[float]) -> list[tuple[float, float]]:
    return [(start + i * step, v) for i, v in enumerate(values)]


def by_code(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def causes(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.role == "cause"]


def assert_refs_real(evidence: EvidenceSet, findings: list[Finding]) -> None:
    """Every reference a finding gives resolves in the evidence (EvidenceSet.check)."""
    for f in findings:
        for ref in f.evidence:
            assert evidence.check(ref), f"{f.code}: reference {ref} does not resolve"
