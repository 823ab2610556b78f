"""The remediation write tools, previewed and run against real things: a PostgreSQL server, a Redis server,
child processes, runbook scripts and an Alertmanager."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
from pydantic import SecretStr

from core.settings import Settings
from core.types import Effect, ToolStatus
from tests.harness import ROOT, PostgresDatabase, RedisServer, free_port, wait_until
from tools import CATALOG, ToolContext
from tools.pg import mask_query

WRITE_TOOLS = [
    "postgres_cancel_query",
    "postgres_terminate_session",
    "redis_config_set",
    "redis_delete_keys",
    "process_signal",
    "run_runbook",
    "alertmanager_silence",
]


def ctx_with(tmp_path: Path, **settings: Any) -> ToolContext:
    return ToolContext(settings=Settings(var_dir=tmp_path, **settings))


def test_write_tools_are_never_retried_and_unavailable_until_configured(tmp_path: Path) -> None:
    bare = Settings(var_dir=tmp_path)
    for name in WRITE_TOOLS:
        spec = CATALOG.get(name)
        assert spec is not None, name
        assert spec.effect == Effect.WRITE and spec.idempotent is False and spec.preview_fn is not None
        described = spec.describe(bare)
        assert described["available"] is False and "OPSGRAPH_" in described["unavailable_reason"], name
        assert described["has_preview"] is True


def test_sql_literals_are_masked_for_approvers() -> None:
    """The write tools' previews show queries as postgres_activity does (one masking, tools.pg.mask_query)."""
    query = "UPDATE orders SET note = 'alice@example.com', qty = qty + 12.5 WHERE id = 4711 AND code = $1"
    masked = mask_query(query)
    assert masked == "UPDATE orders SET note = '?', qty = qty + ? WHERE id = ? AND code = $1"
    assert mask_query("SELECT $tag$secret$tag$, E'it''s'") == "SELECT $$?$$, '?'"
    assert mask_query("SELECT col1 FROM t2") == "SELECT col1 FROM t2"
    assert len(mask_query("SELECT " + "x, " * 500, 300)) == 300


# PostgreSQL -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[str, str]]:
    """A fresh database with an orders table, and a non-superuser role that application sessions use."""
    admin = os.environ.get("OPSGRAPH_TEST_POSTGRES_URL")
    if not admin:
        pytest.skip("OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)")
    import psycopg

    db = PostgresDatabase(admin)
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL, note text)")
        conn.execute("INSERT INTO orders SELECT g, 0, '' FROM generate_series(1, 10) g")
        conn.execute(f"GRANT SELECT, UPDATE ON orders TO {role}")
    base, _, name = db.url.rpartition("/")
    scheme, _, rest = base.partition("://")
    app_url = f"{scheme}://{role}@{rest.split('@', 1)[-1]}/{name}"
    yield db.url, app_url
    db.drop()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def _pg_ctx(tmp_path: Path, dsn: str) -> ToolContext:
    return ctx_with(tmp_path, postgres_dsns=[SecretStr(dsn)])


def _connect(url: str, app: str) -> Any:
    import psycopg

    return psycopg.connect(url, application_name=app)


