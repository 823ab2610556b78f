"""`opsgraph run`: make sure Redis answers, then start and supervise the API, one worker per pool and the
scheduler. Ctrl-C (or SIGTERM) stops every child cleanly; nothing is left running."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import redis

from core.apikeys import KeyBook, write_secret_file
from core.db import Store
from core.metrics import enable_multiprocess
from core.settings import Settings, subprocess_env

Say = Callable[[str], None]


class LaunchError(RuntimeError):
    """A one-line reason the service cannot start, with what to do about it."""


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def ensure_redis(settings: Settings, say: Say = print) -> subprocess.Popen[bytes] | None:
    """Use a Redis that answers; else start redis-server as our child (installing Debian's package if root)."""
    if redis_answers(settings.redis_url):
        return None
    parts = urlsplit(settings.redis_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise LaunchError(f"Redis at {host}:{port} does not answer; start it or set OPSGRAPH_REDIS_URL")
    binary = shutil.which("redis-server")
    if binary is None:
        if os.geteuid() != 0:
            raise LaunchError(
                "redis-server is not installed and no Redis answers: run `sudo apt-get install -y redis-server` "
                "or set OPSGRAPH_REDIS_URL to a running Redis"
            )
        say("installing redis-server (Debian package)...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True, env=env)
        binary = shutil.which("redis-server")
        if binary is None:
            raise LaunchError("apt-get installed redis-server but it is not on PATH")
    say(f"starting redis-server on {host}:{port} (nothing is persisted: Redis holds no only copy)")
    return start_redis_server(binary, port, settings.var_dir / "redis")


def start_redis_server(binary: str, port: int, workdir: Path, timeout_s: float = 10) -> subprocess.Popen[bytes]:
    """A redis-server child on 127.0.0.1:port that keeps nothing on disk; returns once it answers PING."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*argv, "--dir", str(workdir)], stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if redis_answers(url):
            return proc
        if proc.poll() is not None:
            raise LaunchError(f"redis-server exited with code {proc.returncode}; is port {port} taken?")
        time.sleep(0.1)
    proc.terminate()
    raise LaunchError(f"redis-server did not answer on 127.0.0.1:{port} within {timeout_s:g} s")


def port_free(host: str, port: int) -> bool:
    """Whether the API could listen on host:port now. Binds the way uvicorn will (SO_REUSEADDR on POSIX), so
    the TIME_WAIT connections a just-stopped API leaves behind do not count as "in use"; a live listener does."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        if os.name != "nt":  # on Windows SO_REUSEADDR would let two listeners share the port
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ensure_admin_key(settings: Settings, say: Say = print) -> str:
    """The first-run admin key: made when VAR_DIR/admin.key is missing (or holds a key the database no longer
    honours: revoked, or a fresh database), kept there with mode 0600, and returned at every start."""
    path = settings.admin_key_file
    book = KeyBook(Store.from_settings(settings))
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if kept and book.verify(kept) is not None:
        os.chmod(path, 0o600)
        return kept
    issued = book.create("default", ["admin"], name="first-run admin", created_by="first-run")
    write_secret_file(path, issued.token)
    why = "first run" if not kept else "the kept key is no longer valid"
    say(f"{why}: created admin key {issued.row.id} (tenant default), kept in {path} (mode 0600)")
    return issued.token


def console_url(settings: Settings, token: str) -> str:
    """The console with its token in the fragment, as Jupyter does: a fragment never reaches the server or a
    Referer, and the page moves it to its session storage and out of the address bar."""
    return f"{settings.base_api_url}/#token={token}"


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)


def child_commands(settings: Settings) -> list[Child]:
    py = sys.executable
    children = [Child("api", [py, "-m", "services.cli", "api"])]
    for pool in settings.pools:
        children.append(Child(f"worker-{pool}", [py, "-m", "services.cli", "worker", "--pool", pool]))
    children.append(Child("scheduler", [py, "-m", "services.cli", "scheduler"]))
    return children


class Supervisor:
    def __init__(self, settings: Settings, say: Say = print) -> None:
        self.settings = settings
        self.say = say
        self.children = child_commands(settings)
        self.redis_proc: subprocess.Popen[bytes] | None = None
        self.admin_key = ""
        self._stopping = False

    def _spawn(self, child: Child) -> None:
        env = subprocess_env(self.settings, PYTHONUNBUFFERED="1")
        # own session: a Ctrl-C reaches only us, and we stop the children in order
        child.proc = subprocess.Popen(child.argv, env=env, start_new_session=True, cwd=Path.cwd())

    def start(self) -> float:
        started = time.monotonic()
        self.settings.ensure_dirs()
        if not port_free(self.settings.api_host, self.settings.api_port):
            raise LaunchError(
                f"port {self.settings.api_port} on {self.settings.api_host} is in use (another opsgraph?); "
                "stop it or set OPSGRAPH_API_PORT"
            )
        self.admin_key = ensure_admin_key(self.settings, self.say)
        self.redis_proc = ensure_redis(self.settings, self.say)
        # every child counts its metrics in one folder, emptied now: no child runs yet, and a fresh start is a
        # counter reset Prometheus expects
        enable_multiprocess(self.settings.metrics_dir, clean="all")
        for child in self.children:
            self._spawn(child)
        url = self.settings.base_api_url
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            api = self.children[0].proc
            if api is not None and api.poll() is not None:
                raise LaunchError(f"the API exited with code {api.returncode}; see its log above")
            time.sleep(0.2)
        raise LaunchError(f"the API did not answer at {url}/healthz within 120 s")

    def supervise(self) -> None:
        """Restart a child that dies (at most 5 times a minute), until told to stop."""
        while not self._stopping:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is not None and not self._stopping:
                    now = time.time()
                    child.restarts = [t for t in child.restarts if now - t < 60] + [now]
                    if len(child.restarts) > 5:
                        raise LaunchError(f"{child.name} keeps exiting (code {child.proc.returncode}); giving up")
                    self.say(f"{child.name} exited with code {child.proc.returncode}; restarting")
                    self._spawn(child)
            time.sleep(0.5)

    def stop(self) -> None:
        self._stopping = True
        procs = [c.proc for c in reversed(self.children) if c.proc and c.proc.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # prefork pool children live in each worker's session; make sure none outlive it
        for c in self.children:
            if c.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            self.redis_proc.terminate()
            try:
                self.redis_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.redis_proc.kill()


def run_service(settings: Settings, say: Say = print) -> int:
    sup = Supervisor(settings, say)

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a process started in the background of a script inherits SIGINT ignored, and then
    # Python would never raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        ready_s = sup.start()
        say(f"opsgraph is ready in {ready_s:.1f}s (Ctrl-C stops everything); the console, signed in as admin:")
        say(f"    {console_url(settings, sup.admin_key)}")
        sup.supervise()
        return 0
    except KeyboardInterrupt:
        say("stopping opsgraph...")
        return 0
    except LaunchError as exc:
        say(f"error: {exc}")
        return 1
    finally:
        sup.stop()
