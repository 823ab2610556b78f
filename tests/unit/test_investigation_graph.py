"""The investigation graph: fan-out to specialists in parallel, the more-evidence loop and its budget, the merge,
and the LLM refinement against the deterministic OpenAI-compatible server.

LOCAL STAND-INS (this file only): the analyzers and the reasoning (diagnosis/investigate.py, another part of
issue 13) are replaced by a tiny registry and a `StandInReasoning` built here, so the graph is tested on its own;
the production code imports the real modules.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from agents.investigation import (
    BundleSource,
    DiagnosisRefiner,
    EvidenceRequest,
    cited_items,
    diagnose_answer,
    is_diagnose,
    requests_for,
    run_investigation,
    tool_call_for,
)
from diagnosis import Category, Claim, Diagnosis, Domain, EvidenceItem, EvidenceRef, EvidenceSet, Finding
from diagnosis.analyzers.base import AnalyzerRegistry
from tests.fake_llm import DeterministicOpenAIServer


class StandInReasoning:
    """STAND-IN for diagnosis.investigate: runs a registry's analyzers; the top-scored cause is the root cause."""

    def __init__(self, registry: AnalyzerRegistry) -> None:
        self.registry = registry
        self.concluded_with: list[Finding] = []

    def analyze_domain(self, domain: Domain, evidence: EvidenceSet) -> list[Finding]:
        return [f for a in self.registry.for_domain(domain) for f in a.run(evidence)]

    def conclude(self, findings: list[Finding], evidence: EvidenceSet, question: str | None = None) -> Diagnosis:
        self.concluded_with = list(findings)
        causes = sorted((f for f in findings if f.role == "cause"), key=lambda f: -f.score)
        if not causes:
            return Diagnosis(category=Category.UNKNOWN, root_cause="the evidence does not decide", confidence=0.2)
        top = causes[0]
        return Diagnosis(
            category=top.category,
            root_cause=top.mechanism,
            confidence=top.score,
            causal_chain=[top.title],
            evidence=[Claim(claim=top.title, refs=top.evidence)],
            findings=findings,
            text=f"{top.category.value}: {top.mechanism}",
        )


def item(item_id: str, kind: str, obj: str, data: dict) -> EvidenceItem:
    return EvidenceItem(id=item_id, kind=kind, source=item_id.split("#")[0], object=obj, data=data)


def pod_evidence() -> EvidenceSet:
    return EvidenceSet(
        [
            item(
                "pods.json#0",
                "k8s/Pod",
                "Pod/shop/api-1",
                {"status": {"containerStatuses": [{"name": "app", "restartCount": 7}]}},
            ),
            item("activity.csv#0", "pg/session", "pid 4711", {"pid": 4711, "state": "active", "blocked_by": [4700]}),
            item(
                "app.log#0",
                "log",
                "/var/log/app.log",
                {"records": [{"ts": 1.0, "level": "error", "msg": "x", "line": 3}]},
            ),
        ]
    )


def crash_finding(extra: dict | None = None) -> Finding:
    body = {
        "analyzer": "crashloop",
        "domain": Domain.KUBERNETES,
        "role": "symptom",
        "code": "crash_loop",
        "category": Category.CODE_DEFECT,
        "title": "Pod shop/api-1 container app restarted 7 times",
        "mechanism": "the container keeps exiting",
        "object": "Pod shop/api-1 container app",
        "score": 0.4,
        "tags": ["pod:shop/api-1"],
        "evidence": [EvidenceRef(item="pods.json#0", field="status.containerStatuses.0.restartCount", value=7)],
    }
    return Finding(**{**body, **(extra or {})})


