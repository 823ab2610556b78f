"""The serving policy the semantic cache reads: per category an on/off switch, a similarity threshold, a TTL
per entry kind and a quota. One document, so the tuning agent can version and change it later."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CategoryCachePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    threshold: float = Field(0.9, ge=0.5, le=1.0, description="Cosine similarity a hit needs.")
    answer_ttl_s: float = Field(60, ge=0, description="Final answers go stale fast: what a check saw a minute ago.")
    plan_ttl_s: float = Field(86_400, ge=0, description="Plans stay good as long as the playbooks do.")
    tool_ttl_s: float = Field(30, ge=0, description="Results of idempotent read tools.")
    max_entries: int = Field(1000, ge=1, description="Per tenant and kind; least recently used are evicted.")

    def ttl(self, kind: str) -> float:
        return {"answer": self.answer_ttl_s, "plan": self.plan_ttl_s, "tool_result": self.tool_ttl_s}[kind]


def _default_categories() -> dict[str, CategoryCachePolicy]:
    # thresholds: chosen by 5-fold cross-validation on tests/data/cache_pairs.jsonl (587 pairs; `opsgraph cache-eval`):
    # with canonical entities and the change-intent guard deciding what may match, the lowest threshold with
    # precision >= 0.97 sits at the 0.70 floor in every category; 0.72 leaves a little margin. Categories keep
    # their own value so an operator's or the tuner's change to one touches no other.
    return {
        "health": CategoryCachePolicy(threshold=0.72, answer_ttl_s=60),
        "diagnose": CategoryCachePolicy(threshold=0.72, answer_ttl_s=120),
        "report": CategoryCachePolicy(threshold=0.72, answer_ttl_s=900),
        "triage": CategoryCachePolicy(threshold=0.72, answer_ttl_s=60),
        # plans written by the caller run as given, and anything that writes is never served from cache
        "request": CategoryCachePolicy(enabled=False),
        "remediate": CategoryCachePolicy(enabled=False),
        "maintenance": CategoryCachePolicy(enabled=False),  # jobs that change state are run, not remembered
        # results of idempotent read tools (the dispatcher's): a host or endpoint seen 30 s ago is still news
        "tools": CategoryCachePolicy(tool_ttl_s=30, answer_ttl_s=0, plan_ttl_s=0, max_entries=2000),
    }


class CachePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    categories: dict[str, CategoryCachePolicy] = Field(default_factory=_default_categories)
    default: CategoryCachePolicy = Field(default_factory=lambda: CategoryCachePolicy(threshold=0.85))

    def for_category(self, category: str) -> CategoryCachePolicy:
        return self.categories.get(category, self.default)


# scheduling: how the orchestrator places, orders, times out, retries, hedges and batches node attempts.
# The same objects drive production (workers/dispatch.py) and the simulator (workers/simulator.py).

ReleaseOrder = Literal["fifo", "priority", "srpt", "srpt_aging"]


class ToolOverride(BaseModel):
    """Per-tool changes to the defaults a ToolSpec declares."""

    model_config = ConfigDict(extra="forbid")

    soft_timeout_s: float | None = Field(None, gt=0, le=86_400)
    hard_timeout_s: float | None = Field(None, gt=0, le=86_400)
    retries: int | None = Field(None, ge=0, le=10)
    hedge: bool | None = None
    pools: list[str] | None = Field(None, description="Pools the tool may run on (names or kinds: cpu, gpu).")


class SchedulingPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # release order
    release_order: ReleaseOrder = Field("srpt_aging", description="fifo | priority | srpt | srpt_aging.")
    aging: float = Field(
        0.008,
        ge=0,
        le=100,
        description="srpt_aging: seconds of estimated work forgiven per second a node has waited.",
    )
    guard_share: float = Field(
        0.85,
        ge=0,
        le=1,
        description="srpt_aging: a node may be overtaken until it has waited this share of the longest recent "
        "FIFO wait (or its own FIFO wait, if longer); then it goes first.",
    )
    guard_halflife: int = Field(4096, ge=16, le=1_000_000, description="Releases over which that longest wait fades.")
    starvation_factor: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="srpt_aging: the guard acts this many typical run times early (a margin for estimates).",
    )
    fair_share: bool = Field(True, description="Tenants take turns by their share of what is in flight.")
    tenant_weights: dict[str, float] = Field(default_factory=dict, description="Share per tenant (default 1).")
    tenant_max_inflight: int = Field(0, ge=0, description="Attempts in flight per tenant (0: no cap).")
    pool_max_inflight: dict[str, int] = Field(
        default_factory=dict, description="Cap per pool below what its live workers can take."
    )
    oversubscribe: int = Field(0, ge=0, le=64, description="Messages released beyond each pool's free slots.")

    # placement
    ewma_alpha: float = Field(0.2, gt=0, le=1, description="Weight of the newest run time in a tool's estimate.")
    gpu_fallback_slowdown: float = Field(
        4.0, ge=1, le=1000, description="Prior: a gpu tool on a cpu pool runs this many times slower until seen."
    )

    # timeouts and retries
    retries: int = Field(2, ge=0, le=10, description="Retries of a transient failure (errors that may pass).")
    backoff_base_s: float = Field(0.5, ge=0, le=600, description="First retry's delay; doubles each retry.")
    backoff_max_s: float = Field(30.0, ge=0, le=3600, description="Longest retry delay.")
    backoff_jitter: float = Field(0.5, ge=0, le=1, description="Delay varies by +- this fraction.")
    requeue_after_s: float = Field(
        30.0,
        ge=1,
        le=86_400,
        description="A queued attempt no worker started this long while its pool idles is sent again.",
    )

    # hedging
    hedging: bool = Field(True, description="Duplicate idempotent reads running past their p95.")
    hedge_factor: float = Field(1.5, ge=1, le=100, description="Hedge after p95 x this factor.")
    hedge_min_s: float = Field(0.5, ge=0, le=3600, description="Never hedge attempts younger than this.")
    hedge_min_samples: int = Field(10, ge=1, description="Run times seen before a p95 is trusted.")
    hedge_budget: float = Field(0.05, ge=0, le=1, description="Hedges per released attempt, at most.")
    hedge_burst: float = Field(3.0, ge=0, le=1000, description="Hedges that may be spent at once.")

    # batching
    batch_window_s: float = Field(0.05, ge=0, le=10, description="How long a batchable call waits for company.")
    max_batch: int = Field(16, ge=1, le=1024, description="Largest batch of one tool in one message.")

    tools: dict[str, ToolOverride] = Field(default_factory=dict, description="Per-tool overrides.")

    def override(self, tool: str) -> ToolOverride:
        return self.tools.get(tool) or ToolOverride()


PRESETS: dict[str, dict[str, object]] = {
    "fifo": {"release_order": "fifo"},
    "priority": {"release_order": "priority"},
    "srpt": {"release_order": "srpt"},
    "srpt_aging": {"release_order": "srpt_aging"},
}


def preset(name: str, base: SchedulingPolicy | None = None) -> SchedulingPolicy:
    """A named policy: a preset's changes on top of `base` (the defaults when None)."""
    key = name.replace("-", "_")
    if key not in PRESETS:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(PRESETS))}")
    return (base or SchedulingPolicy()).model_copy(update=PRESETS[key])


