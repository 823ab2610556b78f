"""Bad data that loads anyway: a consumer that warns about its input and goes on (an unexpected column it ignores,
a warn-only delta check that flags most rows) writes wrong data while nothing fails. The input's shape changed at
its producer: data_quality, named after the producer and the new column, once the warnings stand out from the
producer's own earlier runs or the other producers'.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from diagnosis.analyzers._common import (
    Rec,
    claimed_elsewhere,
    fmt_ts,
    records_with,
    ref_of,
    service_of,
    span_text,
    with_aliases,
)
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.logs.data import _DATA_FILE, _input_file, _producer_named
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, Finding

# a column or field the consumer did not expect and skips
_NEW_COLUMN = re.compile(
    r"\b(?:unexpected|unknown|unrecognized|unrecognised|unmapped|new|extra|additional) "
    r"(?:column|field|attribute|property|header|key)s?:? [\"'`]?(?P<col>[A-Za-z_][\w.]*)",
    re.I,
)
# a check that flagged rows as changed, out of range or suspicious, with how many and (where said) by how much; or
# a loader's count of the warnings its load raised (MySQL LOAD DATA "Warnings: N", "N warnings during load")
_FLAGGED = re.compile(
    r"(?P<n>\d+) (?:rows?|records?|items?|prices?|values?) (?:changed|flagged|out of (?:range|bounds)|"
    r"suspicious|anomalous|outliers?|deviat\w*)|"
    r"(?P<w>\d+) warnings? (?:during|in|while|on) (?:the )?(?:load|import|ingest|copy|parse)|\bWarnings: (?P<w2>\d+)",
    re.I,
)
# values of a column the database cut or clamped to fit (MySQL 1265/1264 under a lenient sql_mode)
_BAD_COLUMN = re.compile(
    r"(?:Data truncated|Out of range value|Incorrect \w+ value)\b[^'\"`]{0,40}column [\"'`](?P<col>\w+)", re.I
)
# a value the consumer did not find and replaced with a default ("unit_price missing or empty, using 0.00"), and the
# count of such warnings it suppressed ("4807 more 'unit_price missing' warnings suppressed")
_DEFAULTED = re.compile(
    r"[\s:'\"`](?P<col>[A-Za-z_][\w.]*)['\"`]? (?:is )?(?:missing|empty|absent|not found|null)"
    r"(?: or (?:empty|null|missing))?[,;:]? "
    r"(?:using|defaulting to|default(?:ed)? to|set to|assuming|treated as|replaced (?:with|by))\b|"
    r"(?P<n>\d+) more ['\"`]?(?P<col2>[A-Za-z_][\w.]*) (?:missing|empty|absent|not found)['\"`]? warnings?",
    re.I,
)
_DEFAULTED_HINTS = ("missing", "empty", "absent", "not found", "null", "MISSING", "EMPTY")
DEFAULTED_MIN = 100  # rows loaded with a default for one column: the column is gone from the input, not a few gaps
_RATIO = re.compile(r"\b(?:median |mean |avg |average )?(?:ratio|factor)[=: ]+(?P<r>\d+(?:\.\d+)?)", re.I)
_HINTS = ("row", "record", "item", "value", "price", "arning", "column", "field", "attribute", "propert", "header",
          "key")  # fmt: skip
SCALE_JUMP = 10.0  # values ten times (or a tenth of) what they were: a unit change (cents for euros), not drift
FLAGGED_JUMP = 20  # flagged rows this many times the usual count of the same check
RUN_WINDOW_S = 600.0  # a job run's lines: what it named at its start speaks for its later lines


def _count(m: re.Match[str]) -> int:
    return int(m["n"] or m["w"] or m["w2"])


# a templated unit's instance names the input it imports: systemd's supplier-import@acme-supply.service
_UNIT_INSTANCE = re.compile(r"\b[\w-]+@(?P<v>[\w.-]+?)\.(?:service|timer)\b")


def _named(msg: str) -> str | None:
    if named := _producer_named(msg):
        return named
    m = _UNIT_INSTANCE.search(msg)
    return m["v"] if m else None


def _key(rec: Rec, runs: dict[str, list[tuple[float, str]]]) -> str:
    """Whose input a line speaks of: the producer it names, or the one the same run named just before it (a loader
    logs `source=payvia` when it starts and the warnings when it ends), else the consumer itself. `runs` caches each
    source's dated producer mentions, read once."""
    named = _named(rec.msg)
    if named:
        return named
    if rec.ts is not None:
        if rec.item.id not in runs:
            runs[rec.item.id] = [
                (float(r["ts"]), p)
                for r in rec.item.data.get("records") or ()
                if isinstance(r.get("ts"), int | float) and (p := _named(str(r.get("msg") or "")))
            ]
        before = [p for ts, p in runs[rec.item.id] if rec.ts - RUN_WINDOW_S <= ts <= rec.ts]
        if before:
            return before[-1]
    return service_of(rec.item) or rec.item.object


