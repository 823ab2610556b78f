"""Live PostgreSQL sessions: lock chains (the root blocker is the cause, waiters its symptoms), connections
near max_connections (who holds them), and application pools with no free connection."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from diagnosis.analyzers._common import (
    APP_POOL,
    AUTH_DENIED,
    HTTP_POOL_WAIT,
    NAMES_HTTP_UPSTREAM,
    PG_TOO_MANY,
    Rec,
    first_and_last_refs,
    log_end,
    records_with,
    ref_of,
    service_of,
    span_text,
)
from diagnosis.analyzers.database._shared import (
    _DDL,
    _RELATION_IN_QUERY,
    CONNECTIONS_HIGH,
    IDLE_TX_NOTABLE_S,
    LEAK_APP_SHARE,
    LEAK_IDLE_SHARE,
    Context,
    _age,
    _age_of,
    _int,
    _mref,
    _pts,
    _weight,
)
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import (
    human_duration,
)

# ---------------------------------------------------------------- application connection pools


def _app_pools(ctx: Context) -> list[Finding]:
    """A service whose own pool has no free connection (HikariCP, SQLAlchemy QueuePool, Prisma...): its requests
    wait for a connection. Slow or blocked queries hold connections longer (a lock explains it); alone it is the
    pool that is too small or leaks."""
    by_service: dict[str, list[Rec]] = defaultdict(list)
    for r in ctx.logs:
        # a client pool to an HTTP/gRPC upstream is the network analyzer's (the upstream holds the connections)
        if APP_POOL.search(r.msg) and not (HTTP_POOL_WAIT.search(r.msg) or NAMES_HTTP_UPSTREAM.search(r.msg)):
            by_service[service_of(r.item) or r.item.object].append(r)
    out = []
    for svc, recs in by_service.items():
        if len(recs) < 3:
            continue
        recs.sort(key=lambda r: r.ts or 0)
        burst = passing = _passing_burst(recs, ctx.now)
        tiny = None if burst else _configured_pool(ctx, svc)
        if tiny is not None:
            out.append(_tiny_pool_finding(svc, recs, tiny))
            continue
        # a pool that could not open connections while the database refused its password, both over: the blip of a
        # credential rotation the clients caught up with
        refused = burst and _refused_meanwhile(recs)
        # the driver could not reach the database itself just before the pool ran dry: the pool waits for
        # connections the database does not accept, it is not too small
        unreachable = not refused and _db_unreachable_first(recs)
        # the database cancels the service's statements of every kind at their timeout meanwhile: queries hold the
        # connections (the database is slow), the pool is not too small
        held = not refused and not unreachable and (_statements_time_out(recs) or _storage_stalled(ctx, recs))
        burst = burst or unreachable or held
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign" if refused else "symptom" if burst else "cause",
                code="app_pool_exhausted",
                category=Category.HEALTHY if refused else Category.UNKNOWN if burst else Category.RESOURCE_EXHAUSTION,
                title=f"{svc}: database connection pool exhausted ({len(recs)}x)"
                + (" while the database refused its password, then no more" if refused else "")
                + (" for a few minutes, then no more" if burst and not refused and not unreachable and not held else "")
                + (" after the database stopped accepting connections" if unreachable else "")
                + (" while the database's statements or storage are slow" if held else ""),
                mechanism=(
                    f"{svc}'s database connection pool has no free connection: '{recs[0].msg.strip()[:160]}' "
                    f"{len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}; requests wait for a connection and time out "
                    "(the pool is too small for the load, leaks connections, or its queries hold them too long)."
                ),
                object=f"connection pool of {svc}",
                # a few minutes of it that ended (new instances filling their pools in a rolling deploy) is faint
                score=0.3 if passing and not (refused or unreachable or held) else 0.6,
                ts=recs[0].ts,
                tags=[f"service:{svc}", f"db:{ctx.db_name()}"],
                explains=["errors", "latency", "http_5xx", "upstream_timeout"],
                evidence=[ref_of(recs[0]), ref_of(recs[-1])],
                actions=[
                    Action(
                        description="Connections the service holds, by state",
                        command='psql -c "SELECT application_name, state, count(*) FROM pg_stat_activity GROUP BY 1,2"',
                    )
                ],
            )
        )
    return out


# a connection pool's size in a service's settings: Spring's hikari maximum-pool-size, maximumPoolSize, a pool_size
# or max_pool_size, Rails' `pool:`, a DB_POOL variable
_POOL_SIZE = re.compile(
    r"(?:maximum-pool-size|maximumPoolSize|max[_-]?pool[_-]?size|pool[_-]?size|DB_POOL(?:_SIZE)?|\bpool)"
    r"[\"']?\s*[:=]\s*[\"']?(\d+)\b",
    re.I,
)
TINY_POOL = 4  # connections: a pool this small serves one request at a time per few connections


def _configured_pool(ctx: Context, svc: str) -> tuple[int, EvidenceItem, str] | None:
    """A pool size of at most TINY_POOL set for the service in a ConfigMap (its name or its settings name it)."""
    short = re.sub(r"-[a-z0-9]{8,10}-[a-z0-9]{5}$|-[a-z0-9]{5}$", "", svc)
    for item in ctx.evidence.kind("k8s/ConfigMap"):
        data = item.data.get("data") or {}
        name = str((item.data.get("metadata") or {}).get("name") or "")
        for key, value in data.items():
            text = f"{key}: {value}"
            if short not in name and short not in text:
                continue
            m = _POOL_SIZE.search(text)
            if m and 0 < int(m.group(1)) <= TINY_POOL:
                return int(m.group(1)), item, f"{name}/{key}: {m.group(0)}"
    return None


def _tiny_pool_finding(svc: str, recs: list[Rec], tiny: tuple[int, EvidenceItem, str]) -> Finding:
    size, item, where = tiny
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="pool_too_small",
        category=Category.CONFIGURATION_ERROR,
        title=f"{svc}: its connection pool is set to {size} ({where})",
        mechanism=(
            f"{svc}'s connection pool is configured to {size} connection(s) ({where}): its request threads queue for "
            f"one and time out ('{recs[0].msg.strip()[:160]}' {len(recs)}x {span_text(recs[0].ts, recs[-1].ts)}), "
            "while the database has room: the setting, not the database, is the limit."
        ),
        object=f"connection pool of {svc}",
        score=0.85,
        ts=recs[0].ts,
        tags=[f"service:{svc}"],
        explains=["errors", "latency", "http_5xx", "upstream_timeout", "app_pool_exhausted", "exception"],
        evidence=[EvidenceRef(item=item.id, field="data", value=where), ref_of(recs[0])],
        actions=[
            Action(
                description="Set the pool to what the service's threads need (and the database's connection limit "
                "allows), then roll the pods",
                command=f"kubectl edit configmap {where.split('/', 1)[0]}",
                kind="write",
            )
        ],
    )


# a database driver that cannot reach its server (MySQL Connector/J, libpq, psycopg, the MySQL client, pgx)
_DB_UNREACHABLE = re.compile(
    r"Communications link failure|CommunicationsException|Can't connect to (?:MySQL|MariaDB) server|"
    r"could not connect to server|connection to server at .{0,80}failed|Connection refused.{0,80}"
    r"(?:3306|5432|1433|27017)|(?:3306|5432|1433|27017).{0,40}connect: connection refused|"
    r"Lost connection to (?:MySQL|MariaDB) server",
    re.I,
)


def _logged_near(
    recs: list[Rec], rx: re.Pattern[str], before_s: float, after_s: float, *, to_last: bool = True
) -> list[str]:
    """What the pool's own logs said matching `rx` from `before_s` before its first wait to `after_s` after its last
    (or its first) wait."""
    first, last = recs[0].ts, recs[-1].ts if to_last else recs[0].ts
    if first is None or last is None:
        return []
    return [
        msg
        for it in {r.item.id: r.item for r in recs}.values()
        for x in it.data.get("records") or ()
        if isinstance(x.get("ts"), int | float)
        and first - before_s <= x["ts"] <= last + after_s
        and rx.search(msg := str(x.get("msg") or ""))
    ]


def _db_unreachable_first(recs: list[Rec]) -> bool:
    """The service's log says its driver could not reach the database before (or as) its pool ran dry."""
    return bool(_logged_near(recs, _DB_UNREACHABLE, 600, 60, to_last=False))


