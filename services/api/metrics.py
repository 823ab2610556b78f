"""/metrics in Prometheus's text format. Counters and histograms are prometheus_client objects that every
process updates as things happen (core.metrics), summed across processes from their multiprocess files; the
scrape adds a few gauges computed now (policy version, live workers, queue depth) and this process's own
process metrics. A scrape never reads the telemetry table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.heartbeats import live_workers, queue_depth
from core.metrics import metrics, multiprocess_dir


class LiveGauges(Collector):
    """Gauges read at scrape time: bounded (one query of the policy version, one Redis read per pool)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Any]:
        version = GaugeMetricFamily("opsgraph_policy_version", "The policy version in force.")
        try:
            version.add_metric([], self.ctx.policies.current_version()[0])
            yield version
        except Exception:  # the database away: the counters still go out
            pass
        workers = GaugeMetricFamily("opsgraph_workers", "Live workers consuming each pool.", labels=["pool"])
        depth = GaugeMetricFamily("opsgraph_queue_depth", "Messages waiting on each pool's queue.", labels=["pool"])
        try:
            live = live_workers(self.ctx.redis)
            for pool in self.ctx.settings.pools:
                workers.add_metric([pool], sum(1 for w in live if pool in w.get("queues", [])))
                depth.add_metric([pool], queue_depth(self.ctx.redis, pool) or 0)
        except Exception:  # Redis away
            return
        yield workers
        yield depth


def registry_for(ctx: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir() is not None:
        multiprocess.MultiProcessCollector(registry)  # every process's counters and histograms, summed
    else:
        registry.register(_Forward(metrics().registry))  # one process: its own objects
    ProcessCollector(registry=registry)  # the API process: CPU, memory, open files
    registry.register(LiveGauges(ctx))
    return registry


class _Forward(Collector):
    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        yield from self.source.collect()


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpMetricsMiddleware:
    """Requests by method, route template (never the raw path: ids would explode the label set) and status,
    and their latency."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "<unmatched>"
            method = scope["method"] if scope["method"] in _METHODS else "other"  # a client names any method
            m = metrics()
            m.http_requests.labels(method, template, str(status)).inc()
            m.http_duration.labels(method, template).observe(time.perf_counter() - started)
