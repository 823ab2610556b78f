"""Prometheus metrics as prometheus_client objects, updated as things happen, in every process.

Counters and histograms mirror the telemetry rows (one `observe` per row written), so /metrics and the
database agree while neither depends on the other: the database keeps what the tuner reads (and expires it),
the counters only ever go up. Across processes (the API, each Celery worker and its pool children) the values
live in prometheus_client's multiprocess files under VAR_DIR/prometheus; the API's scrape sums them.

The library chooses where values live when its first metric is made, from PROMETHEUS_MULTIPROC_DIR: so every
entry point calls `enable_multiprocess` before anything records a metric."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess, values

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable: it is the library's switch
_DB_FILE = re.compile(r"^[a-z]+(?:_[a-z]+)?_(\d+)\.db$")


def multiprocess_dir() -> Path | None:
    raw = os.environ.get(MULTIPROC_ENV)
    return Path(raw) if raw else None


def enable_multiprocess(path: Path, *, clean: str = "none") -> Path:
    """Keep this process's metric values in `path`, shared with the other opsgraph processes.

    clean: "all" empties the folder (the launcher, before any child starts); "stale" removes the files of
    processes no longer alive (an API started on its own, beside workers that may already run); "none"."""
    path.mkdir(parents=True, exist_ok=True)
    for f in path.glob("*.db"):
        match = _DB_FILE.match(f.name)
        dead = match is not None and not psutil.pid_exists(int(match.group(1)))
        if clean == "all" or (clean == "stale" and dead):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    os.environ[MULTIPROC_ENV] = str(path)
    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.get_value_class()  # chosen at the library's import; choose again now
    return path


def process_exited(pid: int) -> None:
    """A process of ours ended (a pool child, the API): drop its live gauges; its counters stay counted."""
    if multiprocess_dir() is not None:
        with contextlib.suppress(Exception):
            multiprocess.mark_process_dead(pid)


class OpsMetrics:
    """Every metric opsgraph records. Names follow Prometheus conventions (docs/limits-and-metrics.md)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from core.telemetry import BUCKETS  # the database's histogram bounds (core.telemetry imports this module)

        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        r = self.registry
        self.node_attempts = Counter(
            "opsgraph_node_attempts",
            "Node attempts ended, by tool, pool and outcome.",
            ["tool", "pool", "outcome"],
            registry=r,
        )
        self.node_run = Histogram(
            "opsgraph_node_run_seconds", "Run time of node attempts.", ["tool", "pool"], buckets=BUCKETS, registry=r
        )
        self.node_wait = Histogram(
            "opsgraph_node_queue_wait_seconds",
            "From release to a worker's start, by pool.",
            ["pool"],
            buckets=BUCKETS,
            registry=r,
        )
        self.tasks = Counter("opsgraph_tasks", "Tasks ended, by outcome.", ["outcome"], registry=r)
        self.task_duration = Histogram(
            "opsgraph_task_duration_seconds", "Flow time of ended tasks.", buckets=BUCKETS, registry=r
        )
        self.cache_lookups = Counter(
            "opsgraph_cache_lookups",
            "Semantic cache lookups by category and result.",
            ["category", "result"],
            registry=r,
        )
        self.llm_calls = Counter(
            "opsgraph_llm_calls", "LLM calls by model and result.", ["model", "result"], registry=r
        )
        self.llm_tokens = Counter(
            "opsgraph_llm_tokens", "LLM tokens by model and direction.", ["model", "direction"], registry=r
        )
        self.llm_cost = Counter("opsgraph_llm_cost_usd", "LLM spend by model (policy prices).", ["model"], registry=r)
        self.policy_changes = Counter(
            "opsgraph_policy_changes", "Policy versions written, by author.", ["author"], registry=r
        )
        self.tuning_runs = Counter("opsgraph_tuning_runs", "Tuning runs by decision.", ["decision"], registry=r)
        self.http_requests = Counter(
            "opsgraph_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "opsgraph_http_request_duration_seconds",
            "HTTP request latency (to the last byte sent) by method and route template.",
            ["method", "route"],
            buckets=BUCKETS,
            registry=r,
        )

    def observe(self, row: Any) -> None:
        """Count one telemetry row (core.db.TelemetryRow or anything with its fields)."""
        kind = row.kind
        if kind == "node":
            self.node_attempts.labels(row.name, row.pool, row.outcome).inc()
            if row.run_s is not None:
                self.node_run.labels(row.name, row.pool).observe(row.run_s)
            if row.wait_s is not None:
                self.node_wait.labels(row.pool).observe(row.wait_s)
        elif kind == "task":
            self.tasks.labels(row.outcome).inc()
            if row.run_s is not None:
                self.task_duration.observe(row.run_s)
        elif kind == "cache":
            self.cache_lookups.labels(row.name, "hit" if row.hit else "miss").inc()
        elif kind == "llm":
            self.llm_calls.labels(row.name, "ok" if row.outcome == "ok" else "error").inc()
            self.llm_tokens.labels(row.name, "in").inc(row.tokens_in or 0)
            self.llm_tokens.labels(row.name, "out").inc(row.tokens_out or 0)
            self.llm_cost.labels(row.name).inc(max(0.0, row.cost or 0.0))
        elif kind == "policy":
            self.policy_changes.labels(row.name).inc()
        elif kind == "tuning":
            self.tuning_runs.labels(row.outcome).inc()

    def observe_all(self, rows: Iterable[Any]) -> None:
        for row in rows:
            try:
                self.observe(row)
            except Exception:  # a metric never fails the action it measures
                continue


_metrics: OpsMetrics | None = None


def metrics() -> OpsMetrics:
    """This process's metrics, made on first use (after `enable_multiprocess`, where the entry point calls it)."""
    global _metrics
    if _metrics is None:
        _metrics = OpsMetrics()
    return _metrics
