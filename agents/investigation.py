"""The investigation: a lead investigator fans out to specialists per domain, which run in parallel; the lead merges
their findings into one Diagnosis.

```
START -> lead (alerts: what the operator saw) -> Send per specialist with evidence to read
      -> specialist subgraph: analyze -> (asks for more evidence? fetch -> analyze, within the loop budget) -> END
      -> conclude (merge findings, diagnosis.investigate.conclude) -> refine (LLM, only when configured) -> END
```

Specialists and their domains (an analyzer belongs to one domain; see diagnosis/model.py):
- kubernetes: kubernetes and changes (deploys and rollouts are Deployments and ReplicaSets);
- database: database (live PostgreSQL, RDS, CloudWatch, Performance Insights);
- host: host and metrics (saturation, step changes and trends are about capacities, which the host specialist
  owns; a database's CloudWatch series are read here too, and the reasoning links them through tags);
- network: network and logs (upstream timeouts, DNS and TLS show in logs first).
The lead itself reads the alerts: they are what the operator saw, the symptoms the causes must explain.

Evidence comes from an `EvidenceSource`: the evidence given at the start, and more on request. A specialist asks
for more when a finding names evidence it lacks (a crash-looping pod without its logs, a blocked session without
its lock details, or any `Finding.needs`), at most `max_rounds` times. `BundleSource`: a bundle is a closed
record, so nothing more can be fetched; what was asked and not there is listed as missing. `LiveSource`: the
request becomes a new node of the task's plan, validated and dispatched like any node, and its result becomes
evidence items.

With an LLM configured, the lead may refine the rules' Diagnosis (structured output in the Diagnosis schema);
every reference it gives is checked against the evidence items, a claim that cites nothing real is dropped, and
the rules' answer stands when the call fails or returns something unusable.

Only langgraph and diagnosis are imported here, so `opsgraph investigate` starts fast; the OpenAI client and the
ops graph's parts load only on the paths that use them.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import operator
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnosis.analyzers import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Category, Claim, Diagnosis, Domain, EvidenceItem, Finding, RuledOut

if TYPE_CHECKING:
    from agents.context import OpsContext
    from core.policy import LLMPolicy
    from core.settings import Settings

SPECIALISTS: dict[str, tuple[Domain, ...]] = {
    "kubernetes": (Domain.KUBERNETES, Domain.CHANGES),
    "database": (Domain.DATABASE,),
    "host": (Domain.HOST, Domain.METRICS),
    "network": (Domain.NETWORK, Domain.LOGS),
}
LEAD_DOMAINS: tuple[Domain, ...] = (Domain.ALERTS,)
DEFAULT_MAX_ROUNDS = 2  # more-evidence rounds per specialist
DEFAULT_MAX_REQUESTS = 4  # requests per round


class InvestigationError(RuntimeError):
    """The investigation was run the wrong way, or its evidence cannot be read."""


class Reasoning(Protocol):
    """The analyzers and the reasoning over their findings (diagnosis/investigate.py)."""

    def analyze_domain(self, domain: Domain, evidence: EvidenceSet) -> list[Finding]: ...

    def conclude(self, findings: list[Finding], evidence: EvidenceSet, question: str | None = None) -> Diagnosis: ...


def default_reasoning() -> Reasoning:
    from diagnosis import investigate

    return investigate  # type: ignore[return-value]


# --- evidence requests and sources -------------------------------------------------------------------------------


class EvidenceRequest(BaseModel):
    """Evidence a specialist asks for: of a kind (see diagnosis/model.py), about an object."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str  # "log", "pg/lock", "pg/session", "host/process", "http/probe", "host/snapshot" or "any"
    object: str  # "Pod/shop/checkout-7d9f", "pid 4711", a log path, a URL, a process name
    reason: str = ""
    specialist: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.object}"

    def describe(self) -> str:
        what = {"log": "logs", "pg/lock": "lock details", "pg/session": "session details"}.get(self.kind, self.kind)
        return f"{what} of {self.object}" + (f" ({self.reason})" if self.reason else "")


class EvidenceSource(Protocol):
    """Where more evidence comes from. `fetch` returns only new items (none when there is nothing more)."""

    def fetch(self, request: EvidenceRequest) -> EvidenceSet: ...


class BundleSource:
    """A bundle is a closed record of what was exported: everything in it is loaded at the start (load_bundle
    enforces the size, file-count and expansion limits), so a request can only be noted as not in the bundle."""

    def __init__(self) -> None:
        self.unanswered: list[EvidenceRequest] = []

    def fetch(self, request: EvidenceRequest) -> EvidenceSet:
        self.unanswered.append(request)
        return EvidenceSet()


