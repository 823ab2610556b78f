"""What tools may touch and how they are bounded: log roots, RE2 patterns, HTTP targets and body caps,
opsgraph's own processes and CPU, and the one redaction everything stored goes through."""

from __future__ import annotations

import gzip
import logging
import lzma
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
import zstandard

from core.db import Store
from core.logging import configure_logging, redact, redact_value
from core.settings import Settings
from core.types import NodeStatus, Plan, TaskStatus
from tools import CATALOG, ToolContext
from tools.host import CpuCounters, is_opsgraph_cmdline, sample_cpu
from tools.net import TargetRefused, check_target


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


@pytest.fixture
def ctx(tmp_path: Path, logs: Path) -> ToolContext:
    return ToolContext(settings=Settings(var_dir=tmp_path, log_roots=[logs], http_targets=["127.0.0.1"]))


def _stamp(minutes_ago: float = 1) -> str:
    return f"{datetime.now() - timedelta(minutes=minutes_ago):%Y-%m-%d %H:%M:%S}"


# log_search


def test_links_met_while_walking_are_resolved_and_refused_outside_the_roots(
    ctx: ToolContext, tmp_path: Path, logs: Path
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.log").write_text(f"{_stamp()} ERROR password leak\n")
    (logs / "app.log").write_text(f"{_stamp()} ERROR inside\n")
    (logs / "sub").mkdir()
    os.symlink(tmp_path / "outside" / "secret.log", logs / "sub" / "file-link.log")
    os.symlink(tmp_path / "outside", logs / "dir-link")
    os.symlink(logs, logs / "sub" / "loop")  # a link back inside: allowed, visited once
    os.symlink(logs / "app.log", logs / "sub" / "inside-link.log")
    r = CATALOG.get("log_search").run({"path": str(logs)}, ctx)
    assert "leak" not in str(r.data["records"]) and "secret" not in str(r.data["per_file"])
    assert {Path(x["path"]).name for x in r.data["refused"]} == {"file-link.log", "dir-link"}
    assert r.data["per_file"] == {str(logs / "app.log"): 1}  # the inside link is the same real file, read once


@pytest.mark.parametrize(
    "pattern", [r"(?<!lib)error", r"(a)\1", "[unclosed", r"(?=x)y"], ids=["lookbehind", "backref", "syntax", "ahead"]
)
def test_patterns_re2_cannot_run_get_a_clear_error(ctx: ToolContext, logs: Path, pattern: str) -> None:
    (logs / "app.log").write_text("error\n")
    r = CATALOG.get("log_search").run({"path": str(logs), "pattern": pattern}, ctx)
    assert r.status.value == "error" and r.data["error_code"] == "invalid_pattern"
    assert "RE2" in r.summary and pattern in r.summary


def test_a_catastrophic_backtracking_pattern_runs_in_linear_time(ctx: ToolContext, logs: Path) -> None:
    (logs / "app.log").write_text(("a" * 5000 + "!\n") * 20)  # Python's re would take ages on (a+)+$ here
    r = CATALOG.get("log_search").run({"path": str(logs), "pattern": "(a+)+$"}, ctx)
    assert r.data["matches"] == 0 and r.data["lines_scanned"] == 20


def test_compressed_logs_are_read_decompressed_and_binaries_skipped(ctx: ToolContext, logs: Path) -> None:
    text = f"{_stamp()} ERROR disk quota exceeded for volume data\n{_stamp()} INFO all fine\n"
    (logs / "a.log.gz").write_bytes(gzip.compress(text.encode()))
    (logs / "b.log.xz").write_bytes(lzma.compress(text.encode()))
    (logs / "c.log.zst").write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    (logs / "renamed.log").write_bytes(lzma.compress(text.encode()))  # recognised by content, not by name
    # compressed random bytes look like anything ("oom" included); they must not be searched as text
    noise = bytes(range(256)) * 64 + b"oom error\x00"
    (logs / "blob.bin").write_bytes(noise)
    (logs / "blob.xz").write_bytes(lzma.compress(noise))
    r = CATALOG.get("log_search").run({"path": str(logs)}, ctx)
    assert r.data["matches"] == 4 and r.data["errors"] == 4 and r.data["terms"] == {"error": 4}
    assert {Path(s["path"]).name: s["reason"] for s in r.data["skipped"]} == {
        "blob.bin": "binary",
        "blob.xz": "binary content inside xz",
    }
    assert len(r.data["templates"]) == 1 and r.data["templates"][0]["count"] == 4


def test_lines_are_grouped_into_templates_with_counts_and_first_and_last_times(ctx: ToolContext, logs: Path) -> None:
    base = datetime.now() - timedelta(minutes=30)
    lines = [
        f"{base + timedelta(seconds=i):%Y-%m-%dT%H:%M:%S}.{i % 1000:03d}Z ERROR orders-api request {9000 + i} "
        f"upstream payments-api at 10.0.3.{i % 250} timed out after {5000 + i % 7}ms"
        for i in range(200)
    ]
    lines += [f"{base:%Y-%m-%d %H:%M:%S} WARN orders-api retry {i} of 3" for i in range(3)]
    (logs / "orders.log").write_text("\n".join(lines) + "\n")
    r = CATALOG.get("log_search").run({"path": str(logs), "pattern": "(?i)timed out|retry"}, ctx)
    top, second = r.data["templates"][:2]
    assert top["count"] == 200 and top["level"] == "error" and "payments-api" in top["template"]
    assert "<ip>" in top["template"] and "<dur>" in top["template"] and "9000" not in top["template"]
    assert top["first_ts"] < top["last_ts"] and top["last_ts"] - top["first_ts"] == pytest.approx(199, abs=1)
    assert second["count"] == 3 and second["level"] == "warn"
    assert r.data["levels"] == {"error": 200, "warn": 3}
    assert len(r.evidence) == 2  # one line per kind of message, not one per occurrence


def test_log_lines_are_redacted_before_they_leave_the_tool(ctx: ToolContext, logs: Path) -> None:
    (logs / "app.log").write_text(f"{_stamp()} ERROR connect postgresql://app:hunter2@db/shop refused\n")
    r = CATALOG.get("log_search").run({"path": str(logs)}, ctx)
    assert "hunter2" not in r.model_dump_json() and r.data["matches"] == 1


# http_probe


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/big":
            self.send_response(200)
            self.send_header("content-length", str(50 * 2**20))
            self.end_headers()
            chunk = b"x" * 65536
            try:
                for _ in range(800):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the probe stopped reading: what this test wants
            return
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_http_probe_reads_at_most_its_byte_cap(tmp_path: Path, http_server: int) -> None:
    settings = Settings(var_dir=tmp_path, http_targets=["127.0.0.1"], http_max_body_bytes=256 * 1024)
    r = CATALOG.get("http_probe").run({"url": f"http://127.0.0.1:{http_server}/big"}, ToolContext(settings=settings))
    assert r.data["status_code"] == 200 and r.data["body_truncated"] is True
    assert r.data["body_bytes"] == 256 * 1024


def test_http_probe_reports_redirects_without_following_them(ctx: ToolContext, http_server: int) -> None:
    r = CATALOG.get("http_probe").run({"url": f"http://127.0.0.1:{http_server}/redirect"}, ctx)
    assert r.data["status_code"] == 302
    assert r.data["redirect"] == {"location": "http://169.254.169.254/latest/meta-data/", "allowed": False}
    assert any("outside the targets" in f["message"] for f in r.data["findings"])


def test_targets_check_ports_resolved_addresses_and_metadata_ranges(tmp_path: Path, http_server: int) -> None:
    assert check_target("localhost", 8080, ["localhost:8080"]).address in ("127.0.0.1", "::1")
    assert check_target("localhost", 8080, ["127.0.0.0/8"]).address == "127.0.0.1"  # the address, by CIDR
    for host, port, allowed in [
        ("localhost", 8081, ["localhost:8080"]),  # another port
        ("127.0.0.1", 80, ["10.0.0.0/8"]),
        ("169.254.169.254", 80, ["*"]),  # metadata: never by wildcard
        ("100.100.100.200", 80, ["0.0.0.0/0"]),  # nor by a catch-all CIDR
        ("::ffff:169.254.169.254", 80, ["*"]),  # nor disguised as IPv6
        ("fe80::1", 80, ["*"]),
        ("fd00:ec2::254", 80, ["*"]),
    ]:
        with pytest.raises(TargetRefused):
            check_target(host, port, allowed)
    assert check_target("169.254.169.254", 80, ["169.254.169.254"]).address == "169.254.169.254"  # explicit
    ctx = ToolContext(settings=Settings(var_dir=tmp_path, http_targets=[f"127.0.0.1:{http_server + 1}"]))
    r = CATALOG.get("http_probe").run({"url": f"http://127.0.0.1:{http_server}/"}, ctx)
    assert r.data["error_code"] == "target_not_allowed"
    ctx = ToolContext(settings=Settings(var_dir=tmp_path, http_targets=[f"localhost:{http_server}"]))
    r = CATALOG.get("http_probe").run({"url": f"http://localhost:{http_server}/"}, ctx)
    assert r.data["status_code"] == 200 and r.data["address"] in ("127.0.0.1", "::1")


def test_a_password_in_a_probed_url_is_neither_sent_nor_shown(ctx: ToolContext, http_server: int) -> None:
    r = CATALOG.get("http_probe").run({"url": f"http://ops:hunter2@127.0.0.1:{http_server}/"}, ctx)
    assert r.data["status_code"] == 200 and "hunter2" not in r.model_dump_json()


# opsgraph never measures or matches itself


def test_process_check_never_matches_opsgraph_or_the_cli_that_asked() -> None:
    assert is_opsgraph_cmdline(["/usr/bin/python3", "-m", "services.cli", "ask", "is orders-api slow?"])
    assert is_opsgraph_cmdline(["/srv/.venv/bin/python", "/srv/.venv/bin/opsgraph", "ask", "orders-api"])
    assert is_opsgraph_cmdline(["opsgraph", "worker", "--pool", "cpu"])
    assert not is_opsgraph_cmdline(["/usr/bin/orders-api", "--port", "8080"])
    asker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "services.cli", "why is orders-api-xyz slow"]
    )
    real = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "orders-api-xyz"])
    try:
        r = CATALOG.get("process_check").run({"name": "orders-api-xyz"}, ToolContext(settings=Settings()))
        assert r.data["pids"] == [real.pid] and r.data["skipped_own"] >= 1
    finally:
        asker.kill()
        real.kill()


