"""Pattern search over log files inside the configured roots, within a time window, grouped into templates.

Bounded on every side: every path met while walking is resolved (symlinks included) and refused outside the
roots; caller patterns run on RE2 (linear time, no catastrophic backtracking); files, bytes per file and the
whole call are capped; binary files are skipped; .gz, .xz, .zst and .bz2 files are read decompressed
(recognised by their magic bytes, not their names).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import re2
from pydantic import Field

from core.logging import redact
from core.types import ToolResult, ToolStatus
from diagnosis.analyzers._common import template_of as mask_variables
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding

_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}:\d{2}:\d{2})")
# RE2 has no look-behind: whole words are bounded by explicit non-word characters instead. The `term` group is
# what gets counted ("libgpg-error0" in a package list is not an error).
DEFAULT_PATTERN = (
    r"(?i)(?:^|[^\w-])(?P<term>errors?|exception|fatal|panic|timeout|timed out|refused|denied|oom|out of memory)"
    r"(?:[^\w-]|$)"
)
# a line's level, from the forms real loggers write: "ERROR", "[error]", "level=error", "\"level\":\"error\"",
# "E1123" (glog/klog), "<3>" (syslog priority)
_LEVEL = re.compile(
    r"(?i)(?:\blevel[\"']?\s*[:=]\s*[\"']?|\[|\b)(fatal|panic|crit(?:ical)?|emerg(?:ency)?|err(?:or)?|"
    r"warn(?:ing)?|info|notice|debug|trace)\b"
)
_GLOG = re.compile(r"^([EWIF])\d{4} \d{2}:\d{2}:\d{2}")
_LEVEL_NAMES = {
    "fatal": "fatal",
    "panic": "fatal",
    "crit": "fatal",
    "critical": "fatal",
    "emerg": "fatal",
    "emergency": "fatal",
    "err": "error",
    "error": "error",
    "warn": "warn",
    "warning": "warn",
    "info": "info",
    "notice": "info",
    "debug": "debug",
    "trace": "debug",
}
_GLOG_LEVELS = {"E": "error", "W": "warn", "I": "info", "F": "fatal"}

# Masks that turn a line into its template: the parts that vary between occurrences of one message.
_STRIP_PREFIX = re.compile(r"^\s*(?:<ts>|<n>)?[\s,|-]*")

_MAX_FILES = 200
_MAX_BYTES_PER_FILE = 64 * 2**20  # decompressed
_MAX_TEMPLATES = 200
_MAX_RECORDS = 300  # matched lines kept with their line numbers, for evidence
_BUDGET_S = 60.0  # the whole call; the tool's hard timeout is above it
_SNIFF = 8192


class LogSearchArgs(ToolArgs):
    path: str = Field(min_length=1, max_length=1024, description="A file or folder inside OPSGRAPH_LOG_ROOTS.")
    pattern: str = Field(
        DEFAULT_PATTERN,
        max_length=512,
        description="RE2 regular expression to count (no look-around or back-references); empty means the "
        "default (error words).",
    )
    since_minutes: float = Field(60, gt=0, le=60 * 24 * 31, description="Only lines newer than this.")
    max_samples: int = Field(5, ge=0, le=50)


class PatternError(ValueError):
    """A caller pattern RE2 cannot run."""


def compile_pattern(pattern: str) -> Any:
    """An RE2 regex (linear time whatever the input). Python-only syntax (look-around, back-references) is
    refused with RE2's reason rather than run on a backtracking engine."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 8 << 20
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"unsupported or invalid pattern `{pattern}`: {reason} (RE2 syntax)") from None


def _line_time(line: str, now: datetime) -> float | None:
    m = _ISO.search(line[:64])
    if m:
        try:
            dt = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{m.group(3) or ''}{m.group(4) or ''}")
        except ValueError:
            return None
        return dt.timestamp()
    m = _SYSLOG.match(line)
    if m:
        try:
            dt = datetime.strptime(f"{now.year} {m.group(1)} {m.group(2)} {m.group(3)}", "%Y %b %d %H:%M:%S")
        except ValueError:
            return None
        return dt.timestamp()
    return None


def line_level(line: str) -> str | None:
    """The log level a line states, lower-case (fatal, error, warn, info, debug), or None."""
    g = _GLOG.match(line)
    if g:
        return _GLOG_LEVELS[g.group(1)]
    m = _LEVEL.search(line[:200])
    return _LEVEL_NAMES[m.group(1).lower()] if m else None


def template_of(line: str) -> str:
    """The line with its variable parts masked (the analyzers' masking) and its leading stamp dropped: one
    template per kind of message."""
    return _STRIP_PREFIX.sub("", mask_variables(line[:400]))[:300]


