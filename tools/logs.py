"""Pattern search over log files inside the configured roots, within a time window."""

from __future__ import annotations

import gzip
import re
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import IO

from pydantic import Field

from core.types import ToolResult, ToolStatus
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, finding

_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}:\d{2}:\d{2})")
# whole words only: "libgpg-error0" in a package list is not an error
DEFAULT_PATTERN = r"(?i)(?<![\w-])(error|errors|exception|fatal|panic|timeout|timed out|refused|denied|oom)(?![\w-])"
_MAX_FILES = 200
_MAX_BYTES_PER_FILE = 64 * 2**20


class LogSearchArgs(ToolArgs):
    path: str = Field(min_length=1, max_length=1024, description="A file or folder inside OPSGRAPH_LOG_ROOTS.")
    pattern: str = Field(
        DEFAULT_PATTERN,
        max_length=512,
        description="Regular expression to count; empty means the default (error words).",
    )
    since_minutes: float = Field(60, gt=0, le=60 * 24 * 31, description="Only lines newer than this.")
    max_samples: int = Field(5, ge=0, le=50)


def _line_time(line: str, now: datetime) -> float | None:
    m = _ISO.search(line[:64])
    if m:
        try:
            return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}").timestamp()
        except ValueError:
            return None
    m = _SYSLOG.match(line)
    if m:
        try:
            dt = datetime.strptime(f"{now.year} {m.group(1)} {m.group(2)} {m.group(3)}", "%Y %b %d %H:%M:%S")
        except ValueError:
            return None
        return dt.timestamp()
    return None


def resolve_inside(path: str, roots: list[Path]) -> Path | None:
    """The real path if it lies inside one of the roots (symlinks resolved), else None."""
    real = Path(path).expanduser().resolve()
    for root in roots:
        r = root.expanduser().resolve()
        if real == r or r in real.parents:
            return real
    return None


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", errors="replace")
    return path.open("r", errors="replace")


@CATALOG.tool(args=LogSearchArgs, timeout_s=120, cost_hint_s=1.0)
def log_search(args: LogSearchArgs, ctx: ToolContext) -> ToolResult:
    """Count lines matching a pattern in log files under a path, newer than a time window; with samples.

    Lines without a timestamp take the time of the last stamped line above them (stack traces).
    """
    target = resolve_inside(args.path, ctx.settings.log_roots)
    if target is None:
        roots = ", ".join(str(r) for r in ctx.settings.log_roots)
        return ToolResult(
            status=ToolStatus.ERROR,
            summary=f"{args.path} is outside the log roots ({roots}); set OPSGRAPH_LOG_ROOTS to read it",
            data={"error_code": "target_not_allowed"},
        )
    if not target.exists():
        return ToolResult(status=ToolStatus.NO_DATA, summary=f"{target} does not exist", data={"path": str(target)})
    try:
        regex = re.compile(args.pattern or DEFAULT_PATTERN)
    except re.error as exc:
        return ToolResult(status=ToolStatus.ERROR, summary=f"invalid pattern {args.pattern!r}: {exc}")
    now = datetime.now()
    since = time.time() - args.since_minutes * 60
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    files = [f for f in files if f.stat().st_mtime >= since][:_MAX_FILES]
    per_file: Counter[str] = Counter()
    terms: Counter[str] = Counter()
    samples: list[str] = []
    scanned = 0
    for f in files:
        if ctx.is_cancelled():
            break
        try:
            with _open(f) as fh:
                last_ts: float | None = None
                read = 0
                for line in fh:
                    read += len(line)
                    if read > _MAX_BYTES_PER_FILE:
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
                    per_file[str(f)] += 1
                    terms[m.group(0).lower()] += 1
                    if len(samples) < args.max_samples:
                        samples.append(f"{f.name}: {line.strip()[:300]}")
        except (OSError, UnicodeError):
            continue
    total = sum(per_file.values())
    window = f"last {args.since_minutes:g} min"
    summary = f"{total} line(s) match in {len(per_file)} of {len(files)} file(s) under {target} ({window})"
    severity = "ok" if total == 0 else ("warn" if total < 100 else "critical")
    top_terms = ", ".join(f"{t} x{n}" for t, n in terms.most_common(5))
    return ToolResult(
        status=ToolStatus.SUCCESS if files else ToolStatus.NO_DATA,
        summary=summary,
        data={
            "path": str(target),
            "matches": total,
            "files_scanned": len(files),
            "lines_scanned": scanned,
            "per_file": dict(per_file.most_common(20)),
            "terms": dict(terms.most_common(10)),
            "samples": samples,
            "findings": [finding(severity, summary + (f": {top_terms}" if top_terms else ""))],
        },
        evidence=samples,
    )
