"""The format contract: a file is sniffed into a Document (its shape), then offered to the formats in order.

A format is two functions registered by decorator: `detect(doc) -> bool` says whether it recognises the
content (never the file name), `parse(doc, ctx)` returns the evidence items. A parser raises `FormatError`
for content it recognised but cannot read (a row that does not parse); the loader reports it per file.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from diagnosis.model import EvidenceItem

Shape = Literal["json", "jsonl", "csv", "text"]


class FormatError(ValueError):
    """Content a format recognised but could not read; the message says where and what."""


@dataclass
class Document:
    """One file of a bundle, sniffed. `value` is the parsed JSON (shape json); `text` the content otherwise."""

    path: str  # relative path inside the bundle, "/"-separated
    shape: Shape
    text: str = ""
    value: Any = None
    header: list[str] = field(default_factory=list)  # CSV column names, as written
    command: str = ""  # in a saved terminal session: the command that printed it ("docker logs shop-api")

    @property
    def stem(self) -> str:
        name = self.path.rsplit("/", 1)[-1]
        for suffix in (".gz", ".bz2", ".xz", ".zst"):
            name = name.removesuffix(suffix)
        return name.split(".", 1)[0]

    @property
    def folder(self) -> str:
        return self.path.rsplit("/", 1)[0] if "/" in self.path else ""

    def lines(self) -> Iterator[str]:
        return iter(self.text.splitlines())

    def rows(self) -> Iterator[dict[str, str]]:
        """CSV rows as {column: text}; a row with a different number of fields than the header is an error."""
        reader = csv.reader(io.StringIO(self.text), strict=True)
        try:
            header = next(reader)
            for row in reader:
                if not row or (len(row) < len(header) and _PASTE_NOTE.match(",".join(row))):
                    continue  # a note left where rows were cut from a paste ("[... 180 more rows ...]", "(3 rows)")
                if len(row) != len(header):
                    raise FormatError(
                        f"CSV line {reader.line_num}: {len(row)} fields where the header has {len(header)}"
                    )
                yield dict(zip(header, row, strict=True))
        except csv.Error as exc:
            raise FormatError(f"CSV line {reader.line_num}: {exc}") from exc


@dataclass
class ParseContext:
    """What a parse needs beyond its file: item ids, and state shared across the files of one bundle.

    `shared` holds what one file lends another (a CloudWatch request for its response); `deferred` runs after
    every file is read, for formats whose items depend on a file that may come later; `after` runs last, for
    fix-ups that need every item (the year of syslog lines, blockers worked out from pg_locks).
    """

    shared: dict[str, Any] = field(default_factory=dict)
    deferred: list[Callable[[ParseContext], Iterable[EvidenceItem]]] = field(default_factory=list)
    after: list[Callable[[ParseContext], None]] = field(default_factory=list)  # fix-ups once every item exists
    max_log_records: int = 1_000_000
    latest_dated_ts: float | None = None  # the newest timestamp that carried its year, for logs that leave it out
    _counters: dict[str, int] = field(default_factory=dict)

    def item(
        self, source: str, kind: str, obj: str, data: dict[str, Any], ts: float | None = None, *, dated: bool = True
    ) -> EvidenceItem:
        n = self._counters.get(source, 0) + 1
        self._counters[source] = n
        if dated and ts is not None and (self.latest_dated_ts is None or ts > self.latest_dated_ts):
            self.latest_dated_ts = ts
        # model_construct: the shapes are built here, and validating a copy of every pod would double the cost
        return EvidenceItem.model_construct(id=f"{source}#{n}", kind=kind, source=source, object=obj, ts=ts, data=data)


DetectFn = Callable[[Document], bool]
ParseFn = Callable[[Document, ParseContext], Iterable[EvidenceItem]]


@dataclass(frozen=True)
class Format:
    name: str
    shapes: frozenset[str]
    detect: DetectFn
    parse: ParseFn
    order: int  # lower is offered first: specific formats before the catch-all log format


@dataclass
class FormatRegistry:
    _formats: dict[str, Format] = field(default_factory=dict)

    def format(self, name: str, *, shapes: set[str], detect: DetectFn, order: int = 50) -> Callable[[ParseFn], ParseFn]:
        def register(fn: ParseFn) -> ParseFn:
            if name in self._formats:
                raise ValueError(f"format {name!r} registered twice")
            self._formats[name] = Format(name, frozenset(shapes), detect, fn, order)
            return fn

        return register

    def all(self) -> list[Format]:
        return sorted(self._formats.values(), key=lambda f: (f.order, f.name))

    def match(self, doc: Document) -> Format | None:
        for fmt in self.all():
            if doc.shape in fmt.shapes and fmt.detect(doc):
                return fmt
        return None


FORMATS = FormatRegistry()


class NotReadable(Exception):
    """A file that is not text (binary) or is malformed for the shape it claims; `ignored` says which list."""

    def __init__(self, message: str, *, ignored: bool) -> None:
        super().__init__(message)
        self.ignored = ignored


# a first line that can only begin JSON: "{", "[", '{"', "[{", "[[", "[]" - not "[2024-06-12 ...] ERROR"
_JSON_START = re.compile(r'\s*[\[{]\s*(?:$|["{\[\]}])')
_CSV_NAME = re.compile(r"^@?[A-Za-z_][A-Za-z0-9_.()\-]*$")  # psql column names: no spaces (Logs Insights': @message)
# quoted: also a Grafana legend ("checkout: p99") or a Prometheus series (`up{job="api"}`, `{pod="x"}`)
_CSV_QUOTED_NAME = re.compile(r"^(?:@?[A-Za-z_][\w .()\[\]\-/%#:@]{0,60}|[A-Za-z_:]?[\w:.\-]*\s*\{[^{}]{0,300}\})$")
_SNIFF_LINES = 20
# a header cell that names a time column, with its unit or zone: "timestamp [UTC]", "Date Time", "time (UTC)"
_CSV_TIME_NAME = re.compile(
    r"^(?:@?timestamp|time|date|datetime|date ?time|timegenerated)(?: ?[\[(][\w +:\-]{1,12}[\])])?$", re.I
)  # (Log Analytics' portal export: "TimeGenerated [UTC]")


_PASTE_NOTE = re.compile(r"^\s*(?:\[[^\]]*\]|\(\d+ rows?\)|\.{3}.*|….*)\s*$")


def sniff(path: str, raw: bytes) -> Document:
    """Decide a file's shape from its bytes. Raises NotReadable for binary or malformed content."""
    head = raw[:8192]
    if b"\x00" in head:
        raise NotReadable("binary file (NUL bytes): not an export opsgraph reads", ignored=True)
    text = raw.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    return sniff_text(path, text)


