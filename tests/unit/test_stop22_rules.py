"""Stop 22: a trend that has barely moved says nothing about exhaustion; a task a runner reports killed by SIGKILL
at info level is a kill from outside; a Capistrano release pins the CPU of the hosts that run it."""

from __future__ import annotations

from pathlib import Path

from diagnosis.analyzers.logs import log_errors
from diagnosis.analyzers.metrics import metric_series
from diagnosis.analyzers.regressions import release_regressions
from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import LineParser
from tests.unit._evidence_builders import T0, Builder, by_code


def _falling(start: float, end: float, n: int = 15) -> list[tuple[float, float]]:
    return [(T0 + 60 * i, start + (end - start) * i / (n - 1)) for i in range(n)]


def test_a_trend_that_covered_little_of_the_way_to_zero_is_not_exhaustion() -> None:
    b = Builder()
    b.metric("node_memory_MemAvailable_bytes", _falling(25.1e9, 24.2e9), {"instance": "worker-3:9100"})
    assert not by_code(metric_series(b.set()), "trend_to_exhaustion")
    b = Builder()
    b.metric("node_memory_MemAvailable_bytes", _falling(12e9, 6e9), {"instance": "worker-3:9100"})
    [f] = by_code(metric_series(b.set()), "trend_to_exhaustion")
    assert "worker-3" in f.title


def test_a_task_killed_with_return_code_minus_9_is_a_kill_from_outside_not_a_recovery() -> None:
    b = Builder()
    lines: list[tuple[float, str | None, str]] = [(T0 + 30 * i, "info", f"loaded chunk {i}/60") for i in range(20)]
    lines += [
        (T0 + 601, "info", "Task exited with return code -9For more information, see https://airflow.apache.org/docs"),
        (T0 + 601, "info", "Marking task as FAILED. dag_id=ledger_nightly, task_id=build_balances"),
    ]
    b.log("build_balances", lines)
    b.log("scheduler", [(T0, "info", "started"), (T0 + 9 * 3600, "info", "heartbeat")])  # now is hours later
    [f] = by_code(log_errors(b.set()), "killed_from_outside")
    assert "SIGKILL" in f.title and f.role == "symptom"
    b = Builder()  # the same line with a return code that is not a signal is not a kill
    b.log("build_balances", [*lines[:20], (T0 + 601, "info", "Task exited with return code 1")])
    assert not by_code(log_errors(b.set()), "killed_from_outside")


def _cpu(before: float, after: float, jump_at: float) -> list[tuple[float, float]]:
    return [(T0 + 60 * i, before if T0 + 60 * i < jump_at else after) for i in range(60)]


def test_a_capistrano_release_that_pins_every_host_s_cpu_at_flat_traffic_is_a_code_defect(tmp_path: Path) -> None:
    ts, _, _ = LineParser().parse("Branch main (at 4be91c2) deployed as release 20231114221320 by jenkins")
    assert ts == T0
    ts, _, _ = LineParser().parse("Branch main (at 4be91c2) deployed as release 20231399999999 by jenkins")
    assert ts is None  # a release id that is no time names no time
    release_at = T0 + 20 * 60
    stamp = "20231114223320"  # T0 + 20 min
    (tmp_path / "deploy.txt").write_text(
        "ci@ci-02:~$ ssh deploy@web-1 tail -n 3 /srv/listings/revisions.log\n"
        "Branch main (at 2f7a0c9) deployed as release 20231110091806 by jenkins\n"
        "Branch main (at 6c03b1e) deployed as release 20231112154120 by jenkins\n"
        f"Branch main (at 4be91c2) deployed as release {stamp} by jenkins\n"
    )
    ev = load_bundle(tmp_path)
    b = Builder()
    b.items.extend(ev.kind("log"))
    for host in ("web-1", "web-2", "web-3"):
        b.metric("cpu_busy", _cpu(0.25, 0.97, release_at + 9 * 60), {"instance": f"{host}:9100", "job": "node"})
    b.metric("requests", [(T0 + 60 * i, 330.0) for i in range(60)], {"service": "listings-web"})
    [f] = by_code(release_regressions(b.set()), "cpu_regression")
    assert "listings" in f.title and "4be91c2" in f.title and "web-2" in f.title
    # traffic that tripled with the release: capacity, not the release
    b.items = [i for i in b.items if "requests" not in i.object]
    b.metric("requests", [(T0 + 60 * i, 330.0 if i < 20 else 1000.0) for i in range(60)], {"service": "listings-web"})
    assert not by_code(release_regressions(b.set()), "cpu_regression")
    # one host that stayed cool: not the release
    b = Builder()
    b.items.extend(ev.kind("log"))
    b.metric("cpu_busy", _cpu(0.25, 0.97, release_at + 9 * 60), {"instance": "web-1:9100", "job": "node"})
    b.metric("cpu_busy", _cpu(0.25, 0.27, release_at + 9 * 60), {"instance": "web-2:9100", "job": "node"})
    b.metric("requests", [(T0 + 60 * i, 330.0) for i in range(60)], {"service": "listings-web"})
    assert not by_code(release_regressions(b.set()), "cpu_regression")