_STATEMENT_TIMEOUT = re.compile(
    r"canceling statement due to statement timeout|QueryTimeoutException|Query execution was interrupted, maximum "
    r"statement execution time exceeded|Statement cancelled due to timeout|Query timed out",
    re.I,
)
STATEMENT_KINDS = 2  # timeouts on statements of at least this many kinds (not one slow query)


# the storage under a database stalling its writes: PostgreSQL's checkpoint fsyncs taking seconds, Ceph's OSDs
# reporting slow ops, the kernel's hung-task watchdog
_CHECKPOINT_SYNC = re.compile(r"checkpoint complete:.*?\bsync=(\d+(?:\.\d+)?) s")
_STORAGE_SLOW = re.compile(r"reporting \d+ slow ops|\d+ slow requests|blocked for more than \d+ seconds")
SLOW_SYNC_S = 10.0


def _storage_stalled(ctx: Context, recs: list[Rec]) -> bool:
    """The database's storage stalled (slow checkpoint fsyncs, slow OSD ops) while the pool ran dry."""
    first, last = recs[0].ts, recs[-1].ts
    if first is None or last is None:
        return False
    for item in ctx.evidence.kind("log"):
        for x in item.data.get("records") or ():
            ts = x.get("ts")
            if not isinstance(ts, int | float) or not first - 1800 <= ts <= last + 60:
                continue
            msg = str(x.get("msg") or "")
            if "checkpoint complete" in msg and (m := _CHECKPOINT_SYNC.search(msg)) and float(m[1]) >= SLOW_SYNC_S:
                return True
            if "slow" in msg and _STORAGE_SLOW.search(msg):
                return True
    return False


