"""The reasoning: findings become hypotheses, causes are told from symptoms, the top one is the root cause (or
healthy, or unknown), independent faults are each named, and every reference is checked against the evidence."""

from __future__ import annotations

from typing import Any

import pytest

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.investigate import analyze_domain, conclude, investigate
from diagnosis.links import entity_names, workload_of_pod
from diagnosis.model import Category, Domain, EvidenceItem, EvidenceRef, Finding
from tests.unit._k8s_evidence import NOW, alert, evidence, metric_point_item


def item(n: int, kind: str = "metric", data: dict[str, Any] | None = None) -> EvidenceItem:
    return EvidenceItem(id=f"ev#{n}", kind=kind, source="test", object=f"obj{n}", ts=NOW, data=data or {"v": n})


ITEMS = [item(i) for i in range(1, 10)]


def ev(*extra: EvidenceItem) -> EvidenceSet:
    return EvidenceSet([*ITEMS, *extra])


def f(
    code: str,
    role: str = "cause",
    *,
    category: Category = Category.RESOURCE_EXHAUSTION,
    tags: list[str] | None = None,
    explains: list[str] | None = None,
    score: float = 0.7,
    ts: float | None = None,
    refs: list[int] | None = None,
    domain: Domain = Domain.DATABASE,
    obj: str | None = None,
) -> Finding:
    return Finding(
        analyzer="test",
        domain=domain,
        role=role,
        code=code,
        category=category,
        title=f"{code} on {obj or code}",
        mechanism=f"{obj or code} fails by {code}",
        object=obj or code,
        score=score,
        ts=ts,
        tags=tags or [],
        explains=explains or [],
        evidence=[EvidenceRef(item=f"ev#{n}", field="v", value=n) for n in (refs or [1])],
    )


# ------------------------------------------------------------------------------------------ names


def test_entity_names_link_pods_to_their_workload_and_ignore_scopes() -> None:
    assert workload_of_pod("checkout-7d9f8b6c5-x2k4p") == "checkout"
    assert workload_of_pod("db-0") == "db"
    a = f(
        "x", tags=["pod:shop/checkout-7d9f8b6c5-x2k4p", "namespace:shop", "container:shop/checkout-7d9f8b6c5-x2k4p/app"]
    )
    assert {"checkout", "checkout-7d9f8b6c5-x2k4p"} <= entity_names(a)
    assert "shop" not in entity_names(a) and "app" not in entity_names(a)
    assert "web-1" in entity_names(f("y", tags=["host:web-1:9100"]))


# ------------------------------------------------------------------------------------------ causes vs symptoms


def test_cpu_high_because_of_one_query() -> None:
    cpu = f("cpu_high", tags=["db:orders-prod", "host:db-1"], score=0.7, ts=NOW - 600, refs=[1], obj="host db-1")
    query = f(
        "query_cpu_hog",
        tags=["db:orders-prod", "query:42"],
        explains=["cpu_high", "latency"],
        score=0.75,
        ts=NOW - 900,
        refs=[2],
        obj="query 42 on orders-prod",
    )
    slow = f("latency", "symptom", category=Category.UNKNOWN, tags=["db:orders-prod"], ts=NOW - 500, refs=[3])
    d = conclude([cpu, query, slow], ev())
    assert d.root_cause.startswith("query 42 on orders-prod")
    assert any(r.alternative.startswith("cpu_high") and "symptom, not the cause" in r.why for r in d.ruled_out)
    assert d.causal_chain[0].startswith("query 42") and len(d.causal_chain) == 3


def test_connections_high_because_writers_are_blocked() -> None:
    conns = f("connections_high", tags=["db:shop"], score=0.8, ts=NOW - 300, refs=[1])
    lock = f(
        "idle_in_transaction",
        tags=["db:shop", "pid:4711", "relation:orders"],
        score=0.8,
        ts=NOW - 1200,
        refs=[2],
        explains=["connections_high", "db_waits", "lock_waits"],
        category=Category.CODE_DEFECT,
        obj="pid 4711",
    )
    d = conclude([conns, lock], ev())
    assert d.category == Category.CODE_DEFECT and "pid 4711" in d.root_cause


