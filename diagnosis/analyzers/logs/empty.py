"""An input that arrived empty while the feed's other inputs held rows."""

from __future__ import annotations

import re

from diagnosis.analyzers._common import (
    Rec,
    first_and_last_refs,
    level_of,
    log_records,
    ref_of,
    service_of,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding
from diagnosis.series import median

# ---------------------------------------------------------------- an input that arrived empty

# a count of zero for one partition, file or batch: "rows=0", "query returned 0 rows", "(0 rows", "partition is empty"
_ZERO = re.compile(
    r"\b(?:rows|records|row_count|num_rows|lines|documents|items)[=:]\s*0\b|\breturned 0 (?:rows|records)\b|"
    r"\(0 (?:rows|records)\b|\b0 (?:rows|records) (?:read|loaded|returned|exported|written|found)\b|"
    r"\bpartition is empty\b|\bempty (?:partition|input file|input|dataset|file)\b",
    re.I,
)
_COUNT = re.compile(
    r"\b(?:rows|records|row_count|num_rows|lines|documents|items)[=:]\s*(\d{3,})\b|"
    r"\breturned (\d{3,}) (?:rows|records)\b|\((\d{3,}) (?:rows|records)\b",
    re.I,
)
# what the count is about: a partition key, an object path, a data file
_INPUT_ID = re.compile(
    r"\b((?:dt|ds|date|day|hour|partition|batch|snapshot)=[\w\-:./]+)|((?:s3a?|gs|abfss?|hdfs)://\S+)|"
    r"(/[\w./\-]+\.(?:csv|parquet|json|jsonl|avro|orc|gz|zst))",
    re.I,
)
_COUNT_WORDS = ("row", "record", "empty", "lines", "document", "items")  # cheap test before the expressions
EMPTY_USUAL_MIN = 100  # other inputs of the same feed held at least this many rows


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def empty_input(evidence: EvidenceSet) -> list[Finding]:
    """A partition, file or batch that arrived with zero rows where the others of the same feed hold many: the
    data is missing (an export that wrote an empty result, a source view that returned nothing), and what
    consumes it fails or produces garbage - a data_quality fault, not the consumer's code."""
    zeros: dict[str, list[Rec]] = {}
    usual: list[int] = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            low = msg.lower()
            if not any(w in low for w in _COUNT_WORDS):
                continue
            c = _COUNT.search(msg)
            if c:
                usual.append(int(next(g for g in c.groups() if g)))
                continue
            if not _ZERO.search(msg):
                continue
            m = _INPUT_ID.search(msg)
            if m:
                key = next(g for g in m.groups() if g).rstrip(".,;)")
                zeros.setdefault(key, []).append(Rec(item, r.get("ts"), msg, r.get("line"), level_of(r)))
    if not zeros or not usual or median([float(u) for u in usual]) < EMPTY_USUAL_MIN:
        return []
    # one partition key names the same input however each log writes it (dt=2025-04-16 in a path and alone)
    out: list[Finding] = []
    for key, recs in sorted(zeros.items(), key=lambda kv: -len(kv[1])):
        if any(key != k and k in key for k in zeros):
            continue  # the shorter key (the partition) names it for every log
        recs.sort(key=lambda r: r.ts or 0)
        mentions = [rec for rec in _mentions(evidence, key)]
        services = sorted({s for rec in [*recs, *mentions] if (s := service_of(rec.item))})
        failed_after = [
            rec
            for rec in log_records(evidence)
            if rec.level in ("error", "fatal") and recs[0].ts is not None and (rec.ts or 0) >= recs[0].ts
        ]
        out.append(
            Finding(
                analyzer="empty_input",
                domain=Domain.LOGS,
                role="cause",
                code="empty_input",
                category=Category.DATA_QUALITY,
                title=f"input {key} has 0 rows (the feed's others ~{median([float(u) for u in usual]):.0f})",
                mechanism=(
                    f"the input {key} arrived empty (0 rows: '{recs[0].msg.strip()[:140]}') while the feed's other "
                    f"inputs hold ~{median([float(u) for u in usual]):.0f} rows"
                    + (f"; {', '.join(services)} wrote or read it" if services else "")
                    + (", and what consumed it failed after" if failed_after else "")
                    + ": missing data upstream (an export that wrote an empty result), not the consumer's code."
                ),
                object=f"input {key}",
                score=0.8 if failed_after else 0.6,
                ts=recs[0].ts,
                tags=[f"input:{key}", *(f"service:{s}" for s in services)],
                explains=["errors", "exception", "job_failed", "crash_loop", "pod_restarts", "metric_shift"],
                evidence=first_and_last_refs(recs) + ([ref_of(failed_after[0])] if failed_after else []),
                actions=[
                    Action(
                        description=f"Count the rows of {key} at the source and compare with the day before",
                        command=f"# e.g. SELECT count(*) FROM <source> WHERE {key.split('/')[-1]}",
                    )
                ],
            )
        )
        break
    return out


def _mentions(evidence: EvidenceSet, key: str) -> list[Rec]:
    """Records of any log that name the input (so the services that read or wrote it are tagged)."""
    out = []
    for item in evidence.kind("log"):
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if key in msg:
                out.append(Rec(item, r.get("ts"), msg, r.get("line"), level_of(r)))
                break
    return out
