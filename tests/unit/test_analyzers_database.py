"""Database analyzer: locks and idle transactions, connections, CPU by one query, storage, replication, failover,
I/O storms, burst balance; their red herrings and a healthy database."""

from __future__ import annotations

from pathlib import Path

from diagnosis.analyzers.database import database
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, by_code, causes, series

NOW = T0 + 3600


def _lock_incident(b: Builder) -> None:
    b.session(
        26846,
        "idle in transaction",
        query="UPDATE orders SET status = 'paid' WHERE id = 42",
        app="orders-api",
        xact_start=NOW - 900,
        query_start=NOW - 895,
        state_change=NOW - 894,
        captured_at=NOW,
    )
    for pid in (26850, 26851, 26856):
        b.session(
            pid,
            "active",
            query="UPDATE orders SET status = 'shipped' WHERE id = 42",
            app="fulfilment",
            xact_start=NOW - 300,
            query_start=NOW - 300,
            state_change=NOW - 300,
            captured_at=NOW,
            blocked_by=[26846],
            wait_event_type="Lock",
        )
        b.lock(pid, "orders", "RowExclusiveLock", True)
        b.lock(pid, None, "ShareLock", False, locktype="transactionid")
    b.lock(26846, "orders", "RowExclusiveLock", True)
    b.lock(26846, None, "ExclusiveLock", True, locktype="transactionid")


def test_idle_in_transaction_blocker_is_the_cause_and_the_waiters_its_symptom() -> None:
    b = Builder()
    _lock_incident(b)
    ev = b.set()
    found = database(ev)
    [cause] = causes(found)
    assert cause.code == "idle_in_transaction_blocker"
    assert cause.category == "code_defect"
    assert "26846" in cause.object and "orders" in cause.object
    assert "idle in transaction for 14m" in cause.mechanism and "RowExclusiveLock" in cause.mechanism
    assert "3 session(s) wait" in cause.mechanism
    assert {"pid:26846", "relation:orders", "db:shop"} <= set(cause.tags)
    write = [a for a in cause.actions if a.kind == "write" and a.tool]
    assert write[0].tool == "postgres_terminate_session" and write[0].args == {"pid": 26846, "database": "shop"}
    [waits] = by_code(found, "db_waits")
    assert waits.role == "symptom" and "relation:orders" in waits.tags
    assert "db_waits" in cause.explains
    assert_refs_real(ev, found)


def test_blocking_derived_from_pg_locks_when_blocked_by_is_missing() -> None:
    b = Builder()
    b.session(
        100,
        "active",
        query="ALTER TABLE orders ADD COLUMN note text",
        xact_start=NOW - 120,
        query_start=NOW - 120,
        state_change=NOW - 120,
        captured_at=NOW,
    )
    b.session(
        101,
        "active",
        query="SELECT * FROM orders WHERE id = 1",
        query_start=NOW - 60,
        captured_at=NOW,
        wait_event_type="Lock",
    )
    b.lock(100, "orders", "AccessExclusiveLock", True)
    b.lock(101, "orders", "AccessShareLock", False)
    [cause] = causes(database(b.set()))
    assert cause.code == "ddl_lock_blocker" and "pid 100" in cause.object and "AccessExclusiveLock" in cause.mechanism


def test_old_idle_transaction_blocking_nobody_is_benign() -> None:
    b = Builder()
    b.session(
        7, "idle in transaction", query="SELECT 1", xact_start=NOW - 3600, state_change=NOW - 3600, captured_at=NOW
    )
    b.session(8, "active", query="SELECT now()", query_start=NOW - 1, captured_at=NOW)
    found = database(b.set())
    assert not causes(found)
    assert by_code(found, "idle_in_transaction_not_blocking")[0].role == "benign"