def test_pod_restarts_because_of_oom() -> None:
    restarts = f("pod_restarts", "symptom", category=Category.UNKNOWN, tags=["pod:shop/api-5c4b7a9d8-abcde"], refs=[1])
    oom = f(
        "oom_killed",
        tags=["pod:shop/api-5c4b7a9d8-abcde"],
        explains=["pod_restarts"],
        score=0.85,
        refs=[2],
        domain=Domain.KUBERNETES,
    )
    d = conclude([restarts, oom], ev())
    assert d.category == Category.RESOURCE_EXHAUSTION
    assert d.causal_chain == ["oom_killed fails by oom_killed", "pod_restarts on pod_restarts"]


def test_5xx_because_an_upstream_times_out() -> None:
    errors = f("http_5xx", "symptom", category=Category.UNKNOWN, tags=["service:orders-api"], refs=[1], ts=NOW - 200)
    upstream = f(
        "upstream_timeout",
        tags=["service:orders-api", "service:payments-api"],
        explains=["http_5xx"],
        category=Category.DEPENDENCY_FAILURE,
        refs=[2],
        ts=NOW - 260,
        obj="upstream payments-api",
    )
    a = alert("OrdersApi5xx", {"service": "orders-api"}, starts=NOW - 100)
    findings = [errors, upstream, *analyze_domain(Domain.ALERTS, ev(a))]
    d = conclude(findings, ev(a))
    assert d.category == Category.DEPENDENCY_FAILURE
    assert d.causal_chain[-1].startswith("alert OrdersApi5xx")


def test_mutual_explanation_goes_to_the_earlier_cause() -> None:
    a = f("disk_full", tags=["host:web-1"], explains=["log_write_errors"], ts=NOW - 3600, refs=[1], obj="fs /var")
    b = f("log_write_errors", tags=["host:web-1"], explains=["disk_full"], ts=NOW - 60, refs=[2], score=0.8)
    d = conclude([a, b], ev())
    assert d.root_cause.startswith("fs /var")


def test_a_cause_cannot_begin_after_its_symptom() -> None:
    errors = f("http_5xx", "symptom", category=Category.UNKNOWN, tags=["service:cart"], ts=NOW - 3600, refs=[1])
    deploy = f(
        "recent_deploy",
        tags=["workload:shop/cart"],
        explains=["http_5xx"],
        ts=NOW - 600,
        score=0.35,
        category=Category.CODE_DEFECT,
        domain=Domain.CHANGES,
        refs=[2],
    )
    d = conclude([errors, deploy], ev())
    assert d.category == Category.UNKNOWN  # the deploy came 50 minutes after the errors began
    early = deploy.model_copy(update={"ts": NOW - 4000})
    d2 = conclude([errors, early], ev())
    assert d2.category == Category.CODE_DEFECT


def test_a_release_that_served_for_hours_did_not_bring_the_failures() -> None:
    errors = f("http_5xx", "symptom", category=Category.UNKNOWN, tags=["service:cart"], ts=NOW - 600, refs=[1])
    deploy = f(
        "recent_deploy",
        tags=["workload:shop/cart"],
        explains=["http_5xx"],
        ts=NOW - 3 * 3600 - 600,
        score=0.35,
        category=Category.CODE_DEFECT,
        domain=Domain.CHANGES,
        refs=[2],
    )
    assert conclude([errors, deploy], ev()).category != Category.CODE_DEFECT  # three hours of clean service between
    soon = deploy.model_copy(update={"ts": NOW - 1200})
    assert conclude([errors, soon], ev()).category == Category.CODE_DEFECT


# ------------------------------------------------------------------------------------------ ranking


def test_more_explained_symptoms_and_specificity_win() -> None:
    s1 = f("latency", "symptom", category=Category.UNKNOWN, tags=["service:cart"], refs=[1])
    s2 = f("http_5xx", "symptom", category=Category.UNKNOWN, tags=["service:cart"], refs=[2])
    wide = f(
        "pool_exhausted", tags=["service:cart"], explains=["latency", "http_5xx"], score=0.7, refs=[3], obj="cart pool"
    )
    narrow = f(
        "gc_pause",
        tags=["service:cart"],
        explains=["latency"],
        score=0.7,
        refs=[4],
        obj="cart gc",
        category=Category.CODE_DEFECT,
    )
    d = conclude([s1, s2, wide, narrow], ev())
    assert d.root_cause.startswith("cart pool")
    assert any(r.alternative.startswith("gc_pause") and "competes" in r.why for r in d.ruled_out)


