"""The answer: every finding with the node, tool and evidence it came from; failures; next steps."""

from __future__ import annotations

from typing import Any

from core.db import NodeRunRow
from core.types import NodeStatus, Plan

_RANK = {"critical": 0, "warn": 1, "ok": 2}
_NEXT_STEPS = {
    "http_probe": "check the service behind the endpoint: its process, its logs (log_search) and its dependencies",
    "host_metrics": "look at the top processes in the evidence; ask for a capacity report to see the trend",
    "log_search": "read the samples; narrow the window or the pattern to the first error of the burst",
    "process_check": "start the process or look at why it exited (its unit's journal or log file)",
    "metric_anomalies": "line the anomalous points up with deploys, cron jobs and error bursts in the logs",
    "redis_info": "look at memory policy and client count; check which clients hold connections",
    "postgres_activity": "look at the blocking sessions and long queries listed; cancel or tune them",
    "pool_status": "start workers for the pool with `opsgraph worker --pool NAME`, or look at their logs",
}


def failure_answer(headline: str, severity: str = "critical") -> dict[str, Any]:
    """The answer of a task that ended before any node ran (no valid plan, cancelled while queued)."""
    return {
        "headline": headline,
        "severity": severity,
        "findings": [],
        "failed_nodes": [],
        "nodes": [],
        "next_steps": [],
        "playbook": None,
        "plan_source": None,
        "text": f"**{headline}**",
    }


def synthesize_answer(
    plan: Plan,
    latest: dict[str, NodeRunRow],
    all_runs: list[NodeRunRow],
    incidents: list[dict[str, Any]] | None = None,
    facts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    findings: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []  # a write nobody approved, or a node whose input never came
    nodes: list[dict[str, Any]] = []
    for node in plan.nodes:
        row = latest.get(node.id)
        if row is None:
            continue
        result = row.result or {}
        attempts = sum(1 for r in all_runs if r.node_id == node.id)
        nodes.append(
            {
                "node_id": node.id,
                "tool": node.tool,
                "status": row.status,
                "summary": result.get("summary"),
                "worker": row.worker,
                "queue": row.queue,
                "attempts": attempts,
            }
        )
        if row.status == NodeStatus.SUCCEEDED.value:
            for f in (result.get("data") or {}).get("findings", []):
                findings.append(
                    {
                        "severity": f.get("severity", "ok"),
                        "message": f.get("message", ""),
                        "node_id": node.id,
                        "tool": node.tool,
                        "evidence": result.get("evidence", [])[:5],
                    }
                )
        elif row.status in (NodeStatus.FAILED.value, NodeStatus.LOST.value, NodeStatus.CANCELLED.value):
            failed.append({"node_id": node.id, "tool": node.tool, "error": row.error or result.get("summary")})
        elif row.status == NodeStatus.SKIPPED.value:
            skipped.append({"node_id": node.id, "tool": node.tool, "reason": row.error or result.get("summary")})
    findings.sort(key=lambda f: _RANK.get(f["severity"], 3))
    problems = [f for f in findings if f["severity"] in ("critical", "warn")]
    worst = problems[0]["severity"] if problems else "ok"
    if problems:
        headline = f"{len(problems)} problem(s) found; worst: {problems[0]['message']}"
    elif failed:
        headline = f"no problems found by the checks that ran, but {len(failed)} check(s) failed"
    elif unapproved := [s for s in skipped if str(s["reason"] or "").startswith("not approved")]:
        headline = f"{unapproved[0]['node_id']} ({unapproved[0]['tool']}) was {unapproved[0]['reason']}"
        worst = "warn"
    elif skipped:
        headline = f"{len(nodes) - len(skipped)} check(s) passed, {len(skipped)} skipped"
    else:
        headline = f"all {len(nodes)} checks passed"
    next_steps = list(dict.fromkeys(_NEXT_STEPS[f["tool"]] for f in problems if f["tool"] in _NEXT_STEPS))
    if failed:
        next_steps.append(
            "re-run the failed checks once their errors are fixed: " + ", ".join(f["node_id"] for f in failed)
        )
    lines = [f"**{headline}**", ""]
    for f in findings:
        lines.append(f"- [{f['severity']}] {f['message']} (from {f['node_id']}: {f['tool']})")
        lines.extend(f"    - {e}" for e in f["evidence"][:3])
    for f in failed:
        lines.append(f"- [failed] {f['node_id']} ({f['tool']}): {f['error']}")
    for f in skipped:
        lines.append(f"- [skipped] {f['node_id']} ({f['tool']}): {f['reason']}")
    if next_steps:
        lines += ["", "Next steps:", *[f"- {s}" for s in next_steps]]
    if facts:
        lines += ["", "Known facts:", *[f"- {f['text']} (source: {f['source']})" for f in facts]]
    if incidents:
        lines += ["", "Similar past incidents:"]
        lines += [f"- {i['goal']} ({i['outcome']}): {i['headline']} [task {i['task_id']}]" for i in incidents]
    return {
        "headline": headline,
        "severity": worst,
        "findings": findings,
        "failed_nodes": failed,
        "skipped_nodes": skipped,
        "nodes": nodes,
        "next_steps": next_steps,
        "similar_incidents": incidents or [],
        "known_facts": facts or [],
        "playbook": plan.playbook,
        "plan_source": plan.source,
        "text": "\n".join(lines),
    }
