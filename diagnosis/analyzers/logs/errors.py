"""Error templates per source: each active template's cause (exception, bad data, out of memory, a missing
setting or resource, a kill from outside), the errors symptom, and old or background errors as benign."""

from __future__ import annotations

import functools
import itertools
import re

from diagnosis.analyzers._common import (
    Rec,
    Template,
    burst_ended,
    claimed_elsewhere,
    fmt_ts,
    group_templates,
    level_of,
    now_of,
    object_tags,
    ref_of,
    service_of,
    span_text,
    with_aliases,
    workload_of_pod,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs._shared import (
    _CAUSED_BY,
    APP_CAPACITY,
    APP_OOM,
    BACKGROUND_BURST_FACTOR,
    BACKGROUND_COVERAGE,
    BACKGROUND_LATE_START,
    BACKGROUND_MAX_RATE_PER_MIN,
    BACKGROUND_MAX_SHARE,
    BACKGROUND_MIN_COUNT,
    BACKGROUND_MIN_OTHERS,
    BACKGROUND_MIN_SPAN_S,
    BAD_DATA,
    DEPLOY_WINDOW_S,
    ENDED_LONG_AGO_S,
    EXCEPTION,
    FEW_ERRORS,
    FEW_ERRORS_AMONG,
    FEW_ERRORS_SHARE,
    LOG_START_SLACK_S,
    REJECTED_INPUT,
    REMOTE_FAILURE,
    RETRIES_SPENT,
    ROLLOUT_SLACK_S,
    SPORADIC,
    STOPPED_AFTER_S,
    last_failed_run,
)
from diagnosis.analyzers.logs.data import (
    _DATA_FILE,
    _around,
    _bad_field,
    _data_error_name,
    _grep_word,
    _input_file,
    _producer,
    _short,
    _stuck_offset,
)
from diagnosis.analyzers.logs.settings import ConfigChange, _missing_setting, _quoted_change, _spaced, config_changes
from diagnosis.analyzers.regressions import releases
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import human_duration, median, points_of
from diagnosis.timeline import parse_ts


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def log_errors(evidence: EvidenceSet) -> list[Finding]:
    """Every log source: its error templates; exceptions, bad data and memory errors as causes; the burst of
    errors as a symptom of the service; stopped or background errors as benign."""
    now = now_of(evidence)
    deploys = _deploys(evidence)
    changes = config_changes(evidence)
    firing = _firing_alerts(evidence)
    parked = _last_dead_lettered(evidence)
    findings: list[Finding] = []
    for item in evidence.kind("log"):
        findings.extend(_analyze_source(item, now, deploys, changes, firing, parked))
    return with_aliases(_one_per_exception(findings))


def _firing_alerts(evidence: EvidenceSet) -> list[tuple[float, frozenset[str]]]:
    """(since, the label values) of every alert still firing."""
    return [
        (float(a.data["starts_at"]), frozenset(str(v).lower() for v in (a.data.get("labels") or {}).values()))
        for a in evidence.kind("alert")
        if a.data.get("status") == "firing" and isinstance(a.data.get("starts_at"), int | float)
    ]


PARKED_MIN = 10  # rejections in a log window that a dead-letter queue growing after it shows going on
_DEAD_LETTER = re.compile(r"dlq|dead[-_ ]?letter|\bDLT\b", re.I)


def _last_dead_lettered(evidence: EvidenceSet) -> float | None:
    """When a dead-letter queue's depth last grew (a series named for a DLQ whose value rose): records parked after
    the errors a log shows mean the rejecting goes on past that log's window."""
    last = None
    for m in evidence.kind("metric"):
        labels = m.data.get("labels") or {}
        if not _DEAD_LETTER.search(" ".join([str(m.data.get("name") or ""), *map(str, labels.values())])):
            continue
        pts = points_of(m.data.get("points"))
        grew = [b[0] for a, b in itertools.pairwise(pts) if b[1] > a[1]]
        if grew and (last is None or grew[-1] > last):
            last = grew[-1]
    return last


def _after(when: float | None, ts: float | None) -> bool:
    return when is not None and ts is not None and when > ts


def _bad_input(tpl: Template) -> bool:
    """Bad input a consumer rejects: it logs a sample of such records, not each (the rest go to a dead letter)."""
    return tpl.sample is not None and bool(BAD_DATA.search(tpl.sample.msg))


_GENERIC_PARTS = frozenset(
    {
        "worker",
        "workers",
        "service",
        "server",
        "backend",
        "frontend",
        "consumer",
        "producer",
        "api",
        "app",
        "web",
        "job",
    }
)


# words an error line shares with any alert's labels by chance
_COMMON_WORDS = frozenset(
    {"error", "errors", "warning", "failed", "failure", "record", "records", "files", "reason", "message", "value"}
)


def _alerted_since(firing: list[tuple[float, frozenset[str]]], who: str, first: float | None, said: str = "") -> bool:
    """Whether an alert on `who` began firing after these errors began and fires still: they are not over. An
    alert names `who` by a label, or by a distinctive part of its name in its own (IntakeRejectionsHigh for
    mezz-intake), or names what the errors say (MediationRejectRatioHigh over "REJECT file=...")."""
    if first is None:
        return False
    parts = [p for p in re.split(r"[-_.]", who.lower()) if len(p) >= 5 and p not in _GENERIC_PARTS]
    parts += [w for w in re.findall(r"[a-z]{5,}", said[:160].lower()) if w not in _COMMON_WORDS | _GENERIC_PARTS]
    return any(
        since >= first and (who.lower() in labels or any(p in label for p in parts for label in labels))
        for since, labels in firing
    )


_THROWS = re.compile(r" throws (\S+) \(")
_THROWN_AT = re.compile(r"unhandled \S+ at (\S+(?: \([\w.$\-]+:\d+\))?):")


def _one_per_exception(findings: list[Finding]) -> list[Finding]:
    """The same exception of one workload seen in several sources (a pod's log, its traces, an APM's error
    summary) is one cause: the strongest finding, citing the others, instead of one "independent" fault each."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if f.code == "exception" and (m := _THROWS.search(f.title)):
            groups.setdefault((workload_of_pod(f.object), m.group(1)), []).append(f)
    merged: dict[int, Finding] = {}
    dropped: set[int] = set()
    for fs in groups.values():
        if len(fs) < 2:
            continue
        best = max(fs, key=lambda f: (f.score, len(f.evidence)))
        others = [f for f in fs if f is not best]
        # where it was thrown, when only another source's trace shows it
        frame = (
            None
            if _THROWN_AT.search(best.mechanism)
            else next((m.group(1) for o in others if (m := _THROWN_AT.search(o.mechanism))), None)
        )
        merged[id(best)] = best.model_copy(
            update={
                "mechanism": f"{best.mechanism.rstrip('.')} (also in {len(others)} other source(s): "
                + ", ".join(sorted({o.object for o in others}))
                + (f"; thrown at {frame}" if frame else "")
                + ").",
                "evidence": [*best.evidence, *(o.evidence[0] for o in others if o.evidence)][:6],
            }
        )
        dropped.update(id(o) for o in others)
    return [merged.get(id(f), f) for f in findings if id(f) not in dropped]


_ERROR_LEVELS = {"error", "fatal", "critical", "crit", "err", "panic", "emerg", "alert"}


# a service failing to read the data it serves or loads ("failed to parse the catalog JSON: ... invalid value"): the
# load failed, whatever level it was logged at (a service that falls back to an empty catalog only warns)
_LOAD_FAILED = re.compile(
    r"fail(?:ed|s|ure)? (?:to )?(?:parse|load|decode|read)\b[^:\n]{0,40}\b(?:json|yaml|csv|xml|file|catalog|data|"
    r"feed|payload|dataset)\b",
    re.I,
)


# schema-migration tools refusing the migrations a release ships: Alembic with two heads, Flyway finding two scripts
# of one version or an applied script changed, Liquibase's checksum validation
_MIGRATION_CONFLICT = re.compile(
    r"Multiple head revisions are present|Found more than one migration with version|"
    r"Migration checksum mismatch for migration|Validate failed: Migrations have failed validation|"
    r"Detected applied migration not resolved locally|change ?sets? check ?sum|"
    r"Multiple leaf nodes in the migration graph|Conflicting migrations detected",
    re.I,
)


def _rejected_record(level: str, msg: str) -> bool:
    """A warning that an input record was refused as bad data (and dead-lettered, skipped or discarded), or that
    the data a service loads failed to parse: that record or load failed, whatever level it was logged at."""
    return (
        level.lower() in ("warn", "warning")
        and bool(REJECTED_INPUT.search(msg) or _LOAD_FAILED.search(msg))
        and bool(BAD_DATA.search(msg))
    )


def _error_records(item: EvidenceItem) -> tuple[list[Rec], float | None, float | None]:
    """The source's error records (by level, or by an exception in an unlevelled line), and its time span."""
    errors: list[Rec] = []
    first: float | None = None
    last: float | None = None
    for r in item.data.get("records") or ():
        ts = r.get("ts")
        if isinstance(ts, int | float):
            first = ts if first is None or ts < first else first
            last = ts if last is None or ts > last else last
        lvl = r.get("level")
        if isinstance(lvl, str) and lvl:
            msg = str(r.get("msg") or "")
            if (
                lvl.lower() not in _ERROR_LEVELS
                and not _rejected_record(lvl, msg)
                and not (_kill_hint(msg) and KILLED_FROM_OUTSIDE.search(msg))
            ):
                continue
            level: str | None = "error"
        else:
            msg = str(r.get("msg") or "")
            level = level_of(r) or ("error" if _kill_hint(msg) and KILLED_FROM_OUTSIDE.search(msg) else None)
        if level in ("error", "fatal") or (
            level is None and (EXCEPTION.search(msg) or APP_OOM.search(msg) or _GATEWAY_REJECTS in msg)
        ):
            errors.append(Rec(item, ts, msg, r.get("line"), level or "error"))
    return errors, first, last


def _analyze_source(
    item: EvidenceItem,
    now: float | None,
    deploys: list[tuple[float, str, EvidenceRef]],
    changes: list[ConfigChange] | None = None,
    firing: list[tuple[float, frozenset[str]]] | None = None,
    parked: float | None = None,
) -> list[Finding]:
    errors, log_first, log_last = _error_records(item)
    if not errors:
        return []
    service = service_of(item)
    tags = object_tags(item, service)
    who = service or item.object
    findings: list[Finding] = []
    active: list[Template] = []
    gave_up = functools.cache(lambda: _gave_up_at(item))  # read only when an error template seems to have stopped
    failed_run = functools.cache(lambda: last_failed_run(item))  # the same: one pass over the records at most
    snapshot = bool((item.data.get("source") or {}).get("snapshot"))  # a run's report, not a running log
    cut = bool((item.data.get("source") or {}).get("cut"))  # printed through `| head`: what came next is unseen
    # a batch task whose retry succeeded after its errors: they are over, whatever the time since
    done = _succeeded_at(item)
    if done is not None and any(e.ts is not None and e.ts > done for e in errors):
        done = None
    for tpl in group_templates(errors):
        verdict = "routine" if tpl.sample is not None and _ROUTINE.search(tpl.sample.msg) else None
        verdict = verdict or _quiet_verdict(tpl, log_first, log_last, now, len(item.data.get("records") or ()))
        if verdict is None and done is not None and tpl.last_ts is not None and tpl.last_ts < done:
            verdict = "retried"
        if verdict == "stopped" and (
            snapshot
            or cut
            or _ended_with(tpl, gave_up())
            or _after(failed_run(), tpl.last_ts)
            or (
                _bad_input(tpl)
                and _alerted_since(firing or [], who, tpl.first_ts, tpl.sample.msg if tpl.sample else "")
            )
            or (_bad_input(tpl) and tpl.count >= PARKED_MIN and _after(parked, tpl.last_ts))
        ):
            verdict = None  # it stopped because what failed gave up for good, not because it recovered
        if verdict == "background" and _deploy_before(deploys, who, tpl.first_ts):
            verdict = None  # errors that began with a release of their own service came with it
        if verdict:
            findings.append(_benign(item, tpl, who, tags, verdict))
            continue
        active.append(tpl)
    if not active:
        return findings
    # errors after which what failed gave up for good are few because nothing runs any more, not because they are
    # a working service's background
    died = any(_ended_with(t, gave_up()) for t in active)
    # a run's report (dbt's run_results) that holds errors: that run failed on them, however few they are
    died = died or snapshot
    for tpl in active:
        cause = _changed_setting(item, tpl, who, tags, changes or []) or _cause_of(
            item, tpl, who, tags, deploys, active
        )
        if cause and died and cause.code in ("bad_data", "exception") and cause.score < DIED_ON_IT_SCORE:
            cause = cause.model_copy(update={"score": DIED_ON_IT_SCORE})
        if cause and cause.ts is not None and log_first is not None and cause.ts - log_first <= LOG_START_SLACK_S:
            # errors from the log's first lines began at or before the export's start (`--since`, `--tail`, a
            # rotated file): when is unknown, so they may explain what began before the log does
            cause = cause.model_copy(update={"ts": None})
        if cause:
            findings.append(cause)
    findings.append(_errors_symptom(item, active, who, tags, died))
    return findings


RECURRING_QUIET = 3.0  # a recurring error is over when quiet for this many of its mean gaps (5% by chance)
DIED_ON_IT_SCORE = 0.6  # a cause the process stopped for good on stands alone, however few times it was logged


# a process or task that stops for good after its error: the errors end because nothing runs any more
GAVE_UP = re.compile(
    r"will not recover|unrecoverable exception|until (?:it is )?manually restarted|giving up\b|gave up\b|"
    r"shutting down due to|exiting (?:forcefully |immediately )?due to|exiting with (?:status|code) [1-9]|"
    r"aborting (?:the )?(?:job|task|run|before|import|load|sync)\b|"
    # a process's last words: its exit status ("catalog_import.main: exit 1", "done in 4.1s exit=3")
    r"\bexit(?:ed)?(?:=| (?:(?:with )?(?:status|code) )?)[1-9]\d{0,2}$|"
    # a batch task with no attempt left (Airflow): its run is over, failed, not recovered; a Spring Batch job
    # that completed FAILED
    r"Marking task as FAILED\b|completed with the following parameters: .* and the following status: \[FAILED\]|"
    # a queue consumer out of retries: the message parked in its dead-letter queue, the work not done
    r"exceeded max[_ ]?retries\b.{0,40}(?:dead[- ]?letter|DLQ)|"
    r"(?:max(?:imum)? )?retries exhausted.{0,40}(?:dead[- ]?letter|DLQ)",
    re.I,
)


# a batch task's run ending well after a failed attempt: Airflow's, a job runner's, a retry wrapper's words
SUCCEEDED = re.compile(
    r"Marking task as SUCCESS|Task exited with return code 0\b|succeeded on (?:retry|attempt)|"
    r"(?:retry|attempt) \d+(?: of \d+)? succeeded|\bJob \S+ succeeded\b",
    re.I,
)


def _succeeded_at(item: EvidenceItem) -> float | None:
    stamps = [
        r["ts"]
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float)
        and ("ucce" in (msg := str(r.get("msg") or "")) or "SUCCE" in msg or "code 0" in msg)
        and SUCCEEDED.search(msg)
    ]
    return max(stamps) if stamps else None