def resolve_inside(path: str | Path, roots: list[Path]) -> Path | None:
    """The real path if it lies inside one of the roots (symlinks resolved), else None."""
    real = Path(path).expanduser().resolve()
    for root in roots:
        r = root.expanduser().resolve()
        if real == r or r in real.parents:
            return real
    return None


def walk_inside(top: Path, roots: list[Path], refused: list[dict[str, str]]) -> Iterator[Path]:
    """Every regular file under `top`, each path resolved; a link (or anything) leading outside the roots is
    refused and listed, never read. Each real folder and file is visited once (link loops end)."""
    seen: set[Path] = set()
    files: set[Path] = set()
    stack = [top]
    while stack:
        folder = stack.pop()
        if folder in seen:
            continue
        seen.add(folder)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            refused.append({"path": str(folder), "reason": f"unreadable: {exc.strerror}"})
            continue
        for entry in entries:
            real = resolve_inside(entry.path, roots)
            if real is None:
                refused.append({"path": entry.path, "reason": "resolves outside the log roots"})
                continue
            if real.is_dir():
                stack.append(real)
            elif real.is_file() and real not in files:
                files.add(real)
                yield real


def _open_text(path: Path) -> tuple[IO[str] | None, str]:
    """A text stream of the file's content (decompressed by its magic bytes), or None and why it is skipped."""
    with path.open("rb") as raw:
        magic = raw.read(6)
    opener: Any
    if magic[:2] == b"\x1f\x8b":
        opener, kind = gzip.open, "gzip"
    elif magic[:6] == b"\xfd7zXZ\x00":
        opener, kind = lzma.open, "xz"
    elif magic[:4] == b"\x28\xb5\x2f\xfd":
        opener, kind = _zstd_open, "zstd"
    elif magic[:3] == b"BZh":
        opener, kind = bz2.open, "bzip2"
    else:
        opener, kind = (lambda p: p.open("rb")), "plain"
    try:
        binary: IO[bytes] = opener(path)
        head = binary.read(_SNIFF)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        return None, f"unreadable {kind} data: {exc}"
    if _looks_binary(head):
        binary.close()
        return None, "binary" if kind == "plain" else f"binary content inside {kind}"
    stream = io.BufferedReader(_Prepended(head, binary))  # type: ignore[arg-type]
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), kind


def _zstd_open(path: Path) -> IO[bytes]:
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True)  # type: ignore[no-any-return]


def _looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 4:  # a multi-byte character cut by the sniff window
            return False
    # not UTF-8: text in a legacy encoding has few control characters; binary has many
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    return control > len(head) * 0.05