# a command that prints CSV (`psql --csv`, `mysql --batch`'s tabs aside, `aws ... --output csv`, `kubectl ... -o csv`)
_CSV_COMMAND = re.compile(r"--csv\b|--format[= ]csv\b|--output[= ]csv\b|-o csv\b|\bformat csv\b", re.I)


def sniff_text(path: str, text: str) -> Document:
    """The shape of decoded text (see sniff)."""
    # look at the start only: slicing or splitting the whole text would copy a large file
    head_text = text[:4096]
    start = len(head_text) - len(head_text.lstrip())
    if start == len(head_text):  # blank so far: measure the whole text (rare, and then short)
        start = len(text) - len(text.lstrip())
    if start >= len(text):
        raise NotReadable("empty file", ignored=True)
    end = text.find("\n", start)
    first = text[start : end if end >= 0 else len(text)].rstrip("\r")
    if text[start] in "{[" and not TERMINAL_PROMPT.match(first):  # "[ops@web-01 ~]$ aws ..." is a prompt
        try:
            return Document(path, "json", value=json.loads(text))
        except json.JSONDecodeError as exc:
            if _looks_jsonl(text):
                return Document(path, "jsonl", text=text)
            if end >= 0 and _is_json_object(first):
                # a log mixing JSON lines with plain text (a stack trace, a banner, another logger's lines):
                # read line by line, each JSON line as a record, not the whole file as malformed JSON
                return Document(path, "text", text=text)
            if _JSON_START.match(first) or first.startswith('{"'):
                raise NotReadable(
                    f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", ignored=False
                ) from None
    if _YAML_START.match(first) or (first.startswith(("#", "---")) and _YAML_START.search(text[:4096])):
        return _yaml_document(path, text)
    if _GCLOUD_YAML.search(text[:4096]) and (first.startswith("---") or _GCLOUD_PROMPT.search(first)):
        # `gcloud logging read` prints its entries as YAML documents (its default format), often pasted under the
        # command that made them
        body = text[end + 1 :] if _GCLOUD_PROMPT.search(first) else text
        nxt = _NEXT_PROMPT.search(body)  # the output ends where the next command of the paste begins
        return _yaml_document(path, body[: nxt.start()] if nxt else body, as_list=True)
    if (prompt := TERMINAL_PROMPT.match(first)) and _CSV_COMMAND.search(prompt["cmd"]) and end >= 0:
        # CSV printed under the command that made it (`psql --csv -f blocking.sql`), up to the next command
        body = text[end + 1 :]
        nxt = _NEXT_PROMPT.search(body)
        doc = sniff_text(path, body[: nxt.start()] if nxt else body)
        if doc.shape == "csv":
            doc.command = prompt["cmd"][:300]
            return doc
    if "," in first and not first.startswith(("#", "[", "{")):
        try:
            header = next(csv.reader([first]))
        except csv.Error:
            header = []
        # quoted names may hold spaces and units: "Date Time", "timestamp [UTC]", "Duration (ms)"
        names = _CSV_QUOTED_NAME if first.lstrip().startswith('"') else _CSV_NAME
        if not first.lstrip().startswith('"') and any(_CSV_TIME_NAME.match(h.strip()) for h in header):
            names = _CSV_QUOTED_NAME  # an export's unquoted header with spaces: "timestamp [UTC],itemType,message"
        if len(header) >= 2 and all(names.match(h.strip()) for h in header):
            return Document(path, "csv", text=text, header=[h.strip() for h in header])
    return Document(path, "text", text=text)


