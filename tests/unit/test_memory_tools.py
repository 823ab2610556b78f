from __future__ import annotations

from pathlib import Path

import numpy as np
import redis
import sqlalchemy as sa

from core import keys
from core.db import Store
from core.policy import CachePolicy
from core.settings import Settings
from memory._tables import CacheEntryRow, EpisodeRow, FactRow
from memory.cache import CacheKind, SemanticCache
from memory.episodic import EpisodicMemory
from memory.semantic import SemanticMemory
from tests.harness import RedisServer
from tools import ToolContext, load_tool_modules


def test_memory_reembed_rewrites_every_vector_and_signals_the_api(
    tmp_path: Path, embedder, redis_server: RedisServer
) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(var_dir=tmp_path, redis_url=redis_server.url)
    store = Store.from_settings(settings)
    SemanticCache(store, embedder, CachePolicy()).put("t", "health", CacheKind.ANSWER, "is redis ok", {})
    EpisodicMemory(store, embedder).record(
        tenant="t",
        task_id="x",
        goal="why is orders-api slow",
        category="diagnose",
        plan={},
        outcome="succeeded",
        answer={},
        duration_s=1,
    )
    SemanticMemory(store, embedder).assert_fact("t", "orders-api", "depends_on", "postgres-main", source="person:a")
    zeros = np.zeros(384, np.float32).tobytes()
    with store.session() as s:  # break every stored vector
        for table in (CacheEntryRow, EpisodeRow, FactRow):
            s.execute(sa.update(table).values(vector=zeros))
    client = redis.Redis.from_url(redis_server.url)
    client.delete(keys.MEMORY_REEMBEDDED)
    tool = load_tool_modules(settings.tool_modules).get("memory_reembed")
    assert tool is not None and tool.pool == "gpu"
    result = tool.run({"layer": "all", "batch_size": 2}, ToolContext(settings=settings, _redis=client))
    assert result.data["rows"] == {"cache_entries": 1, "episodes": 1, "facts": 1}
    with store.session() as s:
        fact_vec = np.frombuffer(s.scalar(sa.select(FactRow.vector)), np.float32)
    assert np.allclose(fact_vec, embedder.embed(["orders-api depends on postgres-main"])[0], atol=1e-5)
    assert client.get(keys.MEMORY_REEMBEDDED) is not None
