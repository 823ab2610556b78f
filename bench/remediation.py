"""Time from a person's approval to a verified fix, on the live PostgreSQL lock incident.

Each run starts a real lock incident (a session idle in transaction after an UPDATE, three writers waiting), asks
the service why queries hang, asks it to remediate, and waits for the approval request. The clock starts when the
approver's POST /approve is sent and stops when the task has ended with `answer.remediation.outcome == fixed`
(terminate on a cpu worker, then postgres_activity again, then the analyzers). The API and worker are real
processes on real Redis and PostgreSQL; the phases come from the task's node runs.

Run: make bench  (or .venv/bin/python -m bench.remediation [--runs N]). Needs PostgreSQL at
OPSGRAPH_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test); prints and writes
bench/results/remediation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness import PostgresDatabase, RedisServer, Service, wait_until
from tests.toolkit.pg_incident import lock_incident

OUT = Path(__file__).resolve().parent / "results" / "remediation.json"
TENANT = "bench"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one_run(
    svc: Service, db: PostgresDatabase, admin_url: str, keys: dict[str, dict[str, str]], i: int
) -> dict[str, Any]:
    with lock_incident(admin_url, table=f"orders_{i}", database=db, settle_s=1.0) as incident:
        question = {"goal": "why are queries on the database hanging?", "cache": "skip"}
        asked = svc.post("/v1/tasks", json=question, headers=keys["op"])
        diag_id = asked.json()["id"]
        svc.tenant_of[diag_id] = TENANT
        t_ask = time.perf_counter()
        svc.wait_task(diag_id, timeout=180)
        diagnosed_s = time.perf_counter() - t_ask
        fix = svc.post(f"/v1/tasks/{diag_id}/remediate", json={}, headers=keys["op"])
        assert fix.status_code == 202, fix.text
        fix_id = fix.json()["id"]
        svc.tenant_of[fix_id] = TENANT
        t_fix = time.perf_counter()

        def pending() -> dict[str, Any] | None:
            items = svc.get(f"/v1/approvals?status=pending&task_id={fix_id}", headers=keys["ap"]).json()["approvals"]
            if items:
                return items[0]  # type: ignore[no-any-return]
            ended = svc.task(fix_id)
            return {"ended": ended} if ended["status"] in ("succeeded", "failed", "cancelled") else None

        approval = wait_until(pending, 120, "the approval request", interval=0.05)
        requested_s = time.perf_counter() - t_fix
        if "ended" in approval:  # the preview refused the write (e.g. the diagnosis named another database's pid)
            return {"run": i, "outcome": "no_request", "headline": approval["ended"]["answer"]["headline"]}
        t0 = time.perf_counter()
        decided = svc.post(f"/v1/approvals/{approval['id']}/approve", json={"reason": "bench"}, headers=keys["ap"])
        assert decided.status_code == 200, decided.text
        task = wait_until(
            lambda: (t := svc.task(fix_id))["status"] in ("succeeded", "failed", "cancelled") and t,
            180,
            "the remediation to end",
            interval=0.05,
        )
        verified_s = time.perf_counter() - t0
        report = task["answer"].get("remediation") or {}
        runs = {r["node_id"]: r for r in task["node_runs"]}
        write = runs.get("fix-1") or {}
        decided_at = decided.json()["decided_at"]
        return {
            "run": i,
            "outcome": report.get("outcome"),
            "holder_gone": not incident.session_alive(incident.holder_pid),
            "diagnose_s": round(diagnosed_s, 3),
            "remediate_to_request_s": round(requested_s, 3),
            "approval_to_verified_s": round(verified_s, 3),
            "approval_to_write_done_s": round((write.get("finished_at") or decided_at) - decided_at, 3),
            "write_run_s": write.get("run_s"),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    admin_url = os.environ.get("OPSGRAPH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        db = PostgresDatabase(admin_url)
    except Exception as exc:  # no PostgreSQL here: say so, and write it down
        print(f"remediation bench skipped: PostgreSQL at {admin_url} unavailable ({type(exc).__name__})")
        OUT.write_text(json.dumps({"skipped": f"no PostgreSQL at {admin_url}"}, indent=2) + "\n")
        return
    work = Path(tempfile.mkdtemp(prefix="opsgraph-bench-remediation-"))
    redis_server = RedisServer(work / "redis")
    svc = Service(work, redis_server.url, "", OPSGRAPH_POSTGRES_DSNS=f'["{db.url}"]')
    results: list[dict[str, Any]] = []
    try:
        svc.start_api()
        svc.start_worker("cpu", "cpu-bench")
        keys = {
            "op": svc.bearer(svc.create_key(TENANT, ["operate"], name="bench operator")),
            "ap": svc.bearer(svc.create_key(TENANT, ["approve"], name="bench approver")),
        }
        for i in range(args.runs):
            results.append(one_run(svc, db, admin_url, keys, i))
            print(json.dumps(results[-1]))
    finally:
        svc.stop()
        redis_server.stop()
        db.drop()
    done = [r for r in results if "approval_to_verified_s" in r]
    if not done:
        print("remediation: no run reached an approval request; see bench/results/remediation.json")
        OUT.write_text(json.dumps({"runs": results}, indent=2) + "\n")
        return
    times = [r["approval_to_verified_s"] for r in done]
    report = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "runs": len(results),
        "fixed": sum(r["outcome"] == "fixed" and r["holder_gone"] for r in done),
        "approval_to_verified_s": {"p50": statistics.median(times), "max": max(times), "min": min(times)},
        "approval_to_write_done_s_p50": statistics.median(r["approval_to_write_done_s"] for r in done),
        "remediate_to_request_s_p50": statistics.median(r["remediate_to_request_s"] for r in done),
        "diagnose_s_p50": statistics.median(r["diagnose_s"] for r in done),
        "per_run": results,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"remediation: {report['fixed']}/{len(results)} fixed and verified; approval -> verified fix "
        f"p50 {report['approval_to_verified_s']['p50']:.2f} s (max {report['approval_to_verified_s']['max']:.2f} s); "
        f"approval -> write done p50 {report['approval_to_write_done_s_p50']:.2f} s; "
        f"remediate -> approval request p50 {report['remediate_to_request_s_p50']:.2f} s"
    )


if __name__ == "__main__":
    main()