def test_pool_leak_near_max_connections_names_the_application() -> None:
    b = Builder()
    b.settings(max_connections=100)
    for pid in range(1000, 1080):
        b.session(pid, "idle", query="SELECT 1", app="billing-worker", state_change=NOW - 1800, captured_at=NOW)
    for pid in range(2000, 2015):
        b.session(pid, "active", query="SELECT * FROM orders", app="orders-api", query_start=NOW - 1, captured_at=NOW)
    b.log(
        "logs/orders-api.log",
        [
            (
                NOW - 30 + i,
                "error",
                "FATAL: remaining connection slots are reserved for non-replication superuser connections",
            )
            for i in range(5)
        ],
    )
    ev = b.set()
    found = database(ev)
    [cause] = causes(found)
    assert cause.code == "connection_pool_leak" and cause.category == "resource_exhaustion"
    assert "billing-worker holds 80" in cause.mechanism and "95 of max_connections 100" in cause.mechanism
    assert "service:billing-worker" in cause.tags
    assert_refs_real(ev, found)


def test_too_many_clients_in_logs_alone_is_a_symptom_that_needs_the_sessions() -> None:
    """Refusals say the slots are gone, not who holds them (leak, lock pile-up, stalled disk, surge): no cause."""
    b = Builder()
    b.log(
        "logs/postgresql.log", [(NOW - 60 + i, "fatal", "FATAL:  sorry, too many clients already") for i in range(20)]
    )
    found = database(b.set())
    assert causes(found) == []
    [refused] = [f for f in found if f.code == "db_connection_errors" and f.analyzer == "database"]
    assert refused.role == "symptom" and refused.category == "unknown"
    assert any("pg_stat_activity" in n for n in refused.needs)


def test_too_many_clients_with_sessions_is_connection_exhaustion() -> None:
    b = Builder()
    b.settings(max_connections=5)
    for pid in range(100, 105):
        b.session(pid, "active", query="SELECT 1", app="api", captured_at=NOW, query_start=NOW)
    b.log("logs/postgresql.log", [(NOW - 60 + i, "fatal", "FATAL:  sorry, too many clients already") for i in range(5)])
    [cause] = causes(database(b.set()))
    assert cause.code == "connection_exhaustion"


def test_connections_high_because_writers_are_blocked_is_a_symptom() -> None:
    b = Builder()
    b.settings(max_connections=5)
    _lock_incident(b)
    b.session(3000, "active", query="SELECT 1", captured_at=NOW, query_start=NOW)
    found = database(b.set())
    assert [f.code for f in causes(found)] == ["idle_in_transaction_blocker"]
    assert by_code(found, "connections_high")[0].role == "symptom"


def test_cpu_saturated_by_one_statement_names_it() -> None:
    b = Builder()
    lab = {"DBInstanceIdentifier": "orders-prod"}
    b.metric(
        "CPUUtilization",
        series(NOW - 3000, 300, [22, 25, 24, 23, 97, 98, 99, 99, 98, 99, 99]),
        lab,
        source="cloudwatch",
        unit="Percent",
    )
    b.pi_sql("SELECT * FROM orders WHERE lower(email) = ?", "A1B2C3", 7.5)
    b.pi_sql("UPDATE carts SET updated_at = ? WHERE id = ?", "D4E5F6", 0.6)
    b.pi_sql("SELECT id FROM users WHERE id = ?", "G7H8I9", 0.3)
    ev = b.set()
    found = database(ev)
    [cause] = causes(found)
    assert cause.code == "cpu_saturated_by_query"
    assert "lower(email)" in cause.mechanism and "orders-prod" in cause.title
    assert "cpu_high" in cause.explains
    assert_refs_real(ev, found)


def test_cpu_high_without_performance_insights_is_a_symptom_that_asks_for_it() -> None:
    b = Builder()
    b.metric("CPUUtilization", series(NOW - 3000, 300, [95] * 11), {"DBInstanceIdentifier": "db1"}, source="cloudwatch")
    found = database(b.set())
    assert not causes(found)
    [sym] = by_code(found, "cpu_high")
    assert sym.needs


