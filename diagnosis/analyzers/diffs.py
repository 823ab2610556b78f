"""Settings a commit changed (`change/diff` items from `git show` / `git log -p`), read against the failures that
followed it. A commit that cut a connection pool's size, a timeout or a concurrency limit, followed within hours by
errors of exactly that kind (a pool with no free connection, calls timing out, requests refused at the limit), is the
cause: a configuration error naming the key, its old and new values and the commit. A commit alone is no evidence;
errors of another kind after it say nothing about it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from diagnosis.analyzers._common import APP_POOL, NET_TIMEOUT, Rec, is_error, log_records, service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.spans import duration_ms
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of
from diagnosis.timeline import fmt_ts

AFTER_S = 24 * 3600  # errors this long after the commit can be its doing
MIN_ERRORS = 3
_POOL_KEY = re.compile(
    r"pool.?size|max.?pool|pool.?max|max.?(?:open.?)?conn|connection.?limit|maxActive|maxTotal", re.I
)
_TIMEOUT_KEY = re.compile(r"time.?out|deadline", re.I)
# how long a server (or a proxy) keeps an idle client connection open (MySQL wait_timeout, PostgreSQL's
# idle_session_timeout, PgBouncer's and HAProxy's idle timeouts): cut below how long the clients' pools keep idle
# connections, the server closes them under the pool and the next query on one fails mid-flight
_IDLE_KEY = re.compile(
    r"wait_timeout|interactive_timeout|idle.?(?:in.?transaction.?)?(?:session.?|connection.?|client.?|server.?)?timeout",
    re.I,
)
_CLOSED_UNDER = re.compile(
    r"Lost connection to (?:MySQL|MariaDB) server|(?:MySQL|MariaDB) server has gone away|\b(?:2013|2006)\b.{0,40}"
    r"(?:Lost connection|gone away)|server closed the connection unexpectedly|terminating connection due to idle|"
    r"\binvalid connection\b|unexpected EOF|broken pipe|connection reset by peer",
    re.I,
)
# a consumer's batch per poll raised (more work between two polls), or the time it may take between polls cut: the
# consumer outlasts the poll interval, leaves its group and rebalances (Kafka; other clients' batch settings alike)
_BATCH_KEY = re.compile(r"max.?poll.?records|max.?batch.?size|batch.?size|prefetch.?count|max.?messages", re.I)
# how long a queue hides a message a consumer took before handing it out again (SQS visibility timeout, Pub/Sub ack
# deadline, Service Bus lock duration): cut below the time the work takes, messages are delivered again mid-work,
# processed twice, and land in the dead-letter queue once their receive count runs out
_VISIBILITY_KEY = re.compile(r"visibility.?timeout|ack.?deadline|lock.?duration", re.I)
_REDELIVERED = re.compile(
    r"duplicate|already (?:processed|rendered|sent|handled)|receive ?count|redeliver|visibility|"
    r"message lock (?:was )?lost|MessageLockLost|ack deadline",
    re.I,
)
_DLQ_SERIES = re.compile(r"dlq|dead.?letter|deadletter|NumberOfMessagesReceived", re.I)
_POLL_INTERVAL_KEY = re.compile(r"max.?poll.?interval", re.I)
_POLL = re.compile(r"max\.poll\.interval\.ms|consumer poll timeout has expired|CommitFailedException|"
                   r"the group has already rebalanced")  # fmt: skip
RAISED = 2.0  # a batch at least this many times larger
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class _Cut:
    item: EvidenceItem
    path: str
    key: str
    old: str
    new: str
    kind: str  # "pool" | "timeout" | "poll"


def _value(v: str, kind: str) -> float | None:
    """A setting's value as a number: a pool's size as it is, a timeout in milliseconds."""
    if kind == "timeout":
        return duration_ms(v)
    m = _NUMBER.match(v)
    return float(m[1]) if m else None


def _cuts(evidence: EvidenceSet) -> list[_Cut]:
    out: list[_Cut] = []
    for item in evidence.kind("change/diff"):
        for f in item.data.get("files") or ():
            for s in f.get("settings") or ():
                key, old, new = str(s["key"]), str(s["old"]), str(s["new"])
                if _BATCH_KEY.search(key):
                    a, b = _value(old, "pool"), _value(new, "pool")
                    if a is not None and b is not None and a > 0 and b >= RAISED * a:
                        out.append(_Cut(item, str(f.get("path") or ""), key, old, new, "poll"))
                    continue
                if _VISIBILITY_KEY.search(key):
                    kind = "visibility"
                elif _POLL_INTERVAL_KEY.search(key):
                    kind = "poll"
                elif _POOL_KEY.search(key):
                    kind = "pool"
                elif _IDLE_KEY.search(key):
                    kind = "idle"
                elif _TIMEOUT_KEY.search(key) and not s.get("parameter"):
                    # (a database's own parameter is no client's call timeout)
                    kind = "timeout"
                else:
                    continue
                unit = {"poll": "pool", "visibility": "pool", "idle": "pool"}.get(kind, kind)
                a, b = _value(old, unit), _value(new, unit)
                if a is not None and b is not None and 0 <= b < a:
                    out.append(_Cut(item, str(f.get("path") or ""), key, old, new, kind))
    return out


def _dead_letters_rose(evidence: EvidenceSet, since: float | None) -> tuple[EvidenceItem, str] | None:
    """A dead-letter queue's depth (or a queue's receives) that rose after the change: the series and what it did."""
    for m in evidence.kind("metric"):
        if not _DLQ_SERIES.search(str(m.data.get("name") or "") + " " + m.object):
            continue
        pts = points_of(m.data.get("points"))
        after = [v for t, v in pts if since is None or t >= since]
        before = [v for t, v in pts if since is not None and t < since]
        base = max(before) if before else (after[0] if after else 0.0)
        if after and max(after) > max(2 * base, base + 10):
            return m, f"{m.object} rose from {base:g} to {max(after):g}"
    return None


def _service_in(path: str) -> str | None:
    """The service a config file's path names: overlays/prod/ts-order-service/configmap.yaml -> ts-order-service."""
    parts = [p for p in path.split("/")[:-1] if p not in ("overlays", "base", "prod", "production", "staging", "apps")]
    named = [p for p in parts if "-" in p or "_" in p]
    return (named or parts)[-1] if named or parts else None