def test_a_quiet_machine_with_opsgraph_busy_sampling_it_reports_no_cpu_problem(tmp_path: Path) -> None:
    # 2 cores, 0.2 s steps: 0.4 CPU-seconds a step. opsgraph burns most of the first steps (its start, its
    # sibling checks) and a little later; the rest of the machine is quiet (2% busy).
    own_per_step = [0.35, 0.30, 0.02, 0.0, 0.01, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0]
    readings = [CpuCounters(total=1000.0, busy=100.0, own=5.0)]
    for own in own_per_step:
        last = readings[-1]
        readings.append(CpuCounters(total=last.total + 0.4, busy=last.busy + 0.008 + own, own=last.own + own))
    feed = iter(readings)
    series = sample_cpu(2.0, [], lambda: False, read=lambda _own: next(feed), sleep=lambda _s: None)
    assert series is not None and len(series) == 10 and all(v == pytest.approx(2.0) for v in series)
    # the host-health playbook scans that series for spikes exactly as written there
    playbook = yaml.safe_load((Path(__file__).parents[2] / "memory/playbooks/host-health.yaml").read_text())
    node = next(n for n in playbook["nodes"] if n["tool"] == "metric_anomalies")
    args = {**node["args"], "series": series}
    r = CATALOG.get("metric_anomalies").run(args, ToolContext(settings=Settings(var_dir=tmp_path)))
    assert r.data["anomalies"] == [] and [f["severity"] for f in r.data["findings"]] == ["ok"]


