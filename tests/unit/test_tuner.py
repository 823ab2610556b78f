"""The tuning agent on a scripted telemetry history: it proposes the expected move and applies it, rejects what
the simulator says is worse, and rolls back a change the live figures then contradict."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

import agents.tuner as tuner_module
from agents.tuner import Candidate, Tuner, _llm_caller
from core.db import PolicyRow, Store, TaskRow, TelemetryRow, TuningRunRow
from core.jobs import claim_tuning_run, finish_tuning_run, queue_tuning_run
from core.policies import PolicyStore
from core.settings import Settings
from core.telemetry import Telemetry
from tests.fake_llm import DeterministicOpenAIServer
from workers.scheduling import ToolProfile

W = 120.0  # the tuning window
T0 = 1_700_000_000.0
PROFILES = {
    "probe": ToolProfile("probe", pool="cpu", hint_s=0.2),
    "anomalies": ToolProfile("anomalies", pool="gpu", hint_s=0.3),
}


def script_window(
    tel: Telemetry, start: float, *, tasks: int, gap_s: float, gpu_s: float, flow_s: float, tag: str
) -> None:
    """Tasks of two nodes: probe on cpu (0.2 s), anomalies on gpu (gpu_s); every fourth anomalies ran on cpu
    (1.2 s). Each task's flow time is what the live service would have recorded."""
    rows = []
    for k in range(tasks):
        arrive = start + k * gap_s
        tid = f"{tag}-{k}"
        on_cpu = k % 4 == 0
        run, pool, worker = (1.2, "cpu", "c1") if on_cpu else (gpu_s, "gpu", "g1")
        rows += [
            {"kind": "node", "name": "probe", "pool": "cpu", "worker": "c1", "outcome": "succeeded", "task_id": tid,
             "node_id": "p", "run_s": 0.2, "wait_s": 0.01, "ts": arrive + 0.21},
            {"kind": "node", "name": "anomalies", "pool": pool, "worker": worker,
             "outcome": "succeeded", "task_id": tid, "node_id": "a", "run_s": run, "wait_s": 0.01,
             "ts": arrive + run + 0.01},
            {"kind": "task", "outcome": "succeeded", "task_id": tid, "run_s": flow_s, "ts": arrive + flow_s,
             "data": {"compute_s": {}}},
        ]  # fmt: skip
    tel.record_many(rows)


@pytest.fixture
def world(database_url: str, tmp_path) -> Iterator[tuple[Tuner, Telemetry, PolicyStore]]:
    settings = Settings(
        var_dir=tmp_path, database_url=database_url, tuning_window_s=W, cpu_concurrency=2, gpu_concurrency=1
    )
    store = Store.from_settings(settings)
    with store.session() as s:  # the PostgreSQL database lives for the module: each test starts from nothing
        for table in (PolicyRow, TelemetryRow, TuningRunRow, TaskRow):
            s.execute(sa.delete(table))
    tel = Telemetry(store)
    policies = PolicyStore(store, settings, refresh_s=0, telemetry=tel)
    policies.ensure()
    tuner = Tuner(store, tel, policies, settings, PROFILES, trials=4, seeds=4)
    # the window before: anomalies on gpu at 0.3 s; then the gpu turns slow (3 s) while tasks keep coming
    script_window(tel, T0 - 2 * W, tasks=40, gap_s=2.5, gpu_s=0.3, flow_s=0.5, tag="before")
    script_window(tel, T0 - W, tasks=55, gap_s=2.0, gpu_s=3.0, flow_s=20.0, tag="drift")
    yield tuner, tel, policies
    store.engine.dispose()


