"""/metrics: prometheus_client objects counted as things happen, summed across processes, never going down
when telemetry expires, and a scrape that never reads the telemetry table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from core.db import Store
from core.metrics import metrics
from core.settings import Settings
from core.telemetry import Telemetry
from services.api.metrics import registry_for

ROOT = Path(__file__).resolve().parents[2]

_RECORDER = """
import sys
from pathlib import Path
from types import SimpleNamespace
from core.metrics import enable_multiprocess, metrics
enable_multiprocess(Path(sys.argv[1]))
row = SimpleNamespace(kind="node", name="disk_usage", pool="cpu", outcome="succeeded", run_s=0.2, wait_s=0.01)
for _ in range(int(sys.argv[2])):
    metrics().observe(row)
"""


def _samples(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def _record_in_a_process(path: Path, n: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    subprocess.run([sys.executable, "-c", _RECORDER, str(path), str(n)], check=True, env=env, cwd=ROOT)


def test_counts_from_several_processes_are_summed_and_outlive_them(tmp_path: Path) -> None:
    _record_in_a_process(tmp_path, 3)
    _record_in_a_process(tmp_path, 4)  # a second process (a worker's pool child), then both have exited
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    labels = {"tool": "disk_usage", "pool": "cpu", "outcome": "succeeded"}
    assert _samples(text, "opsgraph_node_attempts_total", **labels) == 7
    assert _samples(text, "opsgraph_node_run_seconds_count", tool="disk_usage", pool="cpu") == 7
    assert _samples(text, "opsgraph_node_queue_wait_seconds_count", pool="cpu") == 7


class _NoTable:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a scrape read the telemetry table (telemetry.{name})")


def _scrape() -> str:
    ctx = SimpleNamespace(
        telemetry=_NoTable(),
        policies=SimpleNamespace(current_version=lambda: (3, None)),
        redis=None,  # away: the live gauges are left out, the counters still go out
        settings=SimpleNamespace(pools=["cpu", "gpu"]),
    )
    return generate_latest(registry_for(ctx)).decode()


def test_counters_follow_telemetry_and_never_go_down_when_it_expires(tmp_path: Path) -> None:
    store = Store.from_settings(Settings(var_dir=tmp_path))
    telemetry = Telemetry(store)
    before = _scrape()
    old = time.time() - 3 * 86_400
    for outcome in ("succeeded", "succeeded", "failed"):
        telemetry.record("task", outcome=outcome, run_s=1.5, ts=old)
    telemetry.record("llm", name="fake-model", outcome="ok", tokens_in=100, tokens_out=20, cost=0.01, ts=old)
    telemetry.record("cache", name="diagnosis", hit=True, ts=old)
    after = _scrape()
    assert (
        _samples(after, "opsgraph_tasks_total", outcome="succeeded")
        - _samples(before, "opsgraph_tasks_total", outcome="succeeded")
        == 2
    )
    assert (
        _samples(after, "opsgraph_llm_tokens_total", model="fake-model", direction="in")
        - _samples(before, "opsgraph_llm_tokens_total", model="fake-model", direction="in")
        == 100
    )
    assert _samples(after, "opsgraph_cache_lookups_total", category="diagnosis", result="hit") >= 1
    # everything rolled up and then dropped: the database forgets, the counters do not
    telemetry.rollup(raw_retention_s=60, rollup_retention_s=60)
    assert telemetry.rows("task", 0, time.time()) == []
    expired = _scrape()
    for name, labels in [
        ("opsgraph_tasks_total", {"outcome": "succeeded"}),
        ("opsgraph_tasks_total", {"outcome": "failed"}),
        ("opsgraph_llm_tokens_total", {"model": "fake-model", "direction": "in"}),
        ("opsgraph_task_duration_seconds_count", {}),
    ]:
        assert _samples(expired, name, **labels) == _samples(after, name, **labels), name
    assert "opsgraph_policy_version 3.0" in expired
    store.engine.dispose()


def test_a_scrape_carries_process_metrics() -> None:
    metrics()  # made, as in any process that counted something
    assert "process_cpu_seconds_total" in _scrape()
