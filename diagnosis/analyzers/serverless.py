"""Serverless capacity: a region's Lambda concurrency used up. Every function without reserved concurrency shares
the account's unreserved pool (1,000 by default); when one function's burst fills it, the others are throttled
though nothing is wrong with them. The cause is the pool and the function that filled it."""

from __future__ import annotations

import itertools
import re
from typing import Any

from diagnosis.analyzers._common import object_tags, record_ref, service_of
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding
from diagnosis.series import points_of
from diagnosis.timeline import fmt_ts

ACCOUNT_LIMIT = 1000.0  # Lambda's default concurrency quota per region
FULL = 0.85


# a GetMetricData result named by its label, not its request: "fares-api Throttles", "ConcurrentExecutions (account)"
_LABELLED = re.compile(r"^(?:(?P<fn>[\w.\-]+) )?(?P<metric>[A-Za-z]+)(?: \((?P<scope>[^)]*)\))?$")


def _lambda(m: EvidenceItem, name: str) -> bool:
    labels = m.data.get("labels") or {}
    if labels.get("namespace", "AWS/Lambda") != "AWS/Lambda":
        return False
    full = str(m.data.get("name") or "")
    if full == name:
        return True
    lm = _LABELLED.match(full)
    return lm is not None and lm["metric"] == name


def _function(m: EvidenceItem) -> str | None:
    """The function a series is about: its FunctionName dimension, or the function its label names first."""
    fn = (m.data.get("labels") or {}).get("FunctionName")
    if fn:
        return str(fn)
    lm = _LABELLED.match(str(m.data.get("name") or ""))
    return lm["fn"] if lm and lm["fn"] and (lm["scope"] or "").lower() != "account" else None


def _peak(m: EvidenceItem) -> tuple[int, float]:
    pts = points_of(m.data.get("points"))
    i = max(range(len(pts)), key=lambda k: pts[k][1])
    return i, pts[i][1]


@ANALYZERS.analyzer(domain=Domain.METRICS, reads={"metric"})
def lambda_concurrency(evidence: EvidenceSet) -> list[Finding]:
    metrics = [m for m in evidence.kind("metric") if points_of(m.data.get("points"))]
    throttled = [m for m in metrics if _lambda(m, "Throttles") and _peak(m)[1] > 0]
    pool = [
        m for m in metrics
        if (_lambda(m, "UnreservedConcurrentExecutions") or _lambda(m, "ConcurrentExecutions"))
        and not _function(m)
    ]  # fmt: skip
    if not throttled or not pool:
        return []
    account = max(pool, key=lambda m: _peak(m)[1])
    at, used = _peak(account)
    if used < FULL * ACCOUNT_LIMIT:
        return []
    by_function = [m for m in metrics if _lambda(m, "ConcurrentExecutions") and _function(m)]
    culprit = max(by_function, key=lambda m: _peak(m)[1], default=None)
    hog = _function(culprit) if culprit is not None else None
    victims = sorted({_function(m) or "?" for m in throttled} - {hog or ""})
    ts = points_of(account.data.get("points"))[at][0]
    refs = [EvidenceRef(item=account.id, field=f"points.{at}", value=used)]
    share = ""
    if culprit is not None:
        ci, cv = _peak(culprit)
        refs.append(EvidenceRef(item=culprit.id, field=f"points.{ci}", value=cv))
        share = f"; {hog} alone ran {cv:.0f} of them"
    return [
        Finding(
            analyzer="lambda_concurrency",
            domain=Domain.METRICS,
            role="cause",
            code="lambda_concurrency_exhausted",
            category=Category.RESOURCE_EXHAUSTION,
            title=f"the account's Lambda concurrency is used up ({used:.0f} of ~{ACCOUNT_LIMIT:.0f})"
            + (f" by {hog}" if hog else ""),
            mechanism=(
                f"{used:.0f} concurrent executions at {fmt_ts(ts)}, against the account's unreserved pool of about "
                f"{ACCOUNT_LIMIT:.0f}{share}: functions without reserved concurrency"
                + (f" ({', '.join(victims)})" if victims else "")
                + " are throttled because the pool is full, not because anything is wrong with them"
            ),
            object="Lambda concurrency of the account" + (f" (filled by {hog})" if hog else ""),
            score=0.8,
            ts=ts,
            tags=[*(f"service:{v}" for v in victims), *([f"service:{hog}"] if hog else []), "metric:Throttles"],
            explains=["metric_shift", "errors", "http_5xx", "latency", "error_rate", "rate_limited*", "alert:*"],
            evidence=refs,
            actions=[
                Action(
                    description="Cap the function that fills the pool (reserved concurrency), or reserve some for "
                    "the functions that must not be throttled",
                    command=f"aws lambda put-function-concurrency --function-name {hog or '<function>'} "
                    "--reserved-concurrent-executions <n>",
                    kind="write",
                ),
                Action(description="See the account's quota", command="aws lambda get-account-settings"),
            ],
        )
    ]


