from __future__ import annotations

import time
from pathlib import Path

from core.db import Store
from core.policy import CachePolicy, CategoryCachePolicy
from core.settings import Settings
from memory.cache import CacheKind, SemanticCache
from memory.consolidation import consolidate
from memory.episodic import EpisodicMemory
from memory.semantic import SemanticMemory


def test_consolidation_expires_merges_saves_and_finds_playbook_candidates(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    store = Store.from_settings(Settings(var_dir=tmp_path))
    policy = CachePolicy(categories={"health": CategoryCachePolicy(answer_ttl_s=0.2)})
    cache = SemanticCache(store, embedder, policy, index_folder=tmp_path / "index")
    episodes, facts = EpisodicMemory(store, embedder), SemanticMemory(store, embedder)
    cache.put("t", "health", CacheKind.ANSWER, "is redis ok", {"a": 1})
    cache.put("t", "health", CacheKind.PLAN, "is redis ok", {"nodes": []})
    llm_plan = {"source": "llm", "nodes": [{"id": "r", "tool": "redis_info"}]}
    for i in range(3):
        episodes.record(
            tenant="t",
            task_id=f"task-{i}",
            goal="Is  redis OK",
            category="health",
            plan=llm_plan,
            outcome="succeeded",
            answer={"headline": "fine"},
            duration_s=1.0,
        )
    episodes.record(
        tenant="t",
        task_id="task-f",
        goal="is redis ok",
        category="health",
        plan=llm_plan,
        outcome="failed",
        answer={"headline": "down"},
        duration_s=1.0,
    )
    facts.assert_fact("t", "redis", "in_maintenance", "true", source="person:ana", valid_until=time.time() - 1)
    time.sleep(0.3)
    report = consolidate(cache, episodes, facts)
    assert report["cache_expired"] == 1  # the answer; the plan's TTL is a day
    assert report["facts_expired"] == 1
    assert report["episodes_merged"] == 2  # three successes became one (the failure stays apart)
    [candidate] = report["playbook_candidates"]
    assert candidate["repeats"] == 3 and candidate["task_id"] == "task-2"
    assert list((tmp_path / "index").glob("*.faiss"))  # index files written for the next start
    recalled = episodes.recall("t", "is redis ok", k=5)
    assert sorted(e.outcome for e in recalled) == ["failed", "succeeded"]