def _statements_time_out(recs: list[Rec]) -> bool:
    """The service's log shows statements of several kinds cancelled at their timeout while its pool ran dry."""
    kinds: set[str] = set()
    for msg in _logged_near(recs, _STATEMENT_TIMEOUT, 600, 60):
        m = _STATEMENT_TIMEOUT.search(msg)
        verb = re.search(r"\b(select|insert|update|delete)\b\s+\S+\s+\S+", msg[m.end() :], re.I) if m else None
        kinds.add(verb.group(0).lower() if verb else "")
    return len(kinds - {""}) >= STATEMENT_KINDS


def _refused_meanwhile(recs: list[Rec]) -> bool:
    return bool(_logged_near(recs, AUTH_DENIED, 120, 120))


POOL_BURST_S = 300.0  # a pool out of connections for at most this long...
POOL_OVER_S = 900.0  # ...and fine for this long since: connections held up by something that passed
POOL_QUIET_S = 120.0  # ...or its own log went on this long without another


def _passing_burst(recs: list[Rec], now: float | None) -> bool:
    """A pool that ran dry for a few minutes and recovered was held up by something else (a failover, an I/O
    stall, a lock): it is not too small, or it would still be dry."""
    stamps = [r.ts for r in recs if r.ts is not None]
    if not stamps or now is None or max(stamps) - min(stamps) > POOL_BURST_S:
        return False
    if now - max(stamps) >= POOL_OVER_S:
        return True
    # or the service's own log went on for a while after it without another
    return (log_end(recs, max(stamps)) or 0.0) - max(stamps) >= POOL_QUIET_S


# ---------------------------------------------------------------- locks