def test_drift_on_the_gpu_moves_the_tool_to_cpu_after_the_simulator_agrees(world) -> None:
    tuner, _, policies = world
    report = tuner.run(now=T0)
    assert report["decision"] == "applied", report
    assert any(f["kind"] == "drift" and f["tool"] == "anomalies" for f in report["findings"])
    assert report["group"] == "placement"
    row = policies.get(report["policy_version"])
    assert row.author == "tuner" and row.window == {"start": T0 - W, "end": T0}
    assert policies.current().scheduling.override("anomalies").pools == ["cpu"]
    assert row.prediction["p95"] < row.prediction["baseline_p95"]
    accepted = [c for c in report["candidates"] if c["verdict"].get("accepted")]
    assert accepted and all(c["verdict"]["p95_gain"] > c["verdict"]["noise"] for c in accepted)
    # the report names the one applied: the fastest that passed, whose prediction the version carries
    assert report["applied"] == min(accepted, key=lambda c: c["verdict"]["p95"])
    assert row.prediction["p95"] == report["applied"]["verdict"]["p95"]
    assert row.prediction["changes"] == report["applied"]["changes"]


def test_a_candidate_the_simulator_finds_worse_is_rejected_and_nothing_is_applied(world) -> None:
    tuner, _, policies = world
    before = policies.latest_version()
    state: dict = {"now": T0}
    state |= tuner.observe(state)  # type: ignore[arg-type]
    worse = Candidate("everything on the slow gpu", {"scheduling.tools.anomalies.pools": ["gpu"]}, "llm")
    state["candidates"] = [worse]
    out = tuner.verify(state)  # type: ignore[arg-type]
    assert out["decision"] == "kept" and out["accepted"] is None
    assert worse.verdict["accepted"] is False and worse.verdict["p95_gain"] < 0
    assert policies.latest_version() == before


def test_a_change_beyond_the_guard_rails_is_refused(world) -> None:
    tuner, _, _ = world
    state: dict = {"now": T0}
    state |= tuner.observe(state)  # type: ignore[arg-type]
    big = Candidate("hedge much later", {"scheduling.hedge_factor": 10.0}, "llm")  # 1.5 -> 10 is over x2
    state["candidates"] = [big]
    tuner.verify(state)  # type: ignore[arg-type]
    assert big.verdict["accepted"] is False and "more than x2" in big.verdict["why"]


def test_a_change_the_live_figures_contradict_is_rolled_back_in_the_next_round(world) -> None:
    tuner, tel, policies = world
    first = tuner.run(now=T0)
    assert first["decision"] == "applied"
    applied = first["policy_version"]
    # the next window: the live service got worse than before the change, against a predicted gain
    script_window(tel, T0, tasks=55, gap_s=2.0, gpu_s=3.0, flow_s=60.0, tag="after")
    second = tuner.run(now=T0 + W)
    assert second["decision"] == "rolled_back", second["watch"]
    assert second["watch"]["verdict"] == "rolled_back" and second["watch"]["version"] == applied
    back = policies.get(second["policy_version"])
    assert back.author == "tuner" and back.rollback_of == 1 and "automatic rollback" in back.reason
    assert policies.current().scheduling.override("anomalies").pools is None
    # a judged change is not judged again
    third = tuner.run(now=T0 + W + 1)
    assert third["watch"]["verdict"] == "nothing to watch"


def test_a_change_that_stalls_tasks_is_rolled_back_though_the_ended_ones_look_fine(world) -> None:
    tuner, tel, policies = world
    assert tuner.run(now=T0)["decision"] == "applied"
    # the tasks that ended after the change were quick, but a third of those that arrived under it never ended
    script_window(tel, T0, tasks=40, gap_s=2.0, gpu_s=3.0, flow_s=2.0, tag="after")
    stalled = [tuner.store.create_task(f"stalled {k}") for k in range(20)]
    waiting = tuner.store.create_task("waits for a person")  # not the policy's doing: not counted
    with tuner.store.session() as s:
        for k, t in enumerate(stalled):
            s.execute(sa.update(TaskRow).where(TaskRow.id == t.id).values(status="running", created_at=T0 + k))
        s.execute(sa.update(TaskRow).where(TaskRow.id == waiting.id).values(status="waiting_approval", created_at=T0))
    second = tuner.run(now=T0 + W)
    assert second["watch"]["running"] == 20 and second["watch"]["tasks"] == 40
    assert second["watch"]["live_p95"] > W - 20  # the stalled tasks' ages, not the 2 s of those that ended
    assert second["decision"] == "rolled_back", second["watch"]
    assert "20 more still running" in policies.get(second["policy_version"]).reason