def _ended_with(tpl: Template, gave_up: float | None) -> bool:
    """Whether the template's last record came just before what failed gave up for good."""
    return gave_up is not None and tpl.last_ts is not None and -5 <= gave_up - tpl.last_ts <= 120


def _gave_up_at(item: EvidenceItem) -> float | None:
    stamps = [
        r["ts"]
        for r in item.data.get("records") or ()
        if isinstance(r.get("ts"), int | float) and GAVE_UP.search(str(r.get("msg") or ""))
    ]
    return max(stamps) if stamps else None


def _recurring_death(tpl: Template, now: float) -> bool:
    """A process killed or crashed again and again (fatal, or a kill from outside), or bad input rejected again and
    again, whose last occurrence is more recent than three of its mean gaps: the next one may simply not have come
    yet."""
    if tpl.count < 3 or tpl.first_ts is None or tpl.last_ts is None or tpl.sample is None:
        return False
    # also bad input rejected with every delivery of a file or batch: the next delivery has not come yet
    if (
        tpl.sample.level != "fatal"
        and not KILLED_FROM_OUTSIDE.search(tpl.sample.msg)
        and not (BAD_DATA.search(tpl.sample.msg) and _DATA_FILE.search(tpl.sample.msg))
    ):
        return False
    return now - tpl.last_ts < RECURRING_QUIET * (tpl.last_ts - tpl.first_ts) / (tpl.count - 1)