_CONFLICTS: dict[str, set[str]] = {
    "AccessShareLock": {"AccessExclusiveLock"},
    "RowShareLock": {"ExclusiveLock", "AccessExclusiveLock"},
    "RowExclusiveLock": {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
    "ShareUpdateExclusiveLock": {
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareLock": {
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ShareRowExclusiveLock": {
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "ExclusiveLock": {
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
    "AccessExclusiveLock": {
        "AccessShareLock",
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    },
}
_STRENGTH = list(_CONFLICTS)


def _blocking_graph(ctx: Context) -> dict[int, set[int]]:
    """waiter pid -> the pids it waits for. pg_blocking_pids() (the sessions' `blocked_by`) is authoritative; only
    for a waiter without it is the edge derived from pg_locks, and then from table-level locks alone: an ungranted
    `relation` lock waits for the conflicting granted `relation` locks of other pids (tuple and transactionid locks
    queue behind each other in ways a snapshot of modes cannot order, and read as false cycles)."""
    graph: dict[int, set[int]] = defaultdict(set)
    for pid, s in ctx.sessions.items():
        for b in s.data.get("blocked_by") or ():
            bp = _int(b)
            if bp is not None and bp != pid:
                graph[pid].add(bp)
    granted: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for lk in ctx.locks:
        d = lk.data
        if d.get("granted") and d.get("relation") is not None and d.get("locktype", "relation") == "relation":
            granted[str(d["relation"])].append((_int(d.get("pid")) or -1, str(d.get("mode"))))
    for lk in ctx.locks:
        d = lk.data
        waiter = _int(d.get("pid"))
        if d.get("granted") or waiter is None or d.get("relation") is None or waiter in graph:
            continue
        if d.get("locktype", "relation") != "relation":
            continue
        for holder, mode in granted.get(str(d["relation"]), ()):
            if holder != waiter and mode in _CONFLICTS.get(str(d.get("mode")), set(_CONFLICTS)):
                graph[waiter].add(holder)
    _queued_behind(ctx, graph)
    return dict(graph)


def _queued_behind(ctx: Context, graph: dict[int, set[int]]) -> None:
    """Waiters that no granted lock blocks queue behind an earlier request that one does: a table's lock queue is
    first come, first served, so once DDL waits for AccessExclusiveLock (MySQL: an EXCLUSIVE metadata lock) behind
    an open transaction, every later read or write of the table waits behind the DDL. A session the processlist
    shows waiting for a metadata lock, with no lock row of its own, queues so on the table its statement names."""
    heads: dict[str, list[tuple[int, str]]] = defaultdict(list)  # relation -> (pid, mode) of waiting requests
    for lk in ctx.locks:
        d = lk.data
        pid = _int(d.get("pid"))
        if not d.get("granted") and pid in graph and d.get("relation") is not None:
            heads[str(d["relation"])].append((pid, str(d.get("mode"))))
    if not heads:
        return
    for lk in ctx.locks:
        d = lk.data
        waiter = _int(d.get("pid"))
        if d.get("granted") or waiter is None or waiter in graph or d.get("relation") is None:
            continue
        for head, mode in heads.get(str(d["relation"]), ()):
            if head != waiter and mode in _CONFLICTS.get(str(d.get("mode")), set(_CONFLICTS)):
                graph[waiter].add(head)
    for pid, s in ctx.sessions.items():
        if pid in graph or pid < 0 or "metadata lock" not in str(s.data.get("wait_event") or ""):
            continue
        m = _RELATION_IN_QUERY.search(str(s.data.get("query") or ""))
        relation = m.group(1).strip('"`').rsplit(".", 1)[-1] if m else None
        strongest = max(heads.get(relation or "", ()), key=lambda pm: _rank(pm[1]), default=None)
        if strongest is not None and strongest[0] != pid:
            graph[pid].add(strongest[0])


def _roots(graph: dict[int, set[int]], pid: int) -> tuple[set[int], bool]:
    """The pids at the top of pid's blocking chain, and whether the chain has a cycle (a deadlock)."""
    roots: set[int] = set()
    seen = {pid}
    stack = list(graph.get(pid, ()))
    cycle = False
    while stack:
        p = stack.pop()
        if p == pid:
            cycle = True
        if p in seen:
            continue
        seen.add(p)
        up = graph.get(p)
        if up:
            stack.extend(up)
        else:
            roots.add(p)
    return roots, cycle


def _locks(ctx: Context) -> list[Finding]:
    graph = _blocking_graph(ctx)
    out: list[Finding] = []
    if graph:
        waiters_of: dict[int, set[int]] = defaultdict(set)
        deadlocked: set[int] = set()
        for waiter in graph:
            roots, cycle = _roots(graph, waiter)
            if cycle:
                deadlocked.add(waiter)
            for r in roots:
                waiters_of[r].add(waiter)
        ctx.lock_pids = set(graph)
        for root, waiters in sorted(waiters_of.items(), key=lambda kv: -len(kv[1])):
            out.append(_blocker_finding(ctx, root, waiters))
            out.append(_waiters_finding(ctx, root, waiters))
        if deadlocked:
            out.append(_deadlock_finding(ctx, deadlocked))
    # long idle-in-transaction sessions that block nobody: named, but not the incident
    blocking = {b for bs in graph.values() for b in bs}
    at = ctx.captured
    idle_tx = [
        (pid, s)
        for pid, s in ctx.sessions.items()
        if str(s.data.get("state", "")).startswith("idle in transaction")
        and pid not in blocking
        and (_age_of(s.data, "state_change", at) or 0) >= IDLE_TX_NOTABLE_S
    ]
    if idle_tx and len(idle_tx) < 5:  # many of them are the connection analysis' pool leak
        pid, s = max(idle_tx, key=lambda ps: _age(ps[1].data.get("state_change"), at) or 0)
        age = _age_of(s.data, "state_change", at) or 0
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="benign",
                code="idle_in_transaction_not_blocking",
                category=Category.HEALTHY,
                title=f"pid {pid} idle in transaction for {human_duration(age)}, blocking nobody",
                mechanism=(
                    f"pid {pid} ({s.data.get('application_name') or s.data.get('usename')}) has been idle in "
                    "transaction "
                    f"for {human_duration(age)} but no session waits for it: not the cause of waits now (it does hold "
                    "back vacuum; set idle_in_transaction_session_timeout)."
                ),
                object=f"pid {pid}",
                score=0.2,
                tags=[f"pid:{pid}"],
                evidence=[EvidenceRef(item=s.id, field="state", value=s.data.get("state"))],
            )
        )
    return out


def _relation_between(ctx: Context, root: int, waiters: set[int]) -> tuple[str | None, str | None, list[EvidenceRef]]:
    """The relation the waiters wait on and the mode the root holds on it, with the pg_locks rows showing it."""
    refs: list[EvidenceRef] = []
    waiting_rel: Counter[str] = Counter()
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) in waiters and d.get("relation") is not None:
            waiting_rel[str(d["relation"])] += 2 if not d.get("granted") else 1
    held: dict[str, tuple[str, EvidenceItem]] = {}
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) == root and d.get("granted") and d.get("relation") is not None:
            rel, held_mode = str(d["relation"]), str(d.get("mode"))
            prev = held.get(rel)
            if prev is None or _rank(held_mode) > _rank(prev[0]):
                held[rel] = (held_mode, lk)
    relation = next((r for r, _ in waiting_rel.most_common() if r in held), None)
    if relation is None and held:
        relation = next(iter(sorted(held, key=lambda r: -_rank(held[r][0]))))
    if relation is None and waiting_rel:
        relation = waiting_rel.most_common(1)[0][0]
    mode: str | None = None
    if relation and relation in held:
        mode, lk = held[relation]
        if lk.data.get("mdl"):  # MySQL: the metadata lock's own type, as the server names it
            mode = f"a {lk.data['mdl']} metadata lock"
            refs.append(EvidenceRef(item=lk.id, field="mdl", value=lk.data["mdl"]))
        else:
            refs.append(EvidenceRef(item=lk.id, field="mode", value=mode))
    if relation is None:
        for pid in (root, *waiters):
            s = ctx.sessions.get(pid)
            m = _RELATION_IN_QUERY.search(str(s.data.get("query") or "")) if s else None
            if m:
                relation = m.group(1).strip('"')
                break
    for lk in ctx.locks:
        d = lk.data
        if _int(d.get("pid")) in waiters and not d.get("granted"):
            refs.append(EvidenceRef(item=lk.id, field="granted", value=False))
            break
    return relation, mode, refs