def test_lead_fans_out_to_specialists_that_run_in_parallel_and_merges_their_findings() -> None:
    reg = AnalyzerRegistry()
    # three specialists must all be inside their analyzer at once, or the barrier breaks: parallel, not in turn
    barrier = threading.Barrier(3, timeout=10)
    ran: list[str] = []

    def waits(name: str, finding: Finding) -> object:
        def fn(ev: EvidenceSet) -> list[Finding]:
            barrier.wait()
            ran.append(name)
            return [finding]

        return fn

    blocked = Finding(
        analyzer="locks",
        domain=Domain.DATABASE,
        role="cause",
        code="lock_wait",
        category=Category.RESOURCE_EXHAUSTION,
        title="pid 4711 waits on pid 4700",
        mechanism="pid 4700 holds a lock that pid 4711 waits for",
        object="pid 4700",
        score=0.9,
        evidence=[EvidenceRef(item="activity.csv#0", field="blocked_by", value=[4700])],
    )
    errors = Finding(
        analyzer="errors",
        domain=Domain.LOGS,
        role="symptom",
        code="error_burst",
        category=Category.CODE_DEFECT,
        title="errors in app.log",
        mechanism="errors",
        object="/var/log/app.log",
        evidence=[EvidenceRef(item="app.log#0", line=3)],
    )
    reg.analyzer(domain=Domain.KUBERNETES, reads={"k8s/"}, name="crashloop")(waits("kubernetes", crash_finding()))
    reg.analyzer(domain=Domain.DATABASE, reads={"pg/session"}, name="locks")(waits("database", blocked))
    reg.analyzer(domain=Domain.LOGS, reads={"log"}, name="errors")(waits("network", errors))
    # the same analyzer output reached through two domains of one specialist counts once
    reg.analyzer(domain=Domain.NETWORK, reads={"log"}, name="errors-again")(lambda ev: [errors])
    reg.analyzer(domain=Domain.HOST, reads={"host/snapshot"}, name="host")(lambda ev: pytest.fail("no host evidence"))
    reasoning = StandInReasoning(reg)

    result = run_investigation(pod_evidence(), BundleSource(), reasoning=reasoning, registry=reg)

    assert sorted(result.specialists) == ["database", "kubernetes", "network"]  # host has nothing to read
    assert sorted(ran) == ["database", "kubernetes", "network"]
    assert sorted(f.analyzer for f in reasoning.concluded_with) == ["crashloop", "errors", "locks"]
    d = result.diagnosis
    assert d.category == Category.RESOURCE_EXHAUSTION and "pid 4700" in d.root_cause
    assert d.evidence[0].refs[0].item == "activity.csv#0"


class LogsSource:
    """A source that holds one pod's logs, handed out when asked (a live cluster would fetch them)."""

    def __init__(self) -> None:
        self.asked: list[EvidenceRequest] = []

    def fetch(self, request: EvidenceRequest) -> EvidenceSet:
        self.asked.append(request)
        if request.kind == "log" and request.object == "Pod/shop/api-1":
            records = [{"ts": 2.0, "level": "fatal", "msg": "panic: nil map in checkout handler", "line": 41}]
            return EvidenceSet([item("live#1", "log", "Pod/shop/api-1/app", {"records": records})])
        return EvidenceSet()


def test_a_crash_looping_pod_adds_its_logs_and_the_specialist_concludes_from_them() -> None:
    reg = AnalyzerRegistry()

    @reg.analyzer(domain=Domain.KUBERNETES, reads={"k8s/"}, name="crashloop")
    def crashloop(ev: EvidenceSet) -> list[Finding]:
        logs = [i for i in ev.kind("log") if i.object.startswith("Pod/shop/api-1")]
        if not logs:
            return [crash_finding()]
        return [
            crash_finding().model_copy(
                update={
                    "role": "cause",
                    "code": "crash_loop_panic",
                    "score": 0.9,
                    "mechanism": "container app of Pod shop/api-1 panics on a nil map in the checkout handler",
                    "evidence": [EvidenceRef(item=logs[0].id, line=41, value="panic: nil map")],
                }
            )
        ]

    source = LogsSource()
    result = run_investigation(
        EvidenceSet([pod_evidence().get("pods.json#0")]), source, reasoning=StandInReasoning(reg), registry=reg
    )

    assert [(r.kind, r.object) for r in source.asked] == [("log", "Pod/shop/api-1")]
    assert result.requests == [{"specialist": "kubernetes", "request": source.asked[0].describe(), "new_items": 1}]
    d = result.diagnosis
    assert d.category == Category.CODE_DEFECT and "nil map" in d.root_cause
    assert d.evidence[0].refs[0].item == "live#1"


