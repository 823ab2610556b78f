"""A plan is dispatched only when it is acyclic, small enough, every tool is known and available, and every
node's arguments are valid against its tool's schema. Write tools are allowed: none runs before a person approves
it (the dispatcher holds every write node for the ops graph's approval gate)."""

from __future__ import annotations

import json
from collections import deque

from pydantic import ValidationError

from agents.errors import PlanInvalid
from core.plans import refs_in
from core.settings import Settings
from core.types import Plan
from tools import Toolset


def ancestors(plan: Plan) -> dict[str, set[str]]:
    deps = {n.id: set(n.depends_on) for n in plan.nodes}
    out: dict[str, set[str]] = {}

    def visit(nid: str, seen: frozenset[str]) -> set[str]:
        if nid in out:
            return out[nid]
        acc: set[str] = set()
        for d in deps.get(nid, ()):
            if d in seen:
                continue
            acc |= {d} | visit(d, seen | {d})
        out[nid] = acc
        return acc

    for nid in deps:
        visit(nid, frozenset({nid}))
    return out


def find_cycle(plan: Plan) -> list[str] | None:
    """Kahn's algorithm; returns the nodes left on a cycle, or None."""
    indeg = {n.id: 0 for n in plan.nodes}
    children: dict[str, list[str]] = {n.id: [] for n in plan.nodes}
    for n in plan.nodes:
        for d in n.depends_on:
            if d in indeg:
                indeg[n.id] += 1
                children[d].append(n.id)
    queue = deque(nid for nid, k in indeg.items() if k == 0)
    seen = 0
    while queue:
        nid = queue.popleft()
        seen += 1
        for c in children[nid]:
            indeg[c] -= 1
            if indeg[c] == 0:
                queue.append(c)
    if seen == len(indeg):
        return None
    return sorted(nid for nid, k in indeg.items() if k > 0)


def validate_plan(plan: Plan, toolset: Toolset, settings: Settings) -> Plan:
    """Return the plan unchanged if valid; raise PlanInvalid listing every reason otherwise."""
    reasons: list[str] = []
    if not plan.nodes:
        reasons.append("plan has no nodes")
    if len(plan.nodes) > settings.max_plan_nodes:
        reasons.append(f"plan has {len(plan.nodes)} nodes; the limit is {settings.max_plan_nodes}")
    ids = [n.id for n in plan.nodes]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        reasons.append(f"duplicate node ids: {', '.join(dupes)}")
    known = set(ids)
    for n in plan.nodes:
        for d in n.depends_on:
            if d not in known:
                reasons.append(f"node {n.id} depends on unknown node {d!r}")
            if d == n.id:
                reasons.append(f"node {n.id} depends on itself")
    cycle = find_cycle(plan)
    if cycle:
        reasons.append(f"plan has a cycle through {', '.join(cycle)}")
    upstream = ancestors(plan) if not cycle else {}
    for n in plan.nodes:
        spec = toolset.get(n.tool)
        if spec is None:
            reasons.append(f"node {n.id}: unknown tool {n.tool!r} (known: {', '.join(toolset.names())})")
            continue
        unavailable = spec.check_prerequisites(settings)
        if unavailable:
            reasons.append(f"node {n.id}: tool {n.tool} is unavailable: {unavailable}")
        if n.pool is not None and n.pool not in settings.pools:
            reasons.append(f"node {n.id}: pool {n.pool!r} is not declared (pools: {', '.join(settings.pools)})")
        size = len(json.dumps(n.args, default=str))
        if size > settings.max_arg_bytes:
            reasons.append(f"node {n.id}: arguments are {size} bytes; the limit is {settings.max_arg_bytes}")
        refs = refs_in(n.args)
        for arg, target in refs.items():
            if target not in upstream.get(n.id, set()):
                reasons.append(f"node {n.id}: argument {arg} refers to {target}, which is not among its dependencies")
        try:
            spec.args_model.model_validate({k: v for k, v in n.args.items() if k not in refs})
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "(args)"
                if err["type"] == "missing" and err["loc"] and err["loc"][0] in refs:
                    continue
                if not err["loc"] and refs:
                    continue  # a whole-model check that needs the referenced value; rechecked at run time
                reasons.append(f"node {n.id}: argument {loc}: {err['msg']}")
    if reasons:
        raise PlanInvalid(reasons)
    return plan
