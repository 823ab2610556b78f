"""Naming bad data: the error's class, the field, the input file or offset, and who produced it."""

from __future__ import annotations

import re

from diagnosis.analyzers.logs._shared import _DATA_CLASS, _OFFSET, BAD_DATA, EXCEPTION, SPORADIC
from diagnosis.model import EvidenceItem


def _data_error_name(msg: str) -> str:
    """What names the bad data: the innermost exception class whose text is a data error (Java's nested causes
    come last), else the phrase the data-error pattern matched."""
    for m in reversed(list(_DATA_CLASS.finditer(msg))):
        if BAD_DATA.search(m.group(1)) or BAD_DATA.search(msg, m.end(), m.end() + 120):
            return m.group(1).rsplit(".", 1)[-1]
    phrase = BAD_DATA.search(msg)
    return phrase.group(0) if phrase else "bad input"


_STREAM_WORDS = re.compile(r"partition|topic|consumer|kafka|kinesis|shard|stream|\w+-\d+@\d+", re.I)


def _stuck_offset(item: EvidenceItem) -> str:
    """A consumer that keeps re-reading one record (a poison message): the offset (and partition) its log names
    at least 3 times, as ", re-reading offset N of partition P (a poison message)"; else ""."""
    counts: dict[tuple[str, str], int] = {}
    for r in item.data.get("records") or ():
        msg = str(r.get("msg") or "")
        if not _STREAM_WORDS.search(msg):
            continue  # an offset into a file or a buffer ("envelope at offset 0"), not a consumer's position
        for m in _OFFSET.finditer(msg):
            off = m["off"] or m["off2"]
            key = (off, m["part"] or m["topic"] or "")
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    (off, part), n = max(counts.items(), key=lambda kv: kv[1])
    if n < SPORADIC or n < 0.5 * sum(counts.values()):
        return ""
    where = f" of partition {part}" if part else ""
    return f", re-reading offset {off}{where} {n}x (a poison message the consumer cannot skip)"


# a file name, not a namespace (System.Xml.XmlException) that happens to end in a data format's name
_DATA_FILE = re.compile(
    r"([\w.\-]+\.(?:csv|tsv|jsonl?|ndjson|xml|parquet|avro|orc|xlsx?|dat|edi|x12|hl7)(?:\.gz)?)\b(?!\.\w)", re.I
)
INPUT_WINDOW_S = 300.0  # the input a job picked up shortly before it failed on it


def _input_file(item: EvidenceItem, first_ts: float | None) -> str:
    """The data file the source names most around its first failure (an import or ETL job reading it), as
    ", reading <file>"; else ""."""
    counts: dict[str, int] = {}
    for r in item.data.get("records") or ():
        ts = r.get("ts")
        if first_ts is not None and isinstance(ts, int | float) and not (first_ts - INPUT_WINDOW_S <= ts <= first_ts):
            continue
        for m in _DATA_FILE.finditer(str(r.get("msg") or "")):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    if not counts:
        return ""
    return f", reading {max(counts.items(), key=lambda kv: kv[1])[0]}"


# the field or column a data error names: Elasticsearch "failed to parse field [price]", SQL 'column "country_code"',
# MySQL "Unknown column 'x'", Go "into Go struct field Reading.temp_c", pydantic "validation error for Order order_id"
_BAD_FIELD = re.compile(
    r"\bfield \[(?P<es>[\w.]+)\]|\bstruct field \w+\.(?P<go>\w+)|validation errors? for \w+\s+(?P<pyd>[a-z_][\w.]*)|"
    r"\b(?:column|field|property|attribute)\s+[\"'`](?P<q>[A-Za-z_][\w.]*)[\"'`]|"
    r"\b(?:column|field)\s+(?P<bare>[a-z][a-z0-9]*_[a-z0-9_]+)\b|"
    # System.Text.Json's and Jackson's path to the value it could not read ("Path: $.lines[0].unitPrice")
    r"\bPath: \$\.(?:[\w\[\]]+\.)*(?P<json>\w+)\b"
)