def test_same_fault_on_several_pods_of_one_workload_is_one_hypothesis() -> None:
    pods = [
        f(
            "oom_killed",
            tags=[f"pod:shop/api-5c4b7a9d8-{s}"],
            score=0.85,
            refs=[i],
            domain=Domain.KUBERNETES,
            obj=f"pod api-{s}",
        )
        for i, s in enumerate(["aaaaa", "bbbbb", "ccccc"], 1)
    ]
    d = conclude(pods, ev())
    assert d.category == Category.RESOURCE_EXHAUSTION and not d.other_causes and not d.ruled_out
    assert len(d.evidence) == 3


def test_question_naming_an_object_breaks_a_tie() -> None:
    a = f("disk_full", tags=["host:web-1"], refs=[1], obj="fs /var on web-1")
    b = f("oom_killed", tags=["host:worker-3"], refs=[2], obj="worker-3 process", domain=Domain.HOST)
    d = conclude([a, b], ev(), question="why is worker-3 failing?")
    assert d.root_cause.startswith("worker-3 process")
    assert d.other_causes and "web-1" in d.other_causes[0]


# ------------------------------------------------------------------------------------------ outcomes


def test_two_independent_faults_are_each_named() -> None:
    disk = f("disk_full", tags=["host:web-1", "fs:/var"], refs=[1], score=0.85, obj="fs /var on web-1")
    image = f(
        "image_not_found",
        tags=["pod:shop/cart-5c4b7a9d8-abcde"],
        refs=[2],
        score=0.85,
        category=Category.CONFIGURATION_ERROR,
        domain=Domain.KUBERNETES,
        obj="cart image",
    )
    d = conclude([disk, image], ev())
    assert len(d.other_causes) == 1
    named = d.root_cause + d.other_causes[0]
    assert "cart image" in named and "web-1" in named
    assert {d.category, Category.CONFIGURATION_ERROR, Category.RESOURCE_EXHAUSTION} == {
        Category.CONFIGURATION_ERROR,
        Category.RESOURCE_EXHAUSTION,
    }
    assert "Also failing, independently" in d.text


def test_only_benign_signals_is_healthy_and_says_what_was_checked() -> None:
    old = f("old_restart", "benign", category=Category.HEALTHY, refs=[1])
    d = conclude([old], ev())
    assert d.category == Category.HEALTHY
    assert d.checked and any("metric" in c for c in d.checked)
    assert d.ruled_out[0].alternative.startswith("old_restart")
    assert "Nothing is failing" in d.root_cause


def test_weak_candidate_with_nothing_to_explain_is_healthy() -> None:
    hpa = f("hpa_at_max", score=0.45, tags=["workload:shop/cart"], refs=[1], explains=["latency"])
    d = conclude([hpa], ev())
    assert d.category == Category.HEALTHY
    assert "explains none of the observed symptoms" in d.ruled_out[0].why


def test_symptoms_without_a_cause_are_unknown_and_name_what_is_missing() -> None:
    s = f("http_5xx", "symptom", category=Category.UNKNOWN, tags=["service:cart"], refs=[1])
    s = s.model_copy(update={"needs": ["logs of service cart"]})
    d = conclude([s], ev())
    assert d.category == Category.UNKNOWN and d.missing == ["logs of service cart"]
    assert d.confidence <= 0.3


def test_no_evidence_is_unknown() -> None:
    d = investigate(EvidenceSet())
    assert d.category == Category.UNKNOWN and d.missing


# ------------------------------------------------------------------------------------------ references


def test_a_claim_citing_a_missing_item_is_dropped() -> None:
    real = f("disk_full", tags=["host:web-1"], refs=[1], obj="fs /var")
    ghost = f("oom_killed", tags=["host:web-2"], score=0.99, obj="ghost").model_copy(
        update={"evidence": [EvidenceRef(item="nope#1", value="x")]}
    )
    d = conclude([real, ghost], ev())
    assert d.root_cause.startswith("fs /var")
    assert not d.other_causes
    assert all(f.object != "ghost" for f in d.findings)


def test_unreal_references_are_removed_and_real_ones_kept() -> None:
    mixed = f("disk_full", tags=["host:web-1"], refs=[1, 2], obj="fs /var").model_copy()
    mixed.evidence.append(EvidenceRef(item="ev#1", field="no.such.field"))
    mixed.evidence.append(EvidenceRef(item="ev#404"))
    d = conclude([mixed], ev())
    refs = [r.item for c in d.evidence for r in c.refs]
    assert refs == ["ev#1", "ev#2"]


