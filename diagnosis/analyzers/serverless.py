"""Serverless capacity: a region's Lambda concurrency used up. Every function without reserved concurrency shares
the account's unreserved pool (1,000 by default); when one function's burst fills it, the others are throttled
though nothing is wrong with them. The cause is the pool and the function that filled it."""

from __future__ import annotations

import re

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