def _quiet_verdict(
    tpl: Template, log_first: float | None, log_last: float | None, now: float | None, total: int = 0
) -> str | None:
    """'stopped' when the template's last record is long before now; 'background' when it is a steady low
    rate present all along; None when it is a live signal."""
    if tpl.last_ts is None or now is None:
        return None
    if _recurring_death(tpl, now):
        return None  # it came back every hour or two: a quiet stretch shorter than three such gaps is not the end
    if now - tpl.last_ts >= STOPPED_AFTER_S and (
        # the log went on without it; or the log ends with it (a sparse event stream says nothing until the
        # next change) and even so it is long past
        log_last is None or log_last - tpl.last_ts >= STOPPED_AFTER_S or now - tpl.last_ts >= ENDED_LONG_AGO_S
    ):
        return "stopped"
    if (
        log_last is not None
        and tpl.first_ts is not None
        and burst_ended(tpl.count, tpl.first_ts, tpl.last_ts, log_last)
    ):
        return "stopped"
    if log_first is None or log_last is None or tpl.first_ts is None:
        return None
    span = log_last - log_first
    if span < BACKGROUND_MIN_SPAN_S or tpl.count < BACKGROUND_MIN_COUNT:
        return None  # a steady rate takes a few occurrences to show: three lines over hours are three events
    coverage = (tpl.last_ts - tpl.first_ts) / span
    rate = tpl.count / max(span / 60.0, 1.0)
    if coverage < BACKGROUND_COVERAGE or rate > BACKGROUND_MAX_RATE_PER_MIN:
        return None
    # a background is a small share of what the service logs: more than 15% of its lines (of its requests) is a fault
    if total - tpl.count >= BACKGROUND_MIN_OTHERS and tpl.count > BACKGROUND_MAX_SHARE * total:
        return None
    # all along: from the start of the log; errors that begin after a long clean stretch began with the fault
    if tpl.first_ts - log_first > BACKGROUND_LATE_START * span:
        return None
    # even: no 5-minute bucket well above the typical (median non-empty) one, and the last quarter no busier
    buckets: dict[int, int] = {}
    for ts in tpl.stamps:
        b = int((ts - log_first) // 300)
        buckets[b] = buckets.get(b, 0) + 1
    if not buckets:
        return None
    typical = median(list(buckets.values()))
    if max(buckets.values()) > BACKGROUND_BURST_FACTOR * max(typical, 1.0):
        return None
    return "background"


# errors a controller logs as part of normal work: Kubernetes' optimistic-concurrency conflicts, which it retries
_ROUTINE = re.compile(
    r"the object has been modified; please apply your changes to the latest version|"
    r"re-queuing item due to optimistic locking",
    re.I,
)


# a deserializer that could not fetch the writer's schema from its registry: the registry failed, not the record
_SCHEMA_FETCH = re.compile(
    r"Error retrieving (?:Avro|JSON|Protobuf)?\s?(?:key |value )?schema|RestClientException|"
    r"schema ?registry\S* (?:unavailable|timed? ?out|not reachable)",
    re.I,
)
# a record parked (dead-lettered) because its retries ran out: the calls it needed failed, not the record
# the GPU driver failing every call: the device is gone or unusable (fallen off the bus, an Xid), not a code path
_DEVICE_ERROR = re.compile(
    r"CUDA (?:failure|error) 999|CUDA driver error: unknown error|cudaErrorUnknown|cudaErrorDevicesUnavailable|"
    r"no CUDA-capable device is detected|NVML: Unknown Error|GPU is lost|unable to determine the device handle"
)
# the kernel failing a file operation: the disk or the mount under the process, whatever exception wraps it
_OS_IO_ERROR = re.compile(r"Input/output error|\bEIO\b|Read-only file system|\bEROFS\b|Stale file handle|\bESTALE\b")
# a client library reporting that the API it called refused the request's values as invalid (HTTP 400/422): a
# symptom of the data sent (a price imported as 0) as often as of the code that built it
_REMOTE_REJECTED = re.compile(
    r"\bstripe\.\S*InvalidRequestError|\(ValidationException\)|\bValidationException: |\b400 Client Error\b|"
    r"\bBadRequestError\b|\bstatus code (?:400|422)\b|\b422 Unprocessable"
)
# a web framework's own firewall refusing a request (Spring Security's StrictHttpFirewall, a scanner's probes)
_FIREWALLED = re.compile(
    r"RequestRejectedException|The request was rejected because the URL contained a potentially malicious String|"
    r"SuspiciousOperation|DisallowedHost|InvalidURLError",
)
# a runtime killing a request that ran past its time limit (PHP's max_execution_time, Ruby's Timeout): a symptom
_TOO_SLOW = re.compile(r"Maximum execution time of \d+ seconds? exceeded|execution expired|Timeout::Error", re.I)
# an orchestrator's exception that only reports the failure of a job it started elsewhere (Airflow's operators for
# Dataproc, EMR, Databricks, Glue, Dataflow): a symptom of what failed in that job
_CHILD_FAILED = re.compile(
    r"AirflowException: (?:Batch |Dataproc |EMR |Databricks |Glue |Dataflow |Spark )?(?:job|run|step|batch|cluster)\b"
    r"[^\n]{0,160}?\b(?:failed|FAILED|terminated|TERMINATED)|Job failed with message \[|"
    r"(?:Databricks|Glue|EMR) (?:run|job|step) (?:\S+ )?(?:failed|terminated)|"
    # the command an operator ran failed: its own output (above) says why
    r"AirflowException: Bash command failed|Command exited with (?:return code|status) [1-9]|"
    r"AirflowException: Cannot execute: spark-submit",
)


def _benign(item: EvidenceItem, tpl: Template, who: str, tags: list[str], verdict: str) -> Finding:
    assert tpl.sample is not None
    if verdict == "stopped":
        why = f"stopped at {fmt_ts(tpl.last_ts)} while the log went on: it recovered"
        code = "errors_stopped"
    elif verdict == "retried":
        why = "a later attempt of the task then succeeded: the failure was transient and is over"
        code = "errors_stopped"
    elif verdict == "routine":
        why = "an optimistic-concurrency conflict (the object changed under the writer), retried at once: routine"
        code = "errors_routine"
    else:
        why = (
            f"a steady background ({tpl.count} over {span_text(tpl.first_ts, tpl.last_ts)}) present all along, "
            "not a new fault"
        )
        code = "errors_background"
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="benign",
        code=code,
        category=Category.HEALTHY,
        title=f"{who}: '{_short(tpl.template)}' x{tpl.count} ({verdict})",
        mechanism=f"{who} logged '{_short(tpl.sample.msg)}' {tpl.count} times; {why}.",
        object=f"log {item.object}",
        score=0.2,
        ts=tpl.first_ts,
        tags=tags,
        evidence=[ref_of(tpl.sample)],
    )