def test_log_line_references_must_exist() -> None:
    log_item = EvidenceItem(
        id="log#1",
        kind="log",
        source="t",
        object="Pod/shop/x/app",
        data={"records": [{"ts": NOW, "level": "error", "msg": "boom", "line": 7}]},
    )
    good = f("crash_code", category=Category.CODE_DEFECT, tags=["pod:shop/x"], obj="x").model_copy(
        update={"evidence": [EvidenceRef(item="log#1", line=7, value="boom"), EvidenceRef(item="log#1", line=8)]}
    )
    d = conclude([good], ev(log_item))
    assert [r.line for c in d.evidence for r in c.refs] == [7]


# ------------------------------------------------------------------------------------------ entry points


def test_a_failing_analyzer_is_recorded_not_raised() -> None:
    name = "test_exploding_analyzer"
    if name not in {a.name for a in ANALYZERS.all()}:

        @ANALYZERS.analyzer(domain=Domain.METRICS, reads={"test/boom"}, name=name)
        def _boom(evidence: EvidenceSet) -> list[Finding]:
            raise RuntimeError("bad shape")

    boom = EvidenceItem(id="t#1", kind="test/boom", source="t", object="x")
    es = ev(boom)
    findings = analyze_domain(Domain.METRICS, es)  # the other metrics analyzers still run
    assert all(f.analyzer != name for f in findings)
    assert any(e["path"] == f"analyzer:{name}" and "bad shape" in e["error"] for e in es.errors)
    es.ignored.append({"path": "notes.txt", "reason": "no known format"})
    d = conclude([], es)
    assert d.errors and d.ignored == [{"path": "notes.txt", "reason": "no known format"}]


def test_investigate_runs_every_domain_over_a_bundle() -> None:
    items = evidence(alert("DiskFull", {"instance": "web-1:9100"}), metric_point_item("up", {}, 1))
    d = investigate(items, "why is the disk full on web-1?")
    assert d.category == Category.UNKNOWN  # an alert, nothing about web-1 that says why
    assert any("web-1" in m for m in d.missing)


@pytest.mark.parametrize("role", ["cause", "symptom"])
def test_findings_without_references_do_not_count(role: str) -> None:
    bare = f("disk_full", role).model_copy(update={"evidence": []})
    assert conclude([bare], ev()).category == Category.HEALTHY


def test_a_weak_symptom_of_an_episode_whose_alert_resolved_is_recovered() -> None:
    bump = f(
        "latency", "symptom", category=Category.UNKNOWN, tags=["service:catalog"], score=0.45, ts=NOW - 900, refs=[1]
    )
    resolved = alert("CatalogLatencyHigh", {"service": "catalog"}, status="resolved", starts=NOW - 800, ends=NOW - 100)
    es = ev(resolved)
    d = conclude([bump, *analyze_domain(Domain.ALERTS, es)], es)
    assert d.category == Category.HEALTHY
    assert any("recovered episode" in r.why for r in d.ruled_out)
    firing = alert("CatalogLatencyHigh", {"service": "catalog"}, starts=NOW - 60, fingerprint="other")
    es2 = ev(resolved, firing)
    assert conclude([bump, *analyze_domain(Domain.ALERTS, es2)], es2).category == Category.UNKNOWN


def test_a_dependency_failure_is_explained_by_the_fault_of_the_dependency() -> None:
    timeouts = f(
        "upstream_timeout",
        tags=["service:orders-api", "upstream:payments-api.shop.svc:8080"],
        score=0.8,
        category=Category.DEPENDENCY_FAILURE,
        refs=[1],
        ts=NOW - 300,
        domain=Domain.NETWORK,
        obj="orders-api",
    )
    oom = f(
        "oom_killed",
        tags=["pod:shop/payments-api-5c4b7a9d8-abcde"],
        score=0.85,
        refs=[2],
        ts=NOW - 400,
        domain=Domain.KUBERNETES,
        obj="payments-api pod",
    )
    d = conclude([timeouts, oom], ev())
    assert d.category == Category.RESOURCE_EXHAUSTION and d.root_cause.startswith("payments-api pod")
    assert any("symptom, not the cause" in r.why for r in d.ruled_out)


def test_healthy_with_unreadable_files_says_so_and_is_less_sure() -> None:
    es = ev()
    clean = conclude([], es)
    es.errors.append({"path": "quote-api.json", "error": "malformed JSON: Unterminated string"})
    d = conclude([], es)
    assert d.category == Category.HEALTHY and d.confidence < clean.confidence
    assert "quote-api.json" in d.root_cause and d.missing
