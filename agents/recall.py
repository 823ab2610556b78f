"""Recall before planning (the semantic cache: a whole answer, else a plan) and remember after answering.

A cache problem never fails a task: it is logged, reported as an event, and the task goes on uncached.
"""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from agents.context import OpsContext
from core.types import EventType, TaskStatus
from memory.cache import CacheKind, CacheLookup
from memory.entities import change_intent

log = structlog.get_logger(__name__)


def cache_text(goal: str, inputs: dict[str, Any]) -> str:
    """What identifies a request: its words and its structured inputs (a URL given as input counts)."""
    rest = {k: v for k, v in inputs.items() if k not in ("plan", "cache")}
    return goal if not rest else f"{goal} {json.dumps(rest, sort_keys=True)}"


def classify(ctx: OpsContext, goal: str, inputs: dict[str, Any]) -> str:
    if inputs.get("remediation"):
        return "remediate"  # writes a person approved: never read from or stored in the cache
    if inputs.get("plan"):
        return "request"  # a caller-written plan runs as given; its category is never cached
    return ctx.library.choose(goal)[0].category


def _report(ctx: OpsContext, task_id: str, found: CacheLookup) -> None:
    ctx.telemetry.record(
        "cache",
        name=found.category,
        outcome=found.kind,
        hit=found.hit,
        run_s=found.search_ms / 1000,
        task_id=task_id,
        data={"reason": found.reason, "age_s": found.age_s},
    )
    ctx.bus.emit(
        task_id,
        EventType.CACHE_LOOKUP,
        {
            "kind": found.kind,
            "category": found.category,
            "hit": found.hit,
            "reason": found.reason,
            "similarity": None if found.similarity is None else round(found.similarity, 4),
            "search_ms": round(found.search_ms, 3),
            "entry_id": found.entry_id,
        },
    )


def _show_cached_plan(ctx: OpsContext, task_id: str, tenant: str, category: str, text: str, vector: Any) -> None:
    """A task served from the cache still shows the plan that made its answer (the console's plan card)."""
    from core.types import Plan

    assert ctx.cache is not None
    found = ctx.cache.lookup(tenant, category, CacheKind.PLAN, text, vector)
    if not found.hit or not found.payload:
        return
    try:
        plan = Plan.model_validate({**found.payload, "source": "cache"})
    except Exception:  # a plan cached by an older version: the answer still stands
        return
    version = ctx.store.save_plan(task_id, plan)
    ctx.bus.emit(
        task_id,
        EventType.PLAN_READY,
        {"version": version, "notes": ["answer served from the cache"], "plan": plan.model_dump(mode="json")},
    )


# an episode's plan is reused only when its request was this close and named the same things
EPISODE_REUSE_SIMILARITY = 0.9


def recall(ctx: OpsContext, task_id: str, goal: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Returns the state update: category, similar past incidents, and either a cached answer (the task ends)
    or a plan to reuse (from the cache, else from a similar successful episode)."""
    category = classify(ctx, goal, inputs)
    if category in ("request", "remediate"):  # runs as given: nothing to recall a plan or an answer for
        return {"category": category}
    task = ctx.store.get_task(task_id)
    text = cache_text(goal, inputs)
    update: dict[str, Any] = {"category": category}
    try:
        vector = ctx.embedder.embed([text])[0]
        past = ctx.episodes.recall(task.tenant, text, k=3, exclude_task=task_id, vector=vector)
        update["incidents"] = [e.cite() for e in past]
        update["facts"] = [f.view() for f in ctx.facts.about(task.tenant, text)]
        best = next((e for e in past if e.outcome == "succeeded" and e.same_entities), None)
        if best is not None and best.similarity >= EPISODE_REUSE_SIMILARITY and not inputs.get("playbook"):
            update["reuse"] = {"plan": best.plan, "source": "episode", "note": f"plan of task {best.task_id}"}
    except Exception as exc:
        log.warning("episodic recall failed", task_id=task_id, error=repr(exc))
        vector = None
    if vector is None or ctx.cache is None or not ctx.cache.policy_for(category).enabled:
        return update
    if change_intent(goal):  # a request to change something is done, never answered from memory
        update["reuse"] = None
        ctx.bus.emit(task_id, EventType.LOG, {"message": "asks for a change: the cache is neither read nor filled"})
        return update
    if inputs.get("cache") == "skip":  # "run again": the caller wants fresh figures
        ctx.bus.emit(task_id, EventType.LOG, {"message": "cache skipped at the caller's request"})
        return update
    try:
        answer = ctx.cache.lookup(task.tenant, category, CacheKind.ANSWER, text, vector)
        _report(ctx, task_id, answer)
        if answer.hit and answer.payload is not None:
            _show_cached_plan(ctx, task_id, task.tenant, category, text, vector)
            served = {
                **answer.payload,
                "from_cache": {
                    "entry_id": answer.entry_id,
                    "similarity": round(answer.similarity or 0.0, 4),
                    "age_s": answer.age_s,
                    "cached_request": answer.cached_text,
                },
            }
            ctx.store.set_answer(task_id, served)
            ctx.bus.emit(task_id, EventType.ANSWER, {"headline": served.get("headline"), "from_cache": True})
            ctx.store.set_task_status(task_id, TaskStatus.SUCCEEDED)
            return {**update, "outcome": "cached"}
        plan = ctx.cache.lookup(task.tenant, category, CacheKind.PLAN, text, vector)
        _report(ctx, task_id, plan)
        if plan.hit and plan.payload is not None:
            update["reuse"] = {"plan": plan.payload, "source": "cache", "note": f"cache entry {plan.entry_id}"}
    except Exception as exc:
        log.warning("cache recall failed; planning without it", task_id=task_id, error=repr(exc))
        ctx.bus.emit(task_id, EventType.LOG, {"message": f"cache unavailable: {type(exc).__name__}"})
    return update


def remember(ctx: OpsContext, task_id: str, category: str, plan: dict[str, Any]) -> None:
    """Every finished task becomes an episode; one that succeeded with every node fine also fills the cache
    (its answer, and its plan unless it came from the cache)."""
    task = ctx.store.get_task(task_id)
    answer = task.answer or {}
    if answer.get("from_cache") or category == "request":
        return
    text = cache_text(task.goal, task.inputs or {})
    try:
        vector = ctx.embedder.embed([text])[0]
        ctx.episodes.record(
            tenant=task.tenant,
            task_id=task_id,
            goal=text,
            category=category,
            plan=plan,
            outcome=task.status,
            answer=answer,
            duration_s=(task.finished_at or time.time()) - task.created_at,
            vector=vector,
        )
    except Exception as exc:
        log.warning("episode not recorded", task_id=task_id, error=repr(exc))
        return
    if ctx.cache is None or not ctx.cache.policy_for(category).enabled or change_intent(task.goal):
        return
    if task.status != TaskStatus.SUCCEEDED.value or answer.get("failed_nodes"):
        return
    try:
        started = time.perf_counter()
        stored = {"answer": ctx.cache.put(task.tenant, category, CacheKind.ANSWER, text, answer, vector, task_id)}
        if plan.get("source") != "cache":
            stored["plan"] = ctx.cache.put(task.tenant, category, CacheKind.PLAN, text, plan, vector, task_id)
        ctx.bus.emit(
            task_id,
            EventType.CACHE_STORED,
            {"category": category, "entries": stored, "ms": round((time.perf_counter() - started) * 1000, 2)},
        )
    except Exception as exc:
        log.warning("cache fill failed", task_id=task_id, error=repr(exc))
