"""The semantic cache on the real embedding model, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.db import Store
from core.policy import CachePolicy, CategoryCachePolicy
from core.settings import Settings
from memory._tables import CacheEntryRow, init_memory_tables
from memory.cache import CacheKind, SemanticCache

ANSWER = CacheKind.ANSWER


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Iterator[Store]:
    s = Store.from_settings(Settings(var_dir=tmp_path, database_url=database_url))
    yield s
    init_memory_tables(s.engine)
    with s.session() as session:  # the PostgreSQL database is shared by the module's tests
        session.execute(sa.delete(CacheEntryRow))
    s.engine.dispose()


def make_cache(store: Store, embedder, tmp_path: Path, **policy: object) -> SemanticCache:  # type: ignore[no-untyped-def]
    cats = {"health": CategoryCachePolicy(threshold=0.85, **policy), "request": CategoryCachePolicy(enabled=False)}
    return SemanticCache(store, embedder, CachePolicy(categories=cats), index_folder=tmp_path / "index")


def test_a_paraphrase_hits_and_a_different_service_never_does(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    cache.put("t1", "health", ANSWER, "why is checkout-api slow since 14:00", {"answer": "db locks"})
    hit = cache.lookup("t1", "health", ANSWER, "checkout-api has been slow since 14:00, why?")
    assert hit.hit and hit.payload == {"answer": "db locks"} and hit.similarity >= 0.85
    other = cache.lookup("t1", "health", ANSWER, "why is payments-api slow since 14:00")
    assert not other.hit  # another service (similarity 0.83 with this model: under the threshold already)
    later = cache.lookup("t1", "health", ANSWER, "why is checkout-api slow since 15:00")
    assert not later.hit and later.reason == "verifier_rejected"  # similarity 0.98, another time window
    assert later.similarity is not None and later.similarity > 0.95
    unrelated = cache.lookup("t1", "health", ANSWER, "nightly capacity report")
    assert not unrelated.hit and unrelated.reason == "below_threshold"
    stats = cache.stats()["health"]
    assert (stats["lookups"], stats["hits"], stats["verified_rejects"]) == (4, 1, 1)
    assert stats["entries"] == {"answer": 1} and stats["lookup_ms_p50"] is not None


def test_a_tenant_never_gets_another_tenants_entry(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    text = "check the health of this machine"
    vec = embedder.embed([text])[0]
    cache.put("alice", "health", ANSWER, text, {"secret": "alice's"}, vector=vec)
    for tenant in ["bob", "alice ", "ALICE", "alice\x1fanswer", ""]:
        assert not cache.lookup(tenant, "health", ANSWER, text, vector=vec).hit, tenant
    assert cache.lookup("alice", "health", ANSWER, text, vector=vec).hit
    assert cache.stats("bob").get("health", {}).get("entries", {}) == {}


def test_entries_expire_after_their_ttl(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path, answer_ttl_s=1.0)
    vec = embedder.embed(["is redis ok"])[0]  # embedded once: the TTL, not the model's speed, decides
    cache.put("t", "health", ANSWER, "is redis ok", {"a": 1}, vector=vec)
    assert cache.lookup("t", "health", ANSWER, "is redis ok", vector=vec).hit
    time.sleep(1.1)
    assert not cache.lookup("t", "health", ANSWER, "is redis ok", vector=vec).hit
    assert cache.expire() == 1
    assert cache.stats()["health"]["expirations"] == 1


def test_the_quota_evicts_the_least_recently_used(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path, max_entries=3)
    texts = ["is redis ok", "is postgres ok", "is nginx ok", "is kafka ok"]
    for t in texts[:3]:
        cache.put("t", "health", ANSWER, t, {"t": t})
    assert cache.lookup("t", "health", ANSWER, "is redis ok").hit  # redis is now the most recently used
    cache.put("t", "health", ANSWER, texts[3], {"t": texts[3]})
    alive = [t for t in texts if cache.lookup("t", "health", ANSWER, t).hit]
    assert alive == ["is redis ok", "is nginx ok", "is kafka ok"]
    assert cache.stats()["health"]["evictions"] == 1


def test_invalidation_by_entity_category_and_tenant(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    cache.put("t", "health", ANSWER, "why is orders-api slow", {})
    cache.put("t", "health", CacheKind.PLAN, "why is orders-api slow", {})
    cache.put("t", "health", ANSWER, "why is payments-api slow", {})
    cache.put("u", "health", ANSWER, "why is orders-api slow", {})
    assert cache.invalidate("t", entity="orders-api") == 2
    assert not cache.lookup("t", "health", ANSWER, "why is orders-api slow").hit
    assert cache.lookup("t", "health", ANSWER, "why is payments-api slow").hit
    assert cache.lookup("u", "health", ANSWER, "why is orders-api slow").hit  # another tenant: untouched
    assert cache.invalidate("t", category="health") == 1
    assert cache.invalidate("u") == 1


def test_a_disabled_category_neither_stores_nor_serves(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    assert cache.put("t", "request", ANSWER, "run my plan", {}) is None
    assert cache.lookup("t", "request", ANSWER, "run my plan").reason == "disabled"


def test_a_restarted_cache_rebuilds_its_index_from_the_database(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    cache.put("t", "health", ANSWER, "is the disk full on this machine", {"a": 1})
    cache.index.save()
    for f in (tmp_path / "index").glob("*.faiss"):
        f.write_bytes(b"corrupt")
    again = make_cache(store, embedder, tmp_path)
    assert again.lookup("t", "health", ANSWER, "is the disk on this machine full").hit


def test_a_change_request_is_never_stored_nor_served(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = make_cache(store, embedder, tmp_path)
    # stored as a look at checkout-api; the restart must not be answered with it, nor stored itself
    cache.put("t", "health", ANSWER, "is checkout-api healthy", {"a": 1})
    found = cache.lookup("t", "health", ANSWER, "restart checkout-api")
    assert not found.hit and found.reason == "change_request"
    assert cache.put("t", "health", ANSWER, "please restart checkout-api", {"a": 2}) is None
    assert cache.put("t", "health", ANSWER, "can you scale orders-api to 3 replicas", {"a": 3}) is None
    assert cache.lookup("t", "health", ANSWER, "please restart checkout-api").reason == "change_request"
    # asked about, not asked for: an ordinary read request
    assert cache.put("t", "health", ANSWER, "why did checkout-api restart", {"a": 4}) is not None


def test_canonical_entities_let_paraphrases_hit_and_one_changed_entity_miss(
    store: Store, embedder, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    policy = CachePolicy(categories={"diagnose": CategoryCachePolicy(threshold=0.72)})
    cache = SemanticCache(store, embedder, policy, index_folder=tmp_path / "index")
    cache.put("t", "diagnose", ANSWER, "why is checkout slow since 14:00", {"a": 1})
    assert cache.lookup("t", "diagnose", ANSWER, "why has checkout-api been slow since 2pm").hit
    for other in ("why is checkout slow since 15:00", "why is payments slow since 14:00",
                  "why is checkout slow since 14:00 in staging"):  # fmt: skip
        assert not cache.lookup("t", "diagnose", ANSWER, other).hit, other


def test_a_service_alias_from_semantic_memory_names_the_same_service(store: Store, embedder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from memory.semantic import SemanticMemory

    facts = SemanticMemory(store, embedder)
    cats = {"health": CategoryCachePolicy(threshold=0.7)}
    cache = SemanticCache(store, embedder, CachePolicy(categories=cats), aliases=facts.aliases)
    cache.put("t", "health", ANSWER, "is storefront healthy", {"a": 1})
    assert not cache.lookup("t", "health", ANSWER, "is shopfront healthy").hit
    facts.assert_fact("t", "shopfront", "alias_of", "storefront", source="test")
    assert cache.lookup("t", "health", ANSWER, "is shopfront healthy").hit
    cache.put("u", "health", ANSWER, "is storefront healthy", {"a": 2})
    assert not cache.lookup("u", "health", ANSWER, "is shopfront healthy").hit  # the alias is t's, not u's
