"""LangGraph agents: the ops graph (intake -> plan -> dispatch -> synthesize) and its planners; the tuning agent;
the investigation (a lead investigator and specialists per domain).

Names are imported on first use (PEP 562): `opsgraph investigate` imports agents.investigation without paying
for Celery, FAISS, torch or the embedding model that the ops graph's context needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real names for type checkers; at run time they load on first use
    from agents.context import OpsContext, build_context
    from agents.errors import PlanInvalid
    from agents.ops_graph import build_ops_graph
    from agents.planner import LLMPlanner, OfflinePlanner, Planner, make_planner
    from agents.runner import TaskRunner
    from agents.tuner import Tuner, TuningRunner
    from agents.validation import validate_plan

_EXPORTS = {
    "LLMPlanner": "agents.planner",
    "OfflinePlanner": "agents.planner",
    "Planner": "agents.planner",
    "make_planner": "agents.planner",
    "OpsContext": "agents.context",
    "build_context": "agents.context",
    "PlanInvalid": "agents.errors",
    "build_ops_graph": "agents.ops_graph",
    "TaskRunner": "agents.runner",
    "Tuner": "agents.tuner",
    "TuningRunner": "agents.tuner",
    "validate_plan": "agents.validation",
}

__all__ = [
    "LLMPlanner",
    "OfflinePlanner",
    "OpsContext",
    "PlanInvalid",
    "Planner",
    "TaskRunner",
    "Tuner",
    "TuningRunner",
    "build_context",
    "build_ops_graph",
    "make_planner",
    "validate_plan",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
