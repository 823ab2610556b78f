"""Start the real parts tests need: a Redis server, a PostgreSQL database, the API and Celery workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

from services.launcher import start_redis_server

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the thing is still starting
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else "")
    )


class RedisServer:
    """A private redis-server on a free port (so tests never see another run's queues)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make test` installs it (apt-get install redis-server)")
        self.binary, self.workdir = binary, workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = start_redis_server(binary, self.port, workdir)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Kill it (SIGKILL: nothing is saved, every queue and key is gone) and start a new one on the same port."""
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = start_redis_server(self.binary, self.port, self.workdir)


class PostgresDatabase:
    """A fresh database on the server at OPSGRAPH_TEST_POSTGRES_URL, dropped afterwards."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.admin_url = admin_url
        self.name = f"opsgraph_test_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        base, _, _ = admin_url.rpartition("/")
        self.url = f"{base}/{self.name}"

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Service:
    """The API and workers as real subprocesses sharing one var dir, Redis and database."""

    def __init__(self, workdir: Path, redis_url: str, database_url: str = "", **extra_env: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "OPSGRAPH_VAR_DIR": str(workdir / "var"),
            "OPSGRAPH_REDIS_URL": redis_url,
            "OPSGRAPH_DATABASE_URL": database_url,
            "OPSGRAPH_API_PORT": str(self.port),
            "OPSGRAPH_API_URL": self.base,
            "OPSGRAPH_TOOL_MODULES": '["memory.tools", "tests.toolkit.chaos"]',
            "OPSGRAPH_WORKER_HEARTBEAT_S": "0.5",
            "OPSGRAPH_WORKER_LOST_AFTER_S": "3",
            "OPSGRAPH_HTTP_TARGETS": '["127.0.0.1", "localhost"]',
            "OPSGRAPH_LOG_ROOTS": f'["{workdir / "logs"}"]',
            "PYTHONUNBUFFERED": "1",
            # every test request comes from one address without a key: one bucket; tests of limits set their own
            "OPSGRAPH_RATE_LIMIT_READS": "100000/minute",
            "OPSGRAPH_RATE_LIMIT_WRITES": "100000/minute",
            **extra_env,
        }
        # credentials every helper request sends (the auth layer fills it with an admin key)
        self.headers: dict[str, str] = {}
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.redis = redis.Redis.from_url(redis_url)
        # an admin key of tenant "default", made the way an operator would (the keys CLI, on the database)
        self.admin_key = self.cli_create_key("default", ["admin"], name="test harness")
        self.headers = {"Authorization": f"Bearer {self.admin_key}"}
        # the tenant of each task submitted here: REST helpers act for it when a path names the task
        self.tenant_of: dict[str, str] = {}

    def cli_create_key(self, tenant: str, scopes: list[str], name: str = "") -> str:
        argv = [sys.executable, "-m", "services.cli", "keys", "create", "--tenant", tenant, "--name", name]
        for scope in scopes:
            argv += ["--scope", scope]
        done = subprocess.run(argv, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip().splitlines()[-1]

    def create_key(self, tenant: str, scopes: list[str], name: str = "", **body: Any) -> str:
        """A key made over REST by the harness's admin; returns the key itself."""
        resp = self.post("/v1/keys", json={"tenant": tenant, "scopes": scopes, "name": name, **body})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["token"])

    @staticmethod
    def bearer(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def _kw(self, path: str, kw: dict[str, Any]) -> dict[str, Any]:
        """The admin's credential unless the call sends its own, acting for the tenant of a task the path names."""
        headers = {**self.headers, **(kw.pop("headers", None) or {})}
        if not any(h.lower() == "x-opsgraph-tenant" for h in headers):
            for task_id, tenant in self.tenant_of.items():
                if task_id in path:
                    headers["X-Opsgraph-Tenant"] = tenant
                    break
        return {"timeout": 30, **kw, "headers": headers}

    def headers_for(self, task_id: str) -> dict[str, str]:
        return self._kw(f"/v1/tasks/{task_id}", {})["headers"]  # type: ignore[no-any-return]

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args],
            env={**self.env, **(env or {})},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_api(self) -> None:
        self.api = self._spawn("api", "api")
        wait_until(lambda: httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200, 60, "the API")

    def start_worker(self, pool: str, name: str, **env: str) -> str:
        hostname = f"{name}@test"
        self.workers[hostname] = self._spawn(name, "worker", "--pool", pool, "--name", hostname, env=env)
        wait_until(lambda: self.redis.exists(f"opsgraph:worker:{hostname}"), 60, f"worker {hostname}")
        return hostname

    def kill_worker(self, hostname: str) -> None:
        """SIGKILL the worker and its pool processes at once, as an OOM kill or a lost machine would."""
        proc = self.workers.pop(hostname)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def kill_api(self) -> None:
        assert self.api is not None
        os.killpg(self.api.pid, signal.SIGKILL)
        self.api.wait(timeout=10)
        self.api = None

    def stop(self) -> None:
        procs = [p for p in [self.api, *self.workers.values()] if p is not None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)

    # REST helpers
    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, self.base + path, **self._kw(path, kw))

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)

    def client_put(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("PUT", path, **kw)

    def client_delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("DELETE", path, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)

    def stream(self, path: str, **kw: Any) -> Any:
        """httpx.stream over GET with the harness's credential (a context manager)."""
        return httpx.stream("GET", self.base + path, **self._kw(path, kw))

    def submit(self, goal: str, **body: Any) -> str:
        """Each call is its own tenant unless the test names one (the admin key acts for it): the semantic cache
        never links tests."""
        body.setdefault("tenant", f"t-{uuid.uuid4().hex[:10]}")
        resp = self.post("/v1/tasks", json={"goal": goal, **body})
        assert resp.status_code == 202, resp.text
        task_id = str(resp.json()["id"])
        if body["tenant"]:
            self.tenant_of[task_id] = body["tenant"]
        return task_id

    def task(self, task_id: str) -> dict[str, Any]:
        resp = self.get(f"/v1/tasks/{task_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    def wait_task(self, task_id: str, timeout: float = 90) -> dict[str, Any]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: (t := self.task(task_id))["status"] in ("succeeded", "failed", "cancelled") and t,
            timeout,
            f"task {task_id} to end",
            interval=0.25,
        )

    def wait_node_started(self, task_id: str, node_id: str, timeout: float = 60) -> dict[str, Any]:
        def started() -> dict[str, Any] | None:
            for r in self.task(task_id)["node_runs"]:
                if r["node_id"] == node_id and r["status"] == "running" and r["worker"]:
                    return r  # type: ignore[no-any-return]
            return None

        return wait_until(started, timeout, f"node {node_id} to start", interval=0.1)  # type: ignore[no-any-return]


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
