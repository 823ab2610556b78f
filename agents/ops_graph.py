"""The ops graph: intake -> recall -> plan -> dispatch (loops until the DAG ends) -> synthesize -> remember.

A write node stops the dispatch loop at `gate`: the graph interrupts there until a person approves or rejects it
(or the request expires), then dispatch goes on with the decision (agents/remediation.py).

Compiled with a durable checkpointer, thread id = task id, so a restarted API resumes a task at the
step it was in. Each step is idempotent against the database: dispatch never releases a node twice.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import ValidationError

from agents.context import OpsContext
from agents.errors import PlanInvalid
from agents.investigation import diagnose_answer, investigate_live, investigate_request, is_diagnose
from agents.planner import PlanOutcome
from agents.recall import recall, remember
from agents.remediation import approval_gate, remediation_answer, verify_remediation
from agents.synthesis import failure_answer, synthesize_answer
from agents.validation import validate_plan
from core import keys
from core.types import EventType, NodeStatus, Plan, TaskStatus
from memory.compression import working_memory

_MAX_GOAL_CHARS = 4000


class OpsState(TypedDict, total=False):
    task_id: str
    goal: str
    inputs: dict[str, Any]
    plan: dict[str, Any] | None
    done: bool
    category: str
    reuse: dict[str, Any] | None  # {"plan", "source": cache | episode, "note"}
    incidents: list[dict[str, Any]]
    facts: list[dict[str, Any]]
    outcome: str  # accepted | investigation | ended | planned | invalid | cancelled | stopped | finished
    diagnosis: dict[str, Any] | None  # {"diagnosis": Diagnosis JSON, "items": cited items}: investigations, diagnoses
    gated: dict[str, Any] | None  # the write node waiting for a person: {node_id, tool, args}
    decisions: dict[str, dict[str, Any]]  # write node id -> the person's decision (approved, rejected, expired)


def build_ops_graph(ctx: OpsContext) -> CompiledStateGraph[Any]:
    store, bus = ctx.store, ctx.bus

    def intake(state: OpsState) -> OpsState:
        task = store.get_task(state["task_id"])
        if TaskStatus(task.status).terminal:  # cancelled while it waited for a runner thread
            store.set_answer(task.id, failure_answer(f"task {task.status} before planning", "ok"))
            bus.announce(task.id)
            return {"outcome": "ended"}
        store.set_task_status(task.id, TaskStatus.PLANNING)
        inputs = task.inputs or {}
        # an investigation (POST /v1/investigations, an Alertmanager group) has its evidence: no plan to run
        outcome = "investigation" if isinstance(inputs.get("investigation"), dict) else "accepted"
        return {"goal": task.goal[:_MAX_GOAL_CHARS], "inputs": inputs, "outcome": outcome}

    def plan(state: OpsState) -> OpsState:
        task_id = state["task_id"]
        inputs = dict(state.get("inputs") or {})
        try:
            cached = _reuse_plan(ctx, state["goal"], state.get("reuse"))
            if cached is not None:
                outcome = cached
            elif inputs.get("plan"):
                outcome = PlanOutcome(request_plan(ctx, state["goal"], inputs["plan"]), ["plan given with the request"])
            else:
                outcome = ctx.planner.plan(state["goal"], inputs)
        except PlanInvalid as exc:
            bus.emit(task_id, EventType.PLAN_REJECTED, {"reasons": exc.reasons})
            store.set_answer(task_id, failure_answer(f"no valid plan: {exc}"))
            store.set_task_status(task_id, TaskStatus.FAILED, error=f"no valid plan: {exc}")
            return {"plan": None, "outcome": "invalid"}
        if outcome.llm_call is not None:
            call = outcome.llm_call
            ctx.telemetry.record(
                "llm",
                name=str(call["model"])[:64],
                outcome=call["outcome"],
                task_id=task_id,
                run_s=call.get("run_s"),
                tokens_in=call["tokens_in"],
                tokens_out=call["tokens_out"],
                cost=call.get("cost"),
            )
        version = store.save_plan(task_id, outcome.plan)
        bus.emit(
            task_id,
            EventType.PLAN_READY,
            {"version": version, "notes": outcome.notes, "plan": outcome.plan.model_dump(mode="json")},
        )
        store.set_task_status(task_id, TaskStatus.RUNNING)
        return {"plan": outcome.plan.model_dump(mode="json"), "outcome": "planned", "done": False}

    def dispatch(state: OpsState) -> OpsState:
        task_id = state["task_id"]
        # the stored plan, not the checkpoint's: results may have grown it since (each change is a version)
        plan_obj = store.latest_plan(task_id) or Plan.model_validate(state["plan"])
        task = store.get_task(task_id)
        if task.status == TaskStatus.CANCELLED.value:
            cancel_open_attempts(ctx, task_id)
            return {"done": True, "outcome": "cancelled"}
        progress = ctx.dispatcher.run_until_progress(
            task_id,
            plan_obj,
            tenant=task.tenant,
            priority=task.priority,
            decisions=state.get("decisions") or {},
            fresh=(task.inputs or {}).get("cache") == "skip",  # "run again": fresh tool results too
        )
        if progress.gated:
            return {"done": False, "gated": progress.gated[0]}
        if progress.done:
            return {"done": True, "outcome": "stopped" if progress.stopped else "finished"}
        return {"done": False}

    def gate(state: OpsState) -> OpsState:
        """Ask a person about the write node and wait (LangGraph interrupt) for the decision."""
        gated = state.get("gated") or {}
        decision = approval_gate(ctx, state["task_id"], gated)
        return {"gated": None, "decisions": {**(state.get("decisions") or {}), gated["node_id"]: decision}}

    def investigate(state: OpsState) -> OpsState:
        """Investigations and diagnose requests end in a Diagnosis: the evidence of the request (a bundle, alerts,
        evidence items) or of the live tools that ran, grown on request by new plan nodes."""
        task_id = state["task_id"]
        if state.get("outcome") == "investigation":
            try:
                diagnosis = investigate_request(ctx, task_id, state["inputs"]["investigation"])
            except Exception as exc:  # a refused bundle, a missing part: the task fails with the reason
                message = f"investigation failed: {type(exc).__name__}: {exc}"
                store.set_answer(task_id, failure_answer(message))
                store.set_task_status(task_id, TaskStatus.FAILED, error=message)
                return {"diagnosis": None, "outcome": "ended"}
            return {"diagnosis": diagnosis}
        plan_obj = store.latest_plan(task_id) or Plan.model_validate(state["plan"])
        if state.get("outcome") == "cancelled":
            return {"diagnosis": None}
        task = store.get_task(task_id)
        if isinstance((task.inputs or {}).get("remediation"), dict):  # the writes ran (or not): did they work?
            return {"diagnosis": verify_remediation(ctx, task)}
        if not is_diagnose(plan_obj.category, state["goal"]):
            return {"diagnosis": None}
        try:
            return {
                "diagnosis": investigate_live(
                    ctx,
                    task_id,
                    state["goal"],
                    tenant=task.tenant,
                    priority=task.priority,
                    fresh=(task.inputs or {}).get("cache") == "skip",
                )
            }
        except Exception as exc:  # the checks' own answer still stands
            bus.emit(
                task_id, EventType.LOG, {"level": "warning", "message": f"no diagnosis: {type(exc).__name__}: {exc}"}
            )
            return {"diagnosis": None}

    def synthesize(state: OpsState) -> OpsState:
        task_id = state["task_id"]
        if state.get("outcome") == "investigation":
            answer = diagnose_answer(state["diagnosis"] or {}, None)  # investigate ended the task when it had none
            bus.emit(task_id, EventType.ANSWER, {"headline": answer["headline"], "severity": answer["severity"]})
            store.set_answer(task_id, answer)
            store.set_task_status(task_id, TaskStatus.SUCCEEDED)
            return {}
        plan_obj = store.latest_plan(task_id) or Plan.model_validate(state["plan"])
        runs = store.node_runs(task_id)
        latest = store.latest_attempts(task_id)
        answer = synthesize_answer(
            plan_obj, latest, runs, incidents=state.get("incidents") or [], facts=state.get("facts") or []
        )
        outputs = {nid: r.result for nid, r in latest.items() if r.result and r.status == NodeStatus.SUCCEEDED.value}
        # what the task read, compressed within its budget: the context a person or an LLM reads next
        answer["working_memory"] = working_memory(outputs, ctx.settings.working_memory_tokens)
        outcome = state.get("diagnosis")
        if outcome and "remediation" in outcome:
            answer = remediation_answer(outcome, answer)
        elif outcome:
            answer = diagnose_answer(outcome, answer)
        bus.emit(task_id, EventType.ANSWER, {"headline": answer["headline"], "severity": answer["severity"]})
        ran = [r for r in latest.values() if r.status != NodeStatus.SKIPPED.value]
        all_failed = bool(ran) and all(r.status != NodeStatus.SUCCEEDED.value for r in ran)
        store.set_answer(task_id, answer)  # a cancelled task keeps its partial answer too
        if state.get("outcome") == "cancelled":
            store.set_task_status(task_id, TaskStatus.CANCELLED)
        elif state.get("outcome") == "stopped" or all_failed:
            store.set_task_status(task_id, TaskStatus.FAILED, error=answer["headline"])
        else:
            store.set_task_status(task_id, TaskStatus.SUCCEEDED)
        return {}

    def recall_step(state: OpsState) -> OpsState:
        return recall(ctx, state["task_id"], state["goal"], dict(state.get("inputs") or {}))  # type: ignore[return-value]

    def remember_step(state: OpsState) -> OpsState:
        remember(ctx, state["task_id"], state.get("category") or "triage", state.get("plan") or {})
        return {}

    def after_intake(state: OpsState) -> str:
        return {"accepted": "recall", "investigation": "investigate"}.get(state.get("outcome") or "", END)

    def after_recall(state: OpsState) -> str:
        return END if state.get("outcome") == "cached" else "plan"

    def after_plan(state: OpsState) -> str:
        return "dispatch" if state.get("outcome") == "planned" else END

    def after_dispatch(state: OpsState) -> str:
        if state.get("gated"):
            return "gate"
        return "investigate" if state.get("done") else "dispatch"

    def after_investigate(state: OpsState) -> str:
        return END if state.get("outcome") == "ended" else "synthesize"

    def after_synthesize(state: OpsState) -> str:
        # an investigation's answer is about its own evidence: no episode or cached answer for a goal's words
        return END if state.get("outcome") == "investigation" else "remember"

    graph = StateGraph(OpsState)
    graph.add_node("intake", intake)
    graph.add_node("plan", plan)
    graph.add_node("dispatch", dispatch)
    graph.add_node("gate", gate)
    graph.add_node("investigate", investigate)
    graph.add_node("synthesize", synthesize)
    graph.add_node("recall", recall_step)
    graph.add_node("remember", remember_step)
    graph.add_edge(START, "intake")
    graph.add_conditional_edges("intake", after_intake, ["recall", "investigate", END])
    graph.add_conditional_edges("recall", after_recall, ["plan", END])
    graph.add_conditional_edges("plan", after_plan, ["dispatch", END])
    graph.add_conditional_edges("dispatch", after_dispatch, ["dispatch", "gate", "investigate"])
    graph.add_edge("gate", "dispatch")
    graph.add_conditional_edges("investigate", after_investigate, ["synthesize", END])
    graph.add_conditional_edges("synthesize", after_synthesize, ["remember", END])
    graph.add_edge("remember", END)
    return graph.compile(checkpointer=ctx.checkpointer)


def _reuse_plan(ctx: OpsContext, goal: str, reuse: dict[str, Any] | None) -> PlanOutcome | None:
    """A remembered plan (cache or episode), checked again by today's validator (tools may have changed)."""
    if not reuse:
        return None
    try:
        plan = Plan.model_validate({**reuse["plan"], "goal": goal, "source": reuse["source"]})
        validate_plan(plan, ctx.toolset, ctx.settings)
    except (ValidationError, PlanInvalid, KeyError):
        return None
    return PlanOutcome(plan, [f"plan reused from the {reuse['source']}: {reuse.get('note', '')}"])