def _changed_setting(
    item: EvidenceItem, tpl: Template, who: str, tags: list[str], changes: list[ConfigChange]
) -> Finding | None:
    """Errors that quote the value a recent flag or setting change introduced: the change is the cause, whatever
    exception the code throws on it (an invalid enum, a bad URL, a number that does not parse)."""
    change = _quoted_change(changes, tpl)
    if change is None or tpl.sample is None or tpl.first_ts is None:
        return None
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="bad_config_value",
        category=Category.CONFIGURATION_ERROR,
        title=f"{who} fails on the value {change.value} that {change.subject} was set to ({tpl.count}x)",
        mechanism=(
            f"{change.subject} was set to {change.value} {human_duration(tpl.first_ts - change.ts)} before {who} "
            f"began failing on exactly that value: '{_short(tpl.sample.msg)}' x{tpl.count} "
            f"{span_text(tpl.first_ts, tpl.last_ts)}; the configuration change is the cause."
        ),
        object=f"{change.subject} = {change.value}",
        score=0.85 if tpl.count >= SPORADIC else 0.65,
        ts=change.ts,
        tags=[*tags, f"config:{change.subject}"],
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop", "exception", "latency"],
        evidence=[change.ref, ref_of(tpl.sample)],
        actions=[
            Action(
                description=f"Set {change.subject} back to its previous value",
                command=f"# flag/config service: revert {change.subject} (now {change.value})",
                kind="write",
            )
        ],
    )


# a value refused for a 32-bit integer type: "Bad value for type int : 2147483876", "integer out of range",
# .NET's "Value was either too large or too small for an Int32", Go's "strconv.Atoi: ... value out of range"
_INT_TYPE = re.compile(
    r"for type int(?:eger)?\b|integer (?:overflow|out of range)|out of range for (?:type )?(?:int(?:eger)?|int4)\b|"
    r"too large or too small for an Int32|\bInt32\b|\bint32\b|value out of range",
    re.I,
)
_TEN_DIGITS = re.compile(r"(?<![\d.])\d{10}(?![\d.])")
INT32_MAX = 2**31 - 1


def _past_int32(msg: str) -> int | None:
    """The number past the 32-bit limit a message refuses for an integer type, if it says so."""
    if not _INT_TYPE.search(msg):
        return None
    for m in _TEN_DIGITS.finditer(msg):
        n = int(m.group(0))
        if INT32_MAX < n <= 2 * (INT32_MAX + 1):
            return n
    return None