def test_free_storage_falling_gives_time_to_full() -> None:
    b = Builder()
    gib = 2**30
    vals = [50 * gib] * 5 + [50 * gib - i * 2 * gib for i in range(1, 20)]
    b.metric(
        "FreeStorageSpace",
        series(NOW - 23 * 600, 600, vals),
        {"DBInstanceIdentifier": "orders-prod"},
        source="cloudwatch",
    )
    [cause] = causes(database(b.set()))
    assert cause.code == "storage_trend_to_full"
    assert "will be full in about" in cause.mechanism and "db:orders-prod" in cause.tags


def test_storage_full_inferred_when_the_metric_is_missing() -> None:
    b = Builder()
    b.rds_event("orders-prod", "Finished DB Instance backup", NOW - 7200)
    b.log(
        "logs/postgresql.log",
        [
            (NOW - 50 + i, "error", 'ERROR:  could not extend file "base/16384/16397": No space left on device')
            for i in range(5)
        ],
    )
    found = database(b.set())
    [cause] = causes(found)
    assert cause.code == "storage_full" and "no FreeStorageSpace metric" in cause.mechanism
    assert "orders-prod" in cause.object
    assert by_code(found, "rds_routine_event")[0].role == "benign"


def test_storage_sawtooth_is_not_running_out() -> None:
    b = Builder()
    gib = 2**30
    vals = [(40 - (i % 6)) * gib for i in range(30)]
    b.metric(
        "FreeStorageSpace", series(NOW - 29 * 600, 600, vals), {"DBInstanceIdentifier": "db1"}, source="cloudwatch"
    )
    assert not causes(database(b.set()))


def test_replica_lag_rising_is_named() -> None:
    b = Builder()
    b.metric(
        "ReplicaLag",
        series(NOW - 1800, 60, [0, 1, 0, 2, 1] + [30 * i for i in range(1, 26)]),
        {"DBInstanceIdentifier": "orders-replica-1"},
        source="cloudwatch",
    )
    [cause] = causes(database(b.set()))
    assert cause.code == "replication_lag" and "orders-replica-1" in cause.object


def test_recent_failover_is_infrastructure_and_old_one_benign() -> None:
    b = Builder()
    b.rds_event("orders-prod", "Multi-AZ instance failover started.", NOW - 600, ["failover"])
    b.rds_event("orders-prod", "Multi-AZ instance failover completed.", NOW - 540, ["failover"])
    b.log(
        "logs/orders-api.log",
        [
            (NOW - 590 + i, "error", "psycopg2.OperationalError: server closed the connection unexpectedly")
            for i in range(30)
        ],
    )
    found = database(b.set())
    [cause] = causes(found)
    assert cause.code == "db_failover" and cause.category == "infrastructure"
    assert "db_connection_errors" in cause.explains
    assert by_code(found, "db_connection_errors")[0].role == "symptom"

    old = Builder()
    old.rds_event("orders-prod", "Multi-AZ instance failover completed.", NOW - 6 * 86400, ["failover"])
    old.log("logs/api.log", [(NOW, "info", "ok")])
    found = database(old.set())
    assert not causes(found) and by_code(found, "db_failover_old")[0].role == "benign"


def test_checkpoint_storm_with_write_surge() -> None:
    b = Builder()
    b.metric(
        "WriteIOPS",
        series(
            NOW - 1800,
            60,
            [300] * 15 + [2900, 3000, 3000, 2950, 3000, 3000, 2980, 3000, 3000, 3000, 3000, 2990, 3000, 3000, 3000],
        ),
        {"DBInstanceIdentifier": "orders-prod"},
        source="cloudwatch",
    )
    b.log(
        "logs/postgresql.log",
        [
            (NOW - 900 + i * 30, "info", "LOG:  checkpoints are occurring too frequently (24 seconds apart)")
            for i in range(10)
        ],
    )
    b.settings(max_wal_size="1GB")
    [cause] = causes(database(b.set()))
    assert cause.code == "checkpoint_storm" and "every 24s" in cause.title and "1GB" in cause.mechanism


