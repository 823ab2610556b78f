"""The tuning agent: a LangGraph graph that reflects on telemetry and retunes the service's own policy.

observe (the last window's aggregates against the window before, and its workload rebuilt for the simulator)
-> watch (judge the tuner's last change on the live figures since it was applied; roll it back when they
regressed against its prediction) -> diagnose (regressions, drift, saturated pools, stragglers, cache
categories whose answers expire just before they are asked again or that miss below break-even) -> propose
(rules for the obvious moves and Optuna ask/tell over the bounded knobs of one group per round) -> reflect
(the rationale; an LLM, when configured, writes it and may add candidates) -> verify (every candidate and the
current policy replayed on the same resampled workloads; only a gain beyond the measured noise passes) ->
apply (a new policy version with its reason, window and prediction).

The tuner never applies a candidate the simulator rejected, touches only the knob groups settings allow, and
moves a numeric knob at most x or / (1 + `TUNER_MAX_STEP`) per round. A rule whose target lies further is taken
one step at a time, each step judged by where it leads (the target verified, the step no worse).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import optuna
import structlog
from langgraph.graph import END, START, StateGraph

from core.db import PolicyRow, Store, TelemetryRow
from core.jobs import TUNING_CHANNEL, claim_tuning_run, finish_tuning_run, queue_tuning_run, tuning_runs
from core.policies import PolicyInvalid, PolicyStore, parse_policy
from core.policy import LLMPolicy, PolicyDocument, get_path, set_path
from core.settings import Settings
from core.telemetry import Telemetry
from core.types import TaskStatus
from workers.release import profile_of
from workers.replay import Workload, replay, workload_from_telemetry
from workers.scheduling import ToolProfile, pool_kind
from workers.simulator import censored_quantile

log = structlog.get_logger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

GROUPS = ("release_order", "hedging", "placement", "cache")
MIN_GAIN = 0.03  # a gain under 3% is not worth a policy version, whatever the noise
MAX_COST_RISE = 0.05  # a faster policy may cost at most this much more per task
MIN_TASKS = 20  # fewer tasks in a window say nothing about a p95
CACHE_LOOKBACK = 4  # windows of expired lookups a TTL is aimed from
# knobs that act only under one value of another knob of their group: Optuna asks for them only then, so a
# version never carries values that did nothing in the trial that chose them
ACTS_ONLY_WHEN = {
    "scheduling.aging": ("scheduling.release_order", "srpt_aging"),
    "scheduling.guard_share": ("scheduling.release_order", "srpt_aging"),
    "scheduling.hedge_factor": ("scheduling.hedging", True),
    "scheduling.hedge_budget": ("scheduling.hedging", True),
}


@dataclass
class Candidate:
    name: str
    changes: dict[str, Any]
    source: str  # rule | optuna | llm
    doc: PolicyDocument | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    # where a rule would go if the step guard rail allowed it: when the step alone shows nothing in the replay
    # (a TTL still under the repeats it should serve) but the target beats the current policy beyond noise and
    # the step is no worse, the step is taken toward it (a trust region: the direction verified, the size capped)
    toward: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "changes": self.changes,
            **({"toward": self.toward} if self.toward else {}),
            "verdict": self.verdict,
        }


class TuneState(TypedDict, total=False):
    run_id: str
    now: float
    span: float
    window: dict[str, float]
    live: dict[str, Any]
    previous: dict[str, Any]
    version: int
    watch: dict[str, Any]
    findings: list[dict[str, Any]]
    group: str | None
    workload: Workload  # the window's, rebuilt once by propose for every replay of the round
    candidates: list[Candidate]
    rationale: str
    baseline: dict[str, Any]
    accepted: Candidate | None
    decision: str
    policy_version: int | None


def with_changes(doc: PolicyDocument, changes: dict[str, Any]) -> PolicyDocument:
    body = doc.model_dump(mode="json")
    for path, value in changes.items():
        set_path(body, path, value)
    return parse_policy(body)


def step_range(cur: float, lo: float, hi: float, step: float, floor_when_zero: float) -> tuple[float, float]:
    """The values a knob may take this round: between its value / (1 + step) and its value x (1 + step) (a
    step of 1 halves or doubles it at most; a knob at 0 may rise to floor_when_zero x step), inside its hard
    range."""
    if cur <= 0:
        return lo, min(hi, max(lo, floor_when_zero * step))
    return max(lo, cur / (1 + step)), min(hi, cur * (1 + step))


def beyond_step(old: float, new: float, step: float) -> bool:
    """Whether a move from `old` to `new` is larger than one round's step (see step_range)."""
    return old > 0 and (new > old * (1 + step) * (1 + 1e-9) or new < old / (1 + step) * (1 - 1e-9))