def _cause_of(
    item: EvidenceItem,
    tpl: Template,
    who: str,
    tags: list[str],
    deploys: list[tuple[float, str, EvidenceRef]],
    active: list[Template],
) -> Finding | None:
    assert tpl.sample is not None
    msg = tpl.sample.msg
    refs = [ref_of(tpl.sample)]
    span = span_text(tpl.first_ts, tpl.last_ts)
    oom = APP_OOM.search(msg)
    if oom:
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="app_out_of_memory",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"{who} ran out of memory: {oom.group(0).rsplit('.', 1)[-1]} ({tpl.count}x)",
            mechanism=f"{who} exhausted its memory: '{_short(msg)}' x{tpl.count} {span}.",
            object=who,
            score=0.75,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "pod_restarts", "latency", "http_5xx", "memory_high"],
            evidence=refs,
            actions=_mem_actions(item, who),
        )
    conflict = _MIGRATION_CONFLICT.search(msg)
    if conflict is not None:
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="migration_conflict",
            category=Category.CODE_DEFECT,
            title=f"{who}: the release's schema migrations conflict ({conflict.group(0)[:60]}, {tpl.count}x)",
            mechanism=(
                f"{who} refuses to migrate: '{_short(_around(msg, conflict.group(0)))}' x{tpl.count} {span}. The "
                "migration scripts shipped with the release disagree with each other or with the ones already "
                "applied (two branches both added a revision on the same parent, a script edited after it ran, two "
                "with one version): the code's migrations must be fixed (merged, renumbered or restored); the "
                "database and the chart are fine."
            ),
            object=who,
            score=0.8,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "job_failed", "deploy_failed", "crash_loop", "pod_restarts", "alert:*", "exception"],
            evidence=refs,
            actions=[
                Action(
                    description="List the migration heads or the validation errors the tool sees",
                    command="alembic heads; alembic history -r-5:  # flyway validate / liquibase validate",
                ),
                Action(
                    description="Merge the heads (or renumber / restore the script) in the code and release again",
                    command="alembic merge -m 'merge heads' <head1> <head2>",
                    kind="write",
                ),
            ],
        )
    past = _past_int32(msg)
    if past is not None:
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="int32_overflow",
            category=Category.CODE_DEFECT,
            title=f"{who} cannot hold {past} in a 32-bit integer ({tpl.count}x)",
            mechanism=(
                f"{who} reads or stores {past} as a 32-bit integer, whose largest value is 2147483647: an id or "
                f"counter passed that limit and the code (or a column) still uses a 32-bit type "
                f"('{_short(msg)}' x{tpl.count} {span})."
            ),
            object=who,
            score=0.8,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "exception", "http_5xx", "job_failed", "alert:*", "missing_setting"],
            evidence=refs,
            actions=[
                Action(
                    description="Which column and which code type hold the value (the field in the failing statement)",
                    command="psql -c '\\d+ <table>'  # and the entity field's type in the release's diff",
                ),
                Action(
                    description="Widen the type to 64 bits (bigint / long) in the code and the column",
                    command="ALTER TABLE <table> ALTER COLUMN <column> TYPE bigint;",
                    kind="write",
                ),
            ],
        )
    if claimed_elsewhere(msg) or APP_CAPACITY.search(msg):  # app_capacity names a pool or worker limit reached
        return None
    setting = _missing_setting(item, tpl, who, tags, active)
    if setting is not None:
        return setting
    if BAD_DATA.search(msg) and not _SCHEMA_FETCH.search(msg) and not RETRIES_SPENT.search(msg):
        what = _data_error_name(msg)
        stuck = (
            (_stuck_offset(item) or _input_file(item, tpl.first_ts))
            + _bad_field(msg)
            + _producer(item, tpl.first_ts, msg)
        )
        return Finding(
            analyzer="log_errors",
            domain=Domain.LOGS,
            role="cause",
            code="bad_data",
            category=Category.DATA_QUALITY,
            title=f"{who} rejects bad data ({what}): '{_short(tpl.template, 80)}' x{tpl.count}",
            mechanism=(
                f"{who} fails on its input with {what}{stuck}: '{_short(_around(msg, what))}' x{tpl.count} {span}; "
                "the data (its format, schema or a field) does not match what the code expects."
            ),
            object=who,
            # a warning that it skipped a few records and went on is the code handling bad input as designed
            score=0.7 if tpl.count >= SPORADIC and not _skipped_few(tpl, item) else 0.45,
            ts=tpl.first_ts,
            tags=tags,
            explains=["errors", "http_5xx", "pod_restarts"],
            evidence=refs,
            actions=[
                Action(
                    description="Find the first rejected records and their producer",
                    command=f"grep -n -m 20 {_grep_word(msg)} <{item.object} log>",
                ),
            ],
        )
    if KILLED_FROM_OUTSIDE.search(msg):
        return _killed(item, tpl, who, tags)
    if _SIGNATURE_MISMATCH.search(msg) and tpl.count >= SPORADIC:
        return _signature_mismatch(item, tpl, who, tags)
    if (full := _DB_LOG_FULL.search(msg)) is not None:
        return _db_log_full(item, tpl, who, tags, full)
    if MISSING_RESOURCE.search(msg):
        return None  # the thing it asked for is not there (a table, a bucket key): not a bug in its code
    exc = EXCEPTION.search(msg)
    if not exc or REMOTE_FAILURE.search(msg):
        return None  # a client library reporting that its server failed is the dependency's fault, not a bug here
    if _CHILD_FAILED.search(msg):
        return None  # an orchestrator reporting that the job it ran failed: the job's own log says why
    if _OS_IO_ERROR.search(msg) or _DEVICE_ERROR.search(msg):
        # the operating system failing the call (a disk's I/O error, a read-only mount), or the GPU driver reporting
        # its device lost or unusable: not the code
        return None
    if _REMOTE_REJECTED.search(msg):
        return None  # an API refusing the values we sent (an amount of 0): the data or what built it, not yet a bug
    if _TOO_SLOW.search(msg):
        return None  # a request killed for taking too long: slowness from elsewhere (a database, a cache), no bug
    if _FIREWALLED.search(msg):
        return None  # the framework's firewall refusing a malformed or malicious request: it works as it should
    # the class that was thrown, wherever the message names it ("An unhandled exception ...: System.Invalid...")
    named = next((m.group(1) for m in EXCEPTION.finditer(msg) if m.group(1)), None)
    exc_name = _python_raised(msg) or named or exc.group(0).strip()
    if exc_name in ("panic:", "panic") and (
        said := re.search(r"\bpanic: ([^\n]{1,80}?)(?:\s+goroutine \d+ |\n|$)", msg)
    ):
        exc_name = (
            f"panic ({said.group(1).strip()})"  # Go's panic is named by what it says: "assignment to entry in nil map"
        )
    # Java prints the root cause last ("Caused by: java.lang.NullPointerException"): name that one
    caused = _CAUSED_BY.findall(msg)
    if caused:
        exc_name = caused[-1]
    # one cause per source for exceptions: the most frequent; the others are listed in its mechanism
    first_exc = next(
        (
            t
            for t in active
            if t.sample
            and EXCEPTION.search(t.sample.msg)
            and not claimed_elsewhere(t.sample.msg)
            and not BAD_DATA.search(t.sample.msg)
            and not APP_OOM.search(t.sample.msg)
            and not REMOTE_FAILURE.search(t.sample.msg)
            and not APP_CAPACITY.search(t.sample.msg)
        ),
        None,
    )
    if first_exc is not tpl:
        return None
    deploy = _deploy_before(deploys, who, tpl.first_ts, sole=True)
    after = ""
    score = 0.6 if tpl.count >= SPORADIC else 0.45
    if deploy:
        delta = (tpl.first_ts or deploy[0]) - deploy[0]
        after = (
            f", starting {human_duration(delta)} after {deploy[1]}"
            if delta >= 0
            else f", starting while the new pods rolled out ({deploy[1]} {human_duration(-delta)} later)"
        )
        refs.append(deploy[2])
        score = 0.85 if tpl.count >= SPORADIC else 0.7
    msg = msg + _panic_payload(item, tpl)
    if not deploy and not PROGRAMMING_ERROR.search(f"{exc_name} {msg[:400]}"):
        # an exception that names no programming error (a library's or the application's own class) and follows no
        # release says that something failed, not that the code is wrong: a weak candidate
        score = min(score, WEAK_EXCEPTION)
    hung = "deadlock" in exc_name.lower() or "pile-up" in exc_name.lower()
    if hung:
        # a dump that shows the deadlock proves it once: the process is stuck, so it times out and fails probes
        score = max(score, 0.8)
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="exception",
        category=Category.CODE_DEFECT,
        title=f"{who} throws {exc_name} ({tpl.count}x)",
        mechanism=(
            f"{who} is stuck in a {exc_name}: threads (or goroutines) each hold a lock the other waits for, a "
            f"lock-ordering bug: '{_short(msg)}' x{tpl.count} {span}{after}."
            if "deadlock" in exc_name.lower() and "starvation" not in exc_name.lower()
            else f"{who} is stuck in a {exc_name}: tasks running on a pool block waiting for other tasks queued to "
            f"that same pool, so once every thread waits nothing completes (a code defect; a bigger pool only delays "
            f"it): '{_short(msg)}' x{tpl.count} {span}{after}."
            if "starvation" in exc_name.lower()
            else f"{who} fails with an unhandled {exc_name.removeprefix('unhandled ')}{_where(msg)}: "
            f"'{_short(_said(msg))}' x{tpl.count} {span}{after}."
        ),
        object=who,
        score=score,
        ts=tpl.first_ts,
        tags=tags,
        explains=["errors", "http_5xx", "pod_restarts", "crash_loop"]
        + (["probe_*", "upstream_timeout", "latency", "killed", "alert:*"] if hung else []),
        evidence=refs,
        actions=[
            Action(
                description="Read the full stack trace", command=f"grep -n -A 30 {_grep_word(msg)} <{item.object} log>"
            ),
            *(
                [
                    Action(
                        description=f"Roll back the deploy of {who}",
                        command=f"kubectl rollout undo deployment/{who}",
                        kind="write",
                    )
                ]
                if deploy
                else []
            ),
        ],
    )


# exceptions that name a programming error: the code did something wrong whatever its input or its dependencies
PROGRAMMING_ERROR = re.compile(
    r"NullPointer|NullReference|\bTypeError|AttributeError|KeyError|IndexError|NoMethodError|NameError|"
    r"ClassCast|InvalidCast|IndexOutOfBounds|IndexOutOfRange|OutOfRange|IllegalState|IllegalArgument|"
    r"UnsupportedOperation|NotImplemented|ConcurrentModification|StackOverflow|RecursionError|ZeroDivision|"
    r"ArithmeticException|DivideByZero|UnboundLocalError|ArgumentNull|ArgumentException|KeyNotFound|"
    r"AssertionError|assertion failed|\bpanic|panicked|nil pointer|nil map|unwrap\(\)|expect\(\)|"
    r"undefined is not|Cannot read propert|is not a function|is not defined|SIGSEGV|segmentation fault|"
    r"deadlock|starvation|pile-up|infinite loop|NoSuchMethod|NoClassDefFound|ClassNotFound|LazyInitialization|"
    r"NonUniqueResult|IncorrectResultSize|ObjectDisposed|InvalidOperationException|FormatException|"
    r"Call to (?:undefined|private|protected) (?:method|function)|Call to a member function|"
    r"TemplateSyntaxError|UndefinedError|SyntaxError|ReferenceError|RangeError",
    re.I,
)
WEAK_EXCEPTION = 0.4