def test_wraparound_vacuum_is_an_io_storm() -> None:
    b = Builder()
    b.session(
        555,
        "active",
        query="autovacuum: VACUUM public.events (to prevent wraparound)",
        backend_type="autovacuum worker",
        captured_at=NOW,
    )
    b.metric(
        "DiskQueueDepth",
        series(NOW - 1800, 60, [1] * 15 + [40] * 15),
        {"DBInstanceIdentifier": "orders-prod"},
        source="cloudwatch",
    )
    [cause] = causes(database(b.set()))
    assert cause.code == "vacuum_io_storm" and "public.events" in cause.mechanism and "wraparound" in cause.mechanism


def test_burst_balance_exhausted() -> None:
    b = Builder()
    b.metric(
        "BurstBalance",
        series(NOW - 3000, 300, [100, 90, 70, 50, 30, 12, 3, 0, 0, 0, 0]),
        {"DBInstanceIdentifier": "orders-prod"},
        source="cloudwatch",
    )
    [cause] = causes(database(b.set()))
    assert cause.code == "burst_balance_exhausted"


def test_healthy_database_gives_no_cause() -> None:
    b = Builder()
    b.settings(max_connections=200)
    for pid in range(10):
        b.session(
            pid + 100,
            "idle" if pid % 2 else "active",
            query="SELECT 1",
            query_start=NOW - 1,
            state_change=NOW - 1,
            captured_at=NOW,
        )
    lab = {"DBInstanceIdentifier": "db1"}
    b.metric(
        "CPUUtilization",
        series(NOW - 3000, 300, [20, 22, 25, 21, 23, 24, 22, 20, 21, 23, 22]),
        lab,
        source="cloudwatch",
    )
    b.metric("FreeStorageSpace", series(NOW - 3000, 300, [80e9] * 11), lab, source="cloudwatch")
    b.metric(
        "ReplicaLag",
        series(NOW - 3000, 300, [0.5, 0.2, 1, 0.3, 0.1, 0.4, 0.2, 0.3, 0.5, 0.1, 0.2]),
        lab,
        source="cloudwatch",
    )
    assert database(b.set()) == []


def test_wraparound_vacuum_seen_in_performance_insights() -> None:
    b = Builder()
    b.pi_sql("autovacuum: VACUUM public.events (to prevent wraparound)", "D5A7", 4.9, group="db.sql")
    b.pi_sql("INSERT INTO events (id) VALUES ($1)", "E1B5", 2.8, group="db.sql")
    b.metric("BurstBalance", series(NOW - 3000, 300, [100, 100, 90, 60, 30, 10, 0, 0, 0, 0, 0]), source="cloudwatch")
    found = database(b.set())
    vac = by_code(found, "vacuum_io_storm")[0]
    assert "public.events" in vac.mechanism and "IOPS" in vac.mechanism
    assert "burst_balance_exhausted" in vac.explains


def test_replica_lag_explained_by_exhausted_cpu_credits() -> None:
    b = Builder()
    lab = {"DBInstanceIdentifier": "orders-replica-1"}
    b.metric(
        "CPUCreditBalance", series(NOW - 3000, 300, [144, 120, 90, 60, 30, 5, 0, 0, 0, 0, 0]), lab, source="cloudwatch"
    )
    b.metric(
        "ReplicaLag", series(NOW - 3000, 300, [1, 1, 2, 1, 5, 40, 120, 300, 500, 700, 900]), lab, source="cloudwatch"
    )
    found = database(b.set())
    credits = by_code(found, "cpu_credits_exhausted")[0]
    lag = by_code(found, "replication_lag")[0]
    assert "replication_lag" in credits.explains and credits.ts is not None and lag.ts is not None
    assert credits.ts <= lag.ts + 300


def test_live_tool_ages_and_an_unreachable_server() -> None:
    b = Builder()
    sid = b.session(
        9, "idle in transaction", query="UPDATE t SET x = 1", captured_at=NOW, xact_start=None, state_change=None
    )
    b.items[-1].data["state_age_s"] = 1200.0
    b.session(10, "active", query="UPDATE t SET x = 2", captured_at=NOW, blocked_by=[9])
    found = database(b.set())
    blocker = by_code(found, "idle_in_transaction_blocker")[0]
    assert "for 20m" in blocker.mechanism and sid

    down = Builder()
    down.settings(
        server="db.internal:5432",
        reachable=False,
        error='connection to server at "db.internal" (10.0.0.5), port 5432 failed: Connection refused',
    )
    [cause] = causes(database(down.set()))
    assert cause.code == "db_unreachable" and cause.category == "dependency_failure"


