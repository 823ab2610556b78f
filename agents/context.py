"""Everything the agents need, built once per process and passed down (no module-level singletons)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.planner import Planner, make_planner
from agents.validation import validate_plan
from core.approvals import ApprovalStore
from core.db import Store
from core.events import EventBus
from core.policies import PolicyStore
from core.settings import Settings
from core.telemetry import Telemetry
from memory.cache import SemanticCache
from memory.embeddings import MiniLMEmbedder
from memory.episodic import EpisodicMemory
from memory.playbooks import PlaybookLibrary
from memory.semantic import SemanticMemory
from memory.tool_results import ToolResultCache
from tools import Toolset, load_tool_modules
from workers.dispatch import Dispatcher
from workers.release import ReleaseLoop, check_visibility


@dataclass
class OpsContext:
    settings: Settings
    store: Store
    bus: EventBus
    redis: redis.Redis
    celery: Celery
    toolset: Toolset
    library: PlaybookLibrary
    planner: Planner
    dispatcher: Dispatcher
    checkpointer: BaseCheckpointSaver[Any]
    embedder: MiniLMEmbedder
    cache: SemanticCache | None
    episodes: EpisodicMemory
    facts: SemanticMemory
    telemetry: Telemetry
    policies: PolicyStore
    approvals: ApprovalStore
    _closers: list[Any]

    def close(self) -> None:
        for c in self._closers:
            c.close()


def make_checkpointer(settings: Settings) -> tuple[BaseCheckpointSaver[Any], Any]:
    """The LangGraph checkpointer matching the database: SQLite file beside it, or the same PostgreSQL."""
    if settings.is_postgres:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(
            settings.checkpoint_dsn,
            min_size=1,
            max_size=max(4, settings.max_running_tasks + 2),
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=True,
        )
        saver: BaseCheckpointSaver[Any] = PostgresSaver(pool)  # type: ignore[arg-type]
        saver.setup()  # type: ignore[attr-defined]
        return saver, pool
    from langgraph.checkpoint.sqlite import SqliteSaver

    settings.ensure_dirs()
    conn = sqlite3.connect(settings.checkpoint_dsn, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    saver = SqliteSaver(conn)
    saver.setup()
    return saver, conn


def build_context(settings: Settings, celery: Celery, toolset: Toolset | None = None) -> OpsContext:
    toolset = toolset or load_tool_modules(settings.tool_modules)
    store = Store.from_settings(settings)
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, health_check_interval=30)
    bus = EventBus(store, client)
    embedder = MiniLMEmbedder()
    library = PlaybookLibrary.default(embedder)  # semantic playbook choice
    telemetry = Telemetry(store)
    policies = PolicyStore(store, settings, telemetry=telemetry)
    policies.ensure()
    planner = make_planner(settings, library, toolset, serving=lambda: policies.current().serving.llm)
    checkpointer, closer = make_checkpointer(settings)
    facts = SemanticMemory(store, embedder, index_folder=settings.var_dir / "index" / "facts")
    cache = (
        SemanticCache(
            store,
            embedder,
            lambda: policies.current().serving.cache,
            index_folder=settings.var_dir / "index",
            aliases=facts.aliases,
        )
        if settings.cache_enabled
        else None
    )
    results = ToolResultCache(cache) if cache is not None else None
    loop = ReleaseLoop(settings, store, bus, celery, toolset, client, lambda: policies.current().scheduling)
    check_visibility(settings, toolset)
    dispatcher = Dispatcher(loop, results, validator=lambda plan: validate_plan(plan, toolset, settings))
    return OpsContext(
        settings=settings,
        store=store,
        bus=bus,
        redis=client,
        celery=celery,
        toolset=toolset,
        library=library,
        planner=planner,
        dispatcher=dispatcher,
        checkpointer=checkpointer,
        embedder=embedder,
        cache=cache,
        episodes=EpisodicMemory(store, embedder, index_folder=settings.var_dir / "index" / "episodes"),
        facts=facts,
        telemetry=telemetry,
        policies=policies,
        approvals=ApprovalStore.from_settings(settings, store),
        _closers=[closer],
    )