def test_memory_that_would_run_out_in_hours_is_not_why_a_process_was_killed_already() -> None:
    from diagnosis.investigate import investigate

    kill = "wl-idx-03 systemd[1]: indexer.service: Main process exited, code=killed, status=9/KILL"
    b = Builder()
    b.metric("node_memory_MemAvailable_bytes", _falling(22e9, 14e9, 40), {"instance": "wl-idx-03:9100"})
    lines: list[tuple[float, str | None, str]] = [(T0 + 60 * i, None, "indexed batch") for i in range(40)]
    lines[5] = (T0 + 300, None, kill)
    lines[15] = (T0 + 900, None, kill)
    lines[25] = (T0 + 1500, None, kill)
    b.log("syslog", lines)
    d = investigate(b.set(), "why does the indexer keep getting killed?")
    assert d.category == "unknown" and "SIGKILL" in d.root_cause
    # the trend alone, with nothing failing beside it, is still the forecast it is
    b = Builder()
    b.metric("node_memory_MemAvailable_bytes", _falling(22e9, 14e9, 40), {"instance": "wl-idx-03:9100"})
    assert investigate(b.set()).category == "resource_exhaustion"


def test_a_leak_the_runtime_reports_is_the_cause_of_the_pool_that_ran_dry() -> None:
    from diagnosis.analyzers.logs import runtime_leaks

    b = Builder()
    b.log(
        "invoicing",
        [(T0, "warn", "com.zaxxer.hikari.pool.ProxyLeakTask : Connection leak detection triggered for "
                      "org.postgresql.jdbc.PgConnection@1e6c6f2 on thread http-nio-8080-exec-31, stack trace follows"),
         (T0, None, "java.lang.Exception: Apparent connection leak detected"),
         (T0, None, "\tat com.zaxxer.hikari.HikariDataSource.getConnection(HikariDataSource.java:127)"),
         (T0, None, "\tat com.acme.invoicing.export.PdfExportService.openCursor(PdfExportService.java:88)"),
         (T0 + 60, "info", "GET /api/v2/invoices 200 28ms")],
    )  # fmt: skip
    [f] = runtime_leaks(b.set())
    assert f.category == "code_defect" and "PdfExportService.openCursor" in f.title
    b = Builder()
    warning = (
        "(node:1) MaxListenersExceededWarning: Possible EventEmitter memory leak detected. 11 return listeners "
        "added to [ConfirmChannel]. MaxListeners is 10."
    )
    b.log("notifier", [(T0, "warn", warning)])
    [f] = runtime_leaks(b.set())
    assert "ConfirmChannel" in f.mechanism
    b = Builder()
    b.log("api", [(T0, "info", "closed leaked-metrics exporter"), (T0, "error", "memory leak suspected by user")])
    assert not runtime_leaks(b.set())


