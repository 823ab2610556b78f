"""New Relic NRQL query results, as NerdGraph returns them (`{"data": {"actor": {"account": {<alias>: {"nrql":
"SELECT ...", "results": [...]}}}}}`, one or several aliased queries; also `account.nrql` unaliased).

- A `TIMESERIES` query (rows with beginTimeSeconds/endTimeSeconds) -> one `metric` item per numeric column and
  facet, named after the column (`p99`, `throughput`, `error %`), labelled with the query's `appName` and the
  facet; a percentile's `{"99": 0.09}` is its one number.
- A `FACET` query over errors (rows naming `error.class` / `error.message` and a count) -> one `log` item per
  application (`newrelic/<appName>`), one error record per row ("TypeError: Cannot read ... (5214x, in
  WebTransaction/...)") dated at the query's UNTIL, so the analyzers read what failed and how often.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext, get_path, metric_object
from diagnosis.model import EvidenceItem

_APP = re.compile(r"appName\s*=\s*'([^']+)'", re.I)
_UNTIL = re.compile(r"\bUNTIL\s+'([^']+)'", re.I)
_TIME_KEYS = {"beginTimeSeconds", "endTimeSeconds", "facet", "timestamp"}


def _queries(v: Any) -> list[tuple[str, dict[str, Any]]]:
    account = get_path(v, "data", "actor", "account")
    if not isinstance(account, dict):
        return []
    out = []
    for alias, block in account.items():
        if alias == "nrql" and isinstance(block, dict) and isinstance(block.get("results"), list):
            out.append(("nrql", block))
        elif isinstance(block, dict) and isinstance(block.get("results"), list) and "nrql" in block:
            out.append((alias, block))
    return out


def detect(doc: Document) -> bool:
    return bool(_queries(doc.value))


def _number(v: Any) -> float | None:
    if isinstance(v, dict) and len(v) == 1:  # percentile(duration, 99) -> {"99": 0.09}
        v = next(iter(v.values()))
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _facet(row: dict[str, Any]) -> str | None:
    f = row.get("facet")
    if isinstance(f, list):
        return ", ".join(map(str, f))
    return str(f) if f is not None else None


@FORMATS.format("newrelic-nrql", shapes={"json"}, detect=detect, order=30)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    for alias, block in _queries(doc.value):
        query = str(block.get("nrql") or "")
        app = m.group(1) if (m := _APP.search(query)) else None
        until = parse_ts(m.group(1)) if (m := _UNTIL.search(query)) else None
        rows = [r for r in block["results"] if isinstance(r, dict)]
        if rows and all("beginTimeSeconds" in r for r in rows):
            yield from _series(doc, ctx, alias, app, rows)
        elif any("error.class" in r or "error.message" in r for r in rows):
            yield from _errors(doc, ctx, alias, app, rows, until)


def _series(
    doc: Document, ctx: ParseContext, alias: str, app: str | None, rows: list[dict[str, Any]]
) -> Iterator[EvidenceItem]:
    series: dict[tuple[str, str | None], list[list[float]]] = {}
    for r in rows:
        ts = _number(r.get("endTimeSeconds")) or _number(r.get("beginTimeSeconds"))
        if ts is None:
            continue
        for k, v in r.items():
            if k in _TIME_KEYS or (value := _number(v)) is None:
                continue
            series.setdefault((k, _facet(r)), []).append([ts, value])
    for (name, facet), points in series.items():
        labels = {k: v for k, v in (("appName", app), ("facet", facet), ("query", alias)) if v}
        points.sort()
        item = {"name": name, "labels": labels, "unit": None, "points": points, "source": "newrelic"}
        yield ctx.item(doc.path, "metric", metric_object(name, labels), item, points[-1][0] if points else None)


def _errors(
    doc: Document, ctx: ParseContext, alias: str, app: str | None, rows: list[dict[str, Any]], until: float | None
) -> Iterator[EvidenceItem]:
    records = []
    for n, r in enumerate(rows, 1):
        cls, msg = r.get("error.class"), r.get("error.message")
        count = next((c for k, v in r.items() if k.startswith("count") and (c := _number(v)) is not None), None)
        where = r.get("transactionName") or r.get("name")
        text = ": ".join(str(x) for x in (cls, msg) if x) or str(_facet(r) or "")
        extra = ", ".join(
            x for x in (f"{int(count)}x" if count is not None else "", f"in {where}" if where else "") if x
        )
        records.append({"ts": until, "level": "error", "msg": f"{text} ({extra})" if extra else text, "line": n})
    data = {"records": records, "source": {"path": doc.path, "export": "newrelic", "query": alias, "service": app},
            "truncated": False}  # fmt: skip
    yield ctx.item(doc.path, "log", f"newrelic/{app or alias}", data, until)