# ---------------------------------------------------------------- a Lambda function's timeout set below its own work

# Lambda ends an invocation that runs past the function's timeout with "Task timed out after 3.00 seconds". When the
# invocations that finish take most of that time anyway (their REPORT lines' Duration), the limit is set at the
# function's normal work, not something slow that it waits on: the timeout setting is the cause, above all when a
# configuration change (CloudTrail's UpdateFunctionConfiguration) set it. Invocations that finish far below the limit
# mean something it waits on got slow: the analyzers of that dependency decide.
_TASK_TIMED_OUT = re.compile(r"Task timed out after (\d+(?:\.\d+)?) seconds")
_REPORT_DURATION = re.compile(r"REPORT RequestId: \S+\s+Duration: (\d+(?:\.\d+)?) ms")
_CONFIG_TIMEOUT = re.compile(
    r"UpdateFunctionConfiguration\w*.*?\"functionName\":\s*\"([\w\-]+)\".*?\"timeout\":\s*(\d+)"
)
TIMED_OUT_MIN = 3
NEAR_LIMIT = 0.7  # finished invocations' median at 70% of the limit or more: the limit is their normal work


def _timeout_change(evidence: EvidenceSet, limit: float) -> tuple[str, EvidenceRef, float | None] | None:
    """A recorded configuration change that set a function's timeout to this limit: (function, ref, when)."""
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "UpdateFunctionConfiguration" not in msg:
                continue
            m = _CONFIG_TIMEOUT.search(msg)
            if m and abs(float(m.group(2)) - limit) < 0.01:
                return m.group(1), record_ref(item, r), r.get("ts")
    return None


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def lambda_timeout_tight(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        timed_out: list[tuple[dict[str, Any], float]] = []
        durations: list[float] = []
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "Task timed out" in msg and (m := _TASK_TIMED_OUT.search(msg)):
                timed_out.append((r, float(m.group(1))))
            elif "REPORT RequestId" in msg and (d := _REPORT_DURATION.search(msg)):
                durations.append(float(d.group(1)) / 1000)
        if len(timed_out) < TIMED_OUT_MIN:
            continue
        limit = max(t for _, t in timed_out)
        finished = sorted(d for d in durations if d < 0.98 * limit)
        if len(finished) < 3:
            continue
        median = finished[len(finished) // 2]
        if median < NEAR_LIMIT * limit:
            continue
        change = _timeout_change(evidence, limit)
        fn = change[0] if change else service_of(item) or item.object
        first = timed_out[0][0]
        refs = [record_ref(item, first)]
        set_by = ""
        if change:
            refs.append(change[1])
            set_by = f"; a configuration change at {fmt_ts(change[2])} set it to {limit:g} s" if change[2] else ""
        out.append(
            Finding(
                analyzer="lambda_timeout_tight",
                domain=Domain.LOGS,
                role="cause",
                code="function_timeout_too_low",
                category=Category.CONFIGURATION_ERROR,
                title=f"Lambda function {fn}: timeout {limit:g} s is below its normal work "
                f"({len(timed_out)} timed out)",
                mechanism=(
                    f"the function timeout of {fn} is {limit:g} s{set_by}, while its invocations that finish take "
                    f"{median:.2f} s (median of {len(finished)}, up to {finished[-1]:.2f} s): the slower part of its "
                    f"normal work runs past the limit and ends 'Task timed out' ({len(timed_out)}x), so those "
                    "events fail and are retried or dead-lettered"
                ),
                object=f"Lambda function {fn} (timeout)",
                score=0.8 if change else 0.7,
                ts=change[2] if change and change[2] else first.get("ts"),
                tags=[f"service:{fn}", *object_tags(item)],
                explains=["errors", "metric_shift", "latency", "upstream_timeout", "http_5xx", "alert:*", "timeout*"],
                evidence=refs,
                actions=[
                    Action(
                        description="See the function's timeout and when it changed",
                        command=f"aws lambda get-function-configuration --function-name {fn} --query Timeout",
                    ),
                    Action(
                        description="Set the timeout back above the function's longest normal invocation",
                        command=f"aws lambda update-function-configuration --function-name {fn} --timeout <seconds>",
                        kind="write",
                    ),
                ],
            )
        )
    return out


# ---------------------------------------------------------------- a Lambda execution environment that leaks memory

# One execution environment serves one invocation at a time, so its memory should level off whatever the traffic:
# REPORT lines of one log stream (one environment) whose "Max Memory Used" climbs invocation after invocation to the
# function's "Memory Size" show memory kept across invocations (module-level caches, listeners): a leak in the code,
# which then ends in the runtime's out-of-memory error, a timeout or Runtime.ExitError and a fresh cold start. More
# memory only delays it.
_REPORT_MEMORY = re.compile(r"Memory Size: (\d+) MB\s+Max Memory Used: (\d+) MB")
_LOG_STREAM = re.compile(r"\b\d{4}/\d\d/\d\d/\[([^\]]+)\][0-9a-f]{8,}")
_SEMVER = re.compile(r"\b(?:([a-z][\w\-]+) )?v(\d+\.\d+\.\d+)\b")  # "quote-engine v2.14.0 cold start"
LEAK_MIN_REPORTS = 6


def _leaking(used: list[float], size: float) -> bool:
    if len(used) < LEAK_MIN_REPORTS or size <= 0:
        return False
    rising = sum(1 for a, b in itertools.pairwise(used) if b >= a)
    return (
        used[0] <= 0.5 * size
        and used[-1] >= 0.9 * size
        and used[-1] - used[0] >= 0.4 * size
        and rising >= 0.85 * (len(used) - 1)
    )


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def lambda_memory_leak(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        streams: dict[str, list[tuple[dict[str, Any], float, float]]] = {}
        versions: dict[str, tuple[str | None, str]] = {}
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            s = _LOG_STREAM.search(msg)
            key = s.group(1) if s else ""
            if "Max Memory Used" in msg and (m := _REPORT_MEMORY.search(msg)):
                streams.setdefault(key, []).append((r, float(m.group(2)), float(m.group(1))))
            elif key not in versions and (v := _SEMVER.search(msg)):
                versions[key] = (v.group(1), v.group(2))
        for key, reports in streams.items():
            size = reports[-1][2]
            used = [u for _, u, _ in reports]
            if not _leaking(used, size):
                continue
            named_as, version = versions.get(key) or versions.get("") or (None, None)
            fn = named_as or service_of(item) or item.object
            named = f" {version}" if version else ""
            env = f" (version {key})" if key and key != "$LATEST" else ""
            first, last = reports[0][0], reports[-1][0]
            out.append(
                Finding(
                    analyzer="lambda_memory_leak",
                    domain=Domain.LOGS,
                    role="cause",
                    code="memory_leak",
                    category=Category.CODE_DEFECT,
                    title=f"{fn}{named}: one execution environment's memory climbs {used[0]:.0f} -> {used[-1]:.0f} MB "
                    f"of {size:.0f} MB over {len(used)} invocations",
                    mechanism=(
                        f"the code of {fn}{named}{env} keeps memory across invocations: in one execution environment "
                        f"Max Memory Used grew from {used[0]:.0f} MB to {used[-1]:.0f} MB of its {size:.0f} MB over "
                        f"{len(used)} invocations without levelling off (a leak; an environment serves one invocation "
                        "at a time, so traffic does not explain it), until it runs out of memory, times out or "
                        "exits and a cold start begins again"
                    ),
                    object=f"Lambda function {fn}{named}",
                    score=0.85,
                    ts=first.get("ts"),
                    tags=[f"service:{fn}", *([f"version:{version}"] if version else []), *object_tags(item)],
                    explains=[
                        "app_out_of_memory",
                        "oom*",
                        "exception",
                        "errors",
                        "latency",
                        "metric_shift",
                        "http_5xx",
                        "upstream_timeout",
                        "alert:*",
                    ],
                    evidence=[
                        record_ref(item, first),
                        record_ref(item, last),
                    ],
                    actions=[
                        Action(
                            description="Compare memory per environment before and after the release",
                            command='aws logs start-query --query-string \'filter @type = "REPORT" | stats '
                            "max(@maxMemoryUsed/1000/1000) by @logStream, bin(10m)'",
                        ),
                        Action(
                            description="Roll the alias back to the previous version",
                            command=f"aws lambda update-alias --function-name {fn} --name live "
                            "--function-version <previous>",
                            kind="write",
                        ),
                    ],
                )
            )
            break  # one environment shows it
    return out


# ---------------------------------------------------------------- a queue consumer that cannot delete what it handled

# SQS removes a message only when the consumer deletes it with the receipt handle of that receipt. A consumer whose
# deletes fail with ReceiptHandleIsInvalid (it passes the message id, or a handle of another receipt) processes every
# message again each time its visibility timeout ends: duplicates downstream (the same email sent five times), the
# load they put on what it calls (a provider's rate limit), and messages moving to the dead-letter queue after their
# maximum receives though they were handled. The consumer's code is the cause; the throttling it meets is the effect.
_DELETE_REFUSED = re.compile(r"ReceiptHandleIsInvalid|The receipt handle \S* ?is not valid", re.I)
_VERSION_FIELD = re.compile(r"\bversion\W{1,4}v?(\d+\.\d+\.\d+)\b")
DELETES_REFUSED_MIN = 5


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def queue_deletes_refused(evidence: EvidenceSet) -> list[Finding]:
    out: list[Finding] = []
    for item in evidence.kind("log"):
        recs = [
            r
            for r in item.data.get("records") or ()
            if "eceipt" in str(r.get("msg") or "") and _DELETE_REFUSED.search(str(r.get("msg") or ""))
        ]
        if len(recs) < DELETES_REFUSED_MIN:
            continue
        who = service_of(item) or item.object
        version = next((m.group(1) for r in recs if (m := _VERSION_FIELD.search(str(r.get("msg") or "")))), None)
        named = f" {version}" if version else ""
        first = recs[0]
        out.append(
            Finding(
                analyzer="queue_deletes_refused",
                domain=Domain.LOGS,
                role="cause",
                code="queue_delete_refused",
                category=Category.CODE_DEFECT,
                title=f"{who}{named}: its message deletes are refused (ReceiptHandleIsInvalid, {len(recs)}x)",
                mechanism=(
                    f"{who}{named} cannot delete the messages it has handled: SQS refuses its deletes as "
                    f"ReceiptHandleIsInvalid ({len(recs)}x from {fmt_ts(first.get('ts'))}), the handle it passes is "
                    "not the receipt's (a message id, another receipt's handle), so every message comes back when "
                    "its visibility timeout ends and is processed again: duplicates downstream, the load they put on "
                    "what it calls (throttling), and handled messages moving to the dead-letter queue"
                ),
                object=f"{who}{named}",
                score=0.85,
                ts=first.get("ts"),
                tags=[f"service:{who}", *([f"version:{version}"] if version else []), *object_tags(item)],
                explains=[
                    "rate_limited*",
                    "errors",
                    "metric_shift",
                    "shift_within_capacity",
                    "upstream_*",
                    "alert:*",
                    "saturation",
                ],
                evidence=[record_ref(item, r) for r in recs[:2]],
                actions=[
                    Action(
                        description="Compare messages received with messages deleted on the queue",
                        command="aws cloudwatch get-metric-data  # NumberOfMessagesReceived vs NumberOfMessagesDeleted",
                    ),
                    Action(
                        description=f"Roll back {who} to the version before{named or ' the change'}",
                        command=f"aws ecs update-service --service {who} --task-definition <previous revision>",
                        kind="write",
                    ),
                ],
            )
        )
    return out