# the application's own frame where it was thrown: the first stack frame outside the runtime and the frameworks
_JAVA_FRAME = re.compile(r"^\s*at ((?:[\w$]+\.)+[\w$<>]+)\(([\w$.\-]+:\d+)\)", re.M)
_NODE_FRAME = re.compile(r"^\s*at ([\w.$<>\[\] ]+?) \(([^()\s]+?):(\d+):\d+\)", re.M)
_PY_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_GO_FRAME = re.compile(r"^((?:[\w.\-]+/)+[\w.\-]+\.(?:\(\*?\w+\)\.)?\w+)\(", re.M)
_FRAMEWORK = re.compile(
    r"^(?:java|javax|jdk|sun|kotlin|scala|org\.springframework|org\.apache|org\.hibernate|io\.netty|"
    r"com\.fasterxml|reactor|io\.grpc|com\.zaxxer|org\.eclipse|io\.undertow|runtime|net/http|internal/)[./]"
    r"|node_modules|^node:|site-packages|dist-packages|/usr/lib/python|<frozen"
)


def _where(msg: str) -> str:
    """' at PriceFormatter.savingsBadge (PriceFormatter.java:57)': where the application's code threw, when the
    trace names it."""
    if "\n" not in msg:
        return ""
    for m in _JAVA_FRAME.finditer(msg):
        if not _FRAMEWORK.search(m.group(1)):
            cls, method = m.group(1).rsplit(".", 2)[-2:]
            return f" at {cls}.{method} ({m.group(2)})"
    for m in _NODE_FRAME.finditer(msg):
        if not _FRAMEWORK.search(m.group(2)):
            return f" at {m.group(1)} ({m.group(2).rsplit('/', 1)[-1]}:{m.group(3)})"
    py = [m for m in _PY_FRAME.finditer(msg) if not _FRAMEWORK.search(m.group(1))]
    if py:
        return f" at {py[-1].group(3)} ({py[-1].group(1).rsplit('/', 1)[-1]}:{py[-1].group(2)})"
    for m in _GO_FRAME.finditer(msg):
        if not _FRAMEWORK.search(m.group(1)):
            return f" at {m.group(1).rsplit('/', 1)[-1]}"
    return ""


# The last line of a Python traceback names what was raised ("KeyError: 'sku'", "app.errors.QuotaError: ..."):
# the header "Traceback (most recent call last)" says only that something was.
_PY_RAISED = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::\s|:?$)", re.M)


# a store answering that what was asked for does not exist (BigQuery, S3, DynamoDB, a 404 from an API)
MISSING_RESOURCE = re.compile(
    r"Not found: (?:Table|Dataset|Project|Bucket|Object)\b|'reason': 'notFound'|NoSuchKey|NoSuchBucket|"
    r"ResourceNotFoundException|The specified key does not exist",
)


# a process stopped by a signal someone else sent: the exception it raises on the way out is not its bug
KILLED_FROM_OUTSIDE = re.compile(
    r"received SIGTERM|AirflowTaskTerminated|terminated by signal|killed by signal|"
    r"SIGTERM received|got signal (?:15|9)\b|exited with signal (?:15|9)\b|"
    # a runner reporting its child's death by signal at info level: Airflow's "return code -9", a shell's 137
    r"exited with return code -(?:9|15)(?!\d)|exited with (?:exit )?(?:code|status) 137\b|"
    r"Main process exited, code=killed, status=9/KILL|"  # systemd, for a unit's process killed by SIGKILL
    # Airflow's scheduler: the executor lost the task before it ran (a worker evicted, OOM-killed, scaled down)
    r"Was the task killed externally|"
    # Airflow's scheduler: a running task whose heartbeats stopped (its process or worker vanished); Celery's pool
    # losing a child to SIGKILL
    r"Detected zombie job|WorkerLostError: Worker exited prematurely: signal 9",
    re.I,
)


_SKIPPED = re.compile(r"\b(?:skipp(?:ing|ed)|dropp(?:ing|ed)|ignor(?:ing|ed)|discard(?:ing|ed))\b", re.I)
SKIPPED_FEW = 10  # records skipped with a warning, at most, and at most 5% of the log's lines


def _skipped_few(tpl: Template, item: EvidenceItem) -> bool:
    assert tpl.sample is not None
    lines = len(item.data.get("records") or ())
    return (
        # (the template's level is raised for bad data; the record's own text keeps the writer's)
        (level_of({"msg": tpl.sample.msg}) or str(tpl.sample.level or "")).lower() in ("warn", "warning")
        and bool(_SKIPPED.search(tpl.sample.msg))
        and tpl.count <= SKIPPED_FEW
        and tpl.count <= 0.05 * lines
    )


# a gateway refusing a request whose body fails its model (API Gateway's execution log has no level): an error
_GATEWAY_REJECTS = "Request body does not match model schema"


def _kill_hint(msg: str) -> bool:  # a cheap prefilter for KILLED_FROM_OUTSIDE
    return "return code -" in msg or " 137" in msg or "code=killed" in msg


_SIGKILL = re.compile(r"-9(?!\d)|\b137\b|signal 9\b|SIGKILL|status=9/KILL", re.I)


_AIRFLOW_ZOMBIE = re.compile(
    r"Detected zombie job.{0,400}?'DAG Id': '(?P<dag>[\w.\-]+)', 'Task Id': '(?P<task>[\w.\-]+)'"
)
_AIRFLOW_TASK = re.compile(r"<TaskInstance: ([\w.\-]+) \S+ \[\w+\]>.{0,200}killed externally")


def _killed(item: EvidenceItem, tpl: Template, who: str, tags: list[str]) -> Finding:
    assert tpl.sample is not None
    signal = "SIGKILL" if _SIGKILL.search(tpl.sample.msg) else "a signal"
    task = _AIRFLOW_TASK.search(tpl.sample.msg)
    title = f"{who} was stopped by {signal} from outside ({tpl.count}x)"
    need = (
        f"who stopped {who}: the scheduler's or orchestrator's log (a timeout, a manual stop, a deploy), the "
        "node's events (eviction, preemption, scale-down) and the kernel's OOM killer"
    )
    zombie = _AIRFLOW_ZOMBIE.search(tpl.sample.msg)
    if zombie:  # the scheduler reports a running task whose heartbeats stopped: its process or worker vanished
        name = f"{zombie['dag']}.{zombie['task']}"
        title = f"task {name} became a zombie: its process stopped heartbeating ({tpl.count}x, reported by {who})"
        need = (
            f"what happened to the worker that ran task {name}: its pod's events and previous container "
            "(OOMKilled, evicted), its node (spot interruption, scale-down) and the kernel's OOM killer"
        )
        tags = [*tags, f"task:{name}", f"task:{zombie['task']}"]
    if task:  # the scheduler reports a task its executor lost: the task, not the scheduler, was stopped
        title = f"task {task.group(1)} lost by its executor before it ran ({tpl.count}x, reported by {who})"
        need = (
            f"the logs and pod events of the worker that was to run task {task.group(1)} (eviction, OOMKilled, "
            "scale-down, an import error on the worker)"
        )
        tags = [*tags, f"task:{task.group(1)}", f"task:{task.group(1).rsplit('.', 1)[-1]}"]
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="symptom",
        code="killed_from_outside",
        category=Category.UNKNOWN,
        title=title,
        mechanism=(
            f"{who} reports that task {zombie['dag']}.{zombie['task']} stopped heartbeating while it ran: the "
            "process or the worker running it vanished without a word"
            if zombie
            else f"{who} was terminated by a signal it did not send itself"
            if not task
            else f"the executor reported task {task.group(1)} failed while it was still queued: the worker that was "
            "to run it died or dropped it"
        )
        + f": '{_short(tpl.sample.msg)}' x{tpl.count}{_spaced(span_text(tpl.first_ts, tpl.last_ts))}; what stopped "
        "it decides the cause.",
        object=who,
        score=0.5,
        ts=tpl.first_ts,
        tags=tags,
        evidence=[ref_of(tpl.sample)],
        needs=[need],
    )


