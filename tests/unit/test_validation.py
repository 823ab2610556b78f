from __future__ import annotations

import pytest

from agents.errors import PlanInvalid
from agents.validation import find_cycle, validate_plan
from core.settings import Settings
from core.types import Plan
from tools import CATALOG


def plan(*nodes: dict) -> Plan:
    return Plan(goal="g", nodes=list(nodes))


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(var_dir=tmp_path, max_plan_nodes=5, max_arg_bytes=200)


def reasons(p: Plan, settings: Settings) -> str:
    with pytest.raises(PlanInvalid) as exc:
        validate_plan(p, CATALOG, settings)
    return "; ".join(exc.value.reasons)


def test_a_valid_dag_passes_unchanged(settings: Settings) -> None:
    p = plan(
        {"id": "m", "tool": "host_metrics"},
        {
            "id": "a",
            "tool": "metric_anomalies",
            "args": {"series": "${m.data.cpu_series}"},
            "depends_on": ["m"],
        },
        {"id": "r", "tool": "redis_info"},
    )
    assert validate_plan(p, CATALOG, settings) is p


def test_cycles_are_found_and_named(settings: Settings) -> None:
    p = plan(
        {"id": "a", "tool": "redis_info", "depends_on": ["c"]},
        {"id": "b", "tool": "redis_info", "depends_on": ["a"]},
        {"id": "c", "tool": "redis_info", "depends_on": ["b"]},
        {"id": "d", "tool": "redis_info"},
    )
    assert find_cycle(p) == ["a", "b", "c"]
    assert "cycle through a, b, c" in reasons(p, settings)


def test_unknown_tools_unknown_deps_and_duplicate_ids(settings: Settings) -> None:
    text = reasons(plan({"id": "a", "tool": "nope"}, {"id": "a", "tool": "redis_info", "depends_on": ["zz"]}), settings)
    assert "unknown tool 'nope'" in text
    assert "depends on unknown node 'zz'" in text
    assert "duplicate node ids: a" in text


def test_args_are_checked_against_the_tool_schema(settings: Settings) -> None:
    text = reasons(
        plan({"id": "p", "tool": "http_probe", "args": {"url": "ftp://x", "timeout_s": -1, "x": 1}}), settings
    )
    assert "argument url" in text and "argument timeout_s" in text and "argument x" in text
    assert "argument url: Field required" in reasons(plan({"id": "p", "tool": "http_probe"}), settings)


def test_size_limits(settings: Settings) -> None:
    many = [{"id": f"n{i}", "tool": "redis_info"} for i in range(6)]
    assert "6 nodes; the limit is 5" in reasons(plan(*many), settings)
    big = {"id": "b", "tool": "metric_anomalies", "args": {"series": [1.0] * 100}}
    assert "arguments are" in reasons(plan(big), settings)


def test_a_reference_must_point_at_a_dependency(settings: Settings) -> None:
    p = plan(
        {"id": "m", "tool": "host_metrics"},
        {"id": "a", "tool": "metric_anomalies", "args": {"series": "${m.data.cpu_series}"}},
    )
    assert "refers to m, which is not among its dependencies" in reasons(p, settings)


def test_unavailable_tools_and_undeclared_pools_are_refused(settings: Settings) -> None:
    text = reasons(plan({"id": "pg", "tool": "postgres_activity", "pool": "gpu.large"}), settings)
    assert "unavailable: no DSN configured" in text
    assert "pool 'gpu.large' is not declared" in text


def test_node_shape_is_strict() -> None:
    with pytest.raises(ValueError):
        plan({"id": "bad id!", "tool": "redis_info"})
    with pytest.raises(ValueError):
        plan({"id": "a", "tool": "redis_info", "retries": 3})