_URL_HOST = re.compile(r"https?://(?P<host>[\w\-]+)(?:\.[\w\-]+)*")


def _callees(hits: list[Rec]) -> list[str]:
    """The callee most of the timed-out calls went to (the first label of its URL's host): the calls the cut
    timeout now cancels are its symptoms."""
    hosts = Counter(m["host"] for r in hits for m in [_URL_HOST.search(r.msg)] if m)
    if not hosts:
        return []
    host = hosts.most_common(1)[0][0]
    return [f"upstream:{host}", f"service:{host}"]


def _names(rec: Rec, service: str) -> bool:
    """Whether a log record is about what a config path names (a folder of many callees' settings, `bidders/`,
    names them in the singular: "bidder call cancelled")."""
    return any(s in rec.msg or s in rec.item.object for s in {service, service.removesuffix("s")})


def _commit_evidence(item: EvidenceItem, key: str, old: str, new: str, hits: list[Rec]) -> list[EvidenceRef]:
    """The commit's change of the setting, and the first two errors that followed it."""
    return [EvidenceRef(item=item.id, field="files", value=f"{key}: {old} -> {new}")] + [
        EvidenceRef(item=h.item.id, line=h.line, value=h.msg[:200]) for h in hits[:2]
    ]


def _commit_actions(key: str, sha: str, undo: str, command: str) -> list[Action]:
    """Read the commit; undo it (a write, run only once a person approves)."""
    return [
        Action(description=f"Show the commit that changed {key}", command=f"git show {sha}"),
        Action(description=undo, command=command, kind="write"),
    ]


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"change/diff"})
def settings_cut(evidence: EvidenceSet) -> list[Finding]:
    cuts = _cuts(evidence)
    if not cuts:
        return []
    out: list[Finding] = []
    seen: set[str] = set()
    for cut in cuts:
        since = cut.item.data.get("ts")
        sig = {"pool": APP_POOL, "poll": _POLL, "visibility": _REDELIVERED, "idle": _CLOSED_UNDER}.get(
            cut.kind, NET_TIMEOUT
        )
        service = _service_in(cut.path)
        hits = [
            r
            for r in log_records(evidence)
            if r.ts is not None
            and (since is None or 0 <= r.ts - since <= AFTER_S)
            # (a redelivery, and a call cancelled at its deadline, are logged as warnings)
            and (
                is_error({"level": r.level, "msg": r.msg})
                or (cut.kind in ("visibility", "timeout") and r.level == "warn")
            )
            and sig.search(r.msg)
            and (cut.kind != "timeout" or service is None or _names(r, service))
        ]
        # redeliveries the consumers do not log show as the dead-letter queue filling
        rose = _dead_letters_rose(evidence, since) if cut.kind == "visibility" and len(hits) < MIN_ERRORS else None
        if (len(hits) < MIN_ERRORS and rose is None) or cut.key in seen:
            continue
        seen.add(cut.key)
        sha = str(cut.item.data.get("sha") or "")[:7]
        label = f"commit {sha}" if sha else "a change"
        when = f" at {fmt_ts(since)}" if since is not None else ""
        what = {
            "pool": "a connection pool with no free connection",
            "poll": "a consumer that outlasts its poll interval, leaves its group and rebalances",
            "visibility": "messages delivered again while still being worked on (duplicates, dead letters)",
            "idle": "queries failing on connections the server closed",
        }.get(cut.kind, "calls timing out")
        why = {
            "pool": "the pool is set too small for the load",
            "poll": "one poll's batch now takes longer than the consumer may take between polls",
            "visibility": "the queue now hands a message out again before its consumer has finished it",
            "idle": (
                "the server now closes a connection idle for that long, sooner than the clients' pools retire "
                "idle connections, so the next query on one fails"
            ),
        }.get(cut.kind, "the timeout is set too short for the load")
        verb = "raised" if _BATCH_KEY.search(cut.key) else "cut"
        out.append(
            Finding(
                analyzer="settings_cut",
                domain=Domain.CHANGES,
                role="cause",
                code="setting_cut",
                category=Category.CONFIGURATION_ERROR,
                title=f"{label} {verb} {cut.key} from {cut.old} to {cut.new}",
                mechanism=(
                    f"{label}{when} ('{cut.item.data.get('subject', '')[:120]}') {verb} {cut.key} in {cut.path} "
                    f"from {cut.old} to {cut.new}; since then "
                    + (f"{what}: {rose[1]}" if rose else f"{len(hits)} errors show {what} (e.g. '{hits[0].msg[:160]}')")
                    + f": {why}, a configuration error"
                ),
                object=f"{service + ' ' if service else ''}{cut.key}",
                score=0.85,
                ts=since,
                tags=[f"config:{cut.key}", *([f"service:{service}"] if service else []), *_callees(hits)],
                explains=[
                    "app_pool_exhausted",
                    "consumer_too_slow",
                    "consumer_lag",
                    "connection_exhaustion",
                    "upstream_timeout",
                    "latency_origin",
                    "errors",
                    "exception",
                    "latency",
                    "http_5xx",
                    "metric_shift",
                    "alert:*",
                ],
                evidence=_commit_evidence(cut.item, cut.key, cut.old, cut.new, hits)
                + ([EvidenceRef(item=rose[0].id, field="points", value=rose[1])] if rose else []),
                actions=_commit_actions(
                    cut.key,
                    sha,
                    f"Restore {cut.key} to {cut.old} (revert the commit) and roll out",
                    f"git revert {sha}  # then sync the deploy repo",
                ),
            )
        )
    return out


