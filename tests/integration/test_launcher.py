"""`opsgraph run` (what `make run` calls): starts Redis when none answers, the API, a worker per pool and the
scheduler; a CLI submit runs through it; Ctrl-C leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.harness import ROOT, descendants, free_port, wait_until

pytestmark = pytest.mark.integration


def test_run_starts_everything_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    api_port, redis_port = free_port(), free_port()
    env = {
        **os.environ,
        "OPSGRAPH_VAR_DIR": str(tmp_path / "var"),
        "OPSGRAPH_API_PORT": str(api_port),
        "OPSGRAPH_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",  # nothing answers there: run must start it
        "OPSGRAPH_DATABASE_URL": "",
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / "run.log").open("wb")
    # started as a script's background job would be: SIGINT ignored on entry; Ctrl-C must still stop it
    launcher = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "run"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    base = f"http://127.0.0.1:{api_port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=2).json()["ready"], 120, "a ready service")
        children = descendants(launcher.pid)
        names = " ".join(" ".join(psutil.Process(p).cmdline()) for p in children if psutil.pid_exists(p))
        assert "redis-server" in names and "scheduler" in names
        assert "--pool cpu" in names and "--pool gpu" in names and " api" in names
        # first run: an admin key, kept 0600 in the var folder, printed in the console URL
        key_file = tmp_path / "var" / "admin.key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        token = key_file.read_text().strip()
        assert f"{base}/#token={token}" in (tmp_path / "run.log").read_text()
        assert httpx.get(f"{base}/v1/tasks", timeout=5).status_code == 401
        ok = httpx.get(f"{base}/v1/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=5)
        assert ok.status_code == 200
        submit = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli",
                "submit",
                "--wait",
                f"check the health of this machine and of {base}/healthz",
            ],
            env={**env, "OPSGRAPH_API_URL": base},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert submit.returncode == 0, submit.stdout + submit.stderr
        assert "succeeded" in submit.stdout and "probe-1" in submit.stdout
        assert "3/3" in submit.stderr  # the progress bar reached the end
        assert httpx.get(f"{base}/", timeout=5).text.startswith("<!doctype html>")
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=60)
    assert launcher.returncode == 0
    leftovers = [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert leftovers == [], f"left running: {leftovers}"
    assert "ready in" in (tmp_path / "run.log").read_text()


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OPSGRAPH_VAR_DIR": str(tmp_path),
        "OPSGRAPH_API_URL": f"http://127.0.0.1:{free_port()}",
    }

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            env={**env, **extra},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    key = {"OPSGRAPH_API_KEY": "og_0123456789abcdef_" + "A" * 43}
    for args, extra, expected in [
        (("worker", "--pool", "tpu"), {}, "error: unknown pool 'tpu'"),
        (("submit", "hello"), {}, "error: no API key: set OPSGRAPH_API_KEY"),
        (("submit", "hello"), key, "error: cannot reach the API"),
        (("submit", "hello", "--input", "novalue"), key, "error: --input 'novalue' must be KEY=VALUE"),
        (("keys", "revoke", "0123456789abcdef"), {}, "error: no API key with id '0123456789abcdef'"),
    ]:
        r = cli(*args, **extra)
        assert r.returncode == 1, r
        assert r.stderr.strip().startswith(expected) and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_run_refuses_a_taken_port_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OPSGRAPH_VAR_DIR": str(tmp_path), "OPSGRAPH_API_PORT": str(port)}
        r = subprocess.run(
            [sys.executable, "-m", "services.cli", "run"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    assert r.returncode == 1
    expected = f"error: port {port} on 127.0.0.1 is in use (another opsgraph?); stop it or set OPSGRAPH_API_PORT"
    assert r.stdout.strip() == expected
