"""Arguments may refer to an upstream node's result: "${node_id.data.key}" (a dependency's data, by path)."""

from __future__ import annotations

import re
from typing import Any

REF = re.compile(r"^\$\{([A-Za-z0-9_.-]+?)\.data((?:\.[A-Za-z0-9_]+)*)\}$")


class UnresolvedRef(LookupError):
    pass


def refs_in(args: dict[str, Any]) -> dict[str, str]:
    """Top-level argument name -> the node id it refers to."""
    out = {}
    for key, value in args.items():
        if isinstance(value, str):
            m = REF.match(value)
            if m:
                out[key] = m.group(1)
    return out


def resolve_refs(args: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Replace each reference by the value found in that node's result data."""
    resolved = dict(args)
    for key, value in args.items():
        if not isinstance(value, str):
            continue
        m = REF.match(value)
        if not m:
            continue
        node_id, path = m.group(1), [p for p in m.group(2).split(".") if p]
        if node_id not in results:
            raise UnresolvedRef(f"{key}: node {node_id!r} has no result")
        cur: Any = results[node_id].get("data", {})
        for part in path:
            if not isinstance(cur, dict) or part not in cur:
                raise UnresolvedRef(f"{key}: {node_id}.data.{'.'.join(path)} not in that node's result")
            cur = cur[part]
        resolved[key] = cur
    return resolved
