"""Timestamps as exports write them, to epoch seconds (UTC when a zone is not given)."""

from __future__ import annotations

import calendar
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

# 2024-06-12T14:03:01.123456789Z, 2024-06-12 14:03:01+00 (PostgreSQL), 2024-06-12T14:03:01+05:30, 2024/06/12 14:03:01,
# ClickHouse's 2024.06.12 14:03:01.118220, MariaDB's space-padded hour (2024-06-12  3:04:05), Airflow's UI
# (2024-09-03, 05:09:40 UTC)
ISO_RE = re.compile(
    r"(?P<y>\d{4})(?P<sep>[-/.])(?P<mo>\d{2})(?P=sep)(?P<d>\d{2})"
    r"(?:(?:T|,? {1,2}|\t)(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d{1,9}))?)?)?"
    r"(?:\s?(?P<tz>Z|z|UTC|[+-]\d{2}(?::?\d{2})?)(?![\d:]))?"
)
MONTHS = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}
# Apache/nginx common log format: 10/Oct/2000:13:55:36 -0700; HAProxy's 10/Oct/2000:13:55:36.123 (no zone)
CLF_RE = re.compile(
    r"(?P<d>\d{2})/(?P<mon>[A-Z][a-z]{2})/(?P<y>\d{4}):(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?: (?P<tz>[+-]\d{4})|\.(?P<f>\d{3})\])"
)
# RFC 3164 syslog: Jun 12 14:03:01 (no year)
SYSLOG_RE = re.compile(
    r"(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?"
)
# klog header: E0612 14:03:01.123456 (no year)
# klog's "I0612 14:03:01.123456", and CockroachDB's with the year before the month ("W230714 03:12:09.803417")
KLOG_RE = re.compile(
    r"(?P<lvl>[IWEF])(?P<yy>\d{2})?(?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<f>\d{6})"
)

# .NET's JSON date (PowerShell ConvertTo-Json): /Date(1735787045123)/; en-US culture's 1/2/2025 3:04:05 PM
# (PowerShell Export-Csv, Windows tools): month first, as that culture writes it
NET_DATE_RE = re.compile(r"/Date\((?P<ms>-?\d+)(?P<tz>[+-]\d{4})?\)/")
US_RE = re.compile(
    # the Azure portal's and Excel's "11/27/2024, 2:28:19.139 PM" (milliseconds kept)
    r"(?P<mo>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4}),? (?P<h>\d{1,2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?"
    r"(?: ?(?P<ap>[AP]M))?$"
)

_EPOCH_MIN, _EPOCH_MAX = 946684800, 4102444800  # 2000..2100: a bare number outside is not a timestamp


def _tz_offset(tz: str | None) -> int:
    if not tz or tz in ("Z", "z", "UTC"):
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4]) if len(digits) >= 4 else 0
    return sign * (hours * 3600 + minutes * 60)


def _epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None, offset: int) -> float | None:
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59 and s <= 60):
        return None
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    return secs + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _fromiso(text: str) -> float | None:
    """The fast path: datetime's C parser (Python 3.11 reads Z, +00, fractions of any length)."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def iso_match(m: re.Match[str]) -> float | None:
    text = m.group(0)
    if text[4] == "-" and text[-1:] != " ":
        fast = _fromiso(text)
        if fast is not None:
            return fast
    g = m.groupdict()
    return _epoch(
        int(g["y"]), int(g["mo"]), int(g["d"]), int(g["h"] or 0), int(g["mi"] or 0), int(g["s"] or 0),
        g["f"], _tz_offset(g["tz"]),
    )  # fmt: skip


def year_for(month: int, now: float | None = None) -> int:
    """The year of a timestamp written without one (syslog, klog): this year, or last year if that is ahead."""
    t = time.gmtime(now if now is not None else time.time())
    return t.tm_year - 1 if month > t.tm_mon + 1 else t.tm_year


def syslog_match(m: re.Match[str], year: int | None = None) -> float | None:
    mo = MONTHS.get(m["mon"])
    if mo is None:
        return None
    y = year if year is not None else year_for(mo)
    return _epoch(y, mo, int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"], 0)


def klog_match(m: re.Match[str], year: int | None = None) -> float | None:
    mo = int(m["mo"])
    y = 2000 + int(m["yy"]) if m["yy"] else year if year is not None else year_for(mo)
    return _epoch(y, mo, int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"], 0)


def clf_match(m: re.Match[str]) -> float | None:
    mo = MONTHS.get(m["mon"])
    if mo is None:
        return None
    return _epoch(int(m["y"]), mo, int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"], _tz_offset(m["tz"]))


def parse_ts(value: Any) -> float | None:
    """Any timestamp a JSON or CSV export carries -> epoch seconds; None when unset or not a time.

    Numbers are epoch seconds, or milliseconds / microseconds / nanoseconds when too large to be seconds.
    Go's zero time ("0001-01-01T00:00:00Z", Alertmanager's unset endsAt) is None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _number_ts(float(value))
    if isinstance(value, dict) and "$date" in value:  # MongoDB extended JSON: {"$date": "..."} or {"$numberLong"}
        inner = value["$date"]
        return parse_ts(inner.get("$numberLong") if isinstance(inner, dict) else inner)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or text.startswith("0001-01-01"):
        return None
    if len(text) >= 10 and text[4] == "-" and text[7] == "-":
        fast = _fromiso(text)
        if fast is not None:
            return fast
    if text[0].isdigit() and text.replace(".", "", 1).isdigit():
        return _number_ts(float(text))
    m = ISO_RE.match(text)
    if m and m.end() >= 10:
        return iso_match(m)
    m = CLF_RE.match(text)
    if m:
        return clf_match(m)
    m = SYSLOG_RE.match(text)
    if m:
        return syslog_match(m)
    m = NET_DATE_RE.fullmatch(text)
    if m:
        return _number_ts(float(m["ms"]) / 1000) if m["ms"] != "0" else None
    m = US_RE.match(text)
    if m:
        h = int(m["h"]) % 12 + (12 if m["ap"] == "PM" else 0) if m["ap"] else int(m["h"])
        return _epoch(int(m["y"]), int(m["mo"]), int(m["d"]), h, int(m["mi"]), int(m["s"]), m["f"], 0)
    return None


def _number_ts(v: float) -> float | None:
    if not math.isfinite(v) or v <= 0:
        return None
    for scale in (1, 1e3, 1e6, 1e9):
        if _EPOCH_MIN <= v / scale <= _EPOCH_MAX:
            return v / scale
    return None