@dataclass
class Tuner:
    store: Store
    telemetry: Telemetry
    policies: PolicyStore
    settings: Settings
    profiles: dict[str, ToolProfile]
    llm: Callable[[list[dict[str, str]]], str] | None = None  # messages -> reply text, when an LLM is configured
    trials: int | None = None
    seeds: int | None = None

    def __post_init__(self) -> None:
        self.graph = build_tuner_graph(self)

    # the entry points

    def run(
        self,
        run_id: str | None = None,
        *,
        now: float | None = None,
        window_s: float | None = None,
        trigger: str = "direct",
    ) -> dict[str, Any]:
        """One round over the `window_s` (default TUNING_WINDOW_S) before `now`. With no run_id the round records
        itself as a tuning run (the benchmark's way)."""
        if run_id is None:
            run_id = queue_tuning_run(self.store, trigger).id
            claim_tuning_run(self.store, run_id)
        try:
            span = window_s or self.settings.tuning_window_s
            state = self.graph.invoke({"run_id": run_id, "now": time.time() if now is None else now, "span": span})
        except Exception as exc:
            log.exception("tuning run failed", run_id=run_id)
            finish_tuning_run(self.store, run_id, status="failed", decision=None, report={}, error=repr(exc))
            self.telemetry.record("tuning", outcome="failed", data={"run": run_id})
            raise
        report = self.report(state)
        finish_tuning_run(
            self.store,
            run_id,
            status="done",
            decision=state.get("decision"),
            report=report,
            policy_version=state.get("policy_version"),
        )
        self.telemetry.record("tuning", outcome=state.get("decision") or "kept", data={"run": run_id})
        return {"id": run_id, **report}

    def report(self, state: TuneState) -> dict[str, Any]:
        accepted = state.get("accepted")
        return {
            "decision": state.get("decision"),
            "window": state.get("window"),
            "policy_version": state.get("policy_version"),
            "watch": state.get("watch"),
            "findings": state.get("findings", []),
            "group": state.get("group"),
            "rationale": state.get("rationale", ""),
            "baseline": state.get("baseline"),
            "candidates": [c.view() for c in state.get("candidates", [])],
            # the candidate the new version came from (several may pass the verifier; the fastest is applied)
            "applied": accepted.view() if state.get("decision") == "applied" and accepted else None,
            "live": _headline(state.get("live")),
            "previous": _headline(state.get("previous")),
        }

    # observe

    def prices(self) -> dict[str, float]:
        return self.policies.current().serving.pool_cost_per_s

    def observe(self, state: TuneState) -> TuneState:
        now = state["now"]
        span = state.get("span") or self.settings.tuning_window_s
        live = self.telemetry.summary(span, end=now, prices=self.prices())
        previous = self.telemetry.summary(span, end=now - span, prices=self.prices())
        version, _ = self.policies.current_version()
        return {"window": {"start": now - span, "end": now}, "live": live, "previous": previous, "version": version}

    def workload(self, start: float, end: float) -> Workload:
        slots = {"cpu": self.settings.cpu_concurrency, "gpu": self.settings.gpu_concurrency}
        return workload_from_telemetry(self.telemetry, self.store, start, end, profiles=self.profiles, slots=slots)

    # watch

    def watch(self, state: TuneState) -> TuneState:
        row = self.policies.get(state["version"])
        if row.author != "tuner" or row.rollback_of is not None or not row.prediction:
            return {"watch": {"verdict": "nothing to watch", "version": row.version}}
        if self._judged(row.version):
            return {"watch": {"verdict": "judged", "version": row.version}}
        pred = row.prediction
        since = float(pred.get("applied_at") or row.created_at)
        # only tasks that arrived under the new version: one that started before it says nothing about it
        flows = [
            float(r.run_s)
            for r in self.telemetry.rows("task", since, state["now"])
            if r.run_s is not None and r.ts - r.run_s >= since
        ]
        # and those that have not ended count at their age so far (censored): a change that stalls work must not
        # look good because its slowest tasks are still running (waiting for a person's approval is not its doing)
        running = [
            state["now"] - t.created_at
            for t in self.store.unfinished_tasks()
            if t.status != TaskStatus.WAITING_APPROVAL and since <= t.created_at <= state["now"]
        ]
        p95 = censored_quantile(flows, running, 0.95) if flows or running else None
        seen = {
            "version": row.version,
            "live_p95": p95,
            "tasks": len(flows),
            "running": len(running),
            "prediction": pred,
        }
        if p95 is None or len(flows) + len(running) < MIN_TASKS:
            return {"watch": {**seen, "verdict": "waiting"}, "decision": "waiting"}
        # Load moves between windows far more than a policy does, so the live p95 is judged against the same
        # window's workload: replayed under the new policy (the prediction) and under the previous one (what not
        # changing would have given), both scaled by how live compared with the replay before the change. How
        # far live and replay drift apart from window to window under one policy widens the tolerance.
        drift = self._calibration_noise()
        tol = self.settings.tuner_rollback_tolerance + drift
        calibration = (pred.get("baseline_live_p95") or 0.0) / max(pred["baseline_p95"], 1e-9) or 1.0
        workload = self.workload(since, state["now"])
        seeds = range(1, (self.seeds or self.settings.tuner_seeds) + 1)  # the verifier's, as the calibration was
        previous = PolicyDocument.model_validate(self.policies.get(pred["previous_version"]).body)
        current = PolicyDocument.model_validate(row.body)
        sim_new = statistics.mean(replay(workload, current, k)["p95"] for k in seeds)
        sim_old = statistics.mean(replay(workload, previous, k)["p95"] for k in seeds)
        expected, unchanged = calibration * sim_new, calibration * sim_old
        judged = {
            **seen,
            "expected_p95": expected,
            "unchanged_p95": unchanged,
            "calibration": calibration,
            "calibration_noise": drift,
        }
        if p95 > expected * (1 + tol) and p95 > unchanged * (1 + tol):
            reason = (
                f"automatic rollback of v{row.version}: live p95 {p95:.3g}s over {len(flows)} tasks "
                f"({len(running)} more still running), against "
                f"{expected:.3g}s predicted for this workload and {unchanged:.3g}s without the change"
            )
            back = self.policies.rollback(pred["previous_version"], author="tuner", reason=reason)
            return {
                "watch": {**judged, "verdict": "rolled_back", "restored": back.version},
                "decision": "rolled_back",
                "policy_version": back.version,
                "rationale": reason,
            }
        return {"watch": {**judged, "verdict": "kept"}}

    def _calibration_noise(self, rounds: int = 12) -> float:
        """Twice the relative spread of live p95 / replayed p95 over the last rounds that replayed their window:
        a live figure within it of the prediction says nothing against a change."""
        ratios = []
        for run in tuning_runs(self.store, status="done", limit=rounds):
            report = run.report or {}
            live = (report.get("live") or {}).get("p95_flow_s")
            replayed = (report.get("baseline") or {}).get("p95")
            if live and replayed:
                ratios.append(live / replayed)
        return 2 * statistics.stdev(ratios) / statistics.mean(ratios) if len(ratios) >= 3 else 0.0

    def _judged(self, version: int) -> bool:
        for run in tuning_runs(self.store, status="done", limit=200):
            w = (run.report or {}).get("watch") or {}
            if w.get("version") == version and w.get("verdict") in ("kept", "rolled_back"):
                return True
        return False

    # diagnose

    def diagnose(self, state: TuneState) -> TuneState:
        live, prev = state["live"], state["previous"]
        findings: list[dict[str, Any]] = []
        now_p95, was_p95 = live["tasks"]["flow_s"]["p95"], prev["tasks"]["flow_s"]["p95"]
        if now_p95 and was_p95 and now_p95 > was_p95 * 1.2:
            findings.append(
                # a symptom: a drift or a saturated pool, when seen, says better where to look
                {"kind": "regression", "group": "release_order", "severity": 0.5,
                 "detail": f"task p95 {was_p95:.3g}s -> {now_p95:.3g}s"}
            )  # fmt: skip
        before = {(t["tool"], t["pool"]): t for t in prev["tools"]}
        for t in live["tools"]:
            old = before.get((t["tool"], t["pool"]))
            a, b = (old or {}).get("run_s", {}).get("p50"), t["run_s"]["p50"]
            if (
                old
                and a
                and b
                and t["run_s"]["count"] >= 5
                and old["run_s"]["count"] >= 5
                and max(a, b) / min(a, b) > 1.5
            ):
                findings.append(
                    {"kind": "drift", "group": "placement", "tool": t["tool"], "pool": t["pool"],
                     "severity": abs(math.log(b / a)),
                     "detail": f"{t['tool']} on {t['pool']}: p50 {a:.3g}s -> {b:.3g}s"}
                )  # fmt: skip
            if (t["timeout_rate"] or 0) > 0.05:
                findings.append(
                    {"kind": "timeouts", "group": "hedging", "tool": t["tool"], "severity": 1.0,
                     "detail": f"{t['tool']} on {t['pool']}: {t['timeout_rate']:.0%} of attempts time out"}
                )  # fmt: skip
        runs = {(t["tool"], t["pool"]): t["run_s"]["p50"] for t in live["tools"]}
        for pool, p in live["pools"].items():
            wait = p["queue_wait_s"]["p95"]
            typical = statistics.median([v for (_, pl), v in runs.items() if pl == pool and v] or [0.0])
            if wait and typical and wait > 2 * typical:
                findings.append(
                    {"kind": "saturated", "group": "placement" if pool_kind(pool) == "gpu" else "release_order",
                     "pool": pool, "severity": min(2.0, wait / typical / 4),
                     "detail": f"pool {pool}: queue wait p95 {wait:.3g}s against runs of {typical:.3g}s"}
                )  # fmt: skip
        by_tool: dict[str, list[tuple[str, float]]] = {}
        for w in live["workers"]:
            if w["runs"] >= 5 and w["run_p50"]:
                by_tool.setdefault(w["tool"], []).append((w["worker"], w["run_p50"]))
        for tool, ws in by_tool.items():
            if len(ws) < 2:
                continue
            mid = statistics.median(v for _, v in ws)
            for worker, v in ws:
                if v > 2 * mid:
                    findings.append(
                        {"kind": "straggler", "group": "hedging", "tool": tool, "worker": worker, "severity": 1.5,
                         "detail": f"{worker} runs {tool} at {v:.3g}s against {mid:.3g}s on the others"}
                    )  # fmt: skip
        findings += self._cache_findings(state)
        findings.sort(key=lambda f: -f["severity"])
        return {"findings": findings}

    def _cache_findings(self, state: TuneState) -> list[dict[str, Any]]:
        w = state["window"]
        span = w["end"] - w["start"]
        # repeat intervals are a trait of the workload, longer than one window can show: the ages a longer TTL
        # would serve come from the last CACHE_LOOKBACK windows, the finding itself from this one
        older = [
            r for r in self.telemetry.rows("cache", w["end"] - CACHE_LOOKBACK * span, w["end"]) if r.outcome == "answer"
        ]
        rows = [r for r in older if r.ts >= w["start"]]
        doc = self.policies.current()
        out: list[dict[str, Any]] = []
        flow = state["live"]["tasks"]["flow_s"]["mean"] or 0.0
        for category in sorted({r.name for r in rows}):
            mine = [r for r in rows if r.name == category]
            hits = sum(1 for r in mine if r.hit)
            ttl = doc.serving.cache.for_category(category).answer_ttl_s
            # the repeats a longer TTL could serve: over the TTL now in force, under the freshness cap
            cap = max(ttl, self.settings.tuner_max_answer_ttl_s)
            now_ages = _expired_ages(mine, category, ttl, cap)
            if len(now_ages) >= max(3, 0.05 * len(mine)):
                out.append(
                    {"kind": "cache_expired", "group": "cache", "category": category,
                     "severity": 10 * len(now_ages) / len(mine),
                     # the TTL that would have served them all (the operator's cap says what is fresh enough)
                     "ages_max": _expired_ages(older, category, ttl, cap)[-1],
                     "detail": f"{category}: {len(now_ages)} of {len(mine)} lookups found the same answer expired "
                               f"(TTL {ttl:g}s, ages {now_ages[0]:.0f}-{now_ages[-1]:.0f}s)"}
                )  # fmt: skip
            search = statistics.mean([r.run_s or 0.0 for r in mine]) if mine else 0.0
            break_even = search / flow if flow else 0.0
            if len(mine) >= MIN_TASKS and hits / len(mine) < break_even:
                out.append(
                    {"kind": "cache_below_break_even", "group": "cache", "category": category, "severity": 0.5,
                     "detail": f"{category}: hit rate {hits / len(mine):.1%} under break-even {break_even:.1%}"}
                )  # fmt: skip
        return out

    # propose

    def choose_group(self, findings: list[dict[str, Any]]) -> str | None:
        allowed = [g for g in GROUPS if g in self.settings.tuner_knobs]
        if not allowed:
            return None
        recent = [r.report for r in tuning_runs(self.store, status="done", limit=len(GROUPS)) if r.report.get("group")]
        # the groups of the last two rounds, when they found nothing, wait their turn
        fruitless: set[str] = set()
        for r in recent[:2]:
            if r.get("decision") == "applied":
                break
            fruitless.add(r["group"])
        # a climb that paid last round goes on while its finding remains (a TTL far below its repeats, say)
        paid = recent[0]["group"] if recent and recent[0].get("decision") == "applied" else None
        if paid in allowed and any(f["group"] == paid for f in findings):
            return str(paid)
        for f in findings:
            if f["group"] in allowed and f["group"] not in fruitless:
                return str(f["group"])
        # nothing points anywhere: the group tried longest ago (never tried counts as longest)
        last_tried: dict[str, int] = {}
        for age, r in enumerate(recent):  # newest first
            last_tried.setdefault(r["group"], age)
        candidates = [g for g in allowed if g not in fruitless] or allowed
        return max(candidates, key=lambda g: last_tried.get(g, len(recent)))

    def propose(self, state: TuneState) -> TuneState:
        group = self.choose_group(state["findings"])
        if group is None:
            return {"group": None, "candidates": []}
        doc = self.policies.current()
        workload = self.workload(state["window"]["start"], state["window"]["end"])
        space, rules = self.space(group, doc, state["findings"], workload)
        candidates = list(rules)
        if space:
            candidates += self._optuna(group, doc, space, workload)
        return {"group": group, "workload": workload, "candidates": candidates}

    def space(
        self, group: str, doc: PolicyDocument, findings: list[dict[str, Any]], workload: Workload
    ) -> tuple[dict[str, tuple[Any, ...]], list[Candidate]]:
        """The knobs of a group this round (path -> ('float', lo, hi) | ('cat', choices)), and rule moves."""
        step = self.settings.tuner_max_step
        s = doc.scheduling
        body = doc.model_dump(mode="json")
        space: dict[str, tuple[Any, ...]] = {}
        rules: list[Candidate] = []

        def rule(name: str, changes: dict[str, Any], toward: dict[str, Any] | None = None) -> None:
            rules.append(Candidate(f"rule: {name}", changes, "rule", toward=toward))

        if group == "release_order":
            space["scheduling.release_order"] = ("cat", ("fifo", "srpt", "srpt_aging"))
            space["scheduling.aging"] = ("float", *step_range(s.aging, 0.0, 100.0, step, 0.02))
            space["scheduling.guard_share"] = ("float", *step_range(s.guard_share, 0.0, 1.0, step, 1.0))
            if s.release_order != "srpt_aging":
                rule(
                    "srpt_aging orders short work first with a starvation guard",
                    {"scheduling.release_order": "srpt_aging"},
                )
        elif group == "hedging":
            space["scheduling.hedging"] = ("cat", (True, False))
            space["scheduling.hedge_factor"] = ("float", *step_range(s.hedge_factor, 1.0, 100.0, step, 2.0))
            space["scheduling.hedge_budget"] = ("float", *step_range(s.hedge_budget, 0.0, 1.0, step, 0.1))
            if not s.hedging and any(f["kind"] == "straggler" for f in findings):
                rule("hedge stragglers", {"scheduling.hedging": True})
        elif group == "placement":
            space["scheduling.gpu_fallback_slowdown"] = (
                "float", *step_range(s.gpu_fallback_slowdown, 1.0, 1000.0, step, 4.0),
            )  # fmt: skip
            tools = {f["tool"] for f in findings if f.get("tool")} | {
                t for (t, _p) in workload.pool_factor if pool_kind(self.profiles.get(t, ToolProfile(t)).pool) == "gpu"
            }
            for tool in sorted(tools):
                profile = self.profiles.get(tool) or ToolProfile(tool)
                if pool_kind(profile.pool) != "gpu":
                    continue  # a cpu tool has only cpu pools
                path = f"scheduling.tools.{tool}.pools"
                current = get_path(body, path)
                space[path] = ("cat", (json.dumps(current), json.dumps(["cpu"]), json.dumps([profile.pool])))
                on_cpu = min(
                    (f for (t, p), f in workload.pool_factor.items() if t == tool and pool_kind(p) == "cpu"),
                    default=None,
                )
                on_gpu = min(
                    (f for (t, p), f in workload.pool_factor.items() if t == tool and pool_kind(p) == "gpu"),
                    default=None,
                )
                if on_cpu is not None and on_gpu is not None and on_cpu < on_gpu and current != ["cpu"]:
                    rule(f"{tool} runs faster on cpu now ({on_cpu:.2g} vs {on_gpu:.2g})", {path: ["cpu"]})
                if on_cpu is not None and on_gpu is not None and on_gpu < on_cpu and current == ["cpu"]:
                    rule(f"{tool} runs faster on gpu again", {path: None})
        elif group == "cache":
            for f in findings:
                if f["group"] != "cache":
                    continue
                cat = f["category"]
                base = f"serving.cache.categories.{cat}"
                pol = doc.serving.cache.for_category(cat)
                if f["kind"] == "cache_expired":
                    cap = max(pol.answer_ttl_s, self.settings.tuner_max_answer_ttl_s)
                    _, hi = step_range(pol.answer_ttl_s, 0.0, cap, step, 60.0)
                    space[f"{base}.answer_ttl_s"] = ("float", pol.answer_ttl_s, hi)
                    # Within the operator's freshness cap a longer TTL only serves more repeats (an answer kept
                    # longer is older when served, and the cap prices that); and under TTL T expired repeats show
                    # ages in (T, T + their interval], so a target read off those ages moves as T does. The cap
                    # is the target: the replay verifies it pays on this window, the step sets the pace.
                    target = round(cap, 1)
                    want = round(min(hi, target), 1)
                    if want > pol.answer_ttl_s:
                        rule(
                            f"{cat}: keep answers {want:.0f}s (repeats found them expired up to {f['ages_max']:.0f}s; "
                            f"the freshness cap is {cap:g}s)",
                            {f"{base}.answer_ttl_s": want},
                            {f"{base}.answer_ttl_s": target} if target > want else None,
                        )
                elif f["kind"] == "cache_below_break_even" and pol.enabled:
                    rule(f"{cat}: the cache costs more than it saves", {f"{base}.enabled": False})
        return space, rules

    def _optuna(
        self, group: str, doc: PolicyDocument, space: dict[str, tuple[Any, ...]], workload: Workload
    ) -> list[Candidate]:
        """Optuna's ask/tell: each trial is one simulation (seed 0) of the window under the asked knobs."""
        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=11))
        body = doc.model_dump(mode="json")
        study.enqueue_trial(
            {p: (json.dumps(get_path(body, p)) if p.endswith(".pools") else get_path(body, p)) for p in space}
        )
        best: tuple[float, dict[str, Any]] | None = None
        for _ in range(self.trials or self.settings.tuner_trials):
            trial = study.ask()
            changes: dict[str, Any] = {}
            for path, spec in space.items():
                when = ACTS_ONLY_WHEN.get(path)
                if when and when[0] in changes and changes[when[0]] != when[1]:
                    continue
                if spec[0] == "cat":
                    value = trial.suggest_categorical(path, list(spec[1]))
                    changes[path] = json.loads(value) if path.endswith(".pools") else value
                else:
                    lo, hi = float(spec[1]), float(spec[2])
                    changes[path] = round(trial.suggest_float(path, lo, hi), 6) if hi > lo else lo
            try:
                cand = with_changes(doc, changes)
            except PolicyInvalid:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            score = replay(workload, cand)["p95"]
            study.tell(trial, score)
            if best is None or score < best[0]:
                best = (score, changes)
        if best is None:
            return []
        changes = {p: v for p, v in best[1].items() if v != get_path(body, p)}
        return (
            [Candidate(f"optuna: best of {len(study.trials)} trials over {group}", changes, "optuna")]
            if changes
            else []
        )

    # reflect

    def reflect(self, state: TuneState) -> TuneState:
        findings = state.get("findings", [])
        words = "; ".join(f["detail"] for f in findings[:5]) or "no regression, drift, saturation or straggler seen"
        rationale = f"{words}. Group tried: {state.get('group') or 'none'}."
        candidates = list(state.get("candidates", []))
        if self.llm is not None and state.get("group"):
            try:
                reply = self.llm(self._reflect_messages(state))
                body = json.loads(reply)
                rationale = str(body.get("rationale") or rationale)[:2000]
                for k, c in enumerate(body.get("candidates") or []):
                    if isinstance(c, dict) and isinstance(c.get("changes"), dict):
                        candidates.append(Candidate(f"llm: {c.get('name') or k}", c["changes"], "llm"))
            except Exception as exc:  # the findings' own words stand
                log.warning("tuner reflect failed", error=repr(exc))
        return {"rationale": rationale, "candidates": candidates}

    def _reflect_messages(self, state: TuneState) -> list[dict[str, str]]:
        body = {
            "findings": state.get("findings", [])[:10],
            "group": state.get("group"),
            "policy": self.policies.current().model_dump(mode="json"),
            "candidates": [c.view() for c in state.get("candidates", [])],
            "live": _headline(state.get("live")),
        }
        system = (
            "You tune an operations service's scheduling and serving policy. Given telemetry findings and "
            'candidate changes, reply with JSON {"rationale": str, "candidates": [{"name": str, "changes": '
            '{"dotted.path": value}}]}. Every candidate is verified in a simulator before it is applied.'
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": json.dumps(body)}]

    # verify

    def verify(self, state: TuneState) -> TuneState:
        candidates = state.get("candidates", [])
        if not candidates:
            return {"decision": "kept"}
        doc = self.policies.current()
        workload = state.get("workload") or self.workload(state["window"]["start"], state["window"]["end"])
        if len(workload.tasks) < MIN_TASKS:
            for c in candidates:
                c.verdict = {"accepted": False, "why": f"{len(workload.tasks)} tasks in the window; {MIN_TASKS} needed"}
            return {"decision": "kept"}
        seeds = list(range(1, (self.seeds or self.settings.tuner_seeds) + 1))
        current = [replay(workload, doc, s) for s in seeds]
        base_p95 = statistics.mean(r["p95"] for r in current)
        base_cost = statistics.mean(r["cost_per_task"] for r in current)
        baseline = {"p95": base_p95, "cost_per_task": base_cost, "seeds": len(seeds), "workload": workload.describe()}
        step = self.settings.tuner_max_step
        accepted: Candidate | None = None
        for c in candidates:
            try:
                c.doc = with_changes(doc, c.changes)
            except PolicyInvalid as exc:
                c.verdict = {"accepted": False, "why": f"invalid: {exc}"}
                continue
            too_far = self._beyond_guard_rails(doc, c.doc, c.changes, step)
            if too_far:
                c.verdict = {"accepted": False, "why": too_far}
                continue
            c.verdict = _judge(workload, current, c.doc, seeds)
            if not c.verdict["accepted"] and c.toward:
                c.verdict = self._toward(doc, c, workload, current, seeds)
            if c.verdict["accepted"] and (accepted is None or c.verdict["p95"] < accepted.verdict["p95"]):
                accepted = c
        return {"baseline": baseline, "accepted": accepted, "decision": "apply" if accepted else "kept"}

    def _toward(
        self,
        doc: PolicyDocument,
        c: Candidate,
        workload: Workload,
        current: list[dict[str, Any]],
        seeds: list[int],
    ) -> dict[str, Any]:
        """A step the replay cannot tell from the current policy, judged by where it leads: taken when the target
        (every guard rail but the step's) is better beyond noise and the step itself is no worse."""
        step = c.verdict
        try:
            target = with_changes(doc, c.toward or {})
        except PolicyInvalid as exc:
            return {**step, "toward": {"why": f"invalid: {exc}"}}
        too_far = self._beyond_guard_rails(doc, target, c.toward or {}, math.inf)
        if too_far:
            return {**step, "toward": {"why": too_far}}
        there = _judge(workload, current, target, seeds)
        no_worse = step["p95_gain"] >= -step["noise"] and step["cost_gain"] >= -MAX_COST_RISE - step["cost_noise"]
        if not (there["accepted"] and no_worse):
            return {**step, "toward": there}
        return {
            **step,
            "accepted": True,
            "toward": there,
            "why": f"a step toward {json.dumps(c.toward)}, which replays {there['p95_gain']:+.1%} p95 "
            f"(noise {there['noise']:.1%}); the step alone {step['p95_gain']:+.1%}",
        }

    def _beyond_guard_rails(
        self, old: PolicyDocument, new: PolicyDocument, changes: dict[str, Any], step: float
    ) -> str | None:
        a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
        for path in changes:
            group = _group_of(path)
            if group not in self.settings.tuner_knobs:
                return f"{path}: group {group} is not in OPSGRAPH_TUNER_KNOBS"
            x, y = get_path(a, path), get_path(b, path)
            ttl_cap = max(self.settings.tuner_max_answer_ttl_s, x if isinstance(x, int | float) else 0)
            if path.endswith("answer_ttl_s") and isinstance(y, int | float) and y > ttl_cap:
                return f"{path}: answers kept {y}s, over TUNER_MAX_ANSWER_TTL_S={ttl_cap:g}"
            numeric = isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool)
            if numeric and beyond_step(float(x), float(y), step):  # type: ignore[arg-type]
                return f"{path}: {x} -> {y} moves more than x{1 + step:g} in one round (TUNER_MAX_STEP={step:g})"
        return None

    # apply

    def apply(self, state: TuneState) -> TuneState:
        c = state["accepted"]
        assert c is not None and c.doc is not None
        base = state["baseline"]
        live_p95 = state["live"]["tasks"]["flow_s"]["p95"]
        verdict = c.verdict
        reason = (
            f"{c.name}: {', '.join(f'{k}={json.dumps(v)}' for k, v in c.changes.items())}. Simulated on "
            f"{base['workload']['tasks']} tasks of the last window x {base['seeds']} resamples: p95 "
            f"{base['p95']:.3g}s -> {verdict['p95']:.3g}s ({verdict['p95_gain']:+.1%}, noise {verdict['noise']:.1%}), "
            f"cost/task {verdict['cost_gain']:+.1%} saved. Why: {state.get('rationale', '')}"
        )
        prediction = {
            "p95": verdict["p95"],
            "cost_per_task": verdict["cost_per_task"],
            "baseline_p95": base["p95"],
            "baseline_cost_per_task": base["cost_per_task"],
            "baseline_live_p95": live_p95,
            "previous_version": state["version"],
            "applied_at": state["now"],
            "changes": c.changes,
        }
        row: PolicyRow = self.policies.put(
            c.doc, author="tuner", reason=reason[:4000], window=state["window"], prediction=prediction
        )
        return {"decision": "applied", "policy_version": row.version}