def _rank(mode: str) -> int:
    return _STRENGTH.index(mode) if mode in _STRENGTH else -1


def _blocker_finding(ctx: Context, root: int, waiters: set[int]) -> Finding:
    at = ctx.captured
    s = ctx.sessions.get(root)
    d = s.data if s else {}
    state = str(d.get("state") or "unknown")
    app = d.get("application_name") or None
    db = d.get("datname") or ctx.db_name()
    relation, mode, lock_refs = _relation_between(ctx, root, waiters)
    idle_for = _age_of(d, "state_change", at)
    xact_age = _age_of(d, "xact_start", at)
    query = " ".join(str(d.get("query") or "").split())[:200]
    on = f" on relation {relation}" if relation else ""
    holds = f"holds {mode}{on}" if mode else f"holds locks{on}"
    # waiters queued on its transaction id or a tuple wait for the rows its statement changed
    row_wait = any(
        not lk.data.get("granted") and lk.data.get("locktype") in ("transactionid", "tuple")
        for lk in ctx.locks
        if _int(lk.data.get("pid")) in waiters
    )
    if row_wait:
        verb = (query.split() or ["statement"])[0].upper()
        verb = verb if verb in ("UPDATE", "DELETE", "INSERT", "SELECT") else "statement"
        holds = f"holds the row locks of its {verb}{on}"
        holds += f" ({mode})" if mode else ""
    who = f"pid {root}" + (f" ({app}" + (f", user {d.get('usename')}" if d.get("usename") else "") + ")" if app else "")
    n = len(waiters)
    refs: list[EvidenceRef] = []
    if s:
        refs.append(EvidenceRef(item=s.id, field="state", value=state))
        if d.get("xact_start") is not None:
            refs.append(EvidenceRef(item=s.id, field="xact_start", value=d.get("xact_start")))
        if query:
            refs.append(EvidenceRef(item=s.id, field="query", value=query))
    refs += lock_refs
    if state.startswith("idle in transaction"):
        code = "idle_in_transaction_blocker"
        ran = f"'{query}'" if query else "its statements"
        mech = (
            f"{who} opened a transaction{f' {human_duration(xact_age)} ago' if xact_age is not None else ''}, ran "
            f"{ran}, and has sat idle in "
            f"transaction{f' for {human_duration(idle_for)}' if idle_for is not None else ''} "
            f"without committing; it {holds}, so {n} session(s) wait behind it."
        )
        title = f"pid {root} idle in transaction {holds}, blocking {n}"
    else:
        ddl = bool(_DDL.search(query))
        code = "ddl_lock_blocker" if ddl else "long_transaction_blocker"
        dur = _age_of(d, "query_start", at)
        mech = (
            f"{who} is {state} running {'DDL ' if ddl else ''}'{query or '?'}'"
            f"{f' for {human_duration(dur)}' if dur is not None else ''} inside a transaction"
            f"{f' open {human_duration(xact_age)}' if xact_age is not None else ''}; it {holds}, so {n} "
            "session(s) wait behind it."
        )
        title = f"pid {root} ({state}{', DDL' if ddl else ''}) {holds}, blocking {n}"
    ddl_waiter = next(
        (w for w in sorted(waiters) if (ws := ctx.sessions.get(w)) and _DDL.search(str(ws.data.get("query") or ""))),
        None,
    )
    if ddl_waiter is not None and ddl_waiter != root:
        ddl_query = " ".join(str(ctx.sessions[ddl_waiter].data.get("query") or "").split())[:100]
        mech += (
            f" DDL pid {ddl_waiter} ('{ddl_query}') waits for its lock, and every later statement on "
            f"{relation or 'the table'} queues behind the DDL."
        )
    asked = ctx.asked_databases()
    elsewhere = bool(asked) and bool(d.get("datname")) and d.get("datname") not in asked
    if elsewhere:  # on the same server, but not in the database the checks were pointed at
        mech += f" (This is in database {d.get('datname')}, not in {', '.join(sorted(asked))}.)"
    tags = [f"pid:{root}", f"db:{db}"]
    if relation:
        tags.append(f"relation:{relation}")
    if app:
        tags.append(f"service:{app}")
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code=code,
        category=Category.CODE_DEFECT,
        title=title,
        mechanism=mech,
        object=f"pid {root}" + (f" on relation {relation}" if relation else ""),
        score=min(0.95, 0.7 + 0.05 * n) - (0.1 if elsewhere else 0.0),
        ts=d.get("xact_start") if isinstance(d.get("xact_start"), int | float) else None,
        tags=tags,
        explains=[
            "db_waits",
            "latency",
            "connections_high",
            "errors",
            "http_5xx",
            "upstream_timeout",
            "cpu_high",
            "app_pool_exhausted",
        ],
        evidence=refs,
        actions=_mysql_blocker_actions(root, db)
        if d.get("engine") == "mysql"
        else [
            Action(
                description="Show the blocker, its transaction age and what waits for it",
                command=(
                    f'psql -d {db} -c "SELECT pid, state, now()-xact_start AS xact_age, now()-state_change AS idle, '
                    f"application_name, query FROM pg_stat_activity WHERE pid = {root} OR {root} = "
                    'ANY(pg_blocking_pids(pid))"'
                ),
            ),
            Action(
                description=f"Terminate pid {root}: its transaction rolls back and the waiters proceed",
                command=f"psql -d {db} -c 'SELECT pg_terminate_backend({root})'",
                kind="write",
                tool="postgres_terminate_session",
                args={"pid": root, "database": db},
            ),
            Action(
                description="Stop it recurring: end forgotten transactions automatically",
                command=f"psql -d {db} -c \"ALTER DATABASE {db} SET idle_in_transaction_session_timeout = '60s'\"",
                kind="write",
            ),
        ],
    )