_YAML_START = re.compile(r"^(?:apiVersion|kind|items|metadata):", re.MULTILINE)
# a Cloud Logging entry in YAML: `insertId:` or `logName:` at the start of a line, after a `---`
_GCLOUD_YAML = re.compile(r"^---\s*\n(?:[\s\S]{0,2000}?)^(?:insertId|logName|receiveTimestamp):", re.MULTILINE)
_NEXT_PROMPT = re.compile(r"^(?:[\w.\-]+@[\w.\-]+[^\n]*?[$%#]|\$|PS [^\n>]*>)[ \t]+\S", re.MULTILINE)
_GCLOUD_PROMPT = re.compile(r"(?:^|[$%#>]\s*)gcloud\s+(?:beta\s+)?logging\s+read\b")


def _yaml_document(path: str, text: str, *, as_list: bool = False) -> Document:
    """`kubectl get -o yaml` (one document, or several separated by ---): read as the JSON kubectl would print.
    `as_list`: the documents as a JSON array (`gcloud logging read`'s entries, as `--format=json` prints them)."""
    import yaml  # only for the bundles that hold YAML

    try:
        docs = [d for d in yaml.load_all(text, Loader=_yaml_loader()) if d is not None]
    except yaml.YAMLError as exc:
        raise NotReadable(f"malformed YAML: {str(exc).splitlines()[0]}", ignored=False) from None
    if as_list:
        return Document(path, "json", value=docs)
    if len(docs) == 1:
        return Document(path, "json", value=docs[0])
    return Document(path, "json", value={"apiVersion": "v1", "kind": "List", "metadata": {}, "items": docs})


