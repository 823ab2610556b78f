"""The dispatcher never runs a write on its own: a write node whose dependencies ended waits for a decision;
approved, it runs with the approved arguments; rejected or expired, it is skipped with the decision as reason.
A read after a write never reuses a result from before the write."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from agents.remediation import NoRemedy, remediation_request
from core.db import Store
from core.errors import UserError
from core.events import EventBus
from core.policy import CachePolicy
from core.settings import Settings
from core.types import NodeStatus, Plan, PlanNode
from memory.cache import SemanticCache
from memory.tool_results import ToolResultCache
from tests.harness import RedisServer
from tools import load_tool_modules
from workers.celery_app import make_celery
from workers.dispatch import TOOL_RESULTS_CATEGORY, Dispatcher
from workers.release import ReleaseLoop


@pytest.fixture
def rig(tmp_path: Path, embedder: Any, redis_server: RedisServer) -> SimpleNamespace:
    settings = Settings(var_dir=tmp_path, redis_url=redis_server.url)
    store = Store.from_settings(settings)
    client = redis.Redis.from_url(redis_server.url)
    toolset = load_tool_modules(["memory.tools", "tests.toolkit.chaos"])
    loop = ReleaseLoop(
        settings,
        store,
        EventBus(store, client),
        make_celery(settings),
        toolset,
        client,
        lambda: settings.scheduling_policy,
    )
    results = ToolResultCache(SemanticCache(store, embedder, CachePolicy()))
    return SimpleNamespace(store=store, dispatcher=Dispatcher(loop, results), results=results, toolset=toolset)


def _plan(*nodes: PlanNode) -> Plan:
    return Plan(goal="g", nodes=list(nodes))


def test_a_write_waits_for_a_decision_and_runs_with_the_approved_arguments(rig: SimpleNamespace) -> None:
    task = rig.store.create_task("restart it", tenant="t")
    plan = _plan(PlanNode(id="w", tool="chaos_restart", args={"service": "api"}))
    progress = rig.dispatcher.step(task.id, plan, tenant="t")
    assert progress.gated == [{"node_id": "w", "tool": "chaos_restart", "args": {"service": "api"}}]
    assert not progress.done and rig.store.node_runs(task.id) == []  # nothing is in the ready set

    approved = {"w": {"status": "approved", "args": {"service": "api-v2"}, "by": "ann"}}
    progress = rig.dispatcher.step(task.id, plan, tenant="t", decisions=approved)
    assert progress.gated == [] and progress.states["w"] == NodeStatus.READY.value
    [row] = rig.store.node_runs(task.id)
    assert row.args == {"service": "api-v2"}  # what the person approved, not what the plan said


@pytest.mark.parametrize(
    ("decision", "said"),
    [
        ({"status": "rejected", "by": "bob", "reason": "not now"}, "not approved: rejected by bob: not now"),
        ({"status": "expired"}, "expired"),
    ],
)
def test_a_write_nobody_approved_is_skipped_with_the_reason(
    rig: SimpleNamespace, decision: dict[str, Any], said: str
) -> None:
    task = rig.store.create_task("restart it", tenant="t")
    plan = _plan(
        PlanNode(id="w", tool="chaos_restart", args={"service": "api"}),
        PlanNode(id="after", tool="chaos_restart", args={"service": "db"}, depends_on=["w"]),
    )
    progress = rig.dispatcher.step(task.id, plan, tenant="t", decisions={"w": decision})
    assert progress.done and progress.states == {"w": "skipped", "after": "skipped"}
    rows = {r.node_id: r for r in rig.store.node_runs(task.id)}
    assert said in (rows["w"].error or "")
    assert "dependency w was skipped" in (rows["after"].error or "")


def test_a_read_after_a_write_never_reuses_a_result_from_before_it(rig: SimpleNamespace) -> None:
    args = {"names": ["postgres"]}
    rig.results.put("t", TOOL_RESULTS_CATEGORY, "process_check", args, {"status": "success", "summary": "before"})
    task = rig.store.create_task("fix and check", tenant="t")
    plan = _plan(
        PlanNode(id="w", tool="chaos_restart", args={"service": "api"}),
        PlanNode(id="check", tool="process_check", args=args, depends_on=["w"]),
        PlanNode(id="unrelated", tool="process_check", args=args),
    )
    row = rig.store.create_node_run(
        task.id, "w", tool="chaos_restart", args={"service": "api"}, pool="cpu", queue="cpu"
    )
    rig.store.finish_node_run(row.id, NodeStatus.SUCCEEDED, result={"status": "success", "summary": "done"})
    progress = rig.dispatcher.step(task.id, plan, tenant="t", decisions={"w": {"status": "approved"}})
    assert progress.states["check"] == NodeStatus.READY.value  # runs again, on a worker
    assert progress.states["unrelated"] == NodeStatus.SUCCEEDED.value  # no write before it: the cache may serve it


def _diagnosed(store: Store, actions: list[dict[str, Any]]) -> Any:
    source = store.create_task("why are queries hanging?", tenant="t")
    diagnosis = {
        "category": "code_defect",
        "root_cause": "pid 42 is idle in transaction holding locks on orders",
        "confidence": 0.9,
        "actions": actions,
        "findings": [
            {
                "analyzer": "postgres_locks",
                "domain": "database",
                "role": "cause",
                "code": "idle_in_transaction",
                "category": "code_defect",
                "title": "pid 42 idle in transaction",
                "mechanism": "m",
                "object": "pid 42",
                "actions": actions,
            }
        ],
    }
    store.set_answer(source.id, {"diagnosis": diagnosis})
    row = store.create_node_run(source.id, "activity", tool="postgres_activity", args={}, pool="cpu", queue="cpu")
    store.finish_node_run(row.id, NodeStatus.SUCCEEDED, result={"status": "success", "summary": "s"})
    return store.get_task(source.id)


def test_a_diagnosis_becomes_a_plan_of_gated_writes_then_its_checks_again(rig: SimpleNamespace) -> None:
    terminate = {
        "description": "Terminate pid 42",
        "command": "SELECT pg_terminate_backend(42)",
        "kind": "write",
        "tool": "postgres_terminate_session",
        "args": {"pid": 42},
    }
    manual = {"description": "Set a timeout", "command": "ALTER DATABASE ...", "kind": "write"}
    read = {"description": "Show the blocker", "command": "SELECT ...", "kind": "read"}
    source = _diagnosed(rig.store, [read, terminate, manual])
    ctx = SimpleNamespace(toolset=rig.toolset, store=rig.store)
    goal, inputs = remediation_request(ctx, source)  # type: ignore[arg-type]
    nodes = inputs["plan"]["nodes"]
    assert [(n["id"], n["tool"]) for n in nodes] == [
        ("fix-1", "postgres_terminate_session"),
        ("verify-activity", "postgres_activity"),
    ]
    assert nodes[1]["depends_on"] == ["fix-1"] and inputs["cache"] == "skip"
    assert inputs["remediation"]["cause"]["object"] == "pid 42" and goal.startswith("remediate: Terminate pid 42")
    with pytest.raises(UserError):
        remediation_request(ctx, source, [0])  # a read action is not a remedy  # type: ignore[arg-type]
    nothing = _diagnosed(rig.store, [read, manual])
    with pytest.raises(NoRemedy):
        remediation_request(ctx, nothing)  # type: ignore[arg-type]