def tool_call_for(request: EvidenceRequest) -> tuple[str, dict[str, Any]] | None:
    """The read tool that answers a request on the live system, or None when no tool can (Kubernetes pods'
    logs need a cluster API the catalog does not have)."""
    obj = request.object.strip()
    if request.kind in ("pg/lock", "pg/session"):
        return "postgres_activity", {}
    if request.kind == "log" and obj.startswith("/"):
        return "log_search", {"path": obj}
    if request.kind == "host/process" and obj:
        return "process_check", {"name": obj.removeprefix("process/")}
    if request.kind == "http/probe" and obj.startswith(("http://", "https://")):
        return "http_probe", {"url": obj}
    if request.kind == "host/snapshot":
        return "host_metrics", {}
    return None


class LiveSource:
    """Runs read tools through the ops graph's dispatcher: each request is a new node of the task's plan,
    validated like any plan and stored as a new version (announced as plan.changed), dispatched to a pool, and
    its result turned into evidence items. One fetch at a time per task: the dispatcher steps one task's DAG
    from one thread."""

    def __init__(
        self,
        ctx: OpsContext,
        task_id: str,
        *,
        tenant: str,
        priority: int = 5,
        wait_s: float = 120.0,
        fresh: bool = False,
    ):
        self.ctx = ctx
        self.fresh = fresh  # no read from the tool-result cache (fresh figures asked for, or after a write)
        self.task_id = task_id
        self.tenant = tenant
        self.priority = priority
        self.wait_s = wait_s
        self.unanswered: list[EvidenceRequest] = []
        self._lock = threading.Lock()

    def fetch(self, request: EvidenceRequest) -> EvidenceSet:
        call = tool_call_for(request)
        if call is None:
            self.unanswered.append(request)
            return EvidenceSet()
        with self._lock:
            return self._run(request, *call)

    def _run(self, request: EvidenceRequest, tool: str, args: dict[str, Any]) -> EvidenceSet:
        from agents.errors import PlanInvalid
        from agents.validation import validate_plan
        from core.types import EventType, NodeStatus, Plan, PlanNode

        store, bus = self.ctx.store, self.ctx.bus
        # the id follows from the call, so a resumed investigation finds its node instead of adding it twice
        digest = hashlib.sha1(json.dumps([tool, args], sort_keys=True).encode()).hexdigest()[:8]
        node_id = f"more-{tool}-{digest}"[:64]
        plan = store.latest_plan(self.task_id)
        if plan is None:
            self.unanswered.append(request)
            return EvidenceSet()
        if all(n.id != node_id for n in plan.nodes):
            candidate = plan.model_copy(update={"nodes": [*plan.nodes, PlanNode(id=node_id, tool=tool, args=args)]})
            try:
                candidate = validate_plan(candidate, self.ctx.toolset, self.ctx.settings)
            except (PlanInvalid, ValidationError) as exc:
                reasons = getattr(exc, "reasons", [str(exc)])
                bus.emit(self.task_id, EventType.PLAN_REJECTED, {"source": "investigation", "reasons": reasons})
                self.unanswered.append(request)
                return EvidenceSet()
            version = store.save_plan(self.task_id, candidate)
            bus.emit(
                self.task_id,
                EventType.PLAN_CHANGED,
                {
                    "version": version,
                    "source": "investigation",
                    "added": [node_id],
                    "cancelled": [],
                    "reason": f"{request.specialist or 'investigation'} asked for {request.describe()}",
                    "plan": candidate.model_dump(mode="json"),
                },
            )
            plan = candidate
        deadline = time.monotonic() + self.wait_s
        current: Plan = plan
        while time.monotonic() < deadline:
            progress = self.ctx.dispatcher.run_until_progress(
                self.task_id, current, tenant=self.tenant, priority=self.priority, max_wait_s=5.0, fresh=self.fresh
            )
            current = progress.plan or current
            state = progress.states.get(node_id)
            if progress.done or (state is not None and NodeStatus(state).final):
                break
        row = store.latest_attempts(self.task_id).get(node_id)
        if row is None or row.status != NodeStatus.SUCCEEDED.value or not row.result:
            self.unanswered.append(request)
            return EvidenceSet()
        from diagnosis.live import items_from_tool_result

        return EvidenceSet(items_from_tool_result(node_id, tool, row.result.get("data") or {}))


_NEED = re.compile(r"^(?:the\s+)?(logs?|lock(?:s| details)?|sessions?|process(?:es)?|probe)\s+(?:of|for)\s+(.+)$", re.I)
_NEED_KINDS = {
    "log": "log",
    "lock": "pg/lock",
    "session": "pg/session",
    "process": "host/process",
    "probe": "http/probe",
}
_CRASH = ("crash", "restart", "exit", "oom", "backoff", "killed")
_BLOCK = ("block", "lock", "idle_in_transaction", "wait")