def test_redis_full_after_a_diff_set_noeviction_is_the_setting_not_the_size(tmp_path: Path) -> None:
    from diagnosis.investigate import investigate

    (tmp_path / "ansible.log").write_text(
        "2024-10-07 14:04:12,201 p=41022 u=ml n=ansible | ansible-playbook redis.yml --diff\n"
        "2024-10-07 14:04:20,511 p=41022 u=ml n=ansible | --- before: /etc/redis/redis.conf\n"
        "+++ after: /tmp/redis.conf.j2\n@@ -48,5 +48,5 @@\n maxmemory 4gb\n-maxmemory-policy allkeys-lru\n"
        "+maxmemory-policy noeviction\n maxmemory-samples 5\n"
        "2024-10-07 14:04:20,512 p=41022 u=ml n=ansible | changed: [cache-sess-01]\n"
    )
    (tmp_path / "info.txt").write_text(
        "ops@cache-sess-01:~$ redis-cli INFO memory\n# Memory\nused_memory:4294960000\nused_memory_human:4.00G\n"
        "maxmemory:4294967296\nmaxmemory_human:4.00G\nmaxmemory_policy:noeviction\n"
    )
    d = investigate(load_bundle(tmp_path))
    assert d.category == "configuration_error" and "noeviction" in d.root_cause
    # a maxmemory lowered in redis.conf's own units (8gb = 8 GiB, 4096mb = 4 GiB) is the same kind of change
    ansible = (tmp_path / "ansible.log").read_text()
    (tmp_path / "ansible.log").write_text(
        ansible.replace(" maxmemory 4gb\n", "-maxmemory 8gb\n+maxmemory 4096mb\n").replace(
            "-maxmemory-policy allkeys-lru\n+maxmemory-policy noeviction\n", " maxmemory-policy noeviction\n"
        )
    )
    d = investigate(load_bundle(tmp_path))
    assert (
        d.category == "configuration_error" and "maxmemory of Redis info was changed from 8gb to 4096mb" in d.root_cause
    )
    from diagnosis.analyzers.database.keyvalue import redis_bytes

    assert redis_bytes("4gb") == 4 * 1024**3 and redis_bytes("4g") == 4e9 and redis_bytes("100") == 100.0
    assert redis_bytes("lots") is None
    (tmp_path / "ansible.log").unlink()
    assert investigate(load_bundle(tmp_path)).category == "resource_exhaustion"


def test_a_pool_dry_for_two_minutes_long_ago_is_a_symptom_and_one_forced_checkpoint_is_advice() -> None:
    from diagnosis.analyzers.database import database

    b = Builder()
    pool = "HikariPool-1 - Connection is not available, request timed out after 30000ms"
    lines: list[tuple[float, str | None, str]] = [(T0 + 20 * i, "error", pool) for i in range(5)]
    lines += [(T0 + 3600, "info", "GET /health 200")]
    b.log("uw-api", lines)
    b.log("postgresql-14-main.log", [(T0, "log", "checkpoints are occurring too frequently (260 seconds apart)")])
    findings = database(b.set())
    [pool_f] = by_code(findings, "app_pool_exhausted")
    assert pool_f.role == "symptom"
    assert by_code(findings, "checkpoint_once") and not by_code(findings, "checkpoint_storm")


def test_a_chaos_mesh_schedule_is_planned_work_and_a_call_retried_once_is_absorbed() -> None:
    from diagnosis.analyzers.changes import planned_work
    from diagnosis.analyzers.network import network_failures

    b = Builder()
    b._add(
        "k8s/Schedule",
        "Schedule/store/gameday-checkout-pod-kill",
        {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "gameday-checkout-pod-kill"},
         "spec": {"schedule": "0-40/10 10 * * *", "type": "PodChaos"}},
    )  # fmt: skip
    [f] = planned_work(b.set())
    assert "chaos experiment" in f.title and "PodChaos" in f.title
    b = Builder()
    retry = "Retrying inventory call after HttpRequestException: Connection refused (10.244.1.88:8080) (attempt 1)"
    lines: list[tuple[float, str | None, str]] = [(T0 + 60 * i, "info", "POST /checkout 200") for i in range(30)]
    for i in (3, 13, 23):
        lines[i] = (T0 + 60 * i, "warn", retry)
    b.log("checkout", lines)
    found = network_failures(b.set())
    assert found and all(f.role == "benign" and f.code.endswith("_retried") for f in found)
    lines[24] = (T0 + 60 * 24, "warn", retry.replace("(attempt 1)", "(attempt 2)"))  # the first retry failed too
    b = Builder()
    b.log("checkout", lines)
    assert any(f.role == "cause" for f in network_failures(b.set()))


def test_a_markdown_change_record_in_bold_fields_is_planned_work(tmp_path: Path) -> None:
    (tmp_path / "CHG0041872.md").write_text(
        "# CHG0041872 - Replay meter-readings into billing-aggregator after tariff fix\n\n"
        "**Type:** Standard  **State:** Implement  **Risk:** Low\n"
        "**Window:** 2024-12-09 08:00-10:00 UTC (Monday, before the 11:00 invoice run)\n"
    )
    [item] = load_bundle(tmp_path).kind("log")
    assert item.data["source"]["change"] == "CHG0041872"
    assert item.data["records"][0]["ts"] == 1733731200.0  # 2024-12-09 08:00 UTC