def _alive(admin_dsn: str, pid: int) -> bool:
    import psycopg

    with psycopg.connect(admin_dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


def _blocked_writer(url: str, results: list[str]) -> threading.Thread:
    def write() -> None:
        with _connect(url, "writer") as conn:
            conn.execute("UPDATE orders SET qty = qty + 1 WHERE id = 1")
            conn.commit()
            results.append("committed")

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_terminate_ends_an_idle_in_transaction_session_and_releases_its_writers(
    pg: tuple[str, str], tmp_path: Path
) -> None:
    admin_dsn, app_url = pg
    ctx = _pg_ctx(tmp_path, admin_dsn)
    holder = _connect(app_url, "billing")
    holder.execute("UPDATE orders SET note = 'alice@example.com' WHERE id = 1")  # left idle in transaction
    pid = holder.info.backend_pid
    done: list[str] = []
    writers = [_blocked_writer(app_url, done) for _ in range(3)]
    tool = CATALOG.get("postgres_terminate_session")

    def waiting() -> dict[str, Any] | None:
        r = tool.preview({"pid": pid}, ctx)
        return r if r.status == ToolStatus.SUCCESS and len(r.data["session"]["blocks"]) == 3 else None

    preview = wait_until(waiting, 30, "three writers blocked behind the idle transaction")
    session = preview.data["session"]
    assert session["state"] == "idle in transaction" and session["application"] == "billing"
    assert session["user"].startswith("app_") and session["xact_age_s"] >= 0
    assert any(lk["relation"] == "orders" and lk["mode"] == "RowExclusiveLock" for lk in session["locks_held"])
    assert "alice" not in session["query"] and "note = '?'" in session["query"]
    assert f"pid {pid}" in preview.summary and "blocks 3 session(s)" in preview.summary
    assert _alive(admin_dsn, pid) and not done  # a preview changes nothing

    result = tool.run({"pid": pid, "backend_start": session["backend_start"]}, ctx)
    assert result.status == ToolStatus.SUCCESS, result.summary
    assert not _alive(admin_dsn, pid)
    for w in writers:
        w.join(timeout=30)
    assert done == ["committed"] * 3
    assert result.data["before"]["pid"] == pid and len(result.data["before"]["blocks"]) == 3
    again = tool.run({"pid": pid}, ctx)
    assert again.status == ToolStatus.ERROR and again.data["error_code"] == "not_found"
    holder.close()


def test_cancel_stops_a_running_query_and_keeps_the_session(pg: tuple[str, str], tmp_path: Path) -> None:
    admin_dsn, app_url = pg
    ctx = _pg_ctx(tmp_path, admin_dsn)
    import psycopg

    conn = _connect(app_url, "reports")
    pid = conn.info.backend_pid
    outcome: list[str] = []

    def slow() -> None:
        try:
            conn.execute("SELECT pg_sleep(60)")
            outcome.append("finished")
        except psycopg.errors.QueryCanceled:
            outcome.append("cancelled")

    thread = threading.Thread(target=slow, daemon=True)
    thread.start()
    tool = CATALOG.get("postgres_cancel_query")
    preview = wait_until(
        lambda: (r := tool.preview({"pid": pid}, ctx)).status == ToolStatus.SUCCESS and r, 30, "the query running"
    )
    assert preview.data["session"]["query"] == "SELECT pg_sleep(?)" and "cancel the running query" in preview.summary
    result = tool.run({"pid": pid}, ctx)
    assert result.status == ToolStatus.SUCCESS, result.summary
    thread.join(timeout=30)
    assert outcome == ["cancelled"] and _alive(admin_dsn, pid)
    conn.rollback()
    nothing = tool.preview({"pid": pid}, ctx)  # idle now: nothing to cancel
    assert nothing.status == ToolStatus.ERROR and nothing.data["error_code"] == "refused" and "idle" in nothing.summary
    conn.close()


def test_sessions_no_one_should_end_are_refused(pg: tuple[str, str], tmp_path: Path) -> None:
    admin_dsn, app_url = pg
    ctx = _pg_ctx(tmp_path, admin_dsn)
    import psycopg

    superuser = _connect(admin_dsn, "psql")
    superuser.execute("SELECT 1")  # idle in transaction, as a superuser
    own = _connect(app_url, "opsgraph-worker")
    with psycopg.connect(admin_dsn) as probe:
        system_pid = probe.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend' LIMIT 1"
        ).fetchone()[0]
    app = _connect(app_url, "billing")
    app.execute("SELECT 1")
    cases = {
        superuser.info.backend_pid: ({}, "superuser"),
        own.info.backend_pid: ({}, "opsgraph's own session"),
        system_pid: ({}, "not a client session"),
        app.info.backend_pid: ({"backend_start": 1.0}, "different session"),
    }
    for name in ("postgres_terminate_session", "postgres_cancel_query"):
        tool = CATALOG.get(name)
        for pid, (extra, why) in cases.items():
            for result in (tool.preview({"pid": pid, **extra}, ctx), tool.run({"pid": pid, **extra}, ctx)):
                assert result.status == ToolStatus.ERROR and result.data["error_code"] == "refused", result.summary
                assert why in result.summary
            assert _alive(admin_dsn, pid)
    wrong_db = CATALOG.get("postgres_terminate_session").run({"pid": app.info.backend_pid, "database": "nope"}, ctx)
    assert wrong_db.data["error_code"] == "not_found" and _alive(admin_dsn, app.info.backend_pid)
    for c in (superuser, own, app):
        c.close()


