from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agents.planner import LLMPlanner, OfflinePlanner, make_planner
from core.settings import Settings
from memory.playbooks import PlaybookLibrary
from tests.fake_llm import DeterministicOpenAIServer
from tools import CATALOG

LIB = PlaybookLibrary.default()


@pytest.fixture
def llm() -> Iterator[DeterministicOpenAIServer]:
    server = DeterministicOpenAIServer()
    yield server
    server.stop()


@pytest.fixture
def planner(llm: DeterministicOpenAIServer, tmp_path) -> LLMPlanner:
    settings = Settings(var_dir=tmp_path, llm_base_url=llm.base_url, llm_model="test-model", llm_api_key="sk-test")
    p = make_planner(settings, LIB, CATALOG)
    assert isinstance(p, LLMPlanner)
    return p


def test_a_valid_llm_plan_is_used(planner: LLMPlanner, llm: DeterministicOpenAIServer) -> None:
    llm.content = json.dumps(
        {
            "category": "health",
            "nodes": [
                {"id": "m", "tool": "host_metrics", "args": {}, "depends_on": []},
                {
                    "id": "s",
                    "tool": "metric_anomalies",
                    "args": {"series": "${m.data.cpu_series}"},
                    "depends_on": ["m"],
                },
            ],
        }
    )
    outcome = planner.plan("is this box ok", {})
    assert outcome.plan.source == "llm"
    assert [n.id for n in outcome.plan.nodes] == ["m", "s"]
    sent = llm.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["model"] == "test-model"
    assert sent["body"]["response_format"]["type"] == "json_schema"
    assert sent["auth"] == "Bearer sk-test"
    system = sent["body"]["messages"][0]["content"]
    assert "host_metrics" in system and "postgres_activity" not in system  # unavailable tools are not offered


def test_an_invalid_llm_plan_falls_back_to_the_offline_planner(
    planner: LLMPlanner, llm: DeterministicOpenAIServer
) -> None:
    llm.content = json.dumps(
        {"category": "x", "nodes": [{"id": "a", "tool": "drop_database", "args": {}, "depends_on": []}]}
    )
    outcome = planner.plan("nightly capacity report", {})
    assert outcome.plan.source == "playbook" and outcome.plan.playbook == "capacity-report"
    assert "unknown tool 'drop_database'" in outcome.notes[0]


def test_unparseable_output_and_server_errors_fall_back(planner: LLMPlanner, llm: DeterministicOpenAIServer) -> None:
    llm.content = "sure! here is a plan: ..."
    assert planner.plan("is redis ok", {}).plan.playbook == "redis-health"
    llm.status = 500
    outcome = planner.plan("is redis ok", {})
    assert outcome.plan.playbook == "redis-health"
    assert "InternalServerError" in outcome.notes[0]


def test_without_an_endpoint_the_offline_planner_is_the_default(tmp_path) -> None:
    assert isinstance(make_planner(Settings(var_dir=tmp_path), LIB, CATALOG), OfflinePlanner)