class EndlessSource:
    """Always has something new: the loop budget, not the source, must end the asking."""

    def __init__(self) -> None:
        self.calls = 0

    def fetch(self, request: EvidenceRequest) -> EvidenceSet:
        self.calls += 1
        return EvidenceSet([item(f"more#{self.calls}", "log", f"/var/log/more-{self.calls}", {"records": []})])


@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_more_evidence_stops_at_the_loop_budget(rounds: int) -> None:
    reg = AnalyzerRegistry()

    @reg.analyzer(domain=Domain.NETWORK, reads={"log"}, name="curious")
    def curious(ev: EvidenceSet) -> list[Finding]:
        n = len(ev.kind("log"))
        return [
            crash_finding({"needs": [f"logs of /var/log/next-{n}"]}).model_copy(
                update={"domain": Domain.NETWORK, "tags": []}
            )
        ]

    source = EndlessSource()
    start = EvidenceSet([item("a.log#0", "log", "/var/log/a.log", {"records": []})])
    result = run_investigation(start, source, reasoning=StandInReasoning(reg), registry=reg, max_rounds=rounds)
    assert source.calls == rounds
    assert len(result.requests) == rounds
    assert len(start) == 1 + rounds  # what was fetched is evidence of the investigation


def test_a_bundle_cannot_fetch_more_and_an_unknown_diagnosis_says_what_was_missing() -> None:
    reg = AnalyzerRegistry()
    reg.analyzer(domain=Domain.KUBERNETES, reads={"k8s/"}, name="crashloop")(lambda ev: [crash_finding()])
    result = run_investigation(
        EvidenceSet([pod_evidence().get("pods.json#0")]), BundleSource(), reasoning=StandInReasoning(reg), registry=reg
    )
    assert result.diagnosis.category == Category.UNKNOWN
    assert result.requests[0]["new_items"] == 0
    assert any("logs of Pod/shop/api-1" in m for m in result.diagnosis.missing)


def test_requests_for_reads_needs_crash_loops_and_blocked_sessions() -> None:
    ev = pod_evidence()
    blocked = crash_finding().model_copy(update={"code": "blocked_session", "tags": ["pid:4711"], "needs": []})
    needs = crash_finding({"needs": ["lock details of pid 4700", "the process list"]})
    got = {(r.kind, r.object) for r in requests_for([crash_finding(), blocked, needs], ev, "database")}
    assert got == {
        ("log", "Pod/shop/api-1"),
        ("pg/lock", "pid 4711"),
        ("pg/lock", "pid 4700"),
        ("any", "the process list"),
    }
    # logs already in the evidence are not asked for again
    ev.add(item("logs/shop/api-1.log#0", "log", "Pod/shop/api-1/app", {"records": []}))
    assert not requests_for([crash_finding()], ev, "kubernetes")


# --- the LLM path -------------------------------------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[DeterministicOpenAIServer]:
    server = DeterministicOpenAIServer()
    yield server
    server.stop()


def _rules_run(refiner: DiagnosisRefiner) -> tuple[object, StandInReasoning]:
    reg = AnalyzerRegistry()
    reg.analyzer(domain=Domain.KUBERNETES, reads={"k8s/"}, name="crashloop")(
        lambda ev: [crash_finding({"role": "cause", "score": 0.7, "needs": []})]
    )
    reasoning = StandInReasoning(reg)
    result = run_investigation(pod_evidence(), BundleSource(), reasoning=reasoning, registry=reg, refiner=refiner)
    return result, reasoning


def _refiner(server: DeterministicOpenAIServer) -> DiagnosisRefiner:
    from openai import OpenAI

    return DiagnosisRefiner(OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=10), "test-model")