def test_redis_at_maxmemory_live_and_from_client_logs() -> None:
    b = Builder()
    b.raw(
        "redis/info",
        "redis/cache:6379",
        {
            "healthy": True,
            "server": "cache:6379",
            "used_memory_bytes": 1_060_000_000,
            "maxmemory_bytes": 1_073_741_824,
            "evicted_keys": 0,
        },
    )
    [cause] = causes(database(b.set()))
    assert cause.code == "redis_memory_full" and cause.actions[-1].tool == "redis_config_set"

    logs = Builder()
    msg = "ERROR cart: redis write failed: OOM command not allowed when used memory > 'maxmemory'."
    logs.log("logs/cart.log", [(NOW - 60 + i, "error", msg) for i in range(10)])
    [cause] = causes(database(logs.set()))
    assert cause.code == "redis_memory_full" and cause.category == "resource_exhaustion"


def test_storage_eaten_by_wal_for_a_replication_slot() -> None:
    b = Builder()
    gib = 2**30
    lab = {"DBInstanceIdentifier": "orders-prod"}
    b.metric(
        "FreeStorageSpace",
        series(NOW - 19 * 600, 600, [40 * gib - i * 2 * gib for i in range(20)]),
        lab,
        source="cloudwatch",
    )
    b.metric(
        "ReplicationSlotDiskUsage",
        series(NOW - 19 * 600, 600, [0.1 * gib + i * 2 * gib for i in range(20)]),
        lab,
        source="cloudwatch",
    )
    [cause] = causes(database(b.set()))
    assert "replication slot" in cause.mechanism


def test_row_lock_queue_as_a_real_server_reports_it_is_no_deadlock() -> None:
    # the shape PostgreSQL 15 gave for one idle-in-transaction UPDATE and three UPDATEs of the same row: every
    # waiter holds RowExclusiveLock on the table; the first queues on the holder's transaction id, the others on
    # the tuple; pg_blocking_pids() names the holder and the queue ahead
    b = Builder()
    b.session(
        1,
        "idle in transaction",
        query="UPDATE orders SET status = 'paid' WHERE id = 42",
        app="orders-api",
        xact_start=NOW - 60,
        state_change=NOW - 59,
        captured_at=NOW,
    )
    b.session(
        2,
        "active",
        query="UPDATE orders SET status = 'x' WHERE id = 42",
        blocked_by=[1],
        captured_at=NOW,
        query_start=NOW - 30,
    )
    b.session(
        3,
        "active",
        query="UPDATE orders SET status = 'y' WHERE id = 42",
        blocked_by=[2],
        captured_at=NOW,
        query_start=NOW - 29,
    )
    b.session(
        4,
        "active",
        query="UPDATE orders SET status = 'z' WHERE id = 42",
        blocked_by=[2, 3],
        captured_at=NOW,
        query_start=NOW - 28,
    )
    for pid in (1, 2, 3, 4):
        b.lock(pid, "orders", "RowExclusiveLock", True)
    b.lock(1, None, "ExclusiveLock", True, locktype="transactionid")
    b.lock(2, None, "ShareLock", False, locktype="transactionid")
    b.lock(2, "orders", "ExclusiveLock", True, locktype="tuple")
    b.lock(3, "orders", "ExclusiveLock", False, locktype="tuple")
    b.lock(4, "orders", "ExclusiveLock", False, locktype="tuple")
    found = database(b.set())
    assert [f.code for f in causes(found)] == ["idle_in_transaction_blocker"]
    blocker = causes(found)[0]
    assert "pid 1" in blocker.object and "row locks of its UPDATE on relation orders" in blocker.mechanism
    assert "3 session(s) wait" in blocker.mechanism