def test_a_change_the_live_figures_bear_out_is_kept(world) -> None:
    tuner, tel, policies = world
    assert tuner.run(now=T0)["decision"] == "applied"
    script_window(tel, T0, tasks=55, gap_s=2.0, gpu_s=3.0, flow_s=2.0, tag="after")
    second = tuner.run(now=T0 + W)
    assert second["watch"]["verdict"] == "kept"
    assert policies.current().scheduling.override("anomalies").pools == ["cpu"]


@pytest.fixture
def llm_server() -> Iterator[DeterministicOpenAIServer]:
    server = DeterministicOpenAIServer()
    yield server
    server.stop()


def _with_llm(tuner: Tuner, server: DeterministicOpenAIServer) -> Tuner:
    settings = tuner.settings.model_copy(
        update={"llm_base_url": server.base_url, "llm_api_key": SecretStr("sk-tuner-secret")}
    )
    ctx = SimpleNamespace(settings=settings, policies=tuner.policies, telemetry=tuner.telemetry)
    return Tuner(
        tuner.store, tuner.telemetry, tuner.policies, settings, PROFILES, llm=_llm_caller(ctx), trials=4, seeds=4
    )


def test_the_llm_writes_the_rationale_and_its_candidates_go_through_the_same_verifier(world, llm_server) -> None:
    tuner, tel, policies = world
    llm_server.content = json.dumps(
        {
            "rationale": "The gpu pool slowed tenfold for anomalies; the cpu copy is faster now.",
            "candidates": [
                {"name": "pin anomalies to the slow gpu", "changes": {"scheduling.tools.anomalies.pools": ["gpu"]}},
                {"name": "a knob that does not exist", "changes": {"scheduling.warp_speed": 9}},
            ],
        }
    )
    report = _with_llm(tuner, llm_server).run(now=T0)
    assert report["decision"] == "applied"
    assert report["rationale"].startswith("The gpu pool slowed tenfold")
    by_name = {c["name"]: c for c in report["candidates"]}
    worse = by_name["llm: pin anomalies to the slow gpu"]
    assert worse["source"] == "llm" and worse["verdict"]["accepted"] is False and worse["verdict"]["p95_gain"] < 0
    assert by_name["llm: a knob that does not exist"]["verdict"]["why"].startswith("invalid")
    # what was applied is the verified rule, with the LLM's words as its reason
    assert policies.current().scheduling.override("anomalies").pools == ["cpu"]
    assert "The gpu pool slowed tenfold" in policies.get(report["policy_version"]).reason
    # the server saw the findings and the candidates; the key went in the header only; the call is telemetry
    sent = json.loads(llm_server.requests[0]["body"]["messages"][1]["content"])
    assert sent["group"] == "placement" and any(f["kind"] == "drift" for f in sent["findings"])
    assert llm_server.requests[0]["auth"] == "Bearer sk-tuner-secret"
    calls = [r for r in tel.rows("llm", 0, 1e12) if (r.data or {}).get("purpose") == "tuner"]
    assert len(calls) == 1 and calls[0].tokens_in == 10 and calls[0].outcome == "ok"
    assert "sk-tuner-secret" not in json.dumps(report)