@functools.cache
def _yaml_loader() -> Any:
    """A safe loader that keeps timestamps as the strings JSON would carry (the parsers read them)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolvers = {
        first: [(tag, rx) for tag, rx in entries if tag != "tag:yaml.org,2002:timestamp"]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    return type("PlainTimeLoader", (base,), {"yaml_implicit_resolvers": resolvers})


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _looks_jsonl(text: str) -> bool:
    """JSON lines: most of the first lines are JSON objects (a stack trace between them is allowed)."""
    seen = ok = 0
    for line in text[:65536].splitlines():
        line = line.strip()
        if not line:
            continue
        seen += 1
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                ok += isinstance(json.loads(line), dict)
        if seen >= _SNIFF_LINES:
            break
    return seen > 0 and ok >= max(1, seen * 0.6) and (seen > 1 or ok == 1)


def describe_unknown(doc: Document) -> str:
    """The `ignored` reason for a file no format recognised: what it looked like."""
    if doc.shape == "json":
        v = doc.value
        if isinstance(v, dict):
            keys = ", ".join(sorted(map(str, v))[:8]) + (", ..." if len(v) > 8 else "")
            return f"JSON object with keys {keys}: no known format"
        if isinstance(v, list):
            inner = type(v[0]).__name__ if v else "nothing"
            if v and isinstance(v[0], dict):
                keys = ", ".join(sorted(map(str, v[0]))[:8])
                return f"JSON array of {len(v)} objects with keys {keys}: no known format"
            return f"JSON array of {len(v)} {inner} values: no known format"
        return f"JSON {type(v).__name__}: no known format"
    if doc.shape == "csv":
        cols = ", ".join(doc.header[:8]) + (", ..." if len(doc.header) > 8 else "")
        return f"CSV with columns {cols}: no known format"
    if doc.shape == "jsonl":
        return "JSON lines with no timestamps, levels or messages: no known format"
    return "plain text with no timestamps or log levels: no known format"


def get_path(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... or None where a step is missing."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def metric_object(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f"{k}={labels[k]}" for k in sorted(labels))
    return f"metric/{name}{{{inner}}}"


def metric_item(
    ctx: ParseContext,
    doc: Document,
    name: str,
    labels: dict[str, str],
    points: list[list[float]],
    source: str,
    unit: str = "",
) -> EvidenceItem:
    """One series as a `metric` item {name, labels, unit, points: [[ts, value]] oldest first, source}."""
    data = {"name": name, "labels": labels, "unit": unit, "points": points, "source": source}
    return ctx.item(doc.path, "metric", metric_object(name, labels), data, points[-1][0] if points else None)


# the host a terminal session ran on: its prompt ("ops@db-01:~$", "[root@db-1 ~]#") or an `ssh host` it typed
PROMPT_HOST = re.compile(r"^\s*\[?[\w.\-]+@(?P<host>[\w.\-]+)[\]:\s]", re.M)
_SSH_TO = re.compile(r"^\S*\$ ssh (?P<host>[\w.\-]+)\s*$", re.M)


def prompt_host(text: str) -> str | None:
    """The host a pasted terminal session ran on, from its prompt or the `ssh host` it opened with."""
    m = PROMPT_HOST.search(text) or _SSH_TO.search(text)
    return m["host"] if m else None


# A shell (or psql) prompt that starts a command's output in a saved terminal session: "$ df -h",
# "ops@bastion:~$ kubectl get pods", "[root@db-1 ~]# journalctl -u postgresql", "PS C:\\> Get-WinEvent",
# "PS /home/ops> az ...", "shop=> SELECT ...". A bare "# " or "> " (comments, quotes) counts only before a known
# command.
# (a cloud shell's prompt names its project: "sre@cloudshell:~ (shop-prod)$")
TERMINAL_PROMPT = re.compile(
    r"^(?:[\w.\-]+@[\w.\-]+(?::[^\s$#]*(?: \([\w.\-]+\))?)?[$#]|\[[\w.\-]+@[\w.\-]+[^\]]*\][$#]|\$"
    r"|PS (?:[A-Za-z]:\\|/)[^>]*>|\w+=[>#]"
    r"|[#>%] (?=(?:sudo |kubectl|oc|docker|systemctl|journalctl|psql|mysql|redis-cli|curl|dig|nslookup|df|free|top"
    r"|ps|ss|netstat|cat|tail|grep|aws|gcloud|az|helm|openssl|uptime|dmesg|ls|du|consul|nomad)\b))"
    r"\s*(?P<cmd>\S.*)$"
)


# a prompt with no command after it (the end of a pasted session): it prints nothing and ends the output above
_BARE_PROMPT = re.compile(
    r"^(?:[\w.\-]+@[\w.\-]+(?::[^\s$#]*(?: \([\w.\-]+\))?)?[$#]|\[[\w.\-]+@[\w.\-]+[^\]]*\][$#]|\$"
    r"|PS (?:[A-Za-z]:\\|/)[^>]*>)\s*$"
)


def without_bare_prompts(text: str) -> str:
    """The text with empty prompt lines blanked (kept as empty lines, so line numbers stay those of the file)."""
    if "$" not in text and "#" not in text and ">" not in text:
        return text
    return "\n".join("" if _BARE_PROMPT.match(line) else line for line in text.splitlines())


def terminal_segments(text: str) -> list[str] | None:
    """A saved terminal session cut into one text per command output (the prompt line first), each padded with
    blank lines so that line numbers stay those of the file; None when the text holds fewer than two prompts."""
    lines = without_bare_prompts(text).splitlines()
    starts = [i for i, line in enumerate(lines) if TERMINAL_PROMPT.match(line)]
    if len(starts) < 2:
        return None
    cuts = ([0] if starts[0] > 0 else []) + starts + [len(lines)]
    out = []
    for a, b in itertools.pairwise(cuts):
        body = lines[a:b]
        if not any(line.strip() for line in body[1:] if TERMINAL_PROMPT.match(body[0])) and a in starts:
            continue  # a command with no output
        first_output = a + 1 if a in starts else a
        rest = "\n".join(lines[first_output:b]).lstrip()
        if a in starts and rest[:1] in "{[" and _parses_as_json(rest):
            # JSON under its command (`kubectl get pods -o json`): the JSON alone, at its own line
            out.append("\n" * first_output + "\n".join(lines[first_output:b]))
        else:
            out.append("\n" * a + "\n".join(body))
    return out


def _parses_as_json(text: str) -> bool:
    """Whether text is one whole JSON value ("[2026-11-17 ...] INFO" is a log line, not an array; JSON lines are a
    log, whose command names its source)."""
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        # a truncated export is still JSON, reported as malformed: it fails only at its end
        return exc.pos >= len(text.rstrip()) - 1
    return not text[end:].strip()