def _mysql_blocker_actions(root: int, db: str) -> list[Action]:
    return [
        Action(
            description="Show the blocker's transaction and what waits for it",
            command=(
                f'mysql -D {db} -e "SELECT * FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = {root}; '
                'SELECT * FROM sys.schema_table_lock_waits; SELECT * FROM sys.innodb_lock_waits"'
            ),
        ),
        Action(
            description=f"Kill thread {root}: its transaction rolls back and the waiters proceed",
            command=f"mysql -e 'KILL {root}'",
            kind="write",
        ),
        Action(
            description="Stop it recurring: close forgotten idle connections and bound DDL's wait for its lock",
            command='mysql -e "SET GLOBAL wait_timeout = 600; SET GLOBAL lock_wait_timeout = 60"',
            kind="write",
        ),
    ]


def _waiters_finding(ctx: Context, root: int, waiters: set[int]) -> Finding:
    at = ctx.captured
    items = [ctx.sessions[p] for p in sorted(waiters) if p in ctx.sessions]
    waited = [a for a in (_age_of(s.data, "query_start", at) for s in items) if a is not None]
    relation, _, _ = _relation_between(ctx, root, waiters)
    db = next((str(s.data.get("datname")) for s in items if s.data.get("datname")), ctx.db_name())
    sample = " ".join(str(items[0].data.get("query") or "").split())[:120] if items else ""
    pids = sorted(waiters)
    tags = [f"pid:{p}" for p in pids[:20]] + [f"db:{db}"]
    if relation:
        tags.append(f"relation:{relation}")
    for s in items:
        if s.data.get("application_name"):
            tags.append(f"service:{s.data['application_name']}")
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="symptom",
        code="db_waits",
        category=Category.CODE_DEFECT,
        title=f"{len(pids)} session(s) waiting for pid {root}" + (f" on {relation}" if relation else ""),
        mechanism=(
            f"pids {', '.join(map(str, pids[:10]))} wait on a lock held by pid {root}"
            + (f" (relation {relation})" if relation else "")
            + (f", the longest for {human_duration(max(waited))}" if waited else "")
            + (f", e.g. '{sample}'" if sample else "")
            + "."
        ),
        object=f"{len(pids)} waiting sessions",
        score=0.6,
        ts=min(
            (float(q) for q in (s.data.get("query_start") for s in items) if isinstance(q, int | float)), default=None
        ),
        tags=list(dict.fromkeys(tags)),
        evidence=[
            EvidenceRef(item=s.id, field="wait_event_type", value=s.data.get("wait_event_type") or "Lock")
            for s in items[:5]
        ],
    )


def _deadlock_finding(ctx: Context, pids: set[int]) -> Finding:
    items = [ctx.sessions[p] for p in sorted(pids) if p in ctx.sessions]
    return Finding(
        analyzer="database",
        domain=Domain.DATABASE,
        role="cause",
        code="deadlock",
        category=Category.CODE_DEFECT,
        title=f"deadlock between pids {', '.join(map(str, sorted(pids)))}",
        mechanism=(
            f"pids {', '.join(map(str, sorted(pids)))} wait for each other in a cycle: transactions "
            "take the same locks in different orders."
        ),
        object="pids " + ", ".join(map(str, sorted(pids))),
        score=0.8,
        tags=[f"pid:{p}" for p in sorted(pids)],
        explains=["db_waits", "errors"],
        evidence=[EvidenceRef(item=s.id, field="query", value=str(s.data.get("query"))[:200]) for s in items[:4]],
    )