# a webhook or signed request whose signature does not verify against the secret we hold (Stripe, GitHub, Slack,
# Svix, Shopify, Twilio): every delivery fails the same way when the signing secret was rotated on one side only
_SIGNATURE_MISMATCH = re.compile(
    r"No signatures found matching the expected signature|SignatureVerification(?:Error|Exception)|"
    r"(?:webhook|hmac|request|payload|message) signature (?:verification )?(?:failed|mismatch|does not match|invalid)|"
    r"invalid (?:webhook |request )?signature|X-Hub-Signature(?:-256)? (?:mismatch|does not match)",
    re.I,
)


def _signature_mismatch(item: EvidenceItem, tpl: Template, who: str, tags: list[str]) -> Finding:
    assert tpl.sample is not None
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="signature_mismatch",
        category=Category.CONFIGURATION_ERROR,
        title=f"{who} rejects signed requests: their signature does not verify ({tpl.count}x)",
        mechanism=(
            f"{who} rejects every signed delivery because the signature does not match the signing secret it "
            f"verifies with: '{_short(tpl.sample.msg)}' x{tpl.count} {span_text(tpl.first_ts, tpl.last_ts)}; the "
            "secret was rotated at the sender and not in our configuration (or the reverse), or the wrong "
            "environment's secret is deployed."
        ),
        object=f"signing secret of {who}",
        score=0.8,
        ts=tpl.first_ts,
        tags=tags,
        explains=["errors", "exception", "http_4xx", "http_5xx", "alert:*", "metric_shift"],
        evidence=[ref_of(tpl.sample)],
        actions=[
            Action(
                description="Compare the signing secret the sender uses now with the one this service loads",
                command=f"kubectl get secret -l app={who} -o yaml   # and the provider's webhook endpoint settings",
            )
        ],
    )


# SQL Server's error 9002: a database's transaction log full, and what keeps it from being truncated
_DB_LOG_FULL = re.compile(r"The transaction log for database '(?P<db>[^']+)' is full(?: due to '(?P<why>\w+)')?")
_LOG_REUSE_WAIT = {
    "LOG_BACKUP": "log backups are not running or failing, so the log cannot be truncated",
    "ACTIVE_TRANSACTION": "a long open transaction keeps the log from being truncated",
    "REPLICATION": "replication has not read the log, so it cannot be truncated",
    "AVAILABILITY_REPLICA": "an availability-group replica has not received the log",
    "ACTIVE_BACKUP_OR_RESTORE": "a backup or restore holds the log",
}


def _db_log_full(item: EvidenceItem, tpl: Template, who: str, tags: list[str], m: re.Match[str]) -> Finding:
    assert tpl.sample is not None
    why = _LOG_REUSE_WAIT.get(m["why"] or "", "the log grew until its file or disk was full")
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="cause",
        code="db_log_full",
        category=Category.RESOURCE_EXHAUSTION,
        title=f"the transaction log of database {m['db']} is full" + (f" ({m['why']})" if m["why"] else ""),
        mechanism=(
            f"the transaction log of database {m['db']} is full ({m['why'] or 'no reason given'}): {why}, so every "
            f"write fails: '{_short(tpl.sample.msg)}' x{tpl.count} {span_text(tpl.first_ts, tpl.last_ts)}."
        ),
        object=f"transaction log of {m['db']}",
        score=0.85,
        ts=tpl.first_ts,
        tags=[*tags, f"database:{m['db']}"],
        explains=["errors", "exception", "http_5xx", "db_errors", "disk_full", "alert:*"],
        evidence=[ref_of(tpl.sample)],
        actions=[
            Action(
                description="Why the log cannot be truncated, and how full it is",
                command=f"SELECT name, log_reuse_wait_desc FROM sys.databases WHERE name = '{m['db']}'; "
                "DBCC SQLPERF(LOGSPACE);",
            )
        ],
    )


def _said(msg: str) -> str:
    """What an exception says: a Python traceback's closing line ("TypeError: can't compare offset-naive and
    offset-aware datetimes"), which its header and frames only lead to; else the message itself."""
    raised = _python_raised(msg)
    if raised is None:
        return msg
    at = msg.rfind(f"\n{raised}")
    return msg[at + 1 :] if at >= 0 else msg


def _python_raised(msg: str) -> str | None:
    if "Traceback (most recent call last)" not in msg:
        return None
    raised = [m.group(1) for m in _PY_RAISED.finditer(msg) if m.group(1) != "Traceback"]
    return raised[-1] if raised else None


_PANIC_AT = re.compile(r"panicked at [^\s']+:\d+(?::\d+)?:?\s*$")


def _panic_payload(item: EvidenceItem, tpl: Template) -> str:
    """Rust (1.73+) prints a panic's message on the line after "thread 'x' panicked at src/f.rs:212:48:": when the
    sample ends there, the next line of the log is what panicked (`called Option::unwrap() on a None value`)."""
    sample = tpl.sample
    if sample is None or not _PANIC_AT.search(sample.msg) or sample.line is None:
        return ""
    nxt = next((r for r in item.data.get("records") or () if r.get("line") == sample.line + 1), None)
    return f" {str(nxt.get('msg') or '').strip()}" if nxt else ""


def _errors_symptom(
    item: EvidenceItem, active: list[Template], who: str, tags: list[str], died: bool = False
) -> Finding:
    total = sum(t.count for t in active)
    first = min((t.first_ts for t in active if t.first_ts is not None), default=None)
    last = max((t.last_ts for t in active if t.last_ts is not None), default=None)
    top = active[:3]
    listing = "; ".join(f"'{_short(t.template, 100)}' x{t.count}" for t in top)
    lines = len(item.data.get("records") or ())
    # a handful of errors among a busy log's lines is what every working service logs, not a failure
    few = not died and (
        (total <= FEW_ERRORS and lines >= FEW_ERRORS_AMONG and total / lines < FEW_ERRORS_SHARE)
        or (
            # one error in a log that goes on: a blip, unless it ended the process
            total == 1 and lines >= 10 and not any(t.sample and t.sample.level == "fatal" for t in active)
        )
    )
    return Finding(
        analyzer="log_errors",
        domain=Domain.LOGS,
        role="benign" if few else "symptom",
        code="errors_few" if few else "errors",
        category=Category.HEALTHY if few else Category.UNKNOWN,
        title=f"{who}: {total} errors in {len(active)} template(s)" + (f" among {lines} lines" if few else ""),
        mechanism=f"{who} logged {total} errors {span_text(first, last)}: {listing}"
        + (f"; {total} of {lines} lines: the background of a working service, not a failure." if few else "."),
        object=who,
        score=min(0.9, 0.3 + total / 200),
        ts=first,
        tags=tags,
        evidence=[
            EvidenceRef(item=item.id, line=t.sample.line, value=f"{t.template[:200]} (x{t.count})")
            for t in top
            if t.sample
        ],
    )


