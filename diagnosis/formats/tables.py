"""Query results pasted from a SQL client, read as they are: one `table` item per result table.

Data engineers hand over what their client printed: boxed tables (`+----+` rules and `| a | b |` rows: the mysql
client, `bq query --format=pretty`, snowsql, trino, sqlite's `.mode box` in ASCII), DuckDB's and sqlite's unicode
boxes (`┌───┬───┐`, with DuckDB's row of column types under the header), and psql's aligned tables (`---+---` under
the header). The views other readers know (pg_stat_activity, pg_locks, innodb_trx) go to those readers first; this
one takes any other result table, with the query typed above it, when tables make up most of the file.

`table` item data: `columns` (as printed), `rows` ({column: text}), `query` (the SQL or command typed above the
table, when there is one), `relation` (the first table the query reads from, else ""). The item has no time of
its own: the dates are in its rows, and a query run after the incident does not move "now".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats.base import FORMATS, Document, FormatError, ParseContext
from diagnosis.formats.mysql import mysql_tables
from diagnosis.formats.postgres import psql_tables
from diagnosis.model import EvidenceItem

_UNICODE_BOX = str.maketrans({"┌": "+", "┬": "+", "┐": "+", "├": "+", "┼": "+", "┤": "+", "└": "+", "┴": "+",
                              "┘": "+", "─": "-", "│": "|", "╞": "+", "╪": "+", "╡": "+", "═": "-"})  # fmt: skip
_BOX_RULE = re.compile(r"^\s*\+(?:-+\+)+\s*$")
_PSQL_RULE = re.compile(r"^\s*-+(?:\+-+)+\s*$|^\s*-{3,}\s*$")
_ROW_COUNT = re.compile(r"^\s*\(?\d[\d,]* rows?(?: in set| selected| affected)?\b.*$", re.I)
_FROM = re.compile(r"\b(?:FROM|JOIN|INTO|TABLE)\s+[`\"\[]?([\w.\-`\"\]]+)", re.I)
MIN_SHARE = 0.4  # of the file's non-blank lines inside result tables


def _boxed(lines: list[str], i: int) -> int | None:
    """The end (exclusive) of a boxed table starting at line i, or None when none starts there."""
    if not (_BOX_RULE.match(lines[i]) and i + 2 < len(lines) and lines[i + 1].lstrip().startswith("|")):
        return None
    j = i + 1
    while j < len(lines) and (lines[j].lstrip().startswith("|") or _BOX_RULE.match(lines[j])):
        j += 1
    return j


def _aligned(lines: list[str], i: int) -> int | None:
    """The end (exclusive) of a psql aligned table whose header is line i, or None."""
    line = lines[i]
    if not (i + 1 < len(lines) and line.strip() and _PSQL_RULE.match(lines[i + 1]) and "|" in line):
        return None
    j = i + 2
    while j < len(lines) and lines[j].strip() and "|" in lines[j]:
        j += 1
    return j


def _cells(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k} for row in rows]


def result_tables(text: str) -> tuple[list[tuple[str, list[dict[str, str]]]], int]:
    """The result tables of a pasted client session, each with the query typed above it, and how many of the
    text's lines they cover."""
    lines = text.translate(_UNICODE_BOX).splitlines()
    out: list[tuple[str, list[dict[str, str]]]] = []
    covered = 0
    above: list[str] = []
    i = 0
    while i < len(lines):
        end = _boxed(lines, i)
        parse = mysql_tables
        if end is None:
            end = _aligned(lines, i)
            parse = psql_tables
        if end is None:
            line = lines[i].strip()
            if line and not _ROW_COUNT.match(line):
                above.append(line)
            elif _ROW_COUNT.match(line):
                covered += 1
            i += 1
            continue
        block = lines[i:end]
        if parse is mysql_tables and len(block) > 4 and _BOX_RULE.match(block[3]) and not _BOX_RULE.match(block[2]):
            block = [block[0], block[1], *block[3:]]  # DuckDB prints the column types under the header
        for rows in parse("\n".join(block)):
            if rows:
                out.append((" ".join(above)[-600:], _cells(rows)))
        covered += end - i
        above = []
        i = end
    return out, covered


# a line that starts with a log record's time stamp (klog's I1105 09:29:12, ISO 8601, syslog's Mar  3 10:00:01)
_LOGGED = re.compile(
    r"^\s*\[?(?:[IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)"
)
LOGGED_MIN = 10  # time-stamped lines that make a file a log that prints tables (Triton's model table), not tables


def _detect(doc: Document) -> bool:
    text = doc.text[:200_000]
    if "|" not in text and "│" not in text:
        return False
    tables, covered = result_tables(text)
    lines = [line for line in text.splitlines() if line.strip()]
    logged = sum(1 for line in lines if _LOGGED.match(line))
    if logged >= LOGGED_MIN and logged >= MIN_SHARE * (len(lines) - covered):
        return False
    return any(len(rows) >= 2 for _, rows in tables) and covered >= MIN_SHARE * len(lines)


def _relation(query: str) -> str:
    m = _FROM.search(query)
    return m[1].strip('`"[]').split(".")[-1].strip('`"[]') if m else ""


@FORMATS.format("query-tables", shapes={"text"}, detect=_detect, order=97)
def parse_tables(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    tables, _ = result_tables(doc.text)
    for query, rows in tables:
        relation = _relation(query)
        data: dict[str, Any] = {"columns": list(rows[0]), "rows": rows, "query": query, "relation": relation}
        yield ctx.item(doc.path, "table", relation or doc.stem, data)


MAX_CSV_ROWS = 5000


def _detect_csv(doc: Document) -> bool:
    try:
        return len(doc.header) >= 2 and sum(1 for _ in zip(range(3), doc.rows(), strict=False)) >= 3
    except FormatError:
        return False


@FORMATS.format("csv-table", shapes={"csv"}, detect=_detect_csv, order=96)
def parse_csv_table(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    rows = [row for _, row in zip(range(MAX_CSV_ROWS), doc.rows(), strict=False)]
    data: dict[str, Any] = {"columns": list(doc.header), "rows": rows, "query": "", "relation": doc.stem}
    yield ctx.item(doc.path, "table", doc.stem, data)