class _Prepended(io.RawIOBase):
    """Bytes already read (the sniffed head) followed by the rest of a stream."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._rest.close()
        super().close()


@dataclass
class _Template:
    template: str
    count: int = 0
    sample: str = ""
    file: str = ""
    line: int = 0
    level: str | None = None
    first_ts: float | None = None
    last_ts: float | None = None
    terms: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "count": self.count,
            "level": self.level,
            "sample": self.sample,
            "file": self.file,
            "line": self.line,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "terms": dict(self.terms.most_common(3)),
        }


@CATALOG.tool(args=LogSearchArgs, timeout_s=120, cost_hint_s=1.0)
def log_search(args: LogSearchArgs, ctx: ToolContext) -> ToolResult:
    """Count lines matching a pattern in log files under a path, newer than a time window; grouped into
    message templates with counts, levels and first/last times.

    Lines without a timestamp take the time of the last stamped line above them (stack traces).
    """
    roots = ctx.settings.log_roots
    target = resolve_inside(args.path, roots)
    if target is None:
        return ToolResult(
            status=ToolStatus.ERROR,
            summary=f"{args.path} is outside the log roots ({', '.join(map(str, roots))}); "
            "set OPSGRAPH_LOG_ROOTS to read it",
            data={"error_code": "target_not_allowed"},
        )
    if not target.exists():
        return ToolResult(status=ToolStatus.NO_DATA, summary=f"{target} does not exist", data={"path": str(target)})
    try:
        regex = compile_pattern(args.pattern or DEFAULT_PATTERN)
    except PatternError as exc:
        return ToolResult(status=ToolStatus.ERROR, summary=str(exc), data={"error_code": "invalid_pattern"})
    term_group = "term" if "term" in regex.groupindex else 0
    now = datetime.now()
    since = time.time() - args.since_minutes * 60
    deadline = time.monotonic() + _BUDGET_S
    refused: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    candidates = [target] if target.is_file() else list(walk_inside(target, roots, refused))
    files = [f for f in candidates if f.stat().st_mtime >= since][:_MAX_FILES]
    per_file: Counter[str] = Counter()
    terms: Counter[str] = Counter()
    levels: Counter[str] = Counter()  # levels of the matching lines
    templates: dict[str, _Template] = {}
    records: list[dict[str, Any]] = []
    samples: list[str] = []
    scanned = 0
    truncated = False
    for f in files:
        if ctx.is_cancelled() or time.monotonic() > deadline:
            truncated = True
            break
        try:
            stream, kind = _open_text(f)
        except OSError as exc:
            skipped.append({"path": str(f), "reason": f"unreadable: {exc.strerror}"})
            continue
        if stream is None:
            skipped.append({"path": str(f), "reason": kind})
            continue
        with stream:
            last_ts: float | None = None
            read = 0
            try:
                for lineno, line in enumerate(stream, start=1):
                    read += len(line)
                    if read > _MAX_BYTES_PER_FILE or (lineno % 4096 == 0 and time.monotonic() > deadline):
                        truncated = True
                        break
                    scanned += 1
                    ts = _line_time(line, now)
                    if ts is not None:
                        last_ts = ts
                    if last_ts is not None and last_ts < since:
                        continue
                    m = regex.search(line)
                    if not m:
                        continue
                    text = redact(line.rstrip("\n"))[:500]
                    term = (m.group(term_group) or m.group(0)).lower()
                    level = line_level(line)
                    per_file[str(f)] += 1
                    terms[term] += 1
                    levels[level or "none"] += 1
                    key = template_of(text)
                    tpl = templates.get(key)
                    if tpl is None and len(templates) < _MAX_TEMPLATES:
                        tpl = templates[key] = _Template(key, sample=text, file=str(f), line=lineno, level=level)
                    if tpl is not None:
                        tpl.count += 1
                        tpl.terms[term] += 1
                        if last_ts is not None:
                            tpl.first_ts = last_ts if tpl.first_ts is None else min(tpl.first_ts, last_ts)
                            tpl.last_ts = last_ts if tpl.last_ts is None else max(tpl.last_ts, last_ts)
                    if len(records) < _MAX_RECORDS:
                        records.append({"file": str(f), "line": lineno, "ts": last_ts, "level": level, "msg": text})
                    if len(samples) < args.max_samples:
                        samples.append(f"{f.name}:{lineno}: {text[:300]}")
            except (OSError, EOFError, lzma.LZMAError) as exc:
                skipped.append({"path": str(f), "reason": f"read failed after {read} bytes ({kind}): {exc}"})
    total = sum(per_file.values())
    ranked = sorted(templates.values(), key=lambda t: t.count, reverse=True)
    window = f"last {args.since_minutes:g} min"
    summary = f"{total} line(s) match in {len(per_file)} of {len(files)} file(s) under {target} ({window})"
    if ranked:
        summary += f"; {len(ranked)} kind(s) of message, most frequent x{ranked[0].count}: {ranked[0].template[:120]}"
    findings = [_finding_for(t) for t in ranked[:5]] or [finding("ok", summary)]
    for r in refused[:5]:
        findings.append(finding("warn", f"refused {r['path']}: {r['reason']}"))
    return ToolResult(
        status=ToolStatus.SUCCESS if files else ToolStatus.NO_DATA,
        summary=summary,
        data={
            "path": str(target),
            "pattern": args.pattern or DEFAULT_PATTERN,
            "since_minutes": args.since_minutes,
            "matches": total,
            "files_scanned": len(files),
            "lines_scanned": scanned,
            "per_file": dict(per_file.most_common(20)),
            "terms": dict(terms.most_common(10)),
            "levels": dict(levels),
            "errors": levels["error"] + levels["fatal"],  # lines whose own level says error, not keyword guesses
            "templates": [t.as_dict() for t in ranked[:50]],
            "records": records,
            "samples": samples,
            "skipped": skipped[:50],
            "refused": refused[:50],
            "truncated": truncated,
            "findings": findings,
        },
        evidence=[f"x{t.count} {t.level or '-'}: {t.sample[:200]}" for t in ranked[:5]],
    )


def _finding_for(t: _Template) -> dict[str, str]:
    # a line that says it is an error is one; a matched word on an info or debug line is noise until it repeats
    if t.level in ("error", "fatal"):
        severity = "critical" if t.count >= 100 else "warn"
    elif t.level in ("info", "debug"):
        severity = "warn" if t.count >= 10 else "ok"
    else:
        severity = "warn"
    return finding(severity, f"x{t.count} ({t.level or 'no level'}): {t.sample[:200]}")