# PostgreSQL's detail of a unique violation: "Key (external_id)=(ACQ-0048812) is duplicated." / "already exists."
_DUP_KEY = re.compile(r"\bKey \((?P<col>[^)\n]{1,80})\)=\((?P<val>[^)\n]{1,80})\) (?:is duplicated|already exists)")


def _bad_field(msg: str) -> str:
    if (dup := _DUP_KEY.search(msg)) is not None:
        return f", key {dup['col']}={dup['val']} more than once"
    m = _BAD_FIELD.search(msg)
    name = next((g for g in m.groups() if g), None) if m else None
    return f", in field {name}" if name else ""


# who sent the data: a structured field on the error line (feed=, supplier=, carrier=, partner= ...) or, for a
# file, the host it was fetched from (sftp://sftp.nordcarrier.example/out/x.csv -> nordcarrier)
_PRODUCER_FIELD = re.compile(
    r"\b(?:feed|feed_source|feed_name|source|supplier|carrier|partner|producer|vendor|merchant|channel|provider)"
    r"[\"']?[=:]\s*[\"']?(?P<v>[A-Za-z][\w.\-]{1,40})"
)
_URL_HOST = re.compile(r"\b(?:s?ftps?|https?|s3|gs|az)://(?P<host>[\w.\-]+)")
_GENERIC_LABELS = frozenset(
    {"sftp", "ftp", "ftps", "www", "api", "files", "file", "data", "s3", "storage", "blob", "cdn", "dl", "download",
     "upload", "uploads", "feeds", "feed", "example", "com", "net", "org", "io", "internal", "local", "amazonaws",
     "core", "windows", "googleapis", "eu", "us"}
)  # fmt: skip


# a producer named by its code after the word, as .NET message templates render it ("Supplier HVL", "Partner ACME")
_PRODUCER_CODE = re.compile(r"\b(?:Supplier|Partner|Vendor|Carrier|Merchant)\s+(?P<v>[A-Z][A-Z0-9]{1,11})\b")


def _producer_named(text: str) -> str | None:
    """A producer field's value ('partner=northwind'), not a line of code that passes one ('partner=partner)')."""
    for m in _PRODUCER_FIELD.finditer(text):
        key = m.group(0).split("=", 1)[0].split(":", 1)[0].strip("\"'").lower()
        if m["v"].lower() != key and text[m.end() : m.end() + 1] not in (")", "("):
            return m["v"]
    m2 = _PRODUCER_CODE.search(text)
    return m2["v"] if m2 else None


def _producer(item: EvidenceItem, first_ts: float | None, msg: str) -> str:
    named = _producer_named(msg)
    if named is None:  # the lines around the failure that report the bad value often name whose it was
        named = next(
            (p for r in (item.data.get("records") or ())[:5000] if BAD_DATA.search(str(r.get("msg") or ""))
             and (p := _producer_named(str(r.get("msg") or "")))),
            None,
        )  # fmt: skip
    if named:
        return f", from {named}"
    files = {f.group(1) for f in _DATA_FILE.finditer(msg)}
    if not files:
        named = _input_file(item, first_ts)
        files = {named.removeprefix(", reading ")} if named else set()
    for r in item.data.get("records") or ():
        text = str(r.get("msg") or "")
        if any(f in text for f in files):
            host = _URL_HOST.search(text)
            if host:
                label = next((p for p in host["host"].split(".") if p.lower() not in _GENERIC_LABELS), None)
                if label:
                    return f", from {label}"
    return ""


def _around(msg: str, what: str, n: int = 160) -> str:
    """The part of a long message around `what`, so the quoted sample shows the data error itself."""
    flat = " ".join(msg.split())
    i = flat.find(what)
    if i < 0 or i + len(what) <= n - 1:
        return flat
    start = max(0, i - 40)
    return "…" + flat[start:]


def _short(s: str, n: int = 160) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _grep_word(msg: str) -> str:
    m = EXCEPTION.search(msg) or BAD_DATA.search(msg)
    word = m.group(0) if m else msg[:40]
    return "'" + word.replace("'", "") + "'"