def test_llm_refines_the_diagnosis_and_a_claim_citing_nothing_real_is_dropped(llm: DeterministicOpenAIServer) -> None:
    llm.content = json.dumps(
        {
            "category": "code_defect",
            "root_cause": "container app of Pod shop/api-1 exits on start after the 2.3 deploy",
            "confidence": 0.8,
            "causal_chain": ["the 2.3 image exits on start", "the pod restarts 7 times"],
            "evidence": [
                {
                    "claim": "the container restarted 7 times",
                    "refs": [{"item": "pods.json#0", "field": "status.containerStatuses.0.restartCount", "value": 7}],
                },
                {"claim": "the deploy happened at 14:02", "refs": [{"item": "deploys.json#3"}]},
                {"claim": "a field that is not there", "refs": [{"item": "pods.json#0", "field": "spec.nothing"}]},
            ],
            "ruled_out": [
                {"alternative": "OOM kill", "why": "no exit 137", "refs": [{"item": "ghost#1"}]},
                {"alternative": "node pressure", "why": "no node evidence at all", "refs": []},
            ],
            "actions": [
                {"description": "read the previous container's logs", "command": "kubectl logs -p ...", "kind": "read"}
            ],
        }
    )
    result, _ = _rules_run(_refiner(llm))
    d = result.diagnosis
    assert d.source == "llm"
    assert d.root_cause.startswith("container app of Pod shop/api-1 exits")
    assert [c.claim for c in d.evidence] == ["the container restarted 7 times"]
    assert [r.alternative for r in d.ruled_out] == ["node pressure"]
    assert result.llm_call["outcome"] == "ok"
    assert set(result.llm_call["dropped"]) == {
        "the deploy happened at 14:02",
        "a field that is not there",
        "ruled out: OOM kill",
    }
    assert "deploys.json#3" not in d.text and "the container restarted 7 times" in d.text
    # the evidence items went to the model by id, so it could cite them
    sent = json.loads(llm.requests[0]["body"]["messages"][1]["content"])
    assert {i["id"] for i in sent["evidence_items"]} == {"pods.json#0", "activity.csv#0", "app.log#0"}
    assert llm.requests[0]["body"]["response_format"]["type"] == "json_schema"


def test_llm_claiming_a_fault_with_no_real_evidence_keeps_the_rules_answer(llm: DeterministicOpenAIServer) -> None:
    llm.content = json.dumps(
        {
            "category": "infrastructure",
            "root_cause": "the node died",
            "confidence": 0.99,
            "evidence": [{"claim": "node NotReady", "refs": [{"item": "nodes.json#0"}]}],
        }
    )
    result, _ = _rules_run(_refiner(llm))
    assert result.diagnosis.source == "rules" and result.diagnosis.category == Category.CODE_DEFECT
    assert result.llm_call["outcome"] == "unusable"


@pytest.mark.parametrize("failure", ["http500", "junk", "wrong_schema"])
def test_a_failing_llm_keeps_the_rules_answer(llm: DeterministicOpenAIServer, failure: str) -> None:
    if failure == "http500":
        llm.status = 500
    elif failure == "junk":
        llm.content = "the root cause is probably DNS"
    else:
        llm.content = json.dumps({"category": "not-a-category", "root_cause": "", "confidence": 7})
    result, _ = _rules_run(_refiner(llm))
    d = result.diagnosis
    assert d.source == "rules"
    assert d.category == Category.CODE_DEFECT and d.root_cause == "the container keeps exiting"
    assert result.llm_call["outcome"] == ("error" if failure == "http500" else "unusable")
    assert llm.requests  # the endpoint was asked


# --- the ops graph's helpers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("category", "goal", "expected"),
    [
        ("diagnose", "checkout is slow", True),
        ("triage", "take a look", True),
        ("health", "why is redis slow?", True),
        ("health", "What is wrong with orders-api", True),
        ("health", "check the health of this machine", False),
        ("request", "crash", False),
    ],
)
def test_diagnose_requests_are_recognised_by_plan_category_or_words(category: str, goal: str, expected: bool) -> None:
    assert is_diagnose(category, goal) is expected