def _judge(workload: Workload, current: list[dict[str, Any]], doc: PolicyDocument, seeds: list[int]) -> dict[str, Any]:
    """A policy against the current one on the same resampled workloads (paired): the mean gain and twice its
    standard error (the noise); faster beyond noise (and at most MAX_COST_RISE dearer), or cheaper beyond
    noise (and not slower)."""
    runs = [replay(workload, doc, s) for s in seeds]
    base_p95 = statistics.mean(r["p95"] for r in current)
    base_cost = statistics.mean(r["cost_per_task"] for r in current)
    diffs = [a["p95"] - b["p95"] for a, b in zip(current, runs, strict=True)]
    cost_diffs = [a["cost_per_task"] - b["cost_per_task"] for a, b in zip(current, runs, strict=True)]
    gain = statistics.mean(diffs) / max(base_p95, 1e-9)
    noise = 2 * statistics.stdev(diffs) / math.sqrt(len(diffs)) / max(base_p95, 1e-9)
    cost_gain = statistics.mean(cost_diffs) / max(base_cost, 1e-12)
    cost_noise = 2 * statistics.stdev(cost_diffs) / math.sqrt(len(cost_diffs)) / max(base_cost, 1e-12)
    faster = gain > max(noise, MIN_GAIN) and cost_gain > -MAX_COST_RISE - cost_noise
    cheaper = cost_gain > max(cost_noise, MIN_GAIN) and gain > -noise
    return {
        "accepted": faster or cheaper,
        "p95": round(statistics.mean(r["p95"] for r in runs), 6),
        "cost_per_task": round(statistics.mean(r["cost_per_task"] for r in runs), 9),
        "p95_gain": round(gain, 4),
        "noise": round(noise, 4),
        "cost_gain": round(cost_gain, 4),
        "cost_noise": round(cost_noise, 4),
        "why": "faster beyond noise" if faster else "cheaper beyond noise" if cheaper else "not better beyond noise",
    }