def test_an_llm_that_fails_leaves_the_findings_words_and_the_round_goes_on(world, llm_server) -> None:
    tuner, tel, _ = world
    llm_server.status = 500
    report = _with_llm(tuner, llm_server).run(now=T0)
    assert report["decision"] == "applied"
    assert "anomalies on" in report["rationale"] and "Group tried: placement" in report["rationale"]
    assert all(c["source"] != "llm" for c in report["candidates"])
    calls = [r for r in tel.rows("llm", 0, 1e12) if (r.data or {}).get("purpose") == "tuner"]
    assert calls and all(r.outcome == "error" for r in calls)


def _past_round(tuner: Tuner, group: str, decision: str) -> None:
    row = queue_tuning_run(tuner.store, "test")
    claim_tuning_run(tuner.store, row.id)
    finish_tuning_run(
        tuner.store, row.id, status="done", decision=decision, report={"group": group, "decision": decision}
    )


def test_a_group_whose_change_paid_goes_on_while_its_finding_remains(world) -> None:
    tuner, _, _ = world
    findings = [
        {"kind": "saturated", "group": "release_order", "severity": 2.0},
        {"kind": "cache_expired", "group": "cache", "severity": 1.0},
    ]
    assert tuner.choose_group(findings) == "release_order"  # the strongest finding, with no history
    _past_round(tuner, "cache", "applied")
    assert tuner.choose_group(findings) == "cache"  # the TTL climb goes on
    assert tuner.choose_group(findings[:1]) == "release_order"  # nothing left to climb
    _past_round(tuner, "cache", "kept")
    assert tuner.choose_group(findings) == "release_order"  # it stopped paying
    _past_round(tuner, "release_order", "kept")
    # both groups found nothing in the last two rounds: they wait their turn, and a group not tried goes first
    assert tuner.choose_group(findings) in ("hedging", "placement")
    _past_round(tuner, "hedging", "kept")
    assert tuner.choose_group(findings) == "cache"  # cache found nothing two rounds ago: its turn again


def expired_lookups(start: float, age: float, tasks: Iterable[int], every_s: float = 1.0, tag: str = "") -> list[dict]:
    """Diagnose lookups by tasks `{tag}-{k}` at start + k x every_s, each finding its answer expired at `age` s
    (a tag of script_window's ties them to its tasks, which the replay then serves from the cache)."""
    return [
        {"kind": "cache", "name": "diagnose", "outcome": "answer", "hit": False, "run_s": 0.01,
         "task_id": f"{tag or start}-{k}", "ts": start + k * every_s, "data": {"reason": "expired", "age_s": age}}
        for k in tasks
    ]  # fmt: skip


def diagnosed(tuner: Tuner, now: float = T0) -> dict:
    """The state of a round after observe and diagnose."""
    state: dict = {"now": now}
    state |= tuner.observe(state)  # type: ignore[arg-type]
    state |= tuner.diagnose(state)  # type: ignore[arg-type]
    return state


def test_a_ttl_far_under_its_repeats_steps_toward_a_target_the_replay_verifies(world) -> None:
    tuner, tel, policies = world
    # every other task of the drifted window found its diagnose answer expired, 500 s old (the TTL is 120 s)
    tel.record_many(expired_lookups(T0 - W, 500.0, range(0, 55, 2), every_s=2.0, tag="drift"))
    state = diagnosed(tuner)
    (expired,) = [f for f in state["findings"] if f["kind"] == "cache_expired"]
    assert expired["category"] == "diagnose" and expired["ages_max"] == 500.0
    state["workload"] = tuner.workload(T0 - W, T0)
    _, rules = tuner.space("cache", policies.current(), state["findings"], state["workload"])
    path = "serving.cache.categories.diagnose.answer_ttl_s"
    (climb,) = [c for c in rules if path in c.changes]
    assert climb.changes == {path: 240.0} and climb.toward == {path: 900.0}  # one step (x2) toward the cap
    state["candidates"] = [climb]
    out = tuner.verify(state)  # type: ignore[arg-type]
    assert climb.verdict["p95_gain"] < 0.03  # 240 s serves none of the 500 s repeats: the step alone shows nothing
    assert (
        climb.verdict["toward"]["accepted"] and climb.verdict["toward"]["p95_gain"] > climb.verdict["toward"]["noise"]
    )
    assert climb.verdict["accepted"] and climb.verdict["why"].startswith("a step toward")
    assert out["decision"] == "apply" and out["accepted"] is climb


