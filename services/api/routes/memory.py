"""Memory and cache: search what the service knows, look at and clear the semantic cache. Tenant-scoped."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from core.errors import Conflict
from memory.cache import SemanticCache
from services.api.deps import Ctx

router = APIRouter(tags=["memory"])
Tenant = Annotated[str, Query(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


def _cache(ctx: Ctx) -> SemanticCache:
    if ctx.cache is None:
        raise Conflict("the semantic cache is off (OPSGRAPH_CACHE_ENABLED=false)")
    return ctx.cache


@router.get("/v1/cache/stats")
def cache_stats(ctx: Ctx, tenant: Tenant | None = None) -> dict[str, Any]:
    """Per category: lookups, hits, misses, hit rate, verifier rejects, evictions, expirations, entries, latency."""
    return {"tenant": tenant, "categories": _cache(ctx).stats(tenant)}


@router.delete("/v1/cache")
def clear_cache(
    ctx: Ctx,
    tenant: Tenant,
    category: Annotated[str | None, Query(max_length=32)] = None,
    entity: Annotated[str | None, Query(max_length=200)] = None,
    kind: Literal["plan", "answer", "tool_result"] | None = None,
) -> dict[str, Any]:
    """Drop a tenant's entries, narrowed to a category, a kind, or those naming an entity (a service, URL...)."""
    removed = _cache(ctx).invalidate(tenant, category=category, entity=entity, kind=kind)
    return {"tenant": tenant, "removed": removed}


@router.get("/v1/memory/search")
async def memory_search(
    ctx: Ctx,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    tenant: Tenant = "default",
    layer: Literal["semantic", "episodic", "cache"] = "semantic",
    k: Annotated[int, Query(ge=1, le=50)] = 10,
) -> dict[str, Any]:
    """semantic: playbooks closest in meaning to q; episodic: the tenant's past tasks (similarity, recency,
    outcome); cache: the tenant's cached requests."""
    if layer == "episodic":
        found = await run_in_threadpool(lambda: ctx.episodes.recall(tenant, q, k=k, min_similarity=0.3))
        return {"layer": layer, "tenant": tenant, "results": [{**e.cite(), "score": round(e.score, 4)} for e in found]}
    if layer == "cache":
        results = await run_in_threadpool(_cache(ctx).search, tenant, q, k)
        return {"layer": layer, "tenant": tenant, "results": results}
    sims = await run_in_threadpool(ctx.library.similarities, q)
    ranked = sorted(zip(ctx.library.playbooks, sims, strict=True), key=lambda p: p[1], reverse=True)[:k]
    results = [
        {"playbook": b.name, "category": b.category, "description": b.description, "similarity": round(s, 4)}
        for b, s in ranked
    ]
    return {"layer": layer, "tenant": tenant, "results": results}