def _expired_ages(rows: list[TelemetryRow], category: str, ttl: float, cap: float) -> list[float]:
    """Sorted ages of the entries a category's lookups found expired, over `ttl` and up to `cap`."""
    ages = (
        float(r.data["age_s"])
        for r in rows
        if r.name == category and (r.data or {}).get("reason") == "expired" and r.data.get("age_s")
    )
    return sorted(a for a in ages if ttl < a <= cap)


def _group_of(path: str) -> str:
    if path.startswith("serving.cache"):
        return "cache"
    knob = path.split(".")[1] if path.count(".") else path
    if knob in ("tools", "gpu_fallback_slowdown", "pool_max_inflight"):
        return "placement"
    if knob.startswith("hedg"):
        return "hedging"
    return "release_order"


def _headline(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if not summary:
        return None
    return {
        "tasks": summary["tasks"]["count"],
        "p95_flow_s": summary["tasks"]["flow_s"]["p95"],
        "cost_per_task": summary["tasks"]["cost_per_task"],
    }


def build_tuner_graph(tuner: Tuner) -> Any:
    g: StateGraph[TuneState] = StateGraph(TuneState)
    g.add_node("observe", tuner.observe)
    g.add_node("watch", tuner.watch)
    g.add_node("diagnose", tuner.diagnose)
    g.add_node("propose", tuner.propose)
    g.add_node("reflect", tuner.reflect)
    g.add_node("verify", tuner.verify)
    g.add_node("apply", tuner.apply)
    g.add_edge(START, "observe")
    g.add_edge("observe", "watch")
    # a change still being watched (or just rolled back) is not stacked with another
    g.add_conditional_edges("watch", lambda s: END if s.get("decision") in ("rolled_back", "waiting") else "diagnose")
    g.add_edge("diagnose", "propose")
    g.add_edge("propose", "reflect")
    g.add_edge("reflect", "verify")
    g.add_conditional_edges("verify", lambda s: "apply" if s.get("decision") == "apply" else END)
    g.add_edge("apply", END)
    return g.compile()


class TuningRunner:
    """Runs the tuning runs that the scheduler or POST /v1/tuning/run queued, one at a time, in the API process
    (beside the task orchestrator, whose telemetry it reads)."""

    def __init__(self, ctx: Any, *, poll_s: float = 5.0) -> None:
        self.ctx = ctx
        profiles = {spec.name: profile_of(spec, spec.name) for spec in ctx.toolset}
        self.tuner = Tuner(ctx.store, ctx.telemetry, ctx.policies, ctx.settings, profiles, llm=_llm_caller(ctx))
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tuning-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run_queued(self) -> int:
        ran = 0
        for row in reversed(tuning_runs(self.ctx.store, status="queued", limit=20)):
            if claim_tuning_run(self.ctx.store, row.id):
                with contextlib.suppress(Exception):  # Tuner.run records a failed run
                    self.tuner.run(row.id)
                ran += 1
        return ran

    def _loop(self) -> None:
        pubsub = None
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self.ctx.redis.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(TUNING_CHANNEL)
                self.run_queued()
                pubsub.get_message(timeout=self.poll_s)
            except Exception as exc:  # Redis or the database away: look again later
                log.warning("tuning runner", error=repr(exc))
                pubsub = None
                self._stop.wait(self.poll_s)


def _llm_caller(ctx: Any) -> Callable[[list[dict[str, str]]], str] | None:
    settings: Settings = ctx.settings
    if not settings.llm_base_url:
        return None
    from openai import OpenAI

    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "not-needed"
    client = OpenAI(base_url=settings.llm_base_url, api_key=key, timeout=settings.llm_timeout_s, max_retries=1)

    def call(messages: list[dict[str, str]]) -> str:
        llm: LLMPolicy = ctx.policies.current().serving.llm
        model = llm.model or settings.llm_model
        started = time.monotonic()
        outcome, tin, tout = "ok", 0, 0
        try:
            request: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0}
            resp = client.chat.completions.create(**request, response_format={"type": "json_object"})
            if resp.usage is not None:
                tin, tout = resp.usage.prompt_tokens, resp.usage.completion_tokens
            return resp.choices[0].message.content or ""
        except Exception:
            outcome = "error"
            raise
        finally:
            ctx.telemetry.record(
                "llm", name=model[:64], outcome=outcome, run_s=time.monotonic() - started, tokens_in=tin,
                tokens_out=tout, cost=llm.cost(tin, tout), data={"purpose": "tuner"},
            )  # fmt: skip

    return call
