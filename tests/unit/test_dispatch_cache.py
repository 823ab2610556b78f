from __future__ import annotations

from pathlib import Path

import redis

from core.db import Store
from core.events import EventBus
from core.policy import CachePolicy
from core.settings import Settings
from core.types import NodeStatus, Plan, PlanNode
from memory.cache import CacheKind, SemanticCache
from memory.tool_results import ToolResultCache
from tests.harness import RedisServer
from tools import load_tool_modules
from workers.celery_app import make_celery
from workers.dispatch import Dispatcher
from workers.release import ReleaseLoop


def test_a_successful_write_invalidates_what_the_cache_knows_about_its_entities(
    tmp_path: Path,
    embedder,
    redis_server: RedisServer,  # type: ignore[no-untyped-def]
) -> None:
    settings = Settings(var_dir=tmp_path, redis_url=redis_server.url)
    store = Store.from_settings(settings)
    cache = SemanticCache(store, embedder, CachePolicy())
    cache.put("t", "diagnose", CacheKind.ANSWER, "why is payments-api slow", {"a": 1})
    cache.put("t", "diagnose", CacheKind.ANSWER, "why is orders-api slow", {"a": 2})
    cache.put("u", "diagnose", CacheKind.ANSWER, "why is payments-api slow", {"a": 3})
    client = redis.Redis.from_url(redis_server.url)
    toolset = load_tool_modules(["memory.tools", "tests.toolkit.chaos"])
    loop = ReleaseLoop(
        settings,
        store,
        EventBus(store, client),
        make_celery(settings),
        toolset,
        client,
        lambda: settings.scheduling_policy,
    )
    dispatcher = Dispatcher(loop, ToolResultCache(cache))
    task = store.create_task("restart payments-api", tenant="t")
    args = {"service": "payments-api"}
    plan = Plan(goal=task.goal, nodes=[PlanNode(id="w", tool="chaos_restart", args=args)])
    row = store.create_node_run(task.id, "w", tool="chaos_restart", args=args, pool="cpu", queue="cpu")
    store.finish_node_run(row.id, NodeStatus.SUCCEEDED, result={"status": "success", "summary": "restarted"})
    assert dispatcher.step(task.id, plan, tenant="t").done
    assert not cache.lookup("t", "diagnose", CacheKind.ANSWER, "why is payments-api slow").hit
    assert cache.lookup("t", "diagnose", CacheKind.ANSWER, "why is orders-api slow").hit
    assert cache.lookup("u", "diagnose", CacheKind.ANSWER, "why is payments-api slow").hit  # another tenant's


def test_a_read_result_is_reused_by_the_same_call_only(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    store = Store.from_settings(Settings(var_dir=tmp_path))
    results = ToolResultCache(SemanticCache(store, embedder, CachePolicy()))
    results.put("t", "tools", "http_probe", {"url": "http://a/"}, {"summary": "200"})
    assert results.get("t", "tools", "http_probe", {"url": "http://a/"}) is not None
    assert results.get("t", "tools", "http_probe", {"url": "http://b/"}) is None
    assert results.get("t", "tools", "http_probe", {"url": "http://a/", "timeout_s": 1}) is None
    assert results.get("u", "tools", "http_probe", {"url": "http://a/"}) is None
