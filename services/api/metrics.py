"""/metrics in Prometheus's text format, with the names a Prometheus user expects (counters `_total`,
histograms `_seconds`). Counters come from the database's telemetry (raw rows and per-minute rollups), so
every API process reports the same figures and a restart resets nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from core.heartbeats import live_workers, queue_depth
from core.telemetry import BUCKETS, Dist


def _buckets(dist: Dist) -> list[tuple[str, float]]:
    out, seen = [], 0
    for bound, n in zip([*map(str, BUCKETS), "+Inf"], dist.hist, strict=True):
        seen += n
        out.append((bound, float(seen)))
    return out


class OpsCollector(Collector):
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Any]:
        acc = self.ctx.telemetry.totals()
        tasks = CounterMetricFamily("opsgraph_tasks", "Tasks ended, by outcome.", labels=["outcome"])
        for outcome, n in sorted(acc.task_outcomes.items()):
            tasks.add_metric([outcome], n)
        yield tasks
        flow = HistogramMetricFamily("opsgraph_task_duration_seconds", "Flow time of ended tasks.", labels=[])
        flow.add_metric([], _buckets(acc.task_flow), acc.task_flow.total)
        yield flow
        attempts = CounterMetricFamily(
            "opsgraph_node_attempts",
            "Node attempts ended, by tool, pool and outcome.",
            labels=["tool", "pool", "outcome"],
        )
        run = HistogramMetricFamily("opsgraph_node_run_seconds", "Run time of node attempts.", labels=["tool", "pool"])
        for (tool, pool), t in sorted(acc.tools.items()):
            for outcome, n in sorted(t["outcomes"].items()):
                attempts.add_metric([tool, pool, outcome], n)
            run.add_metric([tool, pool], _buckets(t["run"]), t["run"].total)
        yield attempts
        yield run
        wait = HistogramMetricFamily(
            "opsgraph_node_queue_wait_seconds", "From release to a worker's start, by pool.", labels=["pool"]
        )
        for pool, d in sorted(acc.pools.items()):
            wait.add_metric([pool], _buckets(d), d.total)
        yield wait
        lookups = CounterMetricFamily(
            "opsgraph_cache_lookups", "Semantic cache lookups by category and result.", labels=["category", "result"]
        )
        for cat, c in sorted(acc.cache.items()):
            lookups.add_metric([cat, "hit"], c["hits"])
            lookups.add_metric([cat, "miss"], c["lookups"] - c["hits"])
        yield lookups
        calls = CounterMetricFamily("opsgraph_llm_calls", "LLM calls by model and result.", labels=["model", "result"])
        tokens = CounterMetricFamily(
            "opsgraph_llm_tokens", "LLM tokens by model and direction.", labels=["model", "direction"]
        )
        cost = CounterMetricFamily("opsgraph_llm_cost_usd", "LLM spend by model (policy prices).", labels=["model"])
        for model, m in sorted(acc.llm.items()):
            calls.add_metric([model, "ok"], m["calls"] - m["errors"])
            calls.add_metric([model, "error"], m["errors"])
            tokens.add_metric([model, "in"], m["tokens_in"])
            tokens.add_metric([model, "out"], m["tokens_out"])
            cost.add_metric([model], m["cost"])
        yield from (calls, tokens, cost)
        changes = CounterMetricFamily(
            "opsgraph_policy_changes", "Policy versions written, by author.", labels=["author"]
        )
        for author, n in sorted(acc.policy.items()):
            changes.add_metric([author], n)
        yield changes
        tuning = CounterMetricFamily("opsgraph_tuning_runs", "Tuning runs by decision.", labels=["decision"])
        for decision, n in sorted(acc.tuning.items()):
            tuning.add_metric([decision], n)
        yield tuning
        version = GaugeMetricFamily("opsgraph_policy_version", "The policy version in force.")
        version.add_metric([], self.ctx.policies.current_version()[0])
        yield version
        yield from self._live()

    def _live(self) -> Iterator[Any]:
        workers = GaugeMetricFamily("opsgraph_workers", "Live workers consuming each pool.", labels=["pool"])
        depth = GaugeMetricFamily("opsgraph_queue_depth", "Messages waiting on each pool's queue.", labels=["pool"])
        try:
            live = live_workers(self.ctx.redis)
            for pool in self.ctx.settings.pools:
                workers.add_metric([pool], sum(1 for w in live if pool in w.get("queues", [])))
                depth.add_metric([pool], queue_depth(self.ctx.redis, pool) or 0)
        except Exception:  # Redis away: the database's figures still go out
            return
        yield workers
        yield depth


def registry_for(ctx: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpsCollector(ctx))
    return registry