# ---------------------------------------------------------------- connections

# a server's line for a new connection that names the client application (mongod "client metadata" with
# appName=..., PostgreSQL log_connections "connection authorized: ... application_name=...")
_OPENED_BY = re.compile(r"\b(?:appName|application_name)=(?P<app>[\w.\-]+)")
OPENERS_MIN = 10  # new connections seen before one application's share of them says who takes the slots
OPENERS_SHARE = 0.6


def _new_connections_by_app(
    ctx: Context, first_ts: float | None
) -> tuple[str, int, int, list[EvidenceRef], str] | None:
    """Without the sessions themselves, who holds a full server's connections: the application that opened most
    of the new connections its log recorded (at least OPENERS_SHARE of OPENERS_MIN or more)."""
    opened = [
        (r, m["app"])
        for r in records_with(ctx.evidence, ("appName=", "application_name="))
        if (m := _OPENED_BY.search(r.msg))
    ]
    if len(opened) < OPENERS_MIN:
        return None
    counts = Counter(app for _, app in opened)
    app, n = counts.most_common(1)[0]
    if n < OPENERS_SHARE * len(opened):
        return None
    mine = [r for r, a in opened if a == app]
    engine = "mongodb" if "appName=" in mine[0].msg else "postgres"
    return app, n, len(opened), [ref_of(mine[0]), ref_of(mine[-1])], engine