# a deploy as a CI/CD job or an operator's shell logs it: `helm upgrade --install NAME`, `deployment "NAME"
# successfully rolled out`, "Deploying NAME 3.8.0", "released NAME v2.4"
_DEPLOY_LINE = re.compile(
    r"\bhelm upgrade (?:--install |-i )?(?P<helm>[a-z0-9][\w.\-]*)|"
    r"\bargocd synced (?P<argo>[a-z0-9][\w.\-]*) to revision|"
    r"\bdeployment(?:\.apps)?[/ ]\"?(?P<k8s>[a-z0-9][\w.\-]*)\"? (?:successfully rolled out|image updated)|"
    r"\b(?:deploy(?:ed|ing)?|releas(?:ed|ing)|rolled out|rolling out)\s+(?P<app>[a-z][a-z0-9\-]+[a-z0-9])"
    r"(?:[ @:]+v?(?P<ver>\d+\.\d+[\w.\-]*))|"
    # ECS service events: a deployment's new tasks starting (only when the deployment completes after them)
    r"\(service (?P<ecs>[\w.\-]+)\) has started \d+ tasks?",
    re.I,
)
_ECS_DONE = re.compile(r"\(service ([\w.\-]+)\) \(deployment [^)]*\) deployment completed")
ECS_DEPLOY_S = 1800.0  # a deployment's tasks start, then it completes within this


def _deploy_lines(evidence: EvidenceSet) -> list[tuple[float, str, EvidenceRef]]:
    """Deploys a log records (a CI/CD job's, a shell session's): the first line naming each deployed workload."""
    out: list[tuple[float, str, EvidenceRef]] = []
    for item in evidence.kind("log"):
        seen: set[str] = set()
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            ts = r.get("ts")
            if not isinstance(ts, int | float) or not any(w in msg for w in ("eploy", "helm", "started", "argocd")):
                continue  # cheap substring tests first: this runs on every line of the bundle
            if str(r.get("level") or "") in ("error", "fatal") or (m := _DEPLOY_LINE.search(msg)) is None:
                continue
            name = m["helm"] or m["argo"] or m["k8s"] or m["app"] or m["ecs"]
            # (a deploy history's every sync is a deploy of its own; elsewhere the first line naming it)
            key = f"{name} {msg}" if m["argo"] else name
            if key in seen or (m["ecs"] and not _ecs_completes(item, name, float(ts))):
                continue
            seen.add(key)
            tag = re.search(r"(?:image\.tag|tag)[=:]\s*v?([\w.\-]+)", msg)
            version = m["ver"] or (tag.group(1) if tag else "") or _image_version(msg, name)
            out.append(
                (
                    float(ts),
                    f"the deploy of {name}{' ' + version if version else ''} ('{msg.strip()[:100]}')",
                    EvidenceRef(item=item.id, line=r.get("line"), value=msg[:200]),
                )
            )
    return out


_IMAGE_REF = re.compile(r"(?:^|[\s,/])(?P<repo>[a-z0-9][\w.\-]*):(?P<tag>v?\d+\.\d+[\w.\-]*)")


def _image_version(msg: str, name: str) -> str:
    """The tag of the image a deploy line lists for the application it names (an Argo CD application
    "billing-api-prod" runs "ghcr.io/acme/billing-api:v2.31.0")."""
    for m in _IMAGE_REF.finditer(msg):
        if name.startswith(m["repo"]) or m["repo"].startswith(name):
            return m["tag"]
    return ""


def _ecs_completes(item: EvidenceItem, service: str, started: float) -> bool:
    """Whether a deployment of the ECS service completes after its tasks started (a deploy, not a scale-out or
    the replacement of a failed task)."""
    for r in item.data.get("records") or ():
        ts, m = r.get("ts"), _ECS_DONE.search(str(r.get("msg") or ""))
        if m and m.group(1) == service and isinstance(ts, int | float) and 0 <= ts - started <= ECS_DEPLOY_S:
            return True
    return False


def _deploys(evidence: EvidenceSet) -> list[tuple[float, str, EvidenceRef]]:
    """Rollouts seen in the evidence: ScalingReplicaSet events, ReplicaSet creation times and deploys logs record."""
    out: list[tuple[float, str, EvidenceRef]] = []
    for ev in evidence.kind("k8s/Event"):
        d = ev.data
        if d.get("reason") == "ScalingReplicaSet" and "up" in str(d.get("message", "")) and d.get("first_ts"):
            out.append(
                (
                    float(d["first_ts"]),
                    f"the rollout '{d.get('message')}'",
                    EvidenceRef(item=ev.id, field="message", value=d.get("message")),
                )
            )
    for dep in evidence.kind("k8s/Deployment"):
        # a settled Deployment's Progressing condition was last updated when its newest ReplicaSet became available
        conds = (dep.data.get("status") or {}).get("conditions") or ()
        prog = next((c for c in conds if isinstance(c, dict) and c.get("type") == "Progressing"), None)
        ts = parse_ts(prog.get("lastUpdateTime")) if prog else None
        if prog and ts and prog.get("reason") in ("NewReplicaSetAvailable", "ReplicaSetUpdated"):
            containers = ((dep.data.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or ()
            images = ", ".join(str(c.get("image")) for c in containers if isinstance(c, dict) and c.get("image"))
            name = dep.object.rsplit("/", 1)[-1]
            out.append(
                (
                    ts,
                    f"the rollout of Deployment {name} ({images}) completed",
                    EvidenceRef(item=dep.id, field="status.conditions", value=prog.get("lastUpdateTime")),
                )
            )
    out += _deploy_lines(evidence)
    for rel in releases(evidence):  # a Lambda function's new version, a service started at a new version
        item = evidence.get(rel.ref.item)
        if item is not None and item.kind == "log":
            out.append((rel.ts, f"the release of {rel.workload} {rel.version}", rel.ref))
    for rs in evidence.kind("k8s/ReplicaSet"):
        created = (rs.data.get("metadata") or {}).get("creationTimestamp")
        ts = parse_ts(created)
        if ts:
            out.append(
                (
                    ts,
                    f"ReplicaSet {rs.object} was created",
                    EvidenceRef(item=rs.id, field="metadata.creationTimestamp", value=created),
                )
            )
    return out


def _deploy_before(
    deploys: list[tuple[float, str, EvidenceRef]], who: str, first_ts: float | None, sole: bool = False
) -> tuple[float, str, EvidenceRef] | None:
    """The newest deploy of `who` shortly before its errors began; with `sole`, also the bundle's only deploy
    line when the log names no workload a deploy does (an application log called after its framework)."""
    if first_ts is None:
        return None
    best = None
    lines = [d for d in deploys if d[1].startswith("the deploy of ")]
    only = lines[0] if sole and len(lines) == 1 and not any(who in d[1] for d in deploys) else None
    for d in deploys:
        # a rollout reported complete may finish a minute or two after the new pods began failing
        named = who in d[1] or (workload_of_pod(who) != who and f" {workload_of_pod(who)} " in f" {d[1]} ")
        named = named or d is only
        if named and -ROLLOUT_SLACK_S <= first_ts - d[0] <= DEPLOY_WINDOW_S and (best is None or d[0] > best[0]):
            best = d
    return best


def _mem_actions(item: EvidenceItem, who: str) -> list[Action]:
    acts = [
        Action(
            description="See the memory errors in context",
            command=f"grep -n -B 5 -A 20 OutOfMemory <{item.object} log>",
        )
    ]
    if item.object.startswith("Pod/"):
        _, ns, pod, *_ = [*item.object.split("/"), ""]
        acts.append(
            Action(
                description="Compare the container's memory use with its limit",
                command=f"kubectl top pod {pod} -n {ns} --containers",
            )
        )
    return acts
