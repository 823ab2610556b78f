"""A real PostgreSQL lock incident, for tests at every level (tool, investigation, remediation).

One session updates a row of `orders` and leaves its transaction open (idle in transaction); writers then
update the same row and wait on its lock. Everything runs in a fresh database that is dropped afterwards. The
application's sessions log in as the ordinary role `shop_app` (not a superuser, as a real application's would
be; opsgraph refuses to end a superuser's session).

    with lock_incident(os.environ["OPSGRAPH_TEST_POSTGRES_URL"]) as incident:
        ...  # incident.url, incident.holder_pid, incident.waiter_pids
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import psycopg

from tests.harness import PostgresDatabase

APP_ROLE = "shop_app"


def _ensure_role(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone()
        if not exists:
            with suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):  # another test made it
                conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER")


@dataclass
class LockIncident:
    url: str  # the incident's database (no password on the test server)
    database: str
    table: str
    holder_pid: int
    waiter_pids: list[int] = field(default_factory=list)
    holder_query: str = ""
    writer_threads: list[threading.Thread] = field(default_factory=list, repr=False)

    def writers_finished(self) -> bool:
        """Every waiting writer got its lock and committed (or gave up)."""
        return not any(t.is_alive() for t in self.writer_threads)

    def session_alive(self, pid: int) -> bool:
        with psycopg.connect(self.url, autocommit=True) as c:
            return c.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"PostgreSQL incident set-up: {what} did not happen within {timeout:g}s")


@contextmanager
def lock_incident(
    admin_url: str,
    *,
    waiters: int = 3,
    table: str = "orders",
    settle_s: float = 0.0,
    database: PostgresDatabase | None = None,
) -> Iterator[LockIncident]:
    """Start the incident, yield it while the writers wait, then end the open transaction and tear it down.

    `settle_s` keeps the holder idle a little longer before yielding (ages above zero)."""
    _ensure_role(admin_url)
    db = database or PostgresDatabase(admin_url)  # a given database outlives the incident (a benchmark's runs)
    holder: psycopg.Connection | None = None
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    pids: list[int] = []
    lock = threading.Lock()
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, status text NOT NULL, qty int NOT NULL)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'new', 1 FROM generate_series(1, 100) g")
            conn.execute(f"GRANT SELECT, UPDATE ON {table} TO {APP_ROLE}")
        holder = psycopg.connect(db.url, user=APP_ROLE, application_name="shop-admin")
        holder_query = f"UPDATE {table} SET status = 'held', qty = qty + 41 WHERE id = 7"
        holder.execute(holder_query)  # opens the transaction and leaves it open: idle in transaction
        holder_pid = holder.info.backend_pid

        def write(i: int) -> None:
            try:
                with psycopg.connect(
                    db.url, user=APP_ROLE, autocommit=True, application_name=f"orders-writer-{i}"
                ) as c:
                    with lock:
                        pids.append(c.info.backend_pid)
                    c.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id = 7")
            except psycopg.Error as exc:  # torn down while waiting: expected only on a failed set-up
                errors.append(exc)

        for i in range(waiters):
            t = threading.Thread(target=write, args=(i,), daemon=True, name=f"pg-incident-writer-{i}")
            t.start()
            threads.append(t)

        def all_waiting() -> bool:
            with psycopg.connect(db.url, autocommit=True) as c:
                row = c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone()
            return bool(row and row[0] >= waiters)

        _wait_for(all_waiting, 20, f"{waiters} writers waiting on the lock")
        if settle_s:
            time.sleep(settle_s)
        yield LockIncident(
            url=db.url,
            database=db.name,
            table=table,
            holder_pid=holder_pid,
            waiter_pids=sorted(pids),
            holder_query=holder_query,
            writer_threads=threads,
        )
    finally:
        if holder is not None:
            with suppress(psycopg.Error):
                holder.rollback()  # the writers go through now
            holder.close()
        for t in threads:
            t.join(timeout=10)
        if database is None:
            db.drop()  # WITH (FORCE): ends any session a failed test left behind