def test_host_metrics_reports_disks_inodes_fds_swap_and_leaves_opsgraph_out_of_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.host

    quiet = iter(CpuCounters(total=1000.0 + 0.4 * i, busy=10.0 + 0.004 * i, own=0.0) for i in range(100))
    monkeypatch.setattr(tools.host, "read_cpu_counters", lambda _own: next(quiet))
    r = CATALOG.get("host_metrics").run({"sample_seconds": 0.4, "top": 50}, ToolContext(settings=Settings()))
    assert r.data["cpu_series"] == [1.0, 1.0]
    assert not any("CPU" in f["message"] for f in r.data["findings"] if f["severity"] != "ok")
    d = r.data["disks"][0]
    assert {"percent", "free_bytes", "inodes_percent", "inodes_free"} <= d.keys()
    assert r.data["fds"]["max"] > r.data["fds"]["used"] > 0
    assert "percent" in r.data["swap"] and len(r.data["load"]) == 3
    assert os.getpid() not in [p["pid"] for p in r.data["top_processes"]]


# redaction


SECRETS = ["hunter2", "s3cr3t-token-value", "og_live_abcdefghijklmnop1234", "AKIAIOSFODNN7EXAMPLE"]


def test_redaction_covers_every_kind_of_secret() -> None:
    cases = {
        "postgresql://app:hunter2@db:5432/shop": "postgresql://app:***@db:5432/shop",
        "redis://:hunter2@cache:6379/0": "redis://:***@cache:6379/0",
        "host=db user=app password=hunter2 dbname=shop": "host=db user=app password=*** dbname=shop",
        "Authorization: Bearer s3cr3t-token-value": "Authorization: Bearer ***",
        "curl -H 'authorization: Basic aHVudGVyMg=='": "curl -H 'authorization: Basic ***'",
        "GET /x?api_key=s3cr3t-token-value&page=2": "GET /x?api_key=***&page=2",
        "using og_live_abcdefghijklmnop1234 now": "using og_*** now",
        "key AKIAIOSFODNN7EXAMPLE": "key AKIA***",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG": "aws_secret_access_key = ***",
        '{"password": "hunter2", "passed": 3}': '{"password": "***", "passed": 3}',
        "http://host:8080/path@v2 and 3 passed": "http://host:8080/path@v2 and 3 passed",  # no secret here
        "secretName: db-creds, tokenPath=/var/run/t": "secretName: db-creds, tokenPath=/var/run/t",  # references
    }
    for text, want in cases.items():
        assert redact(text) == want, text
    value = {"token": "s3cr3t-token-value", "passed": 3, "prompt_tokens": 12, "args": ["redis://:hunter2@h/0"]}
    assert redact_value(value) == {"token": "***", "passed": 3, "prompt_tokens": 12, "args": ["redis://:***@h/0"]}
    volume = {"secret": {"secretName": "db-creds"}, "tokenPath": "/var/run/token", "client_secret": "abc"}
    assert redact_value(volume) == {
        "secret": {"secretName": "db-creds"},
        "tokenPath": "/var/run/token",
        "client_secret": "***",
    }