# serving: what answers and model calls cost, and how the service spends on them


class LLMPolicy(BaseModel):
    """Model routing and budgets: which model plans, what its tokens cost, how much a task may spend."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", max_length=128, description="Model that plans; empty means OPSGRAPH_LLM_MODEL.")
    small_model: str = Field(
        "", max_length=128, description="Cheaper model for short requests (empty: always the main model)."
    )
    small_model_max_chars: int = Field(
        0, ge=0, le=100_000, description="Requests up to this length go to small_model (0: never)."
    )
    price_in_per_1k: float = Field(0.00015, ge=0, le=10, description="USD per 1,000 prompt tokens.")
    price_out_per_1k: float = Field(0.0006, ge=0, le=10, description="USD per 1,000 completion tokens.")
    max_cost_per_task: float = Field(
        0.05, ge=0, le=100, description="Above this a task's planning uses the offline planner."
    )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return tokens_in / 1000 * self.price_in_per_1k + tokens_out / 1000 * self.price_out_per_1k

    def route(self, goal: str, default_model: str) -> str:
        if self.small_model and len(goal) <= self.small_model_max_chars:
            return self.small_model
        return self.model or default_model


class ServingPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache: CachePolicy = Field(default_factory=CachePolicy)
    llm: LLMPolicy = Field(default_factory=LLMPolicy)
    pool_cost_per_s: dict[str, float] = Field(
        default_factory=lambda: {"cpu": 0.00002, "gpu": 0.0008},
        description="USD per busy second of one worker slot, by pool or kind: the compute side of cost per task.",
    )

    def price(self, pool: str) -> float:
        return self.pool_cost_per_s.get(pool, self.pool_cost_per_s.get(pool.split(".", 1)[0], 0.0))


class PolicyDocument(BaseModel):
    """The one versioned policy: scheduling (placement, order, caps, timeouts, retries, hedging, batching) and
    serving (cache, model routing and budgets, prices). Unknown keys are refused at every level."""

    model_config = ConfigDict(extra="forbid")

    scheduling: SchedulingPolicy = Field(default_factory=SchedulingPolicy)
    serving: ServingPolicy = Field(default_factory=ServingPolicy)


def get_path(doc: dict[str, object], path: str) -> object:
    """`scheduling.tools.metric_anomalies.pools` -> the value in a dumped document (None when absent)."""
    cur: object = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def set_path(doc: dict[str, object], path: str, value: object) -> None:
    """Set a value in a dumped document, making the dictionaries on the way."""
    parts = path.split(".")
    cur = doc
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = value
