"""A test analyzer for tests/integration/test_investigations.py, loaded into that module's API process (this folder
is on its PYTHONPATH, so Python imports this file at start).

`test_log_chain` asks for ledger-db's log when ledger-api's log shows refused connections to it, and names
ledger-db's shutdown as the cause once that log is read: a deterministic analyzer, so the diagnose-request test
can watch an investigation grow its live plan (a log_search node a real worker runs) whatever the real analyzers
conclude about the same logs. It runs beside the real analyzers; nothing else is replaced.
"""

from __future__ import annotations

from pathlib import Path

from diagnosis import Category, Domain, EvidenceRef, EvidenceSet, Finding
from diagnosis.analyzers import ANALYZERS


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"}, name="test_log_chain")
def log_chain(ev: EvidenceSet) -> list[Finding]:
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
