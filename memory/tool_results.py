"""Results of idempotent read tools, reused within the category's tool TTL (the dispatcher's ResultCache).

Matching is exact on the tool and its arguments: similarity means nothing for arguments.
"""

from __future__ import annotations

import json
from typing import Any

from memory.cache import CacheKind, SemanticCache
from memory.entities import entity_values, extract_entities


def call_key(tool: str, args: dict[str, Any]) -> str:
    return f"{tool} {json.dumps(args, sort_keys=True, default=str)}"


class ToolResultCache:
    def __init__(self, cache: SemanticCache) -> None:
        self.cache = cache

    def get(self, tenant: str, category: str, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], float] | None:
        found = self.cache.get_exact(tenant, category, CacheKind.TOOL_RESULT, call_key(tool, args))
        return None if found is None else (found["payload"], found["age_s"])

    def put(self, tenant: str, category: str, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        text = call_key(tool, args)
        if self.cache.get_exact(tenant, category, CacheKind.TOOL_RESULT, text) is not None:
            return  # one live entry per call is enough
        # the vector is never searched for tool results (matching is exact); the call's words still give one
        self.cache.put(tenant, category, CacheKind.TOOL_RESULT, text, result)

    def invalidate_written(self, tenant: str, tool: str, args: dict[str, Any]) -> int:
        """A write touched these entities: nothing cached about them may be served any more."""
        named = set(entity_values(extract_entities(json.dumps(args, default=str))))
        named |= {str(v).lower() for v in args.values() if isinstance(v, str) and 0 < len(v) <= 200}
        return sum(self.cache.invalidate(tenant, entity=name) for name in sorted(named))
