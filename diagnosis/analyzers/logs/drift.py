"""Bad data that loads anyway: a consumer that warns about its input and goes on (an unexpected column it ignores,
a warn-only delta check that flags most rows) writes wrong data while nothing fails. The input's shape changed at
its producer: data_quality, named after the producer and the new column, once the warnings stand out from the
producer's own earlier runs or the other producers'.
"""

from __future__ import annotations

import re
from collections import defaultdict

from diagnosis.analyzers._common import Rec, fmt_ts, log_records, ref_of, service_of, with_aliases
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs.data import _producer_named
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

# a column or field the consumer did not expect and skips
_NEW_COLUMN = re.compile(
    r"\b(?:unexpected|unknown|unrecognized|unrecognised|unmapped|new|extra|additional) "
    r"(?:column|field|attribute|property|header|key)s?:? [\"'`]?(?P<col>[A-Za-z_][\w.]*)",
    re.I,
)
# a check that flagged rows as changed, out of range or suspicious, with how many and (where said) by how much
_FLAGGED = re.compile(
    r"(?P<n>\d+) (?:rows?|records?|items?|prices?|values?) (?:changed|flagged|out of (?:range|bounds)|"
    r"suspicious|anomalous|outliers?|deviat\w*)",
    re.I,
)
_RATIO = re.compile(r"\b(?:median |mean |avg |average )?(?:ratio|factor)[=: ]+(?P<r>\d+(?:\.\d+)?)", re.I)
SCALE_JUMP = 10.0  # values ten times (or a tenth of) what they were: a unit change (cents for euros), not drift
FLAGGED_JUMP = 20  # flagged rows this many times the usual count of the same check


def _key(rec: Rec) -> str:
    return _producer_named(rec.msg) or service_of(rec.item) or rec.item.object


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def input_drift(evidence: EvidenceSet) -> list[Finding]:
    columns: dict[str, list[tuple[Rec, str]]] = defaultdict(list)
    flagged: dict[str, list[tuple[Rec, int, float | None]]] = defaultdict(list)
    for rec in log_records(evidence):
        if rec.level not in ("warn", "error"):
            # the usual count of a check is read from its info lines too
            if rec.level == "info" and (m := _FLAGGED.search(rec.msg)):
                r = _RATIO.search(rec.msg)
                flagged[_key(rec)].append((rec, int(m["n"]), float(r["r"]) if r else None))
            continue
        if m := _NEW_COLUMN.search(rec.msg):
            columns[_key(rec)].append((rec, m["col"]))
        if m := _FLAGGED.search(rec.msg):
            r = _RATIO.search(rec.msg)
            flagged[_key(rec)].append((rec, int(m["n"]), float(r["r"]) if r else None))
    usual = sorted(n for runs in flagged.values() for _, n, _ in runs)
    typical = usual[len(usual) // 2] if usual else 0
    out: list[Finding] = []
    for producer, runs in flagged.items():
        jumps = [
            (rec, n, ratio)
            for rec, n, ratio in runs
            if rec.level in ("warn", "error")
            and (
                (ratio is not None and (ratio >= SCALE_JUMP or 0 < ratio <= 1 / SCALE_JUMP))
                or (n >= 100 and n >= FLAGGED_JUMP * max(typical, 1))
            )
        ]
        if not jumps:
            continue
        rec, n, ratio = jumps[0]
        new_cols = columns.get(producer, [])
        col = new_cols[0][1] if new_cols else None
        consumer = service_of(rec.item) or rec.item.object
        first = min((r.ts for r, *_ in jumps + [(c, 0, None) for c, _ in new_cols] if r.ts is not None), default=None)
        said = f"{n} rows" + (f" (ratio {ratio:g})" if ratio is not None else "")
        refs = [ref_of(rec)] + ([ref_of(new_cols[0][0])] if new_cols else [])
        mechanism = (
            f"from {fmt_ts(first)} the input from {producer} changed shape: "
            + (f"it carries a new column '{col}' that {consumer} ignores, and " if col else "")
            + f"{consumer}'s check flags {said} against {typical} usually ('{rec.msg.strip()[:160]}'), yet it loads "
            "them: the data is wrong while nothing fails."
        )
        out.append(
            Finding(
                analyzer="input_drift",
                domain=Domain.LOGS,
                role="cause",
                code="input_drift",
                category=Category.DATA_QUALITY,
                title=f"input from {producer} changed"
                + (f": new column '{col}'" if col else "")
                + f", {n} rows flagged and loaded",
                mechanism=mechanism,
                object=f"input from {producer}",
                score=0.75 if col else 0.65,
                ts=first,
                tags=[f"service:{consumer}", f"producer:{producer}"],
                explains=["metric_shift", "metric_anomaly", "errors", "latency", "throughput_drop", "step_change"],
                evidence=refs,
                actions=[
                    Action(
                        description=f"Compare the newest input from {producer} with the last good one "
                        "(header and a few rows)",
                        command=f"diff <(head -3 <last good {producer} file>) <(head -3 <newest {producer} file>)",
                    ),
                    Action(
                        description=f"Stop loading {producer}'s input until it is fixed or mapped, and reload the "
                        "last good one",
                        command=f"# pause the {consumer} job for {producer}; re-run it on the last good file",
                        kind="write",
                    ),
                ],
            )
        )
    return with_aliases(out)
