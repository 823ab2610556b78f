"""Planners turn a request into a validated Plan.

OfflinePlanner (the embedded default) instantiates the best-matching playbook. LLMPlanner asks any
OpenAI-compatible endpoint for a plan as structured output, checks it with the same validator, and falls
back to the offline planner when the call fails or the plan is invalid.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from openai import OpenAI, OpenAIError
from pydantic import ValidationError

from agents.errors import PlanInvalid
from agents.slots import SlotError, fill_slots
from agents.validation import validate_plan
from core.policy import LLMPolicy
from core.settings import Settings
from core.types import Plan, PlanNode
from memory.playbooks import Playbook, PlaybookLibrary
from tools import Toolset

log = structlog.get_logger(__name__)
_SLOT = re.compile(r"(?<!\$)\{(\w+)\}")


@dataclass
class PlanOutcome:
    plan: Plan
    notes: list[str] = field(default_factory=list)  # why a fallback happened, which playbook was chosen
    llm_call: dict[str, Any] | None = None  # model, tokens, cost, latency, outcome: telemetry of the call


class Planner(Protocol):
    def plan(self, goal: str, inputs: dict[str, Any]) -> PlanOutcome: ...


def _substitute(value: Any, slots: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = _SLOT.fullmatch(value)
        if whole and whole.group(1) in slots:
            return slots[whole.group(1)]  # keeps the slot's type (a number stays a number)
        return _SLOT.sub(lambda m: str(slots[m.group(1)]) if m.group(1) in slots else m.group(0), value)
    if isinstance(value, list):
        return [_substitute(v, slots) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, slots) for k, v in value.items()}
    return value


def instantiate(book: Playbook, slots: dict[str, Any], goal: str, toolset: Toolset, settings: Settings) -> Plan:
    """Expand foreach nodes, drop nodes whose `when` slot is empty or whose tool is unavailable here."""
    expanded: dict[str, list[str]] = {}
    nodes: list[PlanNode] = []
    for t in book.nodes:
        spec = toolset.get(t.tool)
        if spec is not None and spec.check_prerequisites(settings):
            expanded[t.id] = []
            continue
        if t.when and not slots.get(t.when):
            expanded[t.id] = []
            continue
        items = [None] if t.foreach is None else list(slots.get(t.foreach) or [])
        ids = []
        for i, item in enumerate(items, start=1):
            nid = t.id if t.foreach is None else f"{t.id}-{i}"
            local = {**slots, "item": item} if t.foreach else slots
            deps = [d2 for d in t.depends_on for d2 in expanded.get(d, [d])]
            nodes.append(
                PlanNode(
                    id=nid,
                    tool=t.tool,
                    args=_substitute(t.args, local),
                    depends_on=deps,
                    pool=t.pool,
                    on_failure=t.on_failure,
                )
            )
            ids.append(nid)
        expanded[t.id] = ids
    # a node that depended on a dropped node would dangle; drop it too (and say so in validation if not)
    kept = {n.id for n in nodes}
    nodes = [n for n in nodes if all(d in kept for d in n.depends_on)]
    return Plan(goal=goal, category=book.category, source="playbook", playbook=book.name, nodes=nodes)


class OfflinePlanner:
    def __init__(self, library: PlaybookLibrary, toolset: Toolset, settings: Settings) -> None:
        self.library = library
        self.toolset = toolset
        self.settings = settings

    def plan(self, goal: str, inputs: dict[str, Any]) -> PlanOutcome:
        notes: list[str] = []
        ranked = self.library.candidates(goal)
        if inputs.get("playbook"):
            chosen = self.library.by_name.get(str(inputs["playbook"]))
            if chosen is None:
                raise PlanInvalid([f"unknown playbook {inputs['playbook']!r}"])
            ranked = [chosen]
        tried: set[str] = set()
        for book in [*ranked, self.library.fallback]:
            if book.name in tried:
                continue  # the fallback may already be among the candidates
            tried.add(book.name)
            try:
                slots = fill_slots(book, goal, inputs)
            except SlotError as exc:
                notes.append(str(exc))
                continue
            plan = instantiate(book, slots, goal, self.toolset, self.settings)
            validate_plan(plan, self.toolset, self.settings)
            notes.append(f"playbook {book.name} chosen")
            return PlanOutcome(plan, notes)
        raise PlanInvalid(notes or ["no playbook fits this request"])


def plan_json_schema() -> dict[str, Any]:
    node = {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "tool", "args", "depends_on"],
        "properties": {
            "id": {"type": "string"},
            "tool": {"type": "string"},
            "args": {"type": "object"},
            "depends_on": {"type": "array", "items": {"type": "string"}},
            "on_failure": {"type": "string", "enum": ["continue", "stop"]},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["category", "nodes"],
        "properties": {"category": {"type": "string"}, "nodes": {"type": "array", "items": node}},
    }


class LLMPlanner:
    def __init__(
        self,
        client: OpenAI,
        model: str,
        library: PlaybookLibrary,
        toolset: Toolset,
        settings: Settings,
        fallback: OfflinePlanner,
        serving: Callable[[], LLMPolicy] | None = None,
    ) -> None:
        self.serving = serving or LLMPolicy
        self.client = client
        self.model = model
        self.library = library
        self.toolset = toolset
        self.settings = settings
        self.fallback = fallback

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        library: PlaybookLibrary,
        toolset: Toolset,
        fallback: OfflinePlanner,
        serving: Callable[[], LLMPolicy] | None = None,
    ) -> LLMPlanner:
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "not-needed"
        client = OpenAI(base_url=settings.llm_base_url, api_key=key, timeout=settings.llm_timeout_s, max_retries=1)
        return cls(client, settings.llm_model, library, toolset, settings, fallback, serving)

    def _messages(self, goal: str, inputs: dict[str, Any]) -> list[dict[str, str]]:
        tools = [
            {
                "name": t.name,
                "description": t.description,
                "pool": t.pool,
                "args": t.args_model.model_json_schema(),
            }
            for t in self.toolset
            if t.check_prerequisites(self.settings) is None
        ]
        examples = [
            {
                "playbook": b.name,
                "description": b.description,
                "nodes": [n.model_dump(exclude_none=True) for n in b.nodes],
            }
            for b, _ in self.library.rank(goal)[:3]
        ]
        system = (
            "You plan operations work as a DAG of tool calls. Reply with JSON only, matching the schema. "
            "Use only these tools, with arguments valid for their schema. A node may use an upstream node's "
            'result as an argument with the string "${node_id.data.key}" if it depends on that node. '
            "Keep plans small; run independent checks in parallel (no depends_on).\n"
            f"Tools: {json.dumps(tools)}\nPlaybooks that fit similar requests: {json.dumps(examples)}"
        )
        user = json.dumps({"request": goal, "inputs": inputs})
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def plan(self, goal: str, inputs: dict[str, Any]) -> PlanOutcome:
        policy = self.serving()
        model = policy.route(goal, self.model)  # the policy routes short requests to a cheaper model
        messages: Any = self._messages(goal, inputs)
        # a prompt's tokens are about its characters / 4: over the task's budget, the offline planner plans
        expected = policy.cost(sum(len(m["content"]) for m in messages) // 4, 1000)
        if expected > policy.max_cost_per_task:
            outcome = self.fallback.plan(goal, inputs)
            note = f"LLM plan skipped: expected ${expected:.4f} is over the budget ${policy.max_cost_per_task:.4f}"
            return PlanOutcome(outcome.plan, [note, *outcome.notes])
        call: dict[str, Any] = {"model": model, "outcome": "ok", "tokens_in": 0, "tokens_out": 0}
        started = time.monotonic()
        try:
            response_format: Any = {
                "type": "json_schema",
                "json_schema": {"name": "plan", "schema": plan_json_schema(), "strict": False},
            }
            resp = self.client.chat.completions.create(
                model=model, messages=messages, response_format=response_format, temperature=0
            )
            call["run_s"] = time.monotonic() - started
            if resp.usage is not None:
                call["tokens_in"], call["tokens_out"] = resp.usage.prompt_tokens, resp.usage.completion_tokens
            call["cost"] = policy.cost(call["tokens_in"], call["tokens_out"])
            content = resp.choices[0].message.content or ""
            body = json.loads(content)
            plan = Plan(goal=goal, category=body.get("category", "triage"), source="llm", nodes=body["nodes"])
            validate_plan(plan, self.toolset, self.settings)
            return PlanOutcome(plan, [f"planned by LLM {model}"], llm_call=call)
        except (OpenAIError, json.JSONDecodeError, KeyError, TypeError, ValidationError, PlanInvalid) as exc:
            call.setdefault("run_s", time.monotonic() - started)
            call.setdefault("cost", policy.cost(call["tokens_in"], call["tokens_out"]))
            call["outcome"] = "error" if isinstance(exc, OpenAIError) else "unusable"
            reason = f"LLM plan unusable ({type(exc).__name__}: {str(exc)[:300]}); offline planner used"
            log.warning("llm planner fell back", reason=reason)
            outcome = self.fallback.plan(goal, inputs)
            return PlanOutcome(outcome.plan, [reason, *outcome.notes], llm_call=call)


def make_planner(
    settings: Settings,
    library: PlaybookLibrary,
    toolset: Toolset,
    *,
    serving: Callable[[], LLMPolicy] | None = None,
) -> Planner:
    offline = OfflinePlanner(library, toolset, settings)
    if settings.llm_base_url:
        return LLMPlanner.from_settings(settings, library, toolset, offline, serving)
    return offline