def test_no_step_toward_repeats_beyond_the_freshness_cap(world) -> None:
    tuner, tel, _ = world
    tel.record_many(expired_lookups(T0 - W, 5000.0, range(0, 55, 2), every_s=2.0, tag="drift"))
    state = diagnosed(tuner)
    assert not [f for f in state["findings"] if f["kind"] == "cache_expired"]  # TUNER_MAX_ANSWER_TTL_S is 900 s


def test_a_ttl_is_aimed_at_the_repeats_of_the_last_windows_not_only_this_one(world) -> None:
    tuner, tel, _ = world
    # three windows ago a repeat came after 800 s; one came after 100 s (under the TTL now: served already);
    # one came after 2000 s (beyond the freshness cap); in this window they come after 500 s
    for start, age, n in (
        (T0 - 3 * W, 800.0, 1),
        (T0 - 3 * W + 5, 100.0, 3),
        (T0 - 2 * W, 2000.0, 3),
        (T0 - W, 500.0, 10),
    ):
        tel.record_many(expired_lookups(start, age, range(n)))
    (finding,) = [f for f in diagnosed(tuner)["findings"] if f["kind"] == "cache_expired"]
    assert finding["ages_max"] == 800.0 and "10 of 10 lookups" in finding["detail"]


def test_the_watch_tolerance_widens_by_how_far_live_and_replay_drift_apart(world) -> None:
    tuner, _, _ = world
    assert tuner._calibration_noise() == 0.0  # no history: the configured tolerance alone
    for live, replayed in ((10.0, 10.0), (12.0, 10.0), (8.0, 10.0), (5.0, None)):
        row = queue_tuning_run(tuner.store, "test")
        claim_tuning_run(tuner.store, row.id)
        report = {"live": {"p95_flow_s": live}, "baseline": {"p95": replayed} if replayed else None}
        finish_tuning_run(tuner.store, row.id, status="done", decision="kept", report=report)
    # ratios 1.0, 1.2, 0.8 (the round that replayed nothing does not count): stdev 0.2, twice that
    assert tuner._calibration_noise() == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("group", "switch", "acting", "dependents"),
    [
        ("release_order", "scheduling.release_order", "srpt_aging", ("aging", "guard_share")),
        ("hedging", "scheduling.hedging", True, ("hedge_factor", "hedge_budget")),
    ],
)
def test_optuna_asks_for_a_knob_only_where_it_acts(world, monkeypatch, group, switch, acting, dependents) -> None:
    tuner, _, policies = world
    tuner.trials = 16
    doc = policies.current()
    tried: list = []
    real_replay = tuner_module.replay
    monkeypatch.setattr(tuner_module, "replay", lambda w, d, *a: (tried.append(d), real_replay(w, d, *a))[1])
    workload = tuner.workload(T0 - W, T0)
    space, _ = tuner.space(group, doc, [], workload)
    (best,) = tuner._optuna(group, doc, space, workload) or [None]
    # the trials that turned the switch away from where the knobs act left them as they were
    now, name = doc.scheduling.model_dump(), switch.split(".")[1]
    idle = [d.scheduling for d in tried if getattr(d.scheduling, name) != acting]
    acted = [d.scheduling for d in tried if getattr(d.scheduling, name) == acting]
    assert idle and all(getattr(s, k) == now[k] for s in idle for k in dependents)
    assert any(getattr(s, k) != now[k] for s in acted for k in dependents)  # and they were tuned where they act
    if best is not None and best.changes.get(switch, acting) != acting:
        assert not any(f"scheduling.{k}" in best.changes for k in dependents)