def test_app_pool_exhaustion_is_named_and_a_lock_explains_it() -> None:
    b = Builder()
    _lock_incident(b)
    msg = "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    b.log("Pod/shop/orders-api-6d5f8b7c9d-dvlnp/app", [(NOW - 100 + i, "error", msg) for i in range(20)])
    found = database(b.set())
    pool = by_code(found, "app_pool_exhausted")[0]
    blocker = by_code(found, "idle_in_transaction_blocker")[0]
    assert "orders-api" in pool.object and "app_pool_exhausted" in blocker.explains
    assert set(pool.tags) & set(blocker.tags)  # linked through the service and the database


def test_search_cluster_health_red_is_a_failing_datastore_yellow_degraded_green_benign() -> None:
    from diagnosis.analyzers.database import datastore_health

    b = Builder()
    for name, status, unassigned in (("es-a", "red", 12), ("es-b", "yellow", 4), ("es-c", "green", 0)):
        data = {"engine": "elasticsearch", "cluster": name, "status": status, "unassigned_shards": unassigned}
        b.raw("datastore/health", f"elasticsearch/{name}", {**data, "number_of_data_nodes": 3})
    ev = b.set()
    found = {f.object: f for f in datastore_health(ev)}
    red, yellow, green = (found[f"elasticsearch cluster {n}"] for n in ("es-a", "es-b", "es-c"))
    assert red.role == "cause" and red.category == "dependency_failure" and "12 shards unassigned" in red.title
    assert "service:es-a" in red.tags
    assert yellow.role == "symptom" and green.role == "benign"
    assert_refs_real(ev, list(found.values()))


def test_a_blocker_in_another_database_of_the_server_ranks_below_the_asked_ones() -> None:
    """The live checks connect to one database; a lock there is the question's answer, an equal lock in another
    database on the same server is another fault (row locks never block across databases)."""
    b = Builder()
    b.settings(server="postgresql://app:***@db-1:5432/shop", reachable=True)
    for db, holder, waiters in (("billing", 500, (501, 502, 503)), ("shop", 600, (601, 602, 603))):
        b.session(holder, "idle in transaction", query="UPDATE t SET x = 1 WHERE id = 1", db=db,
                  xact_start=NOW - 60, query_start=NOW - 60, state_change=NOW - 59, captured_at=NOW)  # fmt: skip
        for pid in waiters:
            b.session(pid, "active", query="UPDATE t SET x = 2 WHERE id = 1", db=db, blocked_by=[holder],
                      xact_start=NOW - 30, query_start=NOW - 30, state_change=NOW - 30, captured_at=NOW,
                      wait_event_type="Lock")  # fmt: skip
    found = {f.object.split()[1]: f for f in causes(database(b.set()))}
    assert found["600"].score > found["500"].score
    assert "not in shop" in found["500"].mechanism and "not in" not in found["600"].mechanism


def test_pg_stat_activity_grouped_by_application_names_the_app_holding_the_slots(tmp_path: Path) -> None:
    """The refusals ask for pg_stat_activity grouped by application and state; given that export, each row counts
    for its `count` sessions and the application holding most of them, idle, is a pool leak."""
    from diagnosis.bundle import BundleLimits, load_bundle

    (tmp_path / "activity.csv").write_text(
        "datname,usename,application_name,state,count,oldest_state_change\n"
        "shop,app,worker,idle,180,2026-01-05 08:00:00+00\n"
        "shop,app,worker,active,5,2026-01-05 09:40:00+00\n"
        "shop,app,web,active,8,2026-01-05 09:41:00+00\n"
    )
    (tmp_path / "web.log").write_text(
        "".join(
            f"2026-01-05T09:4{i}:00Z ERROR FATAL:  remaining connection slots are reserved for superusers\n"
            for i in range(5)
        )
    )
    found = database(load_bundle(tmp_path, BundleLimits()))
    [cause] = causes(found)
    assert cause.category == "resource_exhaustion" and cause.code == "connection_pool_leak"
    assert "worker holds 185" in cause.mechanism and "180 idle" in cause.mechanism