def _tag(finding: Finding, prefix: str) -> list[str]:
    return [t[len(prefix) :] for t in finding.tags if t.startswith(prefix)]


def requests_for(findings: list[Finding], evidence: EvidenceSet, specialist: str) -> list[EvidenceRequest]:
    """The evidence these findings lack: what they say they need, the logs of a crash-looping pod, the lock
    details of a blocked session."""
    out: dict[str, EvidenceRequest] = {}

    def want(kind: str, obj: str, reason: str) -> None:
        if kind == "log" and any(o == obj or o.startswith(obj + "/") for o in log_objects):
            return  # already here
        req = EvidenceRequest(kind=kind, object=obj, reason=reason, specialist=specialist)
        out.setdefault(req.key, req)

    log_objects = [i.object for i in evidence.kind("log")]
    for f in findings:
        for need in f.needs:
            m = _NEED.match(need.strip())
            if m:
                word = m.group(1).lower()
                kind = next((v for k, v in _NEED_KINDS.items() if word.startswith(k)), "any")
                want(kind, m.group(2).strip(), f.title)
            else:
                want("any", need.strip(), f.title)
        if f.role == "benign":
            continue
        code = f.code.lower()
        if any(w in code for w in _CRASH):
            for pod in _tag(f, "pod:"):
                want("log", "Pod/" + pod, f.title)
        if any(w in code for w in _BLOCK) and not evidence.kind("pg/lock"):
            for pid in _tag(f, "pid:"):
                want("pg/lock", f"pid {pid}", f.title)
    return list(out.values())


# --- the graph ---------------------------------------------------------------------------------------------------


@dataclass
class Runtime:
    """What one investigation runs on; passed to the graph through its config, never checkpointed."""

    evidence: EvidenceSet
    source: EvidenceSource
    reasoning: Reasoning
    question: str | None = None
    refiner: DiagnosisRefiner | None = None
    max_rounds: int = DEFAULT_MAX_ROUNDS
    max_requests: int = DEFAULT_MAX_REQUESTS
    registry: Any = None  # an AnalyzerRegistry: which specialists have something to read (diagnosis.analyzers')
    lock: threading.Lock = field(default_factory=threading.Lock)  # evidence reads vs. adds across specialists
    asked: set[str] = field(default_factory=set)
    llm_call: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    _snapshot: EvidenceSet | None = None

    def snapshot(self) -> EvidenceSet:
        """The evidence as it stands: analyzers read a snapshot, so specialists analyse in parallel while another
        one adds what it fetched. Read-only and shared until something is added (a large bundle is copied once)."""
        with self.lock:
            if self._snapshot is None:
                snap = EvidenceSet(self.evidence)
                snap.ignored, snap.errors = list(self.evidence.ignored), list(self.evidence.errors)
                self._snapshot = snap
            return self._snapshot

    def analyze(self, domains: tuple[Domain, ...]) -> list[Finding]:
        snap = self.snapshot()
        return [f for d in domains for f in self.reasoning.analyze_domain(d, snap)]

    def add(self, fetched: EvidenceSet) -> int:
        """Adds what is new; an item already present (two specialists asked for the same) is skipped."""
        added = 0
        with self.lock:
            for item in fetched:
                if self.evidence.get(item.id) is None:
                    self.evidence.add(item)
                    added += 1
            self.evidence.ignored.extend(fetched.ignored)
            self.evidence.errors.extend(fetched.errors)
            if added or fetched.ignored or fetched.errors:
                self._snapshot = None
        return added


def _runtime(config: RunnableConfig) -> Runtime:
    rt = (config.get("configurable") or {}).get("investigation")
    if not isinstance(rt, Runtime):
        raise InvestigationError("the investigation graph runs only through run_investigation()")
    return rt


class InvestigationState(TypedDict, total=False):
    specialists: list[str]
    findings: Annotated[list[Finding], operator.add]
    requests: Annotated[list[dict[str, Any]], operator.add]  # {specialist, request, new_items}
    diagnosis: Diagnosis


class SpecialistState(TypedDict, total=False):
    specialist: str
    round: int
    findings: list[Finding]  # this specialist's latest analysis (replaced after each fetch)
    requests: list[dict[str, Any]]
    pending: list[EvidenceRequest]
    new: int  # items the last fetch added


class SpecialistOutput(TypedDict, total=False):
    findings: list[Finding]
    requests: list[dict[str, Any]]


