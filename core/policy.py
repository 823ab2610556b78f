"""The serving policy the semantic cache reads: per category an on/off switch, a similarity threshold, a TTL
per entry kind and a quota. One document, so the tuning agent can version and change it later."""

from __future__ import annotations

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
    # thresholds: what `opsgraph cache-eval tests/data/cache_pairs.jsonl` proposes (precision >= 0.97 with the
    # verifier, never under 0.70), rounded up a little; categories differ: health requests are short and
    # their paraphrases sit lower in similarity than long diagnostic ones
    return {
        "health": CategoryCachePolicy(threshold=0.74, answer_ttl_s=60),
        "diagnose": CategoryCachePolicy(threshold=0.82, answer_ttl_s=120),
        "report": CategoryCachePolicy(threshold=0.75, answer_ttl_s=900),
        "triage": CategoryCachePolicy(threshold=0.75, answer_ttl_s=60),
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
