"""A CDN or shared cache that serves from its cache what the origin marks private: the origin answers a user's own
data (a cart, an account) with `Cache-Control: private` or `no-store`, yet the edge answers it as a cache HIT
(Cloudflare's `cf-cache-status: HIT`, CloudFront's `x-cache: Hit from cloudfront`, Fastly's and Varnish's `x-cache:
HIT`, an `age` above zero from a shared cache). A cache rule that overrides the origin's headers (cache everything,
an edge TTL forced over the origin's) then hands one user's response to the next: users see each other's data and
the origin sees few of those requests. That is configuration of the cache, not the application."""

from __future__ import annotations

import re

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceRef, Finding
from diagnosis.timeline import fmt_ts

_PRIVATE = re.compile(r"\b(?:private|no-store)\b", re.I)
_CACHE_HIT = ("cf-cache-status", "x-cache", "x-cache-status", "cdn-cache-status", "x-proxy-cache", "x-fastly-cache")


def _hit(headers: dict[str, str]) -> str | None:
    """The header that says a shared cache answered, as `name: value`."""
    for name in _CACHE_HIT:
        value = headers.get(name, "")
        if re.match(r"\s*(?:HIT|Hit from|TCP_HIT|TCP_MEM_HIT)", value, re.I) or re.search(r"\bHIT\b", value):
            return f"{name}: {value}"
    return None


_CACHE_SETTING = re.compile(
    r"cache_settings|cache rule|page ?rule|cache everything|edge_ttl|cache_level|cache-control", re.I
)


def _cache_change(evidence: EvidenceSet, before: float | None) -> tuple[float, str, str, int | None] | None:
    """The last change of the cache's settings recorded before the responses (a CDN's audit log, a change record)."""
    found = None
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            ts, msg = r.get("ts"), str(r.get("msg") or "")
            if (
                not isinstance(ts, int | float)
                or (before is not None and ts > before)
                or not _CACHE_SETTING.search(msg)
            ):
                continue
            if found is None or ts > found[0]:
                found = (float(ts), msg, item.id, r.get("line"))
    return found


@ANALYZERS.analyzer(domain=Domain.NETWORK, reads={"http/response", "log"})
def cache_serves_private(evidence: EvidenceSet) -> list[Finding]:
    hits = []
    for item in evidence.kind("http/response"):
        headers = item.data.get("headers") or {}
        control = str(headers.get("cache-control") or "")
        hit = _hit(headers)
        if hit and _PRIVATE.search(control):
            hits.append((item, control, hit))
    if not hits:
        return []
    item, control, hit = hits[0]
    urls = sorted({str(i.data.get("url") or i.object) for i, _, _ in hits})
    age = (item.data.get("headers") or {}).get("age")
    change = _cache_change(evidence, item.ts)
    changed = (
        f" The cache settings were changed at {fmt_ts(change[0])} ('{change[1][:200]}')." if change is not None else ""
    )
    return [
        Finding(
            analyzer="cache_serves_private",
            domain=Domain.NETWORK,
            role="cause",
            code="cache_serves_private",
            category=Category.CONFIGURATION_ERROR,
            title=f"the CDN cache serves private responses ({', '.join(urls[:3])})",
            mechanism=(
                f"{', '.join(urls[:3])} is answered from the CDN's cache ({hit}{f', age {age}s' if age else ''}) "
                f"though the origin marks it '{control}': a cache rule overrides the origin's headers (caches "
                "everything on the path, or forces an edge TTL), so one user's response is served to others and "
                f"barely reaches the origin.{changed}"
            ),
            object=f"CDN cache rule for {urls[0]}",
            score=0.9,
            ts=item.ts,
            tags=[f"url:{u}" for u in urls[:5]],
            explains=["errors", "http_5xx", "latency", "metric_shift", "alert:*", "traffic_drop*", "data_*"],
            evidence=[EvidenceRef(item=i.id, field="headers", value=f"{h}; cache-control: {c}") for i, c, h in hits]
            + ([EvidenceRef(item=change[2], line=change[3], value=change[1][:300])] if change is not None else []),
            actions=[
                Action(
                    description="Show what the edge answers for a private path, and its cache headers",
                    command=f"curl -sI {urls[0]} | grep -Ei 'cache-status|x-cache|age|cache-control'",
                ),
                Action(
                    description="Purge the cached private responses and scope the cache rule away from them "
                    "(respect the origin's Cache-Control on dynamic paths)",
                    command="review the CDN's cache rules for the path; then purge it (Cloudflare: POST "
                    "/zones/<zone>/purge_cache with the URLs)",
                    kind="write",
                ),
            ],
        )
    ]