def test_a_url_password_in_a_tasks_inputs_never_reaches_storage_or_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://shop:hunter2@db.internal:5432/shop"
    store = Store.from_settings(Settings(var_dir=tmp_path))
    task = store.create_task(f"why is {url} slow? token=s3cr3t-token-value", inputs={"dsn": url, "urls": [url]})
    plan = Plan.model_validate({"goal": "x", "nodes": [{"id": "probe", "tool": "http_probe", "args": {"url": url}}]})
    store.save_plan(task.id, plan)
    run = store.create_node_run(task.id, "probe", tool="http_probe", args={"url": url}, pool="cpu", queue="cpu")
    store.finish_node_run(run.id, NodeStatus.FAILED, result={"summary": f"{url} down"}, error=f"connect {url}: refused")
    store.append_event(task.id, "node_failed", {"node": "probe", "error": f"{url} refused", "args": {"url": url}})
    store.set_answer(
        task.id, {"text": f"{url} is down", "findings": [{"message": f"og_live_abcdefghijklmnop1234 {url}"}]}
    )
    store.set_task_status(task.id, TaskStatus.FAILED, error=f"failed on {url}")
    configure_logging("INFO")
    logging.getLogger("uvicorn.error").warning("connect %s failed", url)
    try:
        raise ConnectionError(f"could not connect to {url}")
    except ConnectionError:
        logging.getLogger("celery.worker").exception("task failed")  # the traceback too
    import structlog

    structlog.get_logger().info("probing", url=url, authorization="Bearer s3cr3t-token-value")
    stored = [
        store.get_task(task.id).goal,
        store.get_task(task.id).inputs,
        store.get_task(task.id).answer,
        store.get_task(task.id).error,
        store.latest_plan(task.id).model_dump() if store.latest_plan(task.id) else None,
        [(r.args, r.result, r.error) for r in store.node_runs(task.id)],
        [e.data for e in store.events_after(task.id)],
    ]
    text = repr(stored) + capsys.readouterr().err
    for secret in SECRETS:
        assert secret not in text, secret
    assert "postgresql://shop:***@db.internal:5432/shop" in text  # what an operator needs is still there
    store.engine.dispose()


def _self_signed(tmp_path: Path, days: int) -> tuple[Path, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(tz=UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=30))
        .not_valid_after(now + timedelta(days=days, hours=12))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_https_reports_certificate_days_left_even_when_the_certificate_is_refused(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, days=5)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.block_on_close = False  # the probe's second, unverified handshake sends no request to wait for
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ctx = ToolContext(settings=Settings(var_dir=tmp_path, http_targets=["127.0.0.1"]))
        r = CATALOG.get("http_probe").run({"url": f"https://127.0.0.1:{server.server_address[1]}/"}, ctx)
    finally:
        server.shutdown()
        server.server_close()
    assert r.data["healthy"] is False and "CERTIFICATE_VERIFY_FAILED" in r.data["error"]  # self-signed: untrusted
    assert r.data["tls_days_left"] == pytest.approx(5.5, abs=0.1)
    assert any("expires in 5.5 days" in f["message"] for f in r.data["findings"])


def test_redis_info_takes_credentials_from_configuration_not_from_the_request(
    tmp_path: Path, redis_server: object
) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    settings = Settings(var_dir=tmp_path, redis_url=url, http_targets=[])
    masked = url.replace("redis://", "redis://:***@") if "@" not in url else url
    r = CATALOG.get("redis_info").run({"url": masked}, ToolContext(settings=settings))
    assert r.data["healthy"] is True and r.data["server"].endswith(str(urlsplit(url).port))
    other = CATALOG.get("redis_info").run({"url": "redis://10.9.9.9:6379/0"}, ToolContext(settings=settings))
    assert other.data["error_code"] == "target_not_allowed"