def _file_of(rec: Rec, producer: str) -> str:
    """The file of this producer the run picked up before the line (', reading <file>'), else ''."""
    for r in reversed(rec.item.data.get("records") or ()):
        ts, msg = r.get("ts"), str(r.get("msg") or "")
        if isinstance(ts, int | float) and rec.ts is not None and rec.ts - RUN_WINDOW_S <= ts <= rec.ts:
            low = msg.lower()
            named = producer.lower() in low or producer.split("-")[0].lower() in low
            if named and (m := _DATA_FILE.search(msg)):
                return f", reading {m.group(1)}"
    return ""


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def input_drift(evidence: EvidenceSet) -> list[Finding]:
    columns: dict[str, list[tuple[Rec, str, bool]]] = defaultdict(list)  # (line, column, new rather than mangled)
    flagged: dict[str, list[tuple[Rec, int, float | None]]] = defaultdict(list)
    defaulted: dict[str, list[tuple[Rec, str, int]]] = defaultdict(list)  # (line, column, rows it speaks for)
    mentions: dict[str, list[tuple[float, str]]] = {}
    for rec in records_with(evidence, _HINTS):
        if rec.level not in ("warn", "error"):
            # the usual count of a check is read from its info lines too
            if rec.level == "info" and (m := _FLAGGED.search(rec.msg)):
                r = _RATIO.search(rec.msg)
                flagged[_key(rec, mentions)].append((rec, _count(m), float(r["r"]) if r else None))
            continue
        if any(w in rec.msg for w in _DEFAULTED_HINTS) and (m := _DEFAULTED.search(rec.msg)):
            defaulted[_key(rec, mentions)].append((rec, m["col"] or m["col2"], int(m["n"]) if m["n"] else 1))
        if m := _NEW_COLUMN.search(rec.msg):
            columns[_key(rec, mentions)].append((rec, m["col"], True))
        elif m := _BAD_COLUMN.search(rec.msg):
            columns[_key(rec, mentions)].append((rec, m["col"], False))
        if m := _FLAGGED.search(rec.msg):
            r = _RATIO.search(rec.msg)
            flagged[_key(rec, mentions)].append((rec, _count(m), float(r["r"]) if r else None))
    everyone = [n for runs in flagged.values() for _, n, _ in runs]
    out: list[Finding] = [f for producer, lines in defaulted.items() if (f := _defaulted(producer, lines))]
    out += _unseen_values(evidence)
    for producer, runs in flagged.items():
        jumps = []
        for rec, n, ratio in runs:
            if rec.level not in ("warn", "error"):
                continue
            # the usual count: this producer's earlier runs, else every producer's
            before = sorted(x for r, x, _ in runs if r.ts is not None and rec.ts is not None and r.ts < rec.ts - 60)
            pool = before or sorted(everyone)
            typical = pool[len(pool) // 2] if pool else 0
            scaled = ratio is not None and (ratio >= SCALE_JUMP or 0 < ratio <= 1 / SCALE_JUMP)
            if scaled or (n >= 100 and n >= FLAGGED_JUMP * max(typical, 1)):
                jumps.append((rec, n, ratio, typical))
        if not jumps:
            continue
        rec, n, ratio, typical = jumps[0]
        # the column named in the same run as the jump (a trailer row's warning last week is not this change)
        cols = [
            c
            for c in columns.get(producer, [])
            if rec.ts is None or c[0].ts is None or c[0].ts >= rec.ts - RUN_WINDOW_S
        ]
        col, new = (cols[0][1], cols[0][2]) if cols else (None, False)
        consumer = service_of(rec.item) or rec.item.object
        first = min((r.ts for r in [j[0] for j in jumps] + [c[0] for c in cols] if r.ts is not None), default=None)
        said = f"{n}" + (f" (ratio {ratio:g})" if ratio is not None else "")
        refs = [ref_of(rec)] + ([ref_of(cols[0][0])] if cols else [])
        shape = (
            f"it carries a new column '{col}' that {consumer} ignores, and "
            if col and new
            else f"the values of its column '{col}' no longer fit and are cut, and "
            if col and cols[0][0] is rec
            else f"the values of its column '{col}' no longer fit and are cut ('{cols[0][0].msg.strip()[:120]}'), and "
            if col
            else ""
        )
        source = _file_of(rec, producer) or _input_file(rec.item, rec.ts)
        mechanism = (
            f"from {fmt_ts(first)} the input from {producer}{source} changed shape: {shape}{consumer} reports "
            f"{said} against {typical} usually ('{rec.msg.strip()[:160]}'), yet it loads it: the data is wrong "
            "while nothing fails."
        )
        out.append(
            Finding(
                analyzer="input_drift",
                domain=Domain.LOGS,
                role="cause",
                code="input_drift",
                category=Category.DATA_QUALITY,
                title=f"input from {producer} changed"
                + (f": {'new' if new else 'mangled'} column '{col}'" if col else "")
                + f", {n} flagged and loaded",
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


def _defaulted(producer: str, lines: list[tuple[Rec, str, int]]) -> Finding | None:
    """A column the consumer no longer finds in one producer's input and loads with a default, row after row: the
    producer renamed or dropped it, and every row now carries the default (prices of 0.00, empty categories)."""
    by_column: dict[str, list[tuple[Rec, int]]] = defaultdict(list)
    for rec, col, n in lines:
        by_column[col].append((rec, n))
    col, hits = max(by_column.items(), key=lambda kv: sum(n for _, n in kv[1]))
    rows = sum(n for _, n in hits)
    if rows < DEFAULTED_MIN:
        return None
    rec = hits[0][0]
    consumer = service_of(rec.item) or rec.item.object
    source = _file_of(rec, producer) or _input_file(rec.item, rec.ts)
    return Finding(
        analyzer="input_drift",
        domain=Domain.LOGS,
        role="cause",
        code="input_drift",
        category=Category.DATA_QUALITY,
        title=f"input from {producer} lost column '{col}': {rows} rows loaded with a default",
        mechanism=(
            f"from {fmt_ts(rec.ts)} the input from {producer}{source} no longer carries the column '{col}' (renamed "
            f"or dropped at the producer): {consumer} loads {rows} rows with a default in its place "
            f"('{rec.msg.strip()[:160]}'), so the data is wrong while nothing fails."
        ),
        object=f"input from {producer}",
        score=0.8,
        ts=rec.ts,
        tags=[f"service:{consumer}", f"producer:{producer}", f"column:{col}"],
        explains=[
            "metric_shift",
            "metric_anomaly",
            "errors",
            "exception",
            "latency",
            "throughput_drop",
            "step_change",
            "http_4xx",
            "http_5xx",
            "alert:*",
        ],
        evidence=[ref_of(r) for r, _ in hits[:2]],
        actions=[
            Action(
                description=f"Compare the header of {producer}'s newest input with the last good one",
                command=f"diff <(head -1 <last good {producer} file>) <(head -1 <newest {producer} file>)",
            ),
            Action(
                description=f"Map the new column or reload {producer}'s last good input, then re-run the import",
                command=f"# re-run the {consumer} import for {producer} on the last good file",
                kind="write",
            ),
        ],
    )


# an encoder or a model meeting category values it was never fitted on (scikit-learn's OneHotEncoder with
# handle_unknown="ignore", a label encoder, a feature store's validation): the producer changed the values
_UNSEEN = re.compile(
    r"Found unknown categories|unseen (?:labels?|categor\w+|values?)\b|previously unseen|"
    r"unknown categor(?:y|ies) (?:found|encountered|in column)",
    re.I,
)
UNSEEN_MIN = 3


def _unseen_values(evidence: EvidenceSet) -> list[Finding]:
    """Category values a fitted encoder or model never saw, met again and again in one consumer's run: the input's
    values changed (a producer renamed them), so those rows are scored on zeros while the job succeeds."""
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits = [
            Rec(item, r.get("ts"), str(r.get("msg") or ""), r.get("line"), r.get("level"))
            for r in item.data.get("records") or ()
            if "nknown categor" in str(r.get("msg") or "") or "nseen" in str(r.get("msg") or "")
        ]
        hits = [h for h in hits if _UNSEEN.search(h.msg)]
        if len(hits) < UNSEEN_MIN:
            continue
        consumer = service_of(item) or item.object
        first = min((h.ts for h in hits if h.ts is not None), default=None)
        out.append(
            Finding(
                analyzer="input_drift",
                domain=Domain.LOGS,
                role="cause",
                code="unseen_values",
                category=Category.DATA_QUALITY,
                title=f"{consumer} meets category values its encoder never saw ({len(hits)}x)",
                mechanism=(
                    f"{consumer} meets values of a categorical input that its fitted encoder or model never saw "
                    f"('{hits[0].msg.strip()[:160]}' x{len(hits)}): the producer changed the values (renamed or new "
                    "categories), so those rows are encoded as unknown (all zeros) and scored wrongly while the job "
                    "succeeds."
                ),
                object=f"input of {consumer}",
                score=0.75,
                ts=first,
                tags=[f"service:{consumer}"],
                explains=["metric_shift", "metric_anomaly", "step_change", "throughput_drop", "alert:*"],
                evidence=[ref_of(h) for h in hits[:2]],
                actions=[
                    Action(
                        description="Compare the input's category values today with those the encoder was fitted on",
                        command="SELECT <column>, count(*) FROM <input> WHERE <day> GROUP BY 1 ORDER BY 2 DESC",
                    )
                ],
            )
        )
    return out


# a loader printing the header (columns) of the input it reads: "header: region_code,rate,valid_from"
_HEADER = re.compile(
    r"\b(?:header|columns|fields|schema)\s*[:=]\s*\[?(?P<cols>[\"']?[A-Za-z_][\w.\"' ]*(?:\s*[,;|\t]\s*[\"']?[A-Za-z_]"
    r"[\w.\"' ]*){2,})",
    re.I,
)
HEADER_RUNS = 2  # earlier runs that read the same header: the layout it had


def _columns(text: str) -> tuple[str, ...]:
    return tuple(c.strip(" \"'[]") for c in re.split(r"\s*[,;|\t]\s*", text.strip()) if c.strip(" \"'[]"))


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def input_layout_changed(evidence: EvidenceSet) -> list[Finding]:
    """A loader that logs the header of each input it reads, whose newest header differs from the one its earlier
    runs read: the producer changed the input's layout (a renamed, added or dropped column), so a positional load
    puts values in the wrong columns or units while nothing fails."""
    runs: dict[tuple[str, str], list[tuple[Rec, tuple[str, ...]]]] = defaultdict(list)
    for rec in records_with(evidence, ("eader", "olumns", "ields", "chema")):
        m = _HEADER.search(rec.msg)
        if m and rec.ts is not None:
            runs[(rec.item.id, rec.msg[: m.start()].strip()[-60:])].append((rec, _columns(m["cols"])))
    out: list[Finding] = []
    for seen in runs.values():
        seen.sort(key=lambda x: x[0].ts or 0.0)
        *earlier, (rec, newest) = seen
        if len(earlier) < HEADER_RUNS or len({cols for _, cols in earlier}) != 1 or earlier[-1][1] == newest:
            continue
        old = earlier[-1][1]
        added = [c for c in newest if c not in old]
        gone = [c for c in old if c not in newest]
        consumer = service_of(rec.item) or rec.item.object
        change = (
            "; ".join(
                part
                for part in (
                    f"new column(s) {', '.join(added)}" if added else "",
                    f"no longer {', '.join(gone)}" if gone else "",
                )
                if part
            )
            or f"columns reordered ({', '.join(newest)})"
        )
        out.append(
            Finding(
                analyzer="input_drift",
                domain=Domain.LOGS,
                role="cause",
                code="input_layout_changed",
                category=Category.DATA_QUALITY,
                title=f"the input of {consumer} changed its layout: {change}",
                mechanism=(
                    f"{consumer} read the header ({', '.join(old)}) on {len(earlier)} earlier runs and "
                    f"({', '.join(newest)}) at {fmt_ts(rec.ts)}: {change}. The producer changed the input's layout "
                    "(a renamed column may carry other units), so a load by position or by the old names writes "
                    "wrong values while the job succeeds."
                ),
                object=f"input of {consumer}",
                score=0.75,
                ts=rec.ts,
                tags=[f"service:{consumer}", *(f"column:{c}" for c in added + gone)],
                explains=[
                    "metric_shift",
                    "metric_anomaly",
                    "step_change",
                    "errors",
                    "exception",
                    "http_5xx",
                    "bad_data",
                    "alert:*",
                ],
                evidence=[ref_of(earlier[-1][0]), ref_of(rec)],
                actions=[
                    Action(
                        description="Compare the newest input file's header and values with the previous one's",
                        command="head -3 <previous input> <newest input>",
                    )
                ],
            )
        )
    return with_aliases(out)


# a consumer that ignores columns it does not know (the list it logs), and values that are then missing downstream
_IGNORED_COLUMNS = re.compile(
    r"(?:(?P<who>[\w\-]+): )?(?:unexpected|unknown|unrecognized|unmapped|extra) (?:columns?|fields?)(?: ignored)?:? "
    r"\[?(?P<cols>[\"'`]?[A-Za-z_][\w.]*[\"'`]?(?:,\s*[\"'`]?[A-Za-z_][\w.]*[\"'`]?)*)\]?",
    re.I,
)
_NULL_FIELD = re.compile(
    r"Cannot return null for non-nullable field (?:\w+\.)?(?P<f1>\w+)|null value in column \"(?P<f2>\w+)\"|"
    r"NOT NULL constraint failed: \w+\.(?P<f3>\w+)|Column '(?P<f4>\w+)' cannot be null|"
    r"\b(?P<f5>[a-z_]+) (?:is|was) (?:null|None|missing) for\b",
)
NULLED_MIN = 3


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def ignored_columns_nulled(evidence: EvidenceSet) -> list[Finding]:
    """A producer's input whose columns the consumer ignored as unknown (a renamed `price` -> `unit_price`), after
    which the field they should have filled is missing where it is read (GraphQL "Cannot return null for
    non-nullable field Product.price", NOT NULL violations): the input's layout changed at the producer."""
    ignored: list[tuple[Rec, str, list[str]]] = []
    nulls: dict[str, list[Rec]] = defaultdict(list)
    for rec in records_with(evidence, ("olumn", "ield", "null", "None")):
        m = _IGNORED_COLUMNS.search(rec.msg)
        if m:
            cols = [c.strip(" \"'`") for c in m["cols"].split(",") if c.strip(" \"'`")]
            ignored.append((rec, m["who"] or service_of(rec.item) or rec.item.object, cols))
            continue
        n = _NULL_FIELD.search(rec.msg)
        if n:
            field = next(g for g in n.groups() if g)
            nulls[field.lower()].append(rec)
    out: list[Finding] = []
    for rec, producer, cols in ignored:
        for field, recs in nulls.items():
            related = [c for c in cols if field == c.lower() or field in c.lower().split("_")]
            after = [r for r in recs if r.ts is None or rec.ts is None or r.ts >= rec.ts]
            if not related or len(after) < NULLED_MIN:
                continue
            out.append(
                Finding(
                    analyzer="input_drift",
                    domain=Domain.LOGS,
                    role="cause",
                    code="input_columns_ignored",
                    category=Category.DATA_QUALITY,
                    title=f"input from {producer} changed: column(s) {', '.join(related)} ignored, {field} missing",
                    mechanism=(
                        f"the input from {producer} arrived with columns the loader does not know and ignored "
                        f"({', '.join(cols)}: '{rec.msg.strip()[:140]}'), so {field} was loaded empty: "
                        f"'{' '.join(after[0].msg.split())[:140]}' x{len(after)} since; the producer renamed or "
                        "reshaped its columns, and the rows it sent are wrong while the load succeeded."
                    ),
                    object=f"input from {producer}",
                    score=0.8,
                    ts=rec.ts,
                    tags=[
                        f"producer:{producer}",
                        *(f"column:{c}" for c in related),
                        f"field:{field}",
                        *{f"service:{s}" for r in after if (s := service_of(r.item))},
                    ],
                    explains=["errors", "exception", "http_5xx", "alert:*", "metric_shift", "log_errors"],
                    evidence=[ref_of(rec), ref_of(after[0])],
                    actions=[
                        Action(
                            description=f"Compare {producer}'s newest header with the columns the loader maps",
                            command=f"head -1 <newest {producer} file>",
                        )
                    ],
                )
            )
            break
    return with_aliases(out)


# records a validator rejected one by one, with why: "Record 16410 (src=LNS, ...) rejected: field :59: line 2
# contains characters outside SWIFT X character set", "row 218 rejected: invalid amount"
_REJECTED = re.compile(
    r"\b(?:record|row|line|message|item|payment|order|event|document|entry)s? [\w\-#:.]+(?: \([^)]{0,160}\))? "
    r"(?:was |were |is )?(?:rejected|refused|discarded|skipped|quarantined)\b[:,]?\s*(?P<why>.{5,200})",
    re.I,
)
_SOURCE_FIELD = re.compile(r"\b(?:src|source|source_system|producer|partner|supplier|sender|vendor)[=:]\s*([\w.\-]+)")
REJECTED_MIN = 10  # rejected records that are a bad batch, not a stray row


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def rejected_records(evidence: EvidenceSet) -> list[Finding]:
    """Many records rejected by a validator for what they contain (characters outside a character set, invalid
    values, missing fields), mostly from one source: that source sends bad data."""
    out: list[Finding] = []
    for item in evidence.kind("log"):
        hits: list[tuple[Rec, str]] = []
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if "eject" not in msg and "efuse" not in msg and "iscard" not in msg and "uarantin" not in msg:
                continue
            m = _REJECTED.search(msg)
            if m and not claimed_elsewhere(msg):
                hits.append((Rec(item, r.get("ts"), msg, r.get("line"), str(r.get("level") or "")), m["why"]))
        if len(hits) < REJECTED_MIN:
            continue
        sources = Counter(s.group(1) for rec, _ in hits if (s := _SOURCE_FIELD.search(rec.msg)))
        source, n = sources.most_common(1)[0] if sources else (None, 0)
        why = re.sub(r"\d+", "<n>", hits[0][1])[:120]
        consumer = service_of(item) or item.object
        from_one = source is not None and n >= 0.8 * len(hits)
        out.append(
            Finding(
                analyzer="input_drift",
                domain=Domain.LOGS,
                role="cause",
                code="records_rejected",
                category=Category.DATA_QUALITY,
                title=f"{consumer} rejected {len(hits)} records"
                + (f", {n} of them from {source}" if from_one else "")
                + f" ({why})",
                mechanism=(
                    f"{consumer} rejected {len(hits)} records for what they contain ('{hits[0][0].msg.strip()[:160]}')"
                    + (
                        f"; {n} of {len(hits)} came from {source}: that source sends data the validator does not "
                        "accept (a new source or a changed format)"
                        if from_one
                        else ": the input carries values the validator does not accept"
                    )
                    + "."
                ),
                object=f"input from {source}" if from_one else f"input of {consumer}",
                score=0.75 if from_one else 0.6,
                ts=min((h.ts for h, _ in hits if h.ts is not None), default=None),
                tags=[f"service:{consumer}", *([f"producer:{source}"] if source else [])],
                explains=["errors", "metric_shift", "alert:*", "job_failed", "step_change"],
                evidence=[ref_of(hits[0][0]), ref_of(hits[-1][0])],
                actions=[
                    Action(
                        description="Count the rejected records by source and reason",
                        command=f"grep -c rejected <{item.object}>",
                    )
                ],
            )
        )
    return with_aliases(out)


# records a store or a stream processor drops or refuses for their time stamp: Kafka Streams past its window's grace,
# Loki and Prometheus outside their accepted range. Many at once, beginning inside the evidence, say the producer's
# time stamps went wrong (seconds read as milliseconds, local time read as UTC, a device clock reset).
_STAMP_REFUSED = re.compile(
    r"Skipping record for expired window|Skipping record due to (?:negative|null|invalid) (?:extracted )?timestamp|"
    r"timestamp too (?:new|old)|entry too far behind|(?:is )?too far (?:in the future|behind)|"
    r"(?:sample|record|entry|point|event)s? (?:with )?(?:timestamp )?(?:is )?out of bounds|"
    r"outside (?:of )?the (?:allowed|accepted|ingest(?:ion)?) (?:time )?(?:window|range)",
    re.I,
)
STAMP_REFUSED_MIN = 10
STAMP_EARLY_SHARE = 0.2  # the first fifth of a log: the rate before, to tell a surge from the usual few
STAMP_SURGE = 5.0


def _surged(times: list[float], lo: float, hi: float) -> bool:
    """Whether refusals began, or rose five-fold, inside the log: the rate in its last half against its first fifth
    (a few late records are routine: devices coming out of a tunnel)."""
    if hi <= lo:
        return True
    early_end, late_start = lo + STAMP_EARLY_SHARE * (hi - lo), lo + 0.5 * (hi - lo)
    early = sum(t <= early_end for t in times) / (early_end - lo)
    late = sum(t >= late_start for t in times) / (hi - late_start)
    return late > 0 and late >= STAMP_SURGE * early


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"log"})
def stamps_refused(evidence: EvidenceSet) -> list[Finding]:
    """Many records dropped or refused for their time stamps, beginning inside the evidence: the data's times are
    wrong (their unit or zone), not the store or the processor that refuses them."""
    out: list[Finding] = []
    for item in evidence.kind("log"):
        recs = item.data.get("records") or ()
        hits = [
            Rec(item, r.get("ts"), msg, r.get("line"), None)
            for r in recs
            if (
                "imestamp" in (msg := str(r.get("msg") or "")) or "window" in msg or "too far" in msg or "bounds" in msg
            )
            and _STAMP_REFUSED.search(msg)
        ]
        if len(hits) < STAMP_REFUSED_MIN:
            continue
        stamps = [r.get("ts") for r in recs if isinstance(r.get("ts"), int | float)]
        first = min((h.ts for h in hits if h.ts is not None), default=None)
        if (
            stamps
            and first is not None
            and not _surged([h.ts for h in hits if h.ts is not None], min(stamps), max(stamps))
        ):
            continue  # refused at the same rate from the log's start: the evidence does not show it begin
        who = service_of(item) or item.object
        from diagnosis.analyzers.payloads import epoch_unit_split  # (payloads reads the release rules, which read logs)

        unit = epoch_unit_split(evidence)
        what = _STAMP_REFUSED.search(hits[0].msg)
        assert what is not None
        out.append(
            Finding(
                analyzer="stamps_refused",
                domain=Domain.LOGS,
                role="cause",
                code="timestamps_refused",
                category=Category.DATA_QUALITY,
                title=f"{who} drops {len(hits)} records for their time stamps ({what.group(0)})",
                mechanism=(
                    f"{who} drops or refuses {len(hits)} records for their time stamps ('{hits[0].msg.strip()[:200]}' "
                    f"x{len(hits)} {span_text(first, hits[-1].ts)}): the records carry times outside what it "
                    "accepts, so the data's times are wrong (seconds read as milliseconds, local time read as UTC, "
                    f"a device clock reset) from the producer that began sending them then{unit}."
                ),
                object=f"time stamps of the input of {who}",
                score=0.7,
                ts=first,
                tags=[f"service:{who}"],
                explains=["errors", "metric_shift", "alert:*", "step_change", "rate_limited", "http_4xx"],
                evidence=[ref_of(hits[0]), ref_of(hits[-1])],
                actions=[
                    Action(
                        description="Compare the records' own time stamps with the time they arrived (unit and zone)",
                        command="kcat -C -b <broker> -t <topic> -o -5 -e -f 'ts=%T %s\\n'  # or the raw lines sent",
                    )
                ],
            )
        )
    return with_aliases(out)