# Redis ----------------------------------------------------------------------------------------------------


@pytest.fixture
def redis_target(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    client.config_set("maxmemory", "0")
    yield client
    client.config_set("maxmemory", "0")


def _config(client: redis.Redis, name: str) -> str:
    value = dict(client.config_get(name)).popitem()[1]
    return value.decode() if isinstance(value, bytes) else str(value)


def _redis_ctx(tmp_path: Path, url: str, **extra: Any) -> ToolContext:
    return ctx_with(tmp_path, redis_write_urls=[SecretStr(url)], redis_url="redis://127.0.0.1:1/0", **extra)


def test_redis_config_set_previews_and_sets_only_allowlisted_parameters(
    redis_server: RedisServer, redis_target: redis.Redis, tmp_path: Path
) -> None:
    ctx = _redis_ctx(tmp_path, redis_server.url)
    tool = CATALOG.get("redis_config_set")
    preview = tool.preview({"parameter": "maxmemory", "value": "10mb"}, ctx)
    assert preview.status == ToolStatus.SUCCESS and "0 -> 10mb" in preview.summary
    assert _config(redis_target, "maxmemory") == "0"
    result = tool.run({"parameter": "maxmemory", "value": "10mb"}, ctx)
    assert result.status == ToolStatus.SUCCESS and result.data["after"] == str(10 * 2**20)
    assert _config(redis_target, "maxmemory") == str(10 * 2**20)

    dir_before = _config(redis_target, "dir")
    for call in (tool.preview, tool.run):
        refused = call({"parameter": "dir", "value": "tmp"}, ctx)
        assert refused.status == ToolStatus.ERROR and refused.data["error_code"] == "refused"
    assert _config(redis_target, "dir") == dir_before
    bad = tool.run({"parameter": "maxmemory-policy", "value": "no-such-policy"}, ctx)
    assert bad.status == ToolStatus.ERROR and bad.data["error_code"] == "rejected_by_target"
    injected = tool.run({"parameter": "maxmemory", "value": "1mb save 1 1"}, ctx)
    assert injected.status == ToolStatus.ERROR and "invalid arguments" in injected.summary


def test_redis_delete_keys_counts_deletes_and_respects_the_cap(
    redis_server: RedisServer, redis_target: redis.Redis, tmp_path: Path
) -> None:
    for i in range(25):
        redis_target.set(f"sess:{i:03d}", "x")
    for i in range(5):
        redis_target.set(f"keep:{i}", "x")
    tool = CATALOG.get("redis_delete_keys")

    capped = _redis_ctx(tmp_path, redis_server.url, redis_delete_max_keys=10)
    for call in (tool.preview, tool.run):
        refused = call({"pattern": "sess:*"}, capped)
        assert refused.status == ToolStatus.ERROR and refused.data["error_code"] == "refused"
        assert "more than 10 keys" in refused.summary
    assert redis_target.dbsize() == 30

    ctx = _redis_ctx(tmp_path, redis_server.url)
    preview = tool.preview({"pattern": "sess:*"}, ctx)
    assert preview.status == ToolStatus.SUCCESS and preview.data["matched"] == 25
    assert preview.data["sample"][:2] == ["sess:000", "sess:001"] and redis_target.dbsize() == 30
    result = tool.run({"pattern": "sess:*"}, ctx)
    assert result.status == ToolStatus.SUCCESS and result.data["deleted"] == 25
    assert sorted(k.decode() for k in redis_target.keys("*")) == [f"keep:{i}" for i in range(5)]
    assert tool.preview({"pattern": "sess:*"}, ctx).status == ToolStatus.NO_DATA


def test_redis_write_tools_refuse_opsgraphs_own_redis_and_unconfigured_servers(
    redis_server: RedisServer, redis_target: redis.Redis, tmp_path: Path
) -> None:
    redis_target.set("sess:1", "x")
    own = ctx_with(tmp_path, redis_write_urls=[SecretStr(redis_server.url)], redis_url=redis_server.url)
    result = CATALOG.get("redis_delete_keys").run({"pattern": "sess:*"}, own)
    assert result.data["error_code"] == "refused" and "opsgraph's own Redis" in result.summary
    ctx = _redis_ctx(tmp_path, redis_server.url)
    other = CATALOG.get("redis_delete_keys").run({"pattern": "sess:*", "instance": "10.0.0.9:6379"}, ctx)
    assert other.data["error_code"] == "not_found"
    assert redis_target.exists("sess:1")


# processes ------------------------------------------------------------------------------------------------


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_process_signal_terminates_an_allowlisted_process(
    children: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sleeper = subprocess.Popen(["sleep", "300"])
    children.append(sleeper)
    ctx = ctx_with(tmp_path, process_signal_allowlist=[r"sleep \d+"])
    tool = CATALOG.get("process_signal")
    preview = tool.preview({"pid": sleeper.pid}, ctx)
    assert preview.status == ToolStatus.SUCCESS, preview.summary
    process = preview.data["process"]
    assert process["command"] == "sleep 300" and process["rss_bytes"] > 0 and process["user"]
    assert f"SIGTERM to pid {sleeper.pid}" in preview.summary and sleeper.poll() is None
    result = tool.run({"pid": sleeper.pid, "signal": "TERM", "create_time": process["create_time"]}, ctx)
    assert result.status == ToolStatus.SUCCESS and result.data["exited"] is True
    assert not psutil.pid_exists(sleeper.pid) or psutil.Process(sleeper.pid).status() == psutil.STATUS_ZOMBIE


def test_process_signal_refuses_what_is_not_allowlisted_and_opsgraph_itself(
    children: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    other = subprocess.Popen(["tail", "-f", "/dev/null"])
    sleeper = subprocess.Popen(["sleep", "301"])
    children.extend([other, sleeper])
    ctx = ctx_with(tmp_path, process_signal_allowlist=[r"sleep \d+", r".*python.*"])
    tool = CATALOG.get("process_signal")
    for args, why in [
        ({"pid": other.pid, "signal": "KILL"}, "matches no pattern"),
        ({"pid": os.getpid()}, "opsgraph itself"),
        ({"pid": sleeper.pid, "create_time": 1.0}, "another process"),
    ]:
        for call in (tool.preview, tool.run):
            result = call(args, ctx)
            assert result.status == ToolStatus.ERROR and result.data["error_code"] == "refused", result.summary
            assert why in result.summary
    assert other.poll() is None and sleeper.poll() is None
    assert tool.run({"pid": 1, "signal": "KILL"}, ctx).status == ToolStatus.ERROR  # pid 1: invalid arguments
    opsgraph = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "opsgraph-worker"])
    children.append(opsgraph)
    wait_until(lambda: "opsgraph-worker" in " ".join(psutil.Process(opsgraph.pid).cmdline()), 10, "the child")
    refused = tool.run({"pid": opsgraph.pid}, ctx)
    assert refused.data["error_code"] == "refused" and "an opsgraph process" in refused.summary
    assert opsgraph.poll() is None


# runbooks -------------------------------------------------------------------------------------------------


def _script(path: Path, body: str, executable: bool = True) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755 if executable else 0o644)
    return path