def test_live_requests_map_to_read_tools_and_pod_logs_have_none() -> None:
    def call(kind: str, obj: str) -> tuple[str, dict] | None:
        return tool_call_for(EvidenceRequest(kind=kind, object=obj))

    assert call("pg/lock", "pid 4711") == ("postgres_activity", {})
    assert call("log", "/var/log/app.log") == ("log_search", {"path": "/var/log/app.log"})
    assert call("host/process", "process/nginx") == ("process_check", {"name": "nginx"})
    assert call("http/probe", "http://127.0.0.1:8080/healthz") == (
        "http_probe",
        {"url": "http://127.0.0.1:8080/healthz"},
    )
    assert call("log", "Pod/shop/api-1") is None
    assert call("any", "the process list") is None


def test_the_answer_carries_the_diagnosis_and_its_cited_items_and_keeps_the_checks_fields() -> None:
    ev = pod_evidence()
    ev.add(
        item(
            "big.log#0",
            "log",
            "/var/log/big.log",
            {"records": [{"ts": None, "level": None, "msg": f"line {n}", "line": n} for n in range(1, 200)]},
        )
    )
    d = Diagnosis(
        category=Category.RESOURCE_EXHAUSTION,
        root_cause="pid 4700 holds the lock",
        confidence=0.8,
        evidence=[
            Claim(claim="blocked", refs=[EvidenceRef(item="activity.csv#0", field="blocked_by")]),
            Claim(claim="logged", refs=[EvidenceRef(item="big.log#0", line=100)]),
        ],
    )
    items = cited_items(d, ev)
    assert set(items) == {"activity.csv#0", "big.log#0"}
    assert [r["line"] for r in items["big.log#0"]["data"]["records"]] == [97, 98, 99, 100, 101, 102, 103]
    base = {"headline": "2 problem(s) found", "severity": "critical", "findings": [1], "nodes": [], "next_steps": []}
    answer = diagnose_answer({"diagnosis": d.model_dump(mode="json"), "items": items}, base)
    assert answer["headline"] == "resource_exhaustion: pid 4700 holds the lock"
    assert answer["diagnosis"]["root_cause"] == "pid 4700 holds the lock" and answer["findings"] == [1]
    assert answer["evidence_items"] is items and answer["text"].startswith("**resource_exhaustion**")


def test_the_llm_budget_of_the_serving_policy_is_kept(llm: DeterministicOpenAIServer) -> None:
    from openai import OpenAI

    from core.policy import LLMPolicy

    client = OpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=10)
    broke = DiagnosisRefiner(client, "test-model", serving=lambda: LLMPolicy(max_cost_per_task=0.0))
    result, _ = _rules_run(broke)
    assert result.llm_call["outcome"] == "skipped" and not llm.requests  # never called over the budget
    assert result.diagnosis.source == "rules"
    routed = DiagnosisRefiner(client, "test-model", serving=lambda: LLMPolicy(model="big-model"))
    llm.content = "not json"
    result, _ = _rules_run(routed)
    assert llm.requests[0]["body"]["model"] == "big-model" and result.llm_call["cost"] > 0


def test_first_investigation_of_a_fresh_process_sends_specialists(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The analyzers register on import: a fresh process (every `opsgraph investigate`) must load them before the
    lead picks specialists, or it sees an empty registry and concludes from the alerts alone."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "logs" / "shop").mkdir(parents=True)
    lines = [f"2026-01-01T00:{m:02d}:00Z ERROR panic: runtime error: invalid memory address or nil pointer dereference"
             for m in range(10)]  # fmt: skip
    (tmp_path / "logs" / "shop" / "cart-7c8d9f5b6a-x2k4p.log").write_text("\n".join(lines) + "\n")
    script = (
        "import sys\n"
        "from agents.investigation import load_bundle, run_investigation\n"
        "r = run_investigation(load_bundle(sys.argv[1]))\n"
        "print(','.join(r.specialists), r.diagnosis.category.value)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True, cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    specialists, category = out.stdout.split()
    assert "network" in specialists.split(",")
    assert category == "code_defect"
