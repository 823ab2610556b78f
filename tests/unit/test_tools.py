from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.settings import Settings
from core.types import Effect, ToolStatus
from tools import CATALOG, ToolContext
from tools.anomalies import robust_scores


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(settings=Settings(var_dir=tmp_path, log_roots=[tmp_path / "logs"]))


def test_every_tool_has_a_description_schema_pool_and_timeout() -> None:
    names = CATALOG.names()
    for required in [
        "host_metrics",
        "http_probe",
        "log_search",
        "process_check",
        "redis_info",
        "postgres_activity",
        "pool_status",
        "metric_anomalies",
    ]:
        assert required in names
    for spec in CATALOG:
        if spec.fn.__module__.startswith("tests."):
            continue  # fault-injection tools other tests load into the same catalog
        d = spec.describe(Settings())
        assert d["description"] and d["args_schema"]["type"] == "object"
        assert spec.pool in ("cpu", "gpu") and spec.timeout_s > 0
        # write tools (remediation) never run twice by accident and show what they would do before they run
        assert spec.effect == Effect.READ or (not spec.idempotent and spec.preview_fn is not None), spec.name
    assert CATALOG.get("metric_anomalies").pool == "gpu"
    assert Settings().http_targets and CATALOG.get("postgres_activity").describe(Settings())["available"] is False


def test_http_probe_only_calls_allowed_hosts(ctx: ToolContext) -> None:
    r = CATALOG.get("http_probe").run({"url": "http://example.org/"}, ctx)
    assert r.status == ToolStatus.ERROR and r.data["error_code"] == "target_not_allowed"
    r = CATALOG.get("http_probe").run({"url": "http://127.0.0.1:9/"}, ctx)  # allowed, nothing listening
    assert r.status == ToolStatus.SUCCESS and r.data["healthy"] is False


def test_log_search_refuses_paths_that_escape_its_roots(ctx: ToolContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "secret.log").write_text("ERROR password=hunter2\n")
    os.symlink(tmp_path / "secret.log", logs / "link.log")
    tool = CATALOG.get("log_search")
    for path in [str(tmp_path / "secret.log"), str(logs / ".." / "secret.log"), str(logs / "link.log")]:
        r = tool.run({"path": path}, ctx)
        assert r.status == ToolStatus.ERROR and r.data["error_code"] == "target_not_allowed", path


def test_log_search_respects_the_time_window(ctx: ToolContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log").write_text(
        "2001-01-01 00:00:00 ERROR ancient\n"
        "2001-01-01 00:00:01 ERROR ancient trace line follows\n"
        "  Traceback (error inherits the stamp above)\n"
        f"{__import__('datetime').datetime.now():%Y-%m-%d %H:%M:%S} ERROR fresh\n"
    )
    r = CATALOG.get("log_search").run({"path": str(logs), "pattern": "(?i)error", "since_minutes": 10}, ctx)
    assert r.data["matches"] == 1 and "fresh" in r.data["samples"][0]


def test_the_default_log_pattern_matches_error_words_not_package_names(ctx: ToolContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "history.log").write_text(
        "Install: libgpg-error0:amd64 (1.46-1)\nconnection refused\nTimeout: oom killer\n"
    )
    for pattern in (None, ""):
        args = {"path": str(logs)} if pattern is None else {"path": str(logs), "pattern": pattern}
        r = CATALOG.get("log_search").run(args, ctx)
        assert r.data["matches"] == 2 and r.data["terms"] == {"refused": 1, "timeout": 1}


def test_metric_anomalies_finds_a_spike_and_not_noise(ctx: ToolContext) -> None:
    flat = [10.0, 11.0, 10.0, 9.0, 10.0, 11.0, 10.0, 9.0, 10.0, 10.0]
    assert max(robust_scores(flat, 5, "cpu")[0]) < 3.5
    # a high first sample is the anomaly; the normal points after it are not
    scores, _ = robust_scores([24.4, 2.5, 0.0, 3.0, 2.0, 4.0, 3.0, 2.5, 3.5, 3.0], 5, "cpu")
    assert [i for i, s in enumerate(scores) if s > 3.5] == [0]
    r = CATALOG.get("metric_anomalies").run({"series": [*flat, 95.0, *flat]}, ctx)
    assert r.status == ToolStatus.SUCCESS
    assert [a["index"] for a in r.data["anomalies"]] == [10]
    small = CATALOG.get("metric_anomalies").run({"series": [*flat, 95.0, *flat], "min_delta": 90}, ctx)
    assert small.data["anomalies"] == []  # 85 points above baseline is under the asked-for 90
    bad = CATALOG.get("metric_anomalies").run({"series": [1.0], "metric": "cpu"}, ctx)
    assert bad.status == ToolStatus.ERROR and "exactly one" in bad.summary


def test_process_check_finds_a_running_process(ctx: ToolContext) -> None:
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        r = CATALOG.get("process_check").run({"name": "sleep"}, ctx)
        assert child.pid in [p["pid"] for p in r.data["processes"]] and r.data["healthy"]
    finally:
        child.kill()
    r = CATALOG.get("process_check").run({"name": "no-such-process-xyz"}, ctx)
    assert r.status == ToolStatus.NO_DATA and r.data["healthy"] is False


def test_host_metrics_measures_this_machine(ctx: ToolContext) -> None:
    r = CATALOG.get("host_metrics").run({"sample_seconds": 0.4}, ctx)
    assert r.status == ToolStatus.SUCCESS
    assert r.data["cores"] >= 1 and len(r.data["cpu_series"]) == 2 and r.data["disks"]
    assert r.data["findings"] and r.evidence


def test_passwords_in_urls_are_masked() -> None:
    from core.logging import redact, redact_value

    assert redact("connect postgresql://ops:s3cret@db:5432/x failed") == "connect postgresql://ops:***@db:5432/x failed"
    assert redact_value({"api_key": "sk-1", "url": "redis://:pw@h:6379/0"}) == {
        "api_key": "***",
        "url": "redis://:***@h:6379/0",
    }


def test_every_tool_s_hard_timeout_fits_under_the_default_visibility_timeout() -> None:
    """The API refuses to start otherwise (a running attempt would be delivered twice)."""
    from core.settings import Settings
    from tools import load_tool_modules
    from workers.release import check_visibility

    check_visibility(Settings(), load_tool_modules(Settings().tool_modules))
