"""Memory's own tools, registered in the catalog through OPSGRAPH_TOOL_MODULES (default ["memory.tools"]).

memory_reembed runs on the gpu pool: large batches are what an accelerator is for, and a gpu worker (threads
pool, never forks) loads the model once and keeps it.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np
import sqlalchemy as sa
from pydantic import Field

from core import keys
from core.db import Store
from core.types import ToolResult, ToolStatus
from memory._tables import CacheEntryRow, EpisodeRow, FactRow, init_memory_tables
from memory.embeddings import MiniLMEmbedder
from tools import CATALOG, ToolArgs, ToolContext

_embedder: MiniLMEmbedder | None = None  # one per worker process: the cold start is paid once


def _model() -> MiniLMEmbedder:
    global _embedder
    if _embedder is None:
        _embedder = MiniLMEmbedder().load()
    return _embedder


def _texts(table: Any) -> tuple[Any, Any]:
    if table is FactRow:
        # the fact's text as SemanticMemory embeds it: "subject predicate object" (|| works on every SQLite)
        text = FactRow.subject + " " + sa.func.replace(FactRow.predicate, "_", " ") + " " + FactRow.object
        return FactRow.id, text
    return table.id, (table.text if table is CacheEntryRow else table.goal)


class ReembedArgs(ToolArgs):
    layer: Literal["all", "cache", "episodes", "facts"] = "all"
    batch_size: int = Field(256, ge=1, le=4096)


@CATALOG.tool(args=ReembedArgs, pool="gpu", timeout_s=1800, cost_hint_s=30, idempotent=True)
def memory_reembed(args: ReembedArgs, ctx: ToolContext) -> ToolResult:
    """Re-embed stored memory (cache entries, episodes, facts) in large batches; CUDA when present.

    For after a change of embedding model, or to repair vectors. The API reloads its indexes afterwards.
    """
    tables = {"cache": CacheEntryRow, "episodes": EpisodeRow, "facts": FactRow}
    chosen = list(tables.values()) if args.layer == "all" else [tables[args.layer]]
    store = Store.from_settings(ctx.settings, create=False)
    init_memory_tables(store.engine)
    model = _model()
    started, counts = time.perf_counter(), {}
    try:
        for table in chosen:
            id_col, text_col = _texts(table)
            done, last_id = 0, 0
            while not ctx.is_cancelled():
                with store.session() as s:
                    rows = s.execute(
                        sa.select(id_col, text_col).where(id_col > last_id).order_by(id_col).limit(args.batch_size)
                    ).all()
                if not rows:
                    break
                vectors = model.embed([str(r[1]) for r in rows])
                with store.session() as s:
                    for (row_id, _), vec in zip(rows, vectors, strict=True):
                        s.execute(
                            sa.update(table)
                            .where(id_col == row_id)
                            .values(vector=np.asarray(vec, np.float32).tobytes())
                        )
                done += len(rows)
                last_id = rows[-1][0]
            counts[table.__tablename__] = done
    finally:
        store.engine.dispose()
    ctx.redis.set(keys.MEMORY_REEMBEDDED, str(time.time()))
    seconds = time.perf_counter() - started
    total = sum(counts.values())
    summary = f"re-embedded {total} rows on {model.device} in {seconds:.1f}s ({total / max(seconds, 1e-9):.0f}/s)"
    return ToolResult(
        status=ToolStatus.SUCCESS if total else ToolStatus.NO_DATA,
        summary=summary,
        data={
            "rows": counts,
            "device": model.device,
            "seconds": round(seconds, 2),
            "findings": [{"severity": "ok", "message": summary}],
        },
        evidence=[f"{name}: {n} rows" for name, n in counts.items()],
    )