# a setting that says where something is: a repository, bucket, path, URL or host
_LOCATION_KEY = re.compile(
    r"repo(?:sitory)?|path|dir(?:ectory)?|url|uri|endpoint|bucket|prefix|location|dsn|(?<![a-z])host(?:name)?|"
    r"address|(?<![a-z])addr|mount|(?<![a-z])root",
    re.I,
)
# ... and what a program says when nothing is where it now looks
_GONE = re.compile(
    r"does not exist|doesn't exist|not found|no such (?:file|key|bucket|host|repository|directory|object)|"
    r"NoSuchKey|NoSuchBucket|unable to open (?:config|repository)|is not a repository|\b404\b",
    re.I,
)
MIN_GONE = 2  # a scheduled job that fails on it fails once a run ...
GONE_WITHIN_S = (
    7 * 24 * 3600
)  # ... and may run once a day: its failures are counted over a week, the first within a day


@ANALYZERS.analyzer(domain=Domain.CHANGES, reads={"change/diff", "log"})
def location_changed(evidence: EvidenceSet) -> list[Finding]:
    """A commit that changed where a program looks (a repository, a bucket, a path, a URL), after which the program
    finds nothing there ("The specified key does not exist", "no such file", 404): the new value points where
    nothing is, a configuration error naming the key, its old and new values and the commit."""
    out: list[Finding] = []
    gone: list[Rec] | None = None  # the errors that find nothing, read once for all the commits' settings
    for item in evidence.kind("change/diff"):
        since = item.data.get("ts")
        if not isinstance(since, int | float):
            continue
        for f in item.data.get("files") or ():
            for s in f.get("settings") or ():
                key, old, new = str(s["key"]), str(s["old"]), str(s["new"])
                if not _LOCATION_KEY.search(key) or not old or _value(old, "timeout") is not None:
                    continue
                if gone is None:
                    gone = [
                        r
                        for r in log_records(evidence)
                        if r.ts is not None and is_error({"level": r.level, "msg": r.msg}) and _GONE.search(r.msg)
                    ]
                hits = [r for r in gone if r.ts is not None and 0 <= r.ts - since <= GONE_WITHIN_S]
                if len(hits) < MIN_GONE or hits[0].ts is None or hits[0].ts - since > AFTER_S:
                    continue
                sha = str(item.data.get("sha") or "")[:7]
                label = f"commit {sha}" if sha else "a change"
                where = f" (moved {s['moved']})" if s.get("moved") else f" in {f.get('path')}"
                out.append(
                    Finding(
                        analyzer="location_changed",
                        domain=Domain.CHANGES,
                        role="cause",
                        code="location_changed",
                        category=Category.CONFIGURATION_ERROR,
                        title=f"{label} changed {key}; since then nothing is found there ({len(hits)}x)",
                        mechanism=(
                            f"{label} at {fmt_ts(since)} ('{str(item.data.get('subject', ''))[:120]}') changed {key}"
                            f"{where} from {old} to {new}; since then {len(hits)} errors find nothing where it now "
                            f"points (e.g. '{hits[0].msg.strip()[:160]}'): the new {key} points where nothing is, a "
                            "configuration error"
                        ),
                        object=key,
                        score=0.8,
                        ts=since,
                        tags=[f"config:{key}", *{f"service:{svc}" for h in hits if (svc := service_of(h.item))}],
                        explains=["errors", "job_failed", "exception", "http_4xx", "alert:*", "process_down"],
                        evidence=_commit_evidence(item, key, old, new, hits),
                        actions=_commit_actions(
                            key,
                            sha,
                            f"Point {key} back where the data is ({old}), or move the data",
                            f"git revert {sha}  # then re-apply",
                        ),
                    )
                )
                break
    return out