def _specialist_graph() -> Any:
    def analyze(state: SpecialistState, config: RunnableConfig) -> SpecialistState:
        rt = _runtime(config)
        name = state["specialist"]
        findings = rt.analyze(SPECIALISTS[name])
        pending: list[EvidenceRequest] = []
        if state.get("round", 0) < rt.max_rounds:
            wanted = requests_for(findings, rt.snapshot(), name)
            with rt.lock:
                for req in wanted:
                    if req.key not in rt.asked and len(pending) < rt.max_requests:
                        rt.asked.add(req.key)  # one specialist asks; another asking the same waits for nothing
                        pending.append(req)
        return {"findings": findings, "pending": pending}

    def fetch(state: SpecialistState, config: RunnableConfig) -> SpecialistState:
        rt = _runtime(config)
        asked = list(state.get("requests") or [])
        new = 0
        for req in state.get("pending") or []:
            try:
                got = rt.source.fetch(req)
            except Exception as exc:  # a source's failure is missing evidence, not a failed investigation
                rt.notes.append(f"{req.describe()}: {type(exc).__name__}: {exc}")
                got = EvidenceSet()
            added = rt.add(got)
            new += added
            asked.append({"specialist": state["specialist"], "request": req.describe(), "new_items": added})
        return {"requests": asked, "pending": [], "round": state.get("round", 0) + 1, "new": new}

    def after_analyze(state: SpecialistState) -> str:
        return "fetch" if state.get("pending") else END

    def after_fetch(state: SpecialistState) -> str:
        # nothing new arrived: analysing again would find the same
        return "analyze" if state.get("new") else END

    g = StateGraph(SpecialistState, output_schema=SpecialistOutput)
    g.add_node("analyze", analyze)
    g.add_node("fetch", fetch)
    g.add_edge(START, "analyze")
    g.add_conditional_edges("analyze", after_analyze, ["fetch", END])
    g.add_conditional_edges("fetch", after_fetch, ["analyze", END])
    # checkpointer=False: never inherits the ops graph's checkpointer (the evidence lives in the runtime)
    return g.compile(checkpointer=False)


def _finding_key(f: Finding) -> tuple[str, str, str]:
    return (f.analyzer, f.code, f.object)


@lru_cache(maxsize=1)
def build_investigation_graph() -> Any:
    def lead(state: InvestigationState, config: RunnableConfig) -> InvestigationState:
        rt = _runtime(config)
        snap = rt.snapshot()
        kinds = snap.kinds()
        registry = rt.registry
        if registry is None:
            # the analyzer modules register themselves on import: load them before asking which specialists have
            # something to read, or the first investigation of a process (every `opsgraph investigate`) sees an
            # empty registry and sends no specialist at all
            from diagnosis.investigate import load_analyzers

            load_analyzers()
            registry = ANALYZERS
        # a specialist goes out only when one of its analyzers has evidence to read
        chosen = [
            name
            for name, domains in SPECIALISTS.items()
            if any(a.applies(snap) for d in domains for a in registry.for_domain(d))
        ]
        rt.notes.append(f"evidence kinds: {', '.join(sorted(kinds)) or 'none'}")
        return {"specialists": chosen, "findings": rt.analyze(LEAD_DOMAINS)}

    def fan_out(state: InvestigationState) -> list[Send] | str:
        names = state.get("specialists") or []
        if not names:
            return "conclude"
        return [Send("specialist", {"specialist": n, "round": 0}) for n in names]

    def conclude(state: InvestigationState, config: RunnableConfig) -> InvestigationState:
        rt = _runtime(config)
        merged: dict[tuple[str, str, str], Finding] = {}
        for f in state.get("findings") or []:
            merged.setdefault(_finding_key(f), f)  # an analyzer seen by two specialists counts once
        findings = list(merged.values())
        with rt.lock:
            diagnosis = rt.reasoning.conclude(findings, rt.evidence, rt.question)
        unanswered = getattr(rt.source, "unanswered", [])
        if unanswered and diagnosis.category == Category.UNKNOWN:
            missing = [f"{r.describe()}: not available" for r in unanswered]
            diagnosis = diagnosis.model_copy(update={"missing": list(dict.fromkeys([*diagnosis.missing, *missing]))})
        return {"diagnosis": diagnosis}

    def refine(state: InvestigationState, config: RunnableConfig) -> InvestigationState:
        rt = _runtime(config)
        if rt.refiner is None:
            return {}
        refined, call = rt.refiner.refine(state["diagnosis"], rt.evidence, rt.question)
        rt.llm_call = call
        return {"diagnosis": refined}

    g = StateGraph(InvestigationState)
    g.add_node("lead", lead)
    g.add_node("specialist", _specialist_graph())
    g.add_node("conclude", conclude)
    g.add_node("refine", refine)
    g.add_edge(START, "lead")
    g.add_conditional_edges("lead", fan_out, ["specialist", "conclude"])
    g.add_edge("specialist", "conclude")
    g.add_edge("conclude", "refine")
    g.add_edge("refine", END)
    return g.compile(checkpointer=False)


