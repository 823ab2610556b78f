"""Query results an operator pasted (`table` items): a value that broke away from its own history.

Data engineers check a pipeline with queries like "rows per partition for the last five days" or "average feature
value per region and day". When one partition, source or key holds 0 rows, a rate of 0, a sentinel (999, -1), a
count a hundred times its usual, or a sudden run of nulls or rejects, while its own earlier rows were steady and
the other keys at the same date look as usual, the data itself changed: an empty, duplicated, reformatted or
truncated load. That is `data_quality`, named by the relation, the key and the column, whatever broke downstream.

What is not read as a data fault: operational columns (latency, errors, CPU, lag, bytes, waits), which are
symptoms other analyzers read; a break that every key shows at the same date (a holiday, an outage, a planned
change); columns whose history is itself noisy (order totals, per-row amounts); and identifiers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from statistics import median
from typing import Any

from diagnosis.analyzers.base import ANALYZERS
from diagnosis.evidence import EvidenceSet
from diagnosis.formats._time import parse_ts
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

_DATE_NAME = re.compile(r"date|day|\bdt\b|^d$|as_of|asof|partition|_at$|^ts$|time|period|week|month|hour|valid_from|"
                        r"load(?:ed)?_on|run_on|snapshot", re.I)  # fmt: skip
_DATE_VALUE = re.compile(
    r"^(?:19|20)\d{2}-?(?:0[1-9]|1[0-2])-?[0-3]\d(?:[ T]\d{2}:\d{2}.*)?$|^\d{4}-W\d{2}$|^\d{4}-\d{2}$"
)
_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?%?$")
_ID_NAME = re.compile(r"(?:^|_)(?:id|uuid|number|num|no|version|ver|code|year|rank|seq|offset|pid)$|^#$", re.I)
# operational measures: symptoms other analyzers read, not the data's own content
_OPS_NAME = re.compile(
    r"error|fail|5xx|4xx|latenc|duration|elapsed|_ms$|_sec|seconds|p50|p9\d|timeout|retr|lag|wait|cpu|mem|bytes|"
    r"_gb$|_mb$|size|slot|queue|conn|thread|load_time|runtime|"
    # capacity and its use (credits, quotas, remaining headroom): a resource spent, not the data gone wrong
    r"credit|quota|remaining|available|free|used|usage|limit|capacity|headroom|balance",
    re.I,
)
# counts that are zero when the data is sound: a sudden run of them is a data fault
_FAULT_COUNT = re.compile(
    r"null|reject|invalid|bad_|dup|orphan|missing|unmatched|mismatch|malformed|quarantin|unparse|without|"
    r"unknown|blank|empty|unmapped|failed_parse|parse_fail|future|stale|skew|out_of_range|truncat",
    re.I,
)
JUMP = 20.0  # a value this many times its key's usual (or this fraction of it) broke away
TIGHT, TIGHT_JUMP = 1.25, 4.0  # a history this tight (max / min) breaks at this jump
STEADY = 4.0  # the key's other rows span at most this ratio (max / min) to count as its usual
FAULT_MIN = 100  # a fault count from a history of zeros
MAX_HISTORY = 400  # rows of one key a table is judged on
FAULT_SHARE_MIN = 5.0  # a fault share (percent) where every other key holds none
_SHARE_NAME = re.compile(r"pct|percent|share|ratio|rate\b|_frac", re.I)


def _num(text: Any) -> float | None:
    s = str(text).strip()
    if not _NUMBER.match(s):
        return None
    return float(s.replace(",", "").rstrip("%"))


def _is_date(text: str) -> bool:
    return bool(_DATE_VALUE.match(text.strip()))


def _columns(rows: list[dict[str, str]]) -> tuple[str | None, list[str], list[str]]:
    """The date column, the measure columns and the key columns of a result table."""
    cols = list(rows[0])
    n = len(rows)

    def share(col: str, test: Any) -> float:
        vals = [r.get(col, "") for r in rows if r.get(col, "").strip() not in ("", "NULL", "null")]
        return sum(1 for v in vals if test(v)) / len(vals) if vals else 0.0

    dated = {c: share(c, _is_date) for c in cols}
    date = next((c for c in cols if dated[c] == 1 or (dated[c] >= 0.8 and _DATE_NAME.search(c))), None)
    measures = [
        c for c in cols if c != date and not _ID_NAME.search(c) and share(c, lambda v: _num(v) is not None) >= 0.8
    ]
    keys = [
        c
        for c in cols
        if c not in measures
        and c != date
        and not _ID_NAME.search(c)
        and len({r.get(c, "") for r in rows}) < n
        and all(len(r.get(c, "")) <= 40 for r in rows)
    ]
    return date, measures, keys


def _broke(value: float, earlier: list[float], others: list[float], col: str) -> float | None:
    """The usual value `value` broke away from, or None when it did not (or there is no steady usual). `earlier`:
    the key's rows before this one; `others`: all its other rows. A break needs history before it; a fault count
    (nulls, rejects, unparsed) breaks only upwards, from a history of zeros."""
    if not earlier or len(others) < 2:
        return None
    if _FAULT_COUNT.search(col):
        usual = median(earlier)
        return usual if value >= FAULT_MIN and value >= 100 * max(usual, 0.01) else None
    if _OPS_NAME.search(col) or any(o <= 0 for o in others) or max(others) / min(others) > STEADY:
        return None
    usual = median(others)
    # the steadier the key's history, the smaller the jump that breaks it: rows within a quarter of each other
    # make four times their level a break
    jump = TIGHT_JUMP if max(others) / min(others) <= TIGHT else JUMP
    if value < 0 or value == 0 or value / usual >= jump or value / usual <= 1 / jump:
        return usual
    return None


def _break(
    key: tuple[str, ...], col: str, value: float, usual: float, others: list[float], date: str, row: int
) -> dict[str, Any]:
    return {"key": key, "col": col, "value": value, "usual": usual, "others": others, "date": date, "row": row}


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) and abs(v) >= 1000 else f"{v:g}"


def _breaks(item: EvidenceItem) -> list[dict[str, Any]]:
    rows: list[dict[str, str]] = item.data.get("rows") or []
    if len(rows) < 3:
        return []
    date, measures, keys = _columns(rows)
    if date is None:
        labels = [c for c in rows[0] if c not in measures and all(len(r.get(c, "")) <= 40 for r in rows)]
        return _outliers(rows, measures, labels)
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)  # key -> its rows' indexes, in table order
    for at, row in enumerate(rows):
        groups[tuple(row.get(k, "") for k in keys)].append(at)
    found: list[dict[str, Any]] = []
    for key, members in groups.items():
        if len(members) < 3:
            continue
        members = members[-MAX_HISTORY:]  # a long export is judged on its recent rows (each row against the others)
        for col in measures:
            values = [_num(rows[at].get(col, "")) for at in members]
            shifted = False
            for i, v in enumerate(values):
                if v is None:
                    continue
                others = [o for j, o in enumerate(values) if j != i and o is not None]
                earlier = [o for o in values[:i] if o is not None]
                usual = _broke(v, earlier, others, col)
                if usual is None and not shifted and len(earlier) >= 2:
                    # a level that moved and stayed: judged against the steady rows before it alone
                    usual = _broke(v, earlier, earlier, col)
                    shifted = usual is not None
                    others = earlier if shifted else others
                if usual is not None:
                    at = members[i]
                    found.append(_break(key, col, v, usual, others, rows[at].get(date, ""), at))
    found += _switches(rows, date, keys)
    if len(groups) > 1:
        # a break every key shows at the same date is the calendar's or the platform's, not one source's data
        by_date: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for b in found:
            by_date[b["date"]].add(b["key"])
        found = [b for b in found if len(by_date[b["date"]]) < len(groups)]
    return found


# columns that say in what terms the data is given: a change of one is a change of meaning, not of value
_TERMS_NAME = re.compile(
    r"currency|unit|uom|timezone|\btz\b|_tz$|encoding|charset|format|base|scale|precision|locale|delimiter|"
    r"separator|decimal",
    re.I,
)


def _switches(rows: list[dict[str, str]], date: str, keys: list[str]) -> list[dict[str, Any]]:
    """A column of terms (currency, unit, time zone, encoding) that held one value on 3+ dates and another from a
    date on, one row per date: the source changed what its numbers mean."""
    days = [r.get(date, "") for r in rows]
    if len(set(days)) != len(days):
        return []  # several rows a date: the column is a dimension of the table, not a property of each load
    order = sorted(range(len(rows)), key=lambda i: re.sub(r"\D", "", days[i]))
    out: list[dict[str, Any]] = []
    for col in keys:
        if not _TERMS_NAME.search(col):
            continue
        values = [rows[i].get(col, "") for i in order]
        first = values[0]
        cut = next((n for n, v in enumerate(values) if v != first), None)
        if cut is None or cut < 3 or len(set(values[cut:])) != 1 or cut < 2 * (len(values) - cut):
            continue
        at = order[cut]
        say = f"{col} changed from {first} to {values[cut]} on {days[at]} (after {cut} rows of {first})"
        out.append({**_break((), col, 0.0, 0.0, [0.0], days[at], at), "say": say})
    return out


def _outliers(rows: list[dict[str, str]], measures: list[str], keys: list[str]) -> list[dict[str, Any]]:
    """A table without dates: a fault count (nulls, rejects, unparsed) that a few keys hold by the hundred (a fault
    share by five percent and more) while every other key holds none."""
    found: list[dict[str, Any]] = []
    for col in measures:
        if not _FAULT_COUNT.search(col) or not keys:
            continue
        values = [_num(r.get(col, "")) for r in rows]
        least = FAULT_SHARE_MIN if _SHARE_NAME.search(col) else FAULT_MIN
        high = [i for i, v in enumerate(values) if v is not None and v >= least]
        rest = [v for i, v in enumerate(values) if i not in high and v is not None]
        if high and len(high) <= len(rows) // 3 and len(rest) >= 2 and all(v == 0 for v in rest):
            key = [tuple(rows[i].get(k, "") for k in keys) for i in high]
            found.extend(_break(key[n], col, values[i] or 0.0, 0.0, rest, "", i) for n, i in enumerate(high))
    return found


def _who(b: dict[str, Any]) -> str:
    return "/".join(v for v in b["key"] if v) or "its rows"


@ANALYZERS.analyzer(domain=Domain.DATABASE, reads={"table"})
def table_breaks(evidence: EvidenceSet) -> list[Finding]:
    """One finding per pasted result table where a key's value broke away from its own steady history."""
    findings: list[Finding] = []
    for item in evidence.kind("table"):
        breaks = _breaks(item)
        if not breaks:
            continue
        breaks.sort(key=lambda b: (re.sub(r"\D", "", b["date"])[:8] or "~", b["row"]))
        first = breaks[0]
        relation = item.data.get("relation") or item.object
        who = _who(first)
        lines = [
            b.get("say")
            or f"{_who(b)} {b['col']} = {_fmt(b['value'])}"
            + (f" on {b['date']}" if b["date"] else "")
            + f" ({'its' if b['date'] else 'the'} other rows: {_fmt(min(b['others']))}-{_fmt(max(b['others']))})"
            for b in breaks[:4]
        ]
        mechanism = (
            f"the query results pasted in {item.source} ({relation}) show {'; '.join(lines)}"
            + (f" and {len(breaks) - 4} more" if len(breaks) > 4 else "")
            + ", while the rest of the table stayed as usual: the data itself changed (an empty, duplicated, "
            "truncated or reformatted load from its source), not the code that reads it."
        )
        findings.append(
            Finding(
                analyzer="table_breaks",
                domain=Domain.DATABASE,
                role="cause",
                code="data_break",
                category=Category.DATA_QUALITY,
                title=f"{relation}: "
                + (
                    first.get("say")
                    or f"{who} {first['col']} {_fmt(first['value'])}"
                    + (f" on {first['date']}" if first["date"] else "")
                    + f" (usually {_fmt(first['usual'])})"
                ),
                mechanism=mechanism,
                object=f"{relation} {who}".strip(),
                score=0.6 if len(breaks) == 1 else 0.66,
                ts=parse_ts(first["date"]) if _is_date(first["date"]) and len(first["date"]) != 8 else None,
                tags=[f"relation:{relation}", *(f"key:{v}" for v in first["key"] if v)],
                explains=["metric_shift", "metric_anomaly", "step_change", "throughput_drop", "errors", "alert:*"],
                evidence=[
                    EvidenceRef(item=item.id, field=f"rows.{b['row']}.{b['col']}", value=_fmt(b["value"]))
                    for b in breaks[:6]
                ],
                actions=[
                    Action(
                        description=f"Look at the source rows behind {who}'s {first['col']}"
                        + (
                            f" on {first['date']} next to the day before"
                            if first["date"]
                            else " next to the other keys'"
                        )
                        + " (counts, nulls, formats) before re-running anything downstream",
                        command=item.data.get("query") or f"-- the query behind {item.source}",
                    ),
                    Action(
                        description="Fix or reload the bad partition from its source, then re-run what consumed it",
                        command=f"-- reload {relation} for {first['date'] or who} from its source",
                        kind="write",
                    ),
                ],
            )
        )
    return findings
