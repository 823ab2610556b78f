"""Telemetry: every task, node attempt, LLM call, cache lookup and policy change as a typed row; aggregates on
demand (quantiles per tool and pool, queue waits, error and timeout rates, cache hit rates, cost per task);
bounded retention, with old raw rows rolled up into per-minute aggregates that keep histograms.

Node attempts and task ends are written by the Store in the same transaction as the state change
(core/db.py), so a measured action can be neither lost nor counted twice. The rest comes through `record`.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
import structlog

from core.db import Store, TelemetryMinuteRow, TelemetryRow
from core.metrics import metrics

log = structlog.get_logger(__name__)

# seconds; the upper bounds of the histogram buckets kept in rollups and exported to Prometheus
BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)
KINDS = ("task", "node", "llm", "cache", "policy", "tuning")


def bucket_of(x: float) -> int:
    """Index of the bucket holding x (len(BUCKETS) is +Inf)."""
    return bisect.bisect_left(BUCKETS, x)


@dataclass
class Dist:
    """Values of one measure: exact while every value is kept, from the histogram once rollups join (or when
    values are not kept: /metrics needs only counts)."""

    values: list[float] | None = field(default_factory=list)
    hist: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    count: int = 0
    approximate: bool = False

    def add(self, x: float | None) -> None:
        if x is None:
            return
        if self.values is None:
            self.approximate = True
        else:
            self.values.append(x)
        self.hist[bucket_of(x)] += 1
        self.total += x
        self.count += 1

    def merge_hist(self, hist: Sequence[int], total: float) -> None:
        if not any(hist):
            return
        for i, n in enumerate(hist[: len(self.hist)]):
            self.hist[i] += n
        self.total += total
        self.count += sum(hist)
        self.approximate = True

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        if not self.approximate and self.values is not None:
            ordered = sorted(self.values)
            return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
        target, seen = q * self.count, 0
        for i, n in enumerate(self.hist):
            if n and seen + n >= target:
                lo = BUCKETS[i - 1] if i > 0 else 0.0
                hi = BUCKETS[i] if i < len(BUCKETS) else BUCKETS[-1] * 2
                return lo + (hi - lo) * (target - seen) / n  # linear within the bucket, as Prometheus does
            seen += n
        return BUCKETS[-1]

    def summary(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        return {
            "count": self.count,
            "mean": r(self.total / self.count) if self.count else None,
            "p50": r(self.quantile(0.5)),
            "p95": r(self.quantile(0.95)),
            "p99": r(self.quantile(0.99)),
        }


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


class Telemetry:
    def __init__(self, store: Store) -> None:
        self.store = store

    # writing
    def record(self, kind: str, **fields: Any) -> None:
        self.record_many([{"kind": kind, **fields}])

    def record_many(self, rows: Iterable[dict[str, Any]]) -> None:
        now = time.time()
        items = [TelemetryRow(**{"ts": now, "data": {}, **r}) for r in rows]
        if not items:
            return
        try:
            with self.store.session() as s:
                s.add_all(items)
        except Exception as exc:  # telemetry never fails the action it measures
            log.warning("telemetry write failed", error=repr(exc), rows=len(items))
        metrics().observe_all(items)  # counted whether or not the database took the rows

    # reading
    def rows(self, kind: str, start: float, end: float) -> list[TelemetryRow]:
        stmt = (
            sa.select(TelemetryRow)
            .where(TelemetryRow.kind == kind, TelemetryRow.ts >= start, TelemetryRow.ts < end)
            .order_by(TelemetryRow.ts)
        )
        with self.store.session() as s:
            return list(s.scalars(stmt))

    def _minutes(self, start: float, end: float) -> list[TelemetryMinuteRow]:
        stmt = sa.select(TelemetryMinuteRow).where(
            TelemetryMinuteRow.minute >= int(start // 60), TelemetryMinuteRow.minute < math.ceil(end / 60)
        )
        with self.store.session() as s:
            return list(s.scalars(stmt))

    def summary(
        self,
        window_s: float,
        *,
        end: float | None = None,
        prices: dict[str, float] | None = None,
        tenant: str | None = None,
        max_rows: int | None = None,
    ) -> dict[str, Any]:
        """Aggregates of [end - window_s, end): the console's and the tuner's view. `prices` (USD per busy second
        by pool or kind) turn compute into cost; LLM cost is recorded with each call. With `tenant`, only that
        tenant's raw rows: per-minute rollups mix tenants, so a tenant's view reaches back the raw retention.
        `max_rows` bounds the raw rows read (the API's bound): past it, the window starts at the oldest row read,
        and says so."""
        end = time.time() if end is None else end
        start = end - window_s
        prices = prices or {}
        acc = _Aggregates()
        stmt = sa.select(TelemetryRow).where(TelemetryRow.ts >= start, TelemetryRow.ts < end)
        if tenant is not None:
            stmt = stmt.where(TelemetryRow.tenant == tenant)
        if max_rows is not None:
            stmt = stmt.order_by(TelemetryRow.ts.desc()).limit(max_rows)
        with self.store.session() as s:
            raw = s.scalars(stmt).all()
        capped = max_rows is not None and len(raw) >= max_rows
        if capped:
            start = min(r.ts for r in raw)
        for row in raw:
            acc.add_raw(row)
        if tenant is None:
            for m in self._minutes(start, end):
                acc.add_minute(m)
        out = acc.result(prices)
        out["window"] = {
            "start": round(start, 3),
            "end": round(end, 3),
            "seconds": round(end - start, 3) if capped else window_s,
        }
        if capped:
            out["window"]["capped_at_rows"] = max_rows
        return out

    def totals(self) -> _Aggregates:
        """Everything still held, raw and rolled up: what /metrics exports as counters and histograms."""
        acc = _Aggregates(keep_values=False)
        with self.store.session() as s:
            for row in s.scalars(sa.select(TelemetryRow)).yield_per(2000):
                acc.add_raw(row)
            for m in s.scalars(sa.select(TelemetryMinuteRow)):
                acc.add_minute(m)
        return acc

    # retention
    def rollup(self, *, raw_retention_s: float, rollup_retention_s: float, now: float | None = None) -> dict[str, int]:
        """Raw rows older than raw_retention_s become per-minute rows (added to any already there), in one
        transaction with their deletion; rollups older than rollup_retention_s are dropped."""
        now = time.time() if now is None else now
        cutoff = (now - raw_retention_s) // 60 * 60  # whole minutes only: a minute is rolled up once
        rolled = 0
        with self.store.session() as s:
            old = s.scalars(sa.select(TelemetryRow).where(TelemetryRow.ts < cutoff)).all()
            groups: dict[tuple[int, str, str, str, str], TelemetryMinuteRow] = {}
            for row in old:
                key = (int(row.ts // 60), row.kind, row.name[:64], row.pool, row.outcome)
                m = groups.get(key)
                if m is None:
                    m = s.scalar(
                        sa.select(TelemetryMinuteRow).where(
                            TelemetryMinuteRow.minute == key[0],
                            TelemetryMinuteRow.kind == key[1],
                            TelemetryMinuteRow.name == key[2],
                            TelemetryMinuteRow.pool == key[3],
                            TelemetryMinuteRow.outcome == key[4],
                        )
                    )
                    if m is None:
                        m = TelemetryMinuteRow(
                            minute=key[0], kind=key[1], name=key[2], pool=key[3], outcome=key[4], count=0, hits=0,
                            run_sum=0.0, wait_sum=0.0, cost_sum=0.0, tokens_in=0, tokens_out=0,
                            run_hist=[0] * (len(BUCKETS) + 1), wait_hist=[0] * (len(BUCKETS) + 1), data={},
                        )  # fmt: skip
                        s.add(m)
                    groups[key] = m
                _fold(m, row)
            if old:
                s.execute(sa.delete(TelemetryRow).where(TelemetryRow.ts < cutoff))
                rolled = len(old)
            dropped = s.execute(
                sa.delete(TelemetryMinuteRow).where(TelemetryMinuteRow.minute < int((now - rollup_retention_s) // 60))
            )
        return {"rolled_up": rolled, "minutes": len(groups), "dropped_minutes": int(dropped.rowcount or 0)}  # type: ignore[attr-defined]


def _fold(m: TelemetryMinuteRow, row: TelemetryRow) -> None:
    """Add one raw row to a minute's aggregate (new lists: the ORM sees a changed JSON column only so)."""
    m.count += 1
    m.hits += 1 if row.hit else 0
    run_hist, wait_hist = list(m.run_hist), list(m.wait_hist)
    if row.run_s is not None:
        m.run_sum += row.run_s
        run_hist[bucket_of(row.run_s)] += 1
    if row.wait_s is not None:
        m.wait_sum += row.wait_s
        wait_hist[bucket_of(row.wait_s)] += 1
    m.run_hist, m.wait_hist = run_hist, wait_hist
    m.cost_sum += row.cost or 0.0
    m.tokens_in += row.tokens_in or 0
    m.tokens_out += row.tokens_out or 0
    compute = (row.data or {}).get("compute_s")
    if isinstance(compute, dict):
        data = dict(m.data or {})
        summed = dict(data.get("compute_s") or {})
        for pool, sec in compute.items():
            summed[pool] = summed.get(pool, 0.0) + float(sec)
        data["compute_s"] = summed
        m.data = data


class _Aggregates:
    """Counters and distributions over raw rows and rollups alike."""

    def __init__(self, keep_values: bool = True) -> None:
        self.keep_values = keep_values
        self.tools: dict[tuple[str, str], dict[str, Any]] = {}
        self.pools: dict[str, Dist] = {}
        self.workers: dict[tuple[str, str], Dist] = {}
        self.task_outcomes: dict[str, int] = {}
        self.task_flow = self._dist()
        self.task_cost = 0.0
        self.task_compute: dict[str, float] = {}
        self.cache: dict[str, dict[str, Any]] = {}
        self.llm: dict[str, dict[str, Any]] = {}
        self.policy: dict[str, int] = {}
        self.tuning: dict[str, int] = {}

    def _tool(self, tool: str, pool: str) -> dict[str, Any]:
        t = self.tools.get((tool, pool))
        if t is None:
            t = self.tools[(tool, pool)] = {"outcomes": {}, "run": self._dist(), "wait": self._dist()}
        return t

    def _dist(self) -> Dist:
        return Dist() if self.keep_values else Dist(values=None)

    def add_raw(self, r: TelemetryRow) -> None:
        if r.kind == "node":
            t = self._tool(r.name, r.pool)
            t["outcomes"][r.outcome] = t["outcomes"].get(r.outcome, 0) + 1
            t["run"].add(r.run_s)
            t["wait"].add(r.wait_s)
            self.pools.setdefault(r.pool, self._dist()).add(r.wait_s)
            if r.worker and r.run_s is not None and r.outcome == "succeeded":
                self.workers.setdefault((r.name, r.worker), self._dist()).add(r.run_s)
        elif r.kind == "task":
            self._task(r.outcome, 1, r.cost or 0.0, (r.data or {}).get("compute_s") or {})
            self.task_flow.add(r.run_s)
        elif r.kind == "cache":
            c = self.cache.setdefault(r.name, {"lookups": 0, "hits": 0, "search": self._dist()})
            c["lookups"] += 1
            c["hits"] += 1 if r.hit else 0
            c["search"].add(r.run_s)
        elif r.kind == "llm":
            self._llm(r.name, r.outcome, 1, r.tokens_in or 0, r.tokens_out or 0, r.cost or 0.0)
            self.llm[r.name]["latency"].add(r.run_s)
        elif r.kind == "policy":
            self.policy[r.name] = self.policy.get(r.name, 0) + 1
        elif r.kind == "tuning":
            self.tuning[r.outcome] = self.tuning.get(r.outcome, 0) + 1

    def add_minute(self, m: TelemetryMinuteRow) -> None:
        if m.kind == "node":
            t = self._tool(m.name, m.pool)
            t["outcomes"][m.outcome] = t["outcomes"].get(m.outcome, 0) + m.count
            t["run"].merge_hist(m.run_hist, m.run_sum)
            t["wait"].merge_hist(m.wait_hist, m.wait_sum)
            self.pools.setdefault(m.pool, self._dist()).merge_hist(m.wait_hist, m.wait_sum)
        elif m.kind == "task":
            self._task(m.outcome, m.count, m.cost_sum, (m.data or {}).get("compute_s") or {})
            self.task_flow.merge_hist(m.run_hist, m.run_sum)
        elif m.kind == "cache":
            c = self.cache.setdefault(m.name, {"lookups": 0, "hits": 0, "search": self._dist()})
            c["lookups"] += m.count
            c["hits"] += m.hits
            c["search"].merge_hist(m.run_hist, m.run_sum)
        elif m.kind == "llm":
            self._llm(m.name, m.outcome, m.count, m.tokens_in, m.tokens_out, m.cost_sum)
            self.llm[m.name]["latency"].merge_hist(m.run_hist, m.run_sum)
        elif m.kind == "policy":
            self.policy[m.name] = self.policy.get(m.name, 0) + m.count
        elif m.kind == "tuning":
            self.tuning[m.outcome] = self.tuning.get(m.outcome, 0) + m.count

    def _task(self, outcome: str, n: int, cost: float, compute: dict[str, float]) -> None:
        self.task_outcomes[outcome] = self.task_outcomes.get(outcome, 0) + n
        self.task_cost += cost
        for pool, sec in compute.items():
            self.task_compute[pool] = self.task_compute.get(pool, 0.0) + float(sec)

    def _llm(self, model: str, outcome: str, n: int, tin: int, tout: int, cost: float) -> None:
        m = self.llm.setdefault(
            model, {"calls": 0, "errors": 0, "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "latency": self._dist()}
        )
        m["calls"] += n
        m["errors"] += n if outcome != "ok" else 0
        m["tokens_in"] += tin
        m["tokens_out"] += tout
        m["cost"] += cost

    def result(self, prices: dict[str, float]) -> dict[str, Any]:
        tools = []
        for (tool, pool), t in sorted(self.tools.items()):
            n = sum(t["outcomes"].values())
            errors = sum(v for k, v in t["outcomes"].items() if k in ("failed", "timeout", "lost"))
            tools.append(
                {
                    "tool": tool,
                    "pool": pool,
                    "attempts": n,
                    "outcomes": t["outcomes"],
                    "error_rate": _rate(errors, n),
                    "timeout_rate": _rate(t["outcomes"].get("timeout", 0), n),
                    "run_s": t["run"].summary(),
                    "queue_wait_s": t["wait"].summary(),
                }
            )
        workers = [
            {"tool": tool, "worker": w, "runs": d.count, "run_p50": d.quantile(0.5)}
            for (tool, w), d in sorted(self.workers.items())
        ]
        n_tasks = sum(self.task_outcomes.values())
        compute_cost = sum(
            sec * prices.get(pool, prices.get(pool.split(".", 1)[0], 0.0)) for pool, sec in self.task_compute.items()
        )
        return {
            "tasks": {
                "count": n_tasks,
                "outcomes": self.task_outcomes,
                "error_rate": _rate(self.task_outcomes.get("failed", 0), n_tasks),
                "flow_s": self.task_flow.summary(),
                "compute_s": {k: round(v, 6) for k, v in self.task_compute.items()},
                "llm_cost": round(self.task_cost, 8),
                "cost_per_task": round((self.task_cost + compute_cost) / n_tasks, 8) if n_tasks else None,
            },
            "tools": tools,
            "pools": {p: {"queue_wait_s": d.summary()} for p, d in sorted(self.pools.items())},
            "workers": workers,
            "cache": {
                cat: {
                    "lookups": c["lookups"],
                    "hits": c["hits"],
                    "hit_rate": _rate(c["hits"], c["lookups"]),
                    "search_s": c["search"].summary(),
                }
                for cat, c in sorted(self.cache.items())
            },
            "llm": {
                model: {
                    "calls": m["calls"],
                    "errors": m["errors"],
                    "tokens_in": m["tokens_in"],
                    "tokens_out": m["tokens_out"],
                    "cost": round(m["cost"], 8),
                    "latency_s": m["latency"].summary(),
                }
                for model, m in sorted(self.llm.items())
            },
            "policy_changes": self.policy,
            "tuning_runs": self.tuning,
        }