@dataclass
class InvestigationResult:
    diagnosis: Diagnosis
    specialists: list[str]
    requests: list[dict[str, Any]]  # evidence asked for: {specialist, request, new_items}
    llm_call: dict[str, Any] | None  # model, tokens, outcome of the LLM refinement, for telemetry
    seconds: float
    notes: list[str]


def run_investigation(
    evidence: EvidenceSet,
    source: EvidenceSource | None = None,
    *,
    question: str | None = None,
    refiner: DiagnosisRefiner | None = None,
    reasoning: Reasoning | None = None,
    registry: Any = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> InvestigationResult:
    """Investigate `evidence` (grown through `source` on request) and return the Diagnosis."""
    started = time.perf_counter()
    rt = Runtime(
        evidence=evidence,
        source=source or BundleSource(),
        reasoning=reasoning or default_reasoning(),
        question=question,
        refiner=refiner,
        max_rounds=max_rounds,
        registry=registry,
    )
    config: RunnableConfig = {"configurable": {"investigation": rt}, "recursion_limit": 50}
    # an empty context: the investigation is its own run, never a subgraph of the ops graph run that calls it
    # (which would hand it the ops graph's checkpointer and durability through LangGraph's context variables)
    state = contextvars.Context().run(build_investigation_graph().invoke, {"findings": [], "requests": []}, config)
    diagnosis: Diagnosis = state["diagnosis"]
    if not diagnosis.ignored and evidence.ignored:
        diagnosis = diagnosis.model_copy(update={"ignored": list(evidence.ignored)})
    if not diagnosis.errors and evidence.errors:
        diagnosis = diagnosis.model_copy(update={"errors": list(evidence.errors)})
    return InvestigationResult(
        diagnosis=diagnosis,
        specialists=list(state.get("specialists") or []),
        requests=list(state.get("requests") or []),
        llm_call=rt.llm_call,
        seconds=time.perf_counter() - started,
        notes=rt.notes,
    )


# --- the LLM refinement ------------------------------------------------------------------------------------------


class _LLMDiagnosis(BaseModel):
    """What the LLM may write: the Diagnosis's reasoning fields (findings, files and text stay the rules')."""

    model_config = ConfigDict(extra="ignore")

    category: Category
    root_cause: str = Field(min_length=1)
    confidence: float = Field(ge=0, le=1)
    causal_chain: list[str] = Field(default_factory=list)
    evidence: list[Claim] = Field(default_factory=list)
    ruled_out: list[RuledOut] = Field(default_factory=list)
    actions: list[Any] = Field(default_factory=list)
    other_causes: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)


_RULES_FIELDS = {"category", "root_cause", "confidence", "causal_chain", "evidence", "ruled_out"}


def llm_json_schema() -> dict[str, Any]:
    return _LLMDiagnosis.model_json_schema()


def _item_view(item: EvidenceItem, limit: int = 1200) -> dict[str, Any]:
    data = json.dumps(item.data, default=str)
    return {
        "id": item.id,
        "kind": item.kind,
        "object": item.object,
        "data": data[:limit] + ("..." if len(data) > limit else ""),
    }


def check_refined(raw: _LLMDiagnosis, rules: Diagnosis, evidence: EvidenceSet) -> tuple[Diagnosis | None, list[str]]:
    """The LLM's diagnosis with every reference checked: a reference to nothing real is removed, a claim left
    citing nothing is dropped; None when what remains does not stand (no real evidence for a fault)."""
    from diagnosis.model import Action

    dropped: list[str] = []
    claims: list[Claim] = []
    for c in raw.evidence:
        refs = [r for r in c.refs if evidence.check(r)]
        if refs:
            claims.append(Claim(claim=c.claim, refs=refs))
        else:
            dropped.append(c.claim)
    ruled_out: list[RuledOut] = []
    for r in raw.ruled_out:
        refs = [ref for ref in r.refs if evidence.check(ref)]
        if r.refs and not refs:
            dropped.append(f"ruled out: {r.alternative}")
            continue
        ruled_out.append(RuledOut(alternative=r.alternative, why=r.why, refs=refs))
    actions: list[Action] = []
    for a in raw.actions:
        try:
            action = Action.model_validate(a)
        except ValidationError:
            continue
        if action.kind in ("read", "write"):
            actions.append(action)
    faulty = raw.category not in (Category.HEALTHY, Category.UNKNOWN)
    if faulty and not claims:
        return None, dropped
    refined = rules.model_copy(
        update={
            "category": raw.category,
            "root_cause": raw.root_cause.strip(),
            "confidence": raw.confidence,
            "causal_chain": raw.causal_chain or rules.causal_chain,
            "evidence": claims,
            "ruled_out": ruled_out,
            "actions": actions or rules.actions,
            "other_causes": raw.other_causes,
            "missing": raw.missing or (rules.missing if raw.category == Category.UNKNOWN else []),
            "source": "llm",
        }
    )
    return refined.model_copy(update={"text": render_text(refined)}), dropped


