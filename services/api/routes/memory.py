"""Memory and cache: search what the service knows, look at and clear the semantic cache. Tenant-scoped."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from core.errors import Conflict
from memory.cache import SemanticCache
from services.api.deps import TENANT_PATTERN, Admin, Ctx, Operator, Reader, Tenant, audit, tenant_for

router = APIRouter(tags=["memory"])


def _cache(ctx: Ctx) -> SemanticCache:
    if ctx.cache is None:
        raise Conflict("the semantic cache is off (OPSGRAPH_CACHE_ENABLED=false)")
    return ctx.cache


@router.get("/v1/cache/stats")
def cache_stats(ctx: Ctx, _: Admin, tenant: Tenant) -> dict[str, Any]:
    """Per category: the tenant's entries; lookups, hits, misses, hit rate, verifier rejects, evictions,
    expirations and latency of this API process (all tenants: counters are kept per category)."""
    return {"tenant": tenant, "categories": _cache(ctx).stats(tenant)}


@router.delete("/v1/cache")
def clear_cache(
    ctx: Ctx,
    principal: Admin,
    tenant: Tenant,
    request: Request,
    category: Annotated[str | None, Query(max_length=32)] = None,
    entity: Annotated[str | None, Query(max_length=200)] = None,
    kind: Literal["plan", "answer", "tool_result"] | None = None,
) -> dict[str, Any]:
    """Drop a tenant's entries, narrowed to a category, a kind, or those naming an entity (a service, URL...)."""
    removed = _cache(ctx).invalidate(tenant, category=category, entity=entity, kind=kind)
    details = {"category": category, "entity": entity, "kind": kind, "removed": removed}
    audit(request, principal, "cache.clear", tenant=tenant, target=category or "*", details=details)
    return {"tenant": tenant, "removed": removed}


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented: no true for 1

    subject: str = Field(min_length=1, max_length=200, description="What it is about: orders-api")
    predicate: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_ -]+$", description="depends_on")
    object: str = Field(min_length=1, max_length=500, description="postgres-main")
    source: str = Field("person:api", min_length=1, max_length=200, description="Provenance: person:NAME ...")
    valid_until: float | None = Field(None, description="Unix time after which the fact no longer holds.")
    tenant: str | None = Field(
        None, min_length=1, max_length=64, pattern=TENANT_PATTERN, description="Admins only: as for tasks."
    )


@router.post("/v1/memory/facts", status_code=201)
def add_fact(body: FactIn, ctx: Ctx, principal: Operator, acting: Tenant) -> dict[str, Any]:
    """Record a fact; a fact with the same subject and predicate but another object is closed, not deleted."""
    tenant = tenant_for(principal, body.tenant) if body.tenant else acting
    fact, closed = ctx.facts.assert_fact(
        tenant, body.subject, body.predicate, body.object, source=body.source, valid_until=body.valid_until
    )
    return {"fact": fact.view(), "closed": [c.view() for c in closed]}


@router.get("/v1/memory/facts")
def list_facts(
    ctx: Ctx,
    _: Reader,
    tenant: Tenant,
    subject: Annotated[str, Query(min_length=1, max_length=200)],
    predicate: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    """Every fact about a subject, current and closed, oldest first."""
    return {"tenant": tenant, "facts": [f.view() for f in ctx.facts.history(tenant, subject, predicate)]}


@router.post("/v1/memory/consolidate")
async def consolidate_now(request: Request, principal: Admin) -> dict[str, Any]:
    """Run consolidation now: expiry, pending hit counts, index files, episode merges, playbook candidates."""
    report: dict[str, Any] = await run_in_threadpool(request.app.state.consolidator.run_now)
    await run_in_threadpool(audit, request, principal, "memory.consolidate", target="*", details=_counts(report))
    return report


def _counts(report: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a consolidation report (what changed), for the audit log."""
    return {k: v for k, v in report.items() if isinstance(v, int | float)}


@router.get("/v1/memory/search")
async def memory_search(
    ctx: Ctx,
    _: Reader,
    tenant: Tenant,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
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
    facts = await run_in_threadpool(ctx.facts.search, tenant, q, k)
    results = [
        {"type": "playbook", "playbook": b.name, "category": b.category, "description": b.description,
         "similarity": round(s, 4)}
        for b, s in zip(ctx.library.playbooks, sims, strict=True)
    ] + [{"type": "fact", **f.view(), "similarity": round(s, 4)} for f, s in facts]  # fmt: skip
    results.sort(key=lambda r: r["similarity"], reverse=True)
    return {"layer": layer, "tenant": tenant, "results": results[:k]}