@pytest.fixture
def runbooks(tmp_path: Path) -> Path:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    _script(
        folder / "restart-cache.sh",
        "# Restart the cache service on one host.\n# Prints what it did.\n"
        'echo "restarting $1"\necho "key=${OPSGRAPH_LLM_API_KEY:-unset}"\n',
    )
    _script(folder / "fail.sh", "echo 'disk still full' >&2\nexit 3\n")
    _script(folder / "hang.sh", "sleep 317 &\nwait\n")
    _script(folder / "chatty.sh", "yes line | head -c 100000\n")
    _script(folder / "notexec.sh", "echo hi\n", executable=False)
    _script(tmp_path / "outside.sh", "echo escaped\n")
    os.symlink(tmp_path / "outside.sh", folder / "link.sh")
    return folder


def test_run_runbook_previews_and_runs_with_a_clean_environment(
    runbooks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSGRAPH_LLM_API_KEY", "sk-must-not-leak")
    ctx = ctx_with(tmp_path, runbooks_dir=runbooks)
    tool = CATALOG.get("run_runbook")
    preview = tool.preview({"name": "restart-cache.sh", "args": ["web-1"]}, ctx)
    assert preview.status == ToolStatus.SUCCESS
    assert preview.data["command"] == f"{runbooks.resolve() / 'restart-cache.sh'} web-1"
    assert preview.data["description"] == "Restart the cache service on one host. Prints what it did."
    assert preview.data["head"][0] == "#!/bin/sh"
    result = tool.run({"name": "restart-cache.sh", "args": ["web-1"]}, ctx)
    assert result.status == ToolStatus.SUCCESS and result.data["exit_code"] == 0
    assert result.data["output"] == "restarting web-1\nkey=unset\n"

    failed = tool.run({"name": "fail.sh"}, ctx)
    assert failed.data["error_code"] == "runbook_failed" and failed.data["exit_code"] == 3
    assert "disk still full" in failed.data["output"]
    chatty = tool.run({"name": "chatty.sh"}, ctx_with(tmp_path, runbooks_dir=runbooks, runbook_output_bytes=1024))
    assert chatty.data["output_truncated"] is True and len(chatty.data["output"]) == 1024


def test_run_runbook_kills_a_runbook_past_its_time_limit(runbooks: Path, tmp_path: Path) -> None:
    ctx = ctx_with(tmp_path, runbooks_dir=runbooks, runbook_timeout_s=0.5)
    result = CATALOG.get("run_runbook").run({"name": "hang.sh"}, ctx)
    assert result.status == ToolStatus.ERROR and result.data["error_code"] == "timeout"
    assert result.data["timed_out"] is True

    def sleeper_gone() -> bool:  # the runbook's own child was killed with it (the whole session)
        alive = [p for p in psutil.process_iter(["cmdline", "status"]) if p.info["cmdline"] == ["sleep", "317"]]
        return not [p for p in alive if p.info["status"] != psutil.STATUS_ZOMBIE]

    wait_until(sleeper_gone, 10, "the runbook's child killed")


def test_run_runbook_refuses_escapes_unsafe_arguments_and_non_executables(runbooks: Path, tmp_path: Path) -> None:
    ctx = ctx_with(tmp_path, runbooks_dir=runbooks, runbook_arg_patterns={"restart-cache.sh": [r"web-\d+"]})
    tool = CATALOG.get("run_runbook")
    for args, why in [
        ({"name": "../outside.sh"}, "outside the runbooks folder"),
        ({"name": "link.sh"}, "outside the runbooks folder"),
        ({"name": str(tmp_path / "outside.sh")}, "outside the runbooks folder"),
        ({"name": "notexec.sh"}, "not executable"),
        ({"name": "restart-cache.sh", "args": ["db-1"]}, "does not match"),
        ({"name": "restart-cache.sh", "args": ["web-1", "web-2"]}, "at most 1 argument"),
        ({"name": "fail.sh", "args": ["x; rm -rf /"]}, "does not match"),
    ]:
        for call in (tool.preview, tool.run):
            result = call(args, ctx)
            assert result.status == ToolStatus.ERROR and result.data["error_code"] == "refused", (args, result.summary)
            assert why in result.summary
    assert tool.run({"name": "nope.sh"}, ctx).data["error_code"] == "not_found"
    broken = Settings(var_dir=tmp_path, runbooks_dir=runbooks, runbook_arg_patterns={"fail.sh": ["(unclosed"]})
    assert "invalid regex" in (tool.check_prerequisites(broken) or "")
    assert tool.check_prerequisites(ctx.settings) is None


# Alertmanager ---------------------------------------------------------------------------------------------


def _alertmanager_binary() -> str | None:
    return shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Alertmanager on a free port, with a minimal config and its own storage."""
    if _alertmanager_binary() is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure-alertmanager.sh")], check=True)
    binary = _alertmanager_binary()
    assert binary is not None
    workdir = tmp_path_factory.mktemp("alertmanager")
    config = workdir / "alertmanager.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, 30, "Alertmanager ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _fire(url: str, **labels: str) -> None:
    alert = {"labels": labels, "annotations": {"summary": f"{labels['alertname']} on {labels.get('instance')}"}}
    httpx.post(f"{url}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()


def _alert_state(url: str, alertname: str) -> dict[str, Any] | None:
    alerts = httpx.get(f"{url}/api/v2/alerts", params={"filter": f'alertname="{alertname}"'}, timeout=5).json()
    return alerts[0]["status"] if alerts else None


def test_alertmanager_silence_previews_the_firing_alerts_creates_and_expires(alertmanager: str, tmp_path: Path) -> None:
    _fire(alertmanager, alertname="DiskFull", instance="db-1", severity="critical")
    _fire(alertmanager, alertname="HighCPU", instance="web-1", severity="warning")
    wait_until(lambda: _alert_state(alertmanager, "DiskFull"), 30, "the alert received")
    ctx = ctx_with(tmp_path, alertmanager_url=alertmanager)
    tool = CATALOG.get("alertmanager_silence")
    args = {"matchers": [{"name": "alertname", "value": "DiskFull"}], "duration_s": 600, "comment": "disk cleanup"}
    preview = tool.preview(args, ctx)
    assert preview.status == ToolStatus.SUCCESS, preview.summary
    assert preview.data["matchers"] == ['alertname="DiskFull"'] and preview.data["firing_count"] == 1
    assert preview.data["firing"][0]["labels"]["instance"] == "db-1" and "DiskFull" in preview.summary
    assert httpx.get(f"{alertmanager}/api/v2/silences", timeout=5).json() == []  # a preview changes nothing

    created = tool.run(args, ctx)
    assert created.status == ToolStatus.SUCCESS, created.summary
    silence_id = created.data["silence_id"]
    wait_until(
        lambda: silence_id in (_alert_state(alertmanager, "DiskFull") or {}).get("silencedBy", []), 30, "silenced"
    )
    assert (_alert_state(alertmanager, "HighCPU") or {}).get("silencedBy") == []
    again = tool.preview(args, ctx)
    assert again.data["firing_count"] == 0  # already silenced: nothing more would go quiet

    expire_preview = tool.preview({"action": "expire", "silence_id": silence_id}, ctx)
    assert expire_preview.status == ToolStatus.SUCCESS and 'alertname="DiskFull"' in expire_preview.summary
    expired = tool.run({"action": "expire", "silence_id": silence_id}, ctx)
    assert expired.status == ToolStatus.SUCCESS and expired.data["state"] == "expired"
    silence = httpx.get(f"{alertmanager}/api/v2/silence/{silence_id}", timeout=5).json()
    assert silence["status"]["state"] == "expired"


def test_alertmanager_silence_refuses_broad_or_long_silences(alertmanager: str, tmp_path: Path) -> None:
    ctx = ctx_with(tmp_path, alertmanager_url=alertmanager, alertmanager_max_silence_s=3600)
    tool = CATALOG.get("alertmanager_silence")
    too_long = tool.run({"matchers": [{"name": "alertname", "value": "X"}], "duration_s": 7200}, ctx)
    assert too_long.data["error_code"] == "refused" and "3600s" in too_long.summary
    for broad in ([], [{"name": "alertname", "value": ".*", "is_regex": True}]):
        result = tool.run({"matchers": broad}, ctx)
        assert result.status == ToolStatus.ERROR and "equality matcher" in result.summary
    before = httpx.get(f"{alertmanager}/api/v2/silences", timeout=5).json()
    assert not [s for s in before if s["status"]["state"] == "active"]
    down = ctx_with(tmp_path, alertmanager_url=f"http://127.0.0.1:{free_port()}")
    assert tool.run({"matchers": [{"name": "alertname", "value": "X"}]}, down).data["error_code"] == "unreachable"
    missing = tool.preview({"action": "expire", "silence_id": str(uuid.uuid4())}, ctx)
    assert missing.data["error_code"] == "not_found"
