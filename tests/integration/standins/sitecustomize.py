"""LOCAL STAND-INS for tests/integration/test_investigations.py only (on PYTHONPATH of that module's API process).

diagnosis.bundle, diagnosis.investigate and diagnosis.live are other parts of issue 13, written on other branches.
Until they land, this installs the smallest versions that let the investigation's REST path be tested end to end:
a loader for JSON files (Alertmanager payloads, kubectl Pod lists) and one OOMKilled analyzer. When a real module
exists, its stand-in is not installed and the tests run against the real one.

`test_log_chain` is always registered: a test analyzer that asks for ledger-db's log when ledger-api's log shows
refused connections to it, so the diagnose-request test can watch an investigation grow a live plan whatever the
real analyzers conclude.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
import types
import zipfile
from pathlib import Path
from typing import Any


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True


def _install(full: bool) -> None:
    from diagnosis import Category, Claim, Diagnosis, Domain, EvidenceItem, EvidenceRef, EvidenceSet, Finding
    from diagnosis.analyzers import ANALYZERS

    def items_of(name: str, body: Any) -> list[EvidenceItem]:
        out = []
        if isinstance(body, dict) and body.get("version") == "4" and isinstance(body.get("alerts"), list):
            for n, a in enumerate(body["alerts"]):
                data = {
                    "status": a.get("status"),
                    "labels": a.get("labels", {}),
                    "annotations": a.get("annotations", {}),
                    "group_key": body.get("groupKey"),
                    "receiver": body.get("receiver"),
                }
                obj = f"alert/{a.get('labels', {}).get('alertname', '?')}"
                out.append(EvidenceItem(id=f"{name}#{n}", kind="alert", source=name, object=obj, data=data))
        elif isinstance(body, dict) and body.get("kind") == "List":
            for n, o in enumerate(body.get("items", [])):
                md = o.get("metadata", {})
                obj = f"{o.get('kind')}/{md.get('namespace')}/{md.get('name')}"
                out.append(EvidenceItem(id=f"{name}#{n}", kind=f"k8s/{o.get('kind')}", source=name, object=obj, data=o))
        return out

    def load_bundle(path: Any, limits: Any = None) -> EvidenceSet:
        path = Path(path)
        files: dict[str, bytes] = {}
        if path.is_dir():
            files = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                files = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
        else:
            with tarfile.open(path, "r:gz") as tf:
                files = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]
        ev = EvidenceSet()
        for name, raw in sorted(files.items()):
            try:
                found = items_of(name, json.loads(raw))
            except ValueError:
                found = []
            if not found:
                ev.ignored.append({"path": name, "reason": "stand-in loader: not a known format"})
            for i in found:
                ev.add(i)
        return ev

    def oom(ev: EvidenceSet) -> list[Finding]:
        out = []
        for item in ev.kind("k8s/Pod"):
            for n, cs in enumerate(item.data.get("status", {}).get("containerStatuses", [])):
                term = cs.get("lastState", {}).get("terminated", {})
                if term.get("reason") == "OOMKilled":
                    md = item.data["metadata"]
                    field = f"status.containerStatuses.{n}.lastState.terminated.reason"
                    out.append(
                        Finding(
                            analyzer="standin_oom",
                            domain=Domain.KUBERNETES,
                            role="cause",
                            code="oom_killed",
                            category=Category.RESOURCE_EXHAUSTION,
                            title=f"{md['name']}/{cs['name']} OOMKilled",
                            mechanism=f"container {cs['name']} of Pod {md['namespace']}/{md['name']} was OOMKilled",
                            object=f"Pod {md['namespace']}/{md['name']} container {cs['name']}",
                            score=0.9,
                            evidence=[EvidenceRef(item=item.id, field=field, value="OOMKilled")],
                        )
                    )
        return out

    def alerts(ev: EvidenceSet) -> list[Finding]:
        return [
            Finding(
                analyzer="standin_alerts",
                domain=Domain.ALERTS,
                role="symptom",
                code=f"alert:{i.object.split('/', 1)[1]}",
                category=Category.UNKNOWN,
                title=f"{i.object} {i.data.get('status')}",
                mechanism="an alert fires",
                object=i.object,
                evidence=[EvidenceRef(item=i.id, field="status", value=i.data.get("status"))],
            )
            for i in ev.kind("alert")
        ]

    @ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"}, name="test_log_chain")
    def log_chain(ev: EvidenceSet) -> list[Finding]:
        """Refused connections to ledger-db in the app's log ask for ledger-db's own log; its shutdown is the cause."""
        out = []
        for item in ev.kind("log"):
            for r in item.data.get("records", []):
                if "connection refused" in r["msg"] and "ledger-db" in r["msg"]:
                    folder = str(Path(item.object).parent)
                    out.append(
                        Finding(
                            analyzer="test_log_chain",
                            domain=Domain.LOGS,
                            role="symptom",
                            code="upstream_refused",
                            category=Category.DEPENDENCY_FAILURE,
                            title="ledger-api cannot connect to ledger-db",
                            mechanism="connections to ledger-db are refused",
                            object=item.object,
                            evidence=[EvidenceRef(item=item.id, line=r["line"], value=r["msg"])],
                            needs=[f"logs of {folder}/ledger-db.log"],
                        )
                    )
                    break
                if "database system is shutting down" in r["msg"]:
                    out.append(
                        Finding(
                            analyzer="test_log_chain",
                            domain=Domain.LOGS,
                            role="cause",
                            code="db_shutdown",
                            category=Category.DEPENDENCY_FAILURE,
                            title="ledger-db is shutting down",
                            mechanism="ledger-db is shutting down, so ledger-api's connections are refused",
                            object=item.object,
                            score=0.8,
                            evidence=[EvidenceRef(item=item.id, line=r["line"], value=r["msg"])],
                        )
                    )
                    break
        return out

    def items_from_tool_result(node_id: str, tool: str, data: dict[str, Any]) -> list[EvidenceItem]:
        if tool != "log_search" or not data.get("path"):
            return []
        records = [{"ts": None, "level": None, "msg": m, "line": n} for n, m in enumerate(data.get("samples", []), 1)]
        return [
            EvidenceItem(id=f"{node_id}#0", kind="log", source=node_id, object=data["path"], data={"records": records})
        ]

    def analyze_domain(domain: Domain, evidence: EvidenceSet) -> list[Finding]:
        return [f for a in ANALYZERS.for_domain(domain) for f in a.run(evidence)]

    def conclude(findings: list[Finding], evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
        causes = [f for f in findings if f.role == "cause"]
        if not causes:
            return Diagnosis(
                category=Category.UNKNOWN,
                root_cause="the evidence does not name a cause",
                confidence=0.2,
                missing=["the workload's objects"],
                findings=findings,
                text="**unknown**",
            )
        top = causes[0]
        return Diagnosis(
            category=top.category,
            root_cause=top.mechanism,
            confidence=top.score,
            causal_chain=[top.title, *[f.title for f in findings if f.role == "symptom"]],
            evidence=[Claim(claim=top.title, refs=top.evidence)],
            findings=findings,
            text=f"**{top.category.value}**: {top.mechanism}",
        )

    if not full:
        return
    ANALYZERS.analyzer(domain=Domain.KUBERNETES, reads={"k8s/Pod"}, name="standin_oom")(oom)
    ANALYZERS.analyzer(domain=Domain.ALERTS, reads={"alert"}, name="standin_alerts")(alerts)
    if _missing("diagnosis.bundle"):
        sys.modules["diagnosis.bundle"] = types.SimpleNamespace(load_bundle=load_bundle)  # type: ignore[assignment]
    if _missing("diagnosis.live"):
        sys.modules["diagnosis.live"] = types.SimpleNamespace(  # type: ignore[assignment]
            items_from_tool_result=items_from_tool_result
        )
    sys.modules["diagnosis.investigate"] = types.SimpleNamespace(  # type: ignore[assignment]
        analyze_domain=analyze_domain, conclude=conclude
    )


_install(full=_missing("diagnosis.investigate"))