def _connections(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    clients = [
        (pid, s)
        for pid, s in ctx.sessions.items()
        if str(s.data.get("backend_type") or "client backend") == "client backend"
    ]
    mx = ctx.max_connections()
    n_clients = sum(_weight(s) for _, s in clients)  # a grouped pg_stat_activity row stands for `count` sessions
    log_hits = [r for r in ctx.logs if PG_TOO_MANY.search(r.msg)]
    conn_metric = ctx.metric("DatabaseConnections", "pg_stat_activity_count", "pg_stat_database_numbackends")
    db = ctx.db_name()
    near = bool(mx and clients and n_clients >= CONNECTIONS_HIGH * mx[0])
    if not near and not log_hits:
        return out
    refs: list[EvidenceRef] = []
    if mx:
        refs.append(mx[1])
    if log_hits:
        refs += first_and_last_refs(log_hits)
    for m in conn_metric[:1]:
        pts = _pts(m)
        if pts:
            i = max(range(len(pts)), key=lambda k: pts[k][1])
            refs.append(_mref(m, i, pts))
    count_txt = (
        f"{n_clients} of max_connections {mx[0]}" if mx and clients else (f"{n_clients} sessions" if clients else "")
    )
    # most connections are lock waiters: the lock is the cause, the connection pile-up its symptom
    waiting = [p for p, _ in clients if p in ctx.lock_pids]
    if clients and len(waiting) >= 0.3 * n_clients:
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="symptom",
                code="connections_high",
                category=Category.RESOURCE_EXHAUSTION,
                title=f"connections high on {db} ({count_txt}), {len(waiting)} of them lock waiters",
                mechanism=(
                    f"{db} is near its connection limit ({count_txt}) because {len(waiting)} sessions are stuck "
                    "waiting on locks and pools open more."
                ),
                object=f"database {db}",
                score=0.5,
                tags=[f"db:{db}"],
                evidence=refs,
            )
        )
        return out
    by_app: Counter[str] = Counter()
    for _, s in clients:
        by_app[str(s.data.get("application_name") or s.data.get("usename") or "?")] += _weight(s)
    mech_extra = ""
    title_app = ""
    app_tags: list[str] = []
    if clients:
        app, n_app = by_app.most_common(1)[0]
        app_sessions = [
            s for _, s in clients if str(s.data.get("application_name") or s.data.get("usename") or "?") == app
        ]
        idle = [s for s in app_sessions if str(s.data.get("state", "")).startswith("idle")]
        idle_tx = [s for s in app_sessions if str(s.data.get("state", "")).startswith("idle in transaction")]
        at = ctx.captured
        oldest = max((_age_of(s.data, "state_change", at) or 0 for s in idle), default=0)
        n_idle, n_idle_tx = sum(map(_weight, idle)), sum(map(_weight, idle_tx))
        leak = n_app >= LEAK_APP_SHARE * n_clients and n_idle >= LEAK_IDLE_SHARE * n_app
        title_app = f", {n_app} held by {app}"
        mech_extra = (
            f"; {app} holds {n_app} of them, {n_idle} idle ({n_idle_tx} idle in transaction, the oldest idle for "
            f"{human_duration(oldest)})" + (": its pool leaks connections (taken and never returned)" if leak else "")
        )
        app_tags = [f"service:{app}"]
        refs += [
            EvidenceRef(item=s.id, field="state", value=s.data.get("state"))
            for s in (idle_tx or idle or app_sessions)[:3]
        ]
        code = "connection_pool_leak" if leak else "connection_exhaustion"
    else:
        code = "connection_exhaustion"
    openers = _new_connections_by_app(ctx, first_ts=log_hits[0].ts if log_hits else None) if not clients else None
    if openers:
        app, n_app, total, opened_refs, _engine = openers
        title_app = f", new connections from {app}"
        mech_extra = (
            f"; the server's log shows who opened them: {n_app} of the last {total} new connections came from {app}"
        )
        app_tags = [f"service:{app}"]
        refs += opened_refs
    if log_hits and not clients:
        mech_extra += (
            f"; clients were refused {len(log_hits)}x {span_text(log_hits[0].ts, log_hits[-1].ts)} "
            f"('{log_hits[0].msg.strip()[:120]}')"
        )
    elif log_hits:
        mech_extra += f"; {len(log_hits)} refusals logged"
    first = log_hits[0].ts if log_hits else None
    if not clients and not openers:
        # refusals alone say the slots are gone, not who holds them: a leak, a lock pile-up, a stalled disk and a
        # traffic surge all look like this, so it is a symptom whose cause needs the sessions
        out.append(
            Finding(
                analyzer="database",
                domain=Domain.DATABASE,
                role="symptom",
                code="db_connection_errors",
                category=Category.UNKNOWN,
                title=f"{db} refuses connections: out of connection slots",
                mechanism=f"{db} has run out of connection slots{mech_extra}; nothing shows who holds them.",
                object=f"database {db} connections",
                score=0.6,
                ts=first,
                tags=[f"db:{db}"],
                evidence=refs,
                needs=[
                    f"pg_stat_activity of {db} grouped by application_name and state (who holds the connections)",
                    f"pg_locks of {db} (whether the sessions wait on a lock)",
                ],
                actions=[
                    Action(
                        description="Who holds the connections, by application and state",
                        command=f'psql -d {db} -c "SELECT application_name, state, count(*), max(now()-state_change) FROM pg_stat_activity GROUP BY 1,2 ORDER BY 3 DESC"',  # noqa: E501 (an exact command or data line reads better whole)
                    )
                ],
            )
        )
        return out
    out.append(
        Finding(
            analyzer="database",
            domain=Domain.DATABASE,
            role="cause",
            code=code,
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{db} out of connections" + (f" ({count_txt}{title_app})" if count_txt else ""),
            mechanism=f"{db} has run out of connection slots"
            + (f" ({count_txt})" if count_txt else "")
            + mech_extra
            + ".",
            object=f"database {db} connections",
            # refusals with who holds the slots (the sessions, or the server's record of who opened them)
            score=0.85 if (near and log_hits) or (openers and log_hits) or code == "connection_pool_leak" else 0.75,
            ts=first,
            tags=[f"db:{db}", *app_tags],
            explains=[
                "connections_high",
                "app_pool_exhausted",
                "db_connection_errors",
                "errors",
                "http_5xx",
                "latency",
                "upstream_timeout",
                "pod_restarts",
            ],
            evidence=refs,
            actions=(
                _mongo_connection_actions(db, app_tags[0].split(":", 1)[1] if app_tags else None)
                if openers and openers[4] == "mongodb"
                else [
                    Action(
                        description="Who holds the connections, by application and state",
                        command=f'psql -d {db} -c "SELECT application_name, state, count(*), max(now()-state_change) FROM pg_stat_activity GROUP BY 1,2 ORDER BY 3 DESC"',  # noqa: E501 (an exact command or data line reads better whole)
                    ),
                    Action(
                        description="Close connections idle for over 10 minutes",
                        command=(
                            f'psql -d {db} -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state '
                            "LIKE 'idle%' AND now()-state_change > interval '10 minutes'\""
                        ),
                        kind="write",
                    ),
                ]
            )
            + [
                Action(
                    description="Cap the pool or put PgBouncer in front; check the application returns connections (leak)",  # noqa: E501 (an exact command or data line reads better whole)
                    command="kubectl get deploy -A -o yaml | grep -iE 'pool|max_conn|DB_POOL'",
                ),
            ],
        )
    )
    return out


_MONGO_BY_APP = (
    "db.aggregate([{$currentOp: {allUsers: true, idleConnections: true}}, "
    '{$group: {_id: "$appName", conns: {$sum: 1}}}, {$sort: {conns: -1}}])'
)


def _mongo_connection_actions(server: str, app: str | None) -> list[Action]:
    return [
        Action(
            description="Who holds the connections, by client application",
            command=f"mongosh \"mongodb://{server}:27017/admin\" --eval '{_MONGO_BY_APP}'",
        ),
        Action(
            description=f"Lower {app or 'the holder'}'s pool (maxPoolSize/minPoolSize in its connection string) or "
            "its replicas, so the server's connections fit",
            command=f"kubectl get deploy -A -o yaml | grep -iE '{app or 'mongodb://'}|minPoolSize|maxPoolSize'",
        ),
    ]
