# catalog-api/catalog/cache.py @ c81e4f2 (v5.2.0) -- excerpt
from pymemcache.client.hash import HashClient
from pymemcache import serde

SERVERS = [
    ("mc-01.catalog.internal", 11211),
    ("mc-02.catalog.internal", 11211),
    ("mc-03.catalog.internal", 11211),
]

client = HashClient(
    SERVERS,
    serde=serde.pickle_serde,
    connect_timeout=0.05,
    timeout=0.05,
    no_delay=True,
    use_pooling=True,
    max_pool_size=32,
    ignore_exc=True,          # a cache outage must never fail a request: errors are treated as misses
    retry_attempts=2,
    retry_timeout=1,
    dead_timeout=60,
)

PRODUCT_TTL = 3600
CATEGORY_PAGE_TTL = 600   # was 300 before v5.2.0
