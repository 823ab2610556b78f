"""LangGraph agents: the ops graph (intake -> plan -> dispatch -> synthesize) and its planners; the tuning agent."""

from agents.context import OpsContext, build_context
from agents.errors import PlanInvalid
from agents.ops_graph import build_ops_graph
from agents.planner import LLMPlanner, OfflinePlanner, Planner, make_planner
from agents.runner import TaskRunner
from agents.tuner import Tuner, TuningRunner
from agents.validation import validate_plan

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