def request_plan(ctx: OpsContext, goal: str, body: dict[str, Any]) -> Plan:
    """A plan the caller wrote: the same validator as any planner's, so it is never dispatched unchecked."""
    try:
        plan = Plan.model_validate({"goal": goal, "category": "request", **body, "source": "request"})
    except ValidationError as exc:
        raise PlanInvalid([f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]) from exc
    return validate_plan(plan, ctx.toolset, ctx.settings)


def cancel_open_attempts(ctx: OpsContext, task_id: str) -> None:
    """Cooperative cancel: queued attempts end here (a worker that gets them skips them); running tools see
    the cancel flag and stop at their next check."""
    ctx.redis.set(keys.CANCEL_FLAG + task_id, "1", ex=3600)
    waiting = (NodeStatus.READY.value, NodeStatus.PENDING.value, NodeStatus.QUEUED.value)
    for row in ctx.store.open_attempts(task_id):
        if row.status in waiting and ctx.store.finish_node_run(row.id, NodeStatus.CANCELLED, error="task cancelled"):
            ctx.bus.emit(
                task_id,
                EventType.NODE_FINISHED,
                {
                    "node_id": row.node_id,
                    "attempt": row.attempt,
                    "status": "cancelled",
                    "summary": "task cancelled",
                },
            )