class DiagnosisRefiner:
    """Asks an OpenAI-compatible endpoint to refine the rules' Diagnosis, and keeps only what the evidence holds."""

    def __init__(
        self, client: Any, model: str, *, max_items: int = 60, serving: Callable[[], LLMPolicy] | None = None
    ) -> None:
        self.client = client
        self.model = model
        self.max_items = max_items
        self.serving = serving  # the serving policy's LLM part: model, prices, budget per task

    @classmethod
    def from_settings(
        cls, settings: Settings, serving: Callable[[], LLMPolicy] | None = None
    ) -> DiagnosisRefiner | None:
        if not settings.llm_base_url:
            return None
        from openai import OpenAI

        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "not-needed"
        client = OpenAI(base_url=settings.llm_base_url, api_key=key, timeout=settings.llm_timeout_s, max_retries=1)
        return cls(client, settings.llm_model, serving=serving)

    def _messages(self, rules: Diagnosis, evidence: EvidenceSet, question: str | None) -> list[dict[str, str]]:
        cited = {r.item for c in rules.evidence for r in c.refs} | {r.item for f in rules.findings for r in f.evidence}
        items = [i for i in evidence if i.id in cited] + [i for i in evidence if i.id not in cited]
        system = (
            "You are an SRE naming the root cause of an incident. You get evidence items (id, kind, object, data) "
            "and a diagnosis that rules derived from them. Reply with JSON only, matching this schema: "
            f"{json.dumps(llm_json_schema())}. Categories: {', '.join(c.value for c in Category)}. "
            "root_cause is one sentence naming the exact object and the mechanism; causal_chain goes from the cause "
            "to the symptom the operator saw; every claim in evidence cites items by their exact id (and a field "
            "path in data, or a log line number); actions carry the exact command and kind read or write. Keep "
            "the rules' answer unless the evidence shows it wrong."
        )
        user = json.dumps(
            {
                "question": question,
                "rules_diagnosis": rules.model_dump(
                    mode="json",
                    include={"category", "root_cause", "confidence", "causal_chain", "evidence", "ruled_out"},
                ),
                "evidence_items": [_item_view(i) for i in items[: self.max_items]],
            },
            default=str,
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def refine(
        self, rules: Diagnosis, evidence: EvidenceSet, question: str | None = None
    ) -> tuple[Diagnosis, dict[str, Any]]:
        policy = self.serving() if self.serving is not None else None
        model = (policy.model if policy is not None else "") or self.model
        call: dict[str, Any] = {"model": model, "outcome": "ok", "tokens_in": 0, "tokens_out": 0, "dropped": []}
        messages = self._messages(rules, evidence, question)
        if policy is not None:
            # a prompt's tokens are about its characters / 4: over the task's budget, the rules' answer stands
            expected = policy.cost(sum(len(m["content"]) for m in messages) // 4, 1500)
            if expected > policy.max_cost_per_task:
                call.update(outcome="skipped", cost=0.0, run_s=0.0, error=f"expected ${expected:.4f} over budget")
                return rules, call
        started = time.monotonic()
        try:
            resp = self.client.chat.completions.create(
                model=model,
                messages=messages,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "diagnosis", "schema": llm_json_schema(), "strict": False},
                },
                temperature=0,
            )
            if getattr(resp, "usage", None) is not None:
                call["tokens_in"], call["tokens_out"] = resp.usage.prompt_tokens, resp.usage.completion_tokens
            raw = _LLMDiagnosis.model_validate(json.loads(resp.choices[0].message.content or ""))
            refined, dropped = check_refined(raw, rules, evidence)
            call["dropped"] = dropped
            if refined is None:
                call["outcome"] = "unusable"
                return rules, call
            return refined, call
        except Exception as exc:  # the rules' answer stands whatever the endpoint does
            call["outcome"] = "unusable" if isinstance(exc, ValueError | KeyError | TypeError) else "error"
            call["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return rules, call
        finally:
            call["run_s"] = time.monotonic() - started
            if policy is not None:
                call["cost"] = policy.cost(call["tokens_in"], call["tokens_out"])


def render_text(d: Diagnosis) -> str:
    """Markdown as an operator reads it: the root cause first, then the chain, evidence, ruled out, actions."""
    lines = [f"**{d.category.value}**: {d.root_cause} (confidence {d.confidence:.0%})"]
    if d.causal_chain:
        lines += ["", "Causal chain:", *[f"{n}. {step}" for n, step in enumerate(d.causal_chain, 1)]]
    if d.evidence:
        lines += ["", "Evidence:"]
        for c in d.evidence:
            refs = "; ".join(
                r.item
                + (f" {r.field}" if r.field else "")
                + (f" line {r.line}" if r.line else "")
                + (f" = {r.value}" if r.value is not None else "")
                for r in c.refs
            )
            lines.append(f"- {c.claim} [{refs}]")
    if d.other_causes:
        lines += ["", "Also failing:", *[f"- {c}" for c in d.other_causes]]
    if d.ruled_out:
        lines += ["", "Ruled out:", *[f"- {r.alternative}: {r.why}" for r in d.ruled_out]]
    if d.actions:
        lines += ["", "Next steps:", *[f"- [{a.kind}] {a.description}: `{a.command}`" for a in d.actions]]
    if d.missing:
        lines += ["", "Missing evidence:", *[f"- {m}" for m in d.missing]]
    if d.category == Category.HEALTHY and d.checked:
        lines += ["", "Checked:", *[f"- {c}" for c in d.checked]]
    return "\n".join(lines)


def headline(d: Diagnosis) -> str:
    return f"{d.category.value}: {d.root_cause}"


def severity(d: Diagnosis) -> str:
    return {Category.HEALTHY: "ok", Category.UNKNOWN: "warn"}.get(d.category, "critical")


# --- evidence given with a request --------------------------------------------------------------------------------


def items_from_request(raw: list[dict[str, Any]], source: str = "request") -> list[EvidenceItem]:
    """Evidence items a caller posted ({kind, object, data, ts?, source?}); ids are given here."""
    items = []
    for n, body in enumerate(raw):
        items.append(
            EvidenceItem(
                id=f"{source}#{n}",
                kind=str(body["kind"]),
                source=str(body.get("source") or source),
                object=str(body["object"]),
                ts=body.get("ts"),
                data=dict(body.get("data") or {}),
            )
        )
    return items


def merge_evidence(into: EvidenceSet, other: EvidenceSet, prefix: str) -> None:
    """Adds `other` to `into`; an id already taken is prefixed (two bundles may both hold alerts.json#0)."""
    for item in other:
        if into.get(item.id) is not None:
            item = item.model_copy(update={"id": f"{prefix}:{item.id}"})
        into.add(item)
    into.ignored.extend(other.ignored)
    into.errors.extend(other.errors)


def load_bundle(path: Any) -> EvidenceSet:
    """A bundle under the default limits; its refusals (BundleError) propagate as they are."""
    from diagnosis.bundle import BundleLimits
    from diagnosis.bundle import load_bundle as load

    return load(path, BundleLimits())


# --- the ops graph's use: investigations and diagnose requests ---------------------------------------------------

REQUEST_FILE = "request.json"  # {"question", "evidence": [...]} as posted
ALERTS_FOLDER = "alerts"  # alertmanager.json: the Alertmanager payload (version 4) of the request
BUNDLE_NAMES = ("bundle", "bundle.tar.gz", "bundle.zip")  # the uploaded archive (or an extracted folder)
_DIAGNOSE = re.compile(
    r"\b(why|root[- ]cause|diagnos\w*|what(?:'s| is| went) wrong|what happened|wrong with)\b", re.IGNORECASE
)


def is_diagnose(plan_category: str | None, goal: str) -> bool:
    """A diagnose request ends in a Diagnosis: the diagnose and triage playbooks, or a question why."""
    return plan_category in ("diagnose", "triage") or bool(_DIAGNOSE.search(goal or ""))


def investigations_root(settings: Settings) -> Path:
    return (settings.var_dir / "investigations").resolve()


def evidence_for_request(folder: Path) -> EvidenceSet:
    """The evidence an investigation was given: its bundle, its alerts and the evidence items posted."""
    evidence = EvidenceSet()
    for name in BUNDLE_NAMES:
        if (folder / name).exists():
            merge_evidence(evidence, load_bundle(folder / name), "bundle")
    if (folder / ALERTS_FOLDER).is_dir():
        merge_evidence(evidence, load_bundle(folder / ALERTS_FOLDER), "alerts")
    request = folder / REQUEST_FILE
    if request.exists():
        body = json.loads(request.read_text(encoding="utf-8"))
        merge_evidence(evidence, EvidenceSet(items_from_request(body.get("evidence") or [])), "request")
    return evidence


def _record(ctx: OpsContext, task_id: str, result: InvestigationResult) -> None:
    from core.types import EventType

    ctx.bus.emit(
        task_id,
        EventType.LOG,
        {
            "message": f"investigation: {result.diagnosis.category.value} in {result.seconds:.3f}s",
            "specialists": result.specialists,
            "requests": result.requests,
            "source": result.diagnosis.source,
        },
    )
    call = result.llm_call
    if call is not None:
        ctx.telemetry.record(
            "llm",
            name=str(call["model"])[:64],
            outcome=call["outcome"],
            task_id=task_id,
            run_s=call.get("run_s"),
            tokens_in=call["tokens_in"],
            tokens_out=call["tokens_out"],
            cost=call.get("cost"),
        )


def cited_items(d: Diagnosis, evidence: EvidenceSet, max_chars: int = 4000) -> dict[str, dict[str, Any]]:
    """The evidence items the Diagnosis cites, so an operator can open each reference: a log item keeps the
    records around its cited lines, any other item its data (a preview when it is large)."""
    refs = [r for c in d.evidence for r in c.refs] + [r for x in d.ruled_out for r in x.refs]
    lines: dict[str, set[int]] = {}
    for r in refs:
        lines.setdefault(r.item, set())
        if r.line is not None:
            lines[r.item].add(r.line)
    out: dict[str, dict[str, Any]] = {}
    for item_id, wanted in lines.items():
        item = evidence.get(item_id)
        if item is None:
            continue
        data: Any = item.data
        if item.kind == "log" and wanted:
            near = [r for r in data.get("records", []) if any(abs((r.get("line") or 0) - n) <= 3 for n in wanted)]
            data = {**{k: v for k, v in data.items() if k != "records"}, "records": near}
        text = json.dumps(data, default=str)
        if len(text) > max_chars:
            data = {"preview": text[:max_chars] + "...", "truncated": True}
        out[item_id] = {"id": item.id, "kind": item.kind, "source": item.source, "object": item.object, "data": data}
    return out


def investigate_request(ctx: OpsContext, task_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An investigation task: the evidence stored with it under the var dir (never a folder named elsewhere).
    Returns {"diagnosis": Diagnosis JSON, "items": the cited evidence items}."""
    root = investigations_root(ctx.settings)
    folder = Path(str(spec.get("dir") or "")).resolve()
    if not folder.is_relative_to(root) or not folder.is_dir():
        raise InvestigationError(f"the investigation's evidence folder is not under {root}")
    evidence = evidence_for_request(folder)
    result = run_investigation(
        evidence,
        BundleSource(),
        question=spec.get("question"),
        refiner=DiagnosisRefiner.from_settings(ctx.settings, serving=lambda: ctx.policies.current().serving.llm),
    )
    _record(ctx, task_id, result)
    return {"diagnosis": result.diagnosis.model_dump(mode="json"), "items": cited_items(result.diagnosis, evidence)}


def investigate_live(
    ctx: OpsContext,
    task_id: str,
    goal: str,
    *,
    tenant: str,
    priority: int,
    nodes: set[str] | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """A diagnose request: the live tools' results become evidence; specialists may add plan nodes for more.
    `nodes` limits the evidence to those nodes' results (a remediation's verify checks, not its writes)."""
    from core.types import NodeStatus
    from diagnosis.live import items_from_tool_result

    evidence = EvidenceSet()
    for node_id, row in ctx.store.latest_attempts(task_id).items():
        if nodes is not None and node_id not in nodes:
            continue
        if row.status == NodeStatus.SUCCEEDED.value and row.result:
            for item in items_from_tool_result(node_id, row.tool, row.result.get("data") or {}):
                if evidence.get(item.id) is None:
                    evidence.add(item)
    result = run_investigation(
        evidence,
        LiveSource(ctx, task_id, tenant=tenant, priority=priority, fresh=fresh),
        question=goal,
        refiner=DiagnosisRefiner.from_settings(ctx.settings, serving=lambda: ctx.policies.current().serving.llm),
    )
    _record(ctx, task_id, result)
    return {"diagnosis": result.diagnosis.model_dump(mode="json"), "items": cited_items(result.diagnosis, evidence)}


def diagnose_answer(outcome: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """The task answer with the Diagnosis: `diagnosis` (JSON), `evidence_items` (the items it cites, by id), and
    headline, severity, text and next steps from it; the checks' fields (findings, nodes...) stay as they were."""
    diagnosis = outcome["diagnosis"]
    d = Diagnosis.model_validate(diagnosis)
    answer: dict[str, Any] = (
        dict(base)
        if base
        else {
            "findings": [],
            "failed_nodes": [],
            "nodes": [],
            "next_steps": [],
            "playbook": None,
            "plan_source": None,
        }
    )
    text = d.text or render_text(d)
    if base and base.get("nodes"):
        checks = [f"- {n['node_id']} ({n['tool']}): {n['status']}, {n.get('summary') or ''}" for n in base["nodes"]]
        text += "\n\nChecks that ran:\n" + "\n".join(checks)
    answer.update(
        {
            "diagnosis": diagnosis,
            "evidence_items": outcome.get("items") or {},
            "headline": headline(d),
            "severity": severity(d),
            "text": text,
            "next_steps": [f"[{a.kind}] {a.description}: {a.command}" for a in d.actions]
            or list(answer.get("next_steps") or []),
        }
    )
    return answer
