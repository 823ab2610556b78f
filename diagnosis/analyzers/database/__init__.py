"""Database: live PostgreSQL (sessions, locks, settings), its logs, and RDS (events, CloudWatch metrics,
Performance Insights).

Rules (by mechanism, see docs/analyzers.md):
- Sessions waiting on a lock are symptoms (`db_waits`); the root of the blocking chain is the cause. A root that
  sits "idle in transaction" is an application that opened a transaction and stopped talking without committing
  (a code_defect); an active root holding locks for long is a long transaction or DDL (code_defect as well: the
  work that holds the lock is the application's or a migration's).
- Connections near max_connections: resource_exhaustion, naming the application that holds them (a pool leak
  when most of them are idle); when most connections are lock waiters, the lock explains them instead.
- One statement dominating DB load while CPU is saturated: resource_exhaustion naming the statement.
- Storage running out (FreeStorageSpace falling, or when the metric is missing "could not extend file", "No space
  left on device", an RDS storage event): resource_exhaustion. Burst balance at zero: resource_exhaustion.
- A failover or restart in the last hour: infrastructure (connection errors around it are its symptoms); an old
  one is benign.

The package's modules follow those lines: `sessions` (locks, connections, application pools), `capacity` (CPU by
statement, storage, a datastore's own quota), `io` (replication lag, burst balance, CPU credits, I/O storms),
`events` (reachability, RDS events, clients' database errors), `keyvalue` (Redis), `cassandra` (keyspace
replication against the ring), `search` (a search cluster's own health); `_shared` holds the thresholds and the
per-investigation context they all read.
"""

from __future__ import annotations

from diagnosis.analyzers._common import now_of, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.database._shared import DB_INTERPRETED, Context, is_db_metric
from diagnosis.analyzers.database.capacity import _cpu, _quota_full, _storage
from diagnosis.analyzers.database.cassandra import _keyspaces, _tombstones
from diagnosis.analyzers.database.events import _log_symptoms, _rds_events, _unreachable
from diagnosis.analyzers.database.io import _burst_balance, _cpu_credits, _io_storms, _replica_lag
from diagnosis.analyzers.database.keyvalue import _redis, _redis_blocked
from diagnosis.analyzers.database.search import datastore_health
from diagnosis.analyzers.database.sessions import _app_pools, _connections, _locks
from diagnosis.analyzers.database.slowlog import slow_queries
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Domain, Finding

# ---------------------------------------------------------------- entry point


@ANALYZERS.analyzer(
    domain=Domain.DATABASE,
    reads={
        "pg/session",
        "pg/lock",
        "pg/settings",
        "rds/event",
        "pi/sql",
        "metric",
        "log",
        "redis/info",
        "redis/slowlog",
        "cassandra/node",
        "cassandra/keyspace",
    },
)
def database(evidence: EvidenceSet) -> list[Finding]:
    now = now_of(evidence)
    ctx = Context(evidence, now)
    out: list[Finding] = []
    out += _unreachable(ctx)
    out += _locks(ctx)
    out += _connections(ctx)
    out += _cpu(ctx)
    out += _storage(ctx)
    out += _quota_full(ctx)
    out += _replica_lag(ctx)
    out += _burst_balance(ctx)
    out += _cpu_credits(ctx)
    out += _io_storms(ctx)
    out += _rds_events(ctx)
    out += _log_symptoms(ctx)
    out += _redis(ctx)
    out += _redis_blocked(ctx)
    out += _keyspaces(ctx)
    out += _tombstones(ctx)
    out += _app_pools(ctx)
    return with_aliases(out)


__all__ = ["DB_INTERPRETED", "database", "datastore_health", "is_db_metric", "slow_queries"]
