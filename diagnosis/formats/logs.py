"""Log files: `kubectl logs` text under logs/<namespace>/<pod>[/<container>].log (the object comes from the
path), and any plain-text or JSON-lines log anywhere (the object is its path). One `log` item per file.

A record is {ts, level, msg, line}. Timestamps: RFC 3339 / ISO 8601 (ClickHouse's dotted date, MariaDB's padded
hour), syslog (with a priority), common log format, klog headers, epoch numbers, Redis, MySQL 5, PHP/Erlang, Apache,
and the RFC 3339 prefix `kubectl logs --timestamps` (or a CRI runtime file's, with its stream and tag) adds.
Levels come from JSON fields (level, severity, lvl, levelname, MongoDB's s; pino's numbers), logfmt `level=`, klog's
letter, an upper-case level word, a bracketed one ("[error]") or ClickHouse's <Error>, Redis's level character, a
syslog priority; an access log's HTTP status is not a level. docs/bundles.md lists the layouts. Indented
continuation lines (stack traces) join the record above.
"""

from __future__ import annotations

import calendar
import itertools
import json
import re
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import (
    CLF_RE,
    ISO_RE,
    KLOG_RE,
    MONTHS,
    SYSLOG_RE,
    clf_match,
    iso_match,
    klog_match,
    parse_ts,
    syslog_match,
    year_for,
)
from diagnosis.formats.base import FORMATS, TERMINAL_PROMPT, Document, FormatError, ParseContext
from diagnosis.model import EvidenceItem

KUBECTL_PATH = re.compile(
    r"(?:^|/)logs/(?P<ns>[^/]+)/(?P<pod>[^/]+?)(?:/(?P<container>[^/]+?))?\.log(?:\.gz|\.bz2|\.xz|\.zst)?$"
)
KUBECTL_TS_PREFIX = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})) ")
EPOCH_PREFIX = re.compile(r"(\d{10}(?:\.\d{1,9})?|\d{13})\b")
LEVEL_TOKEN = re.compile(
    r"\b(?:level|lvl|severity)=\"?(?P<kv>[A-Za-z]+)"
    r"|\[(?:[a-z_]+:)?(?P<br>[A-Za-z]{3,8})\]"
    r"|<(?P<ang>[A-Z][a-z]{3,10})>"  # ClickHouse: <Error>, <Warning>, <Information>
    r"|\b(?P<up>[A-Z]{3,8})\b"  # one of UPPER_LEVELS: a character class is cheaper than the alternation
)
UPPER_LEVELS = frozenset(
    ("FATAL", "PANIC", "CRITICAL", "CRIT", "EMERG", "ALERT", "SEVERE", "ERROR", "ERR", "WARNING", "WARN", "WRN",
     "NOTICE", "INFO", "INF", "DEBUG", "DBG", "TRACE", "FTL")
)  # fmt: skip
LEVELS = {
    "fatal": "fatal", "panic": "fatal", "critical": "fatal", "crit": "fatal", "emerg": "fatal",
    "emergency": "fatal", "alert": "fatal", "f": "fatal", "dpanic": "fatal",
    "error": "error", "err": "error", "severe": "error", "e": "error", "eror": "error",
    "warning": "warn", "warn": "warn", "w": "warn",
    "info": "info", "notice": "info", "information": "info", "i": "info", "ok": "info", "success": "info",
    "debug": "debug", "trace": "debug", "d": "debug", "verbose": "debug", "dbug": "debug",
    # MySQL's [Note] and [System], Serilog's three letters, .NET console's fail:/trce:
    "note": "info", "system": "info", "wrn": "warn", "inf": "info", "dbg": "debug", "vrb": "debug", "ftl": "fatal",
    "fail": "error", "trce": "debug",
}  # fmt: skip
PINO_LEVELS = {10: "debug", 20: "debug", 30: "info", 40: "warn", 50: "error", 60: "fatal"}
TS_KEYS = (
    "ts",
    "time",
    "timestamp",
    "@timestamp",
    "t",
    "date",
    "datetime",
    "asctime",
    "eventTime",
    "__REALTIME_TIMESTAMP",
    "@t",  # Serilog's compact JSON (CLEF)
    "Timestamp",  # .NET's JSON console formatter: Timestamp, LogLevel, Category, Message, Exception
)
LEVEL_KEYS = (
    "level",
    "severity",
    "lvl",
    "levelname",
    "loglevel",
    "log.level",
    "@l",
    "status",
    "s",
    "LogLevel",
)  # s: MongoDB
MSG_KEYS = ("msg", "message", "log", "@m", "@mt", "event", "text", "error", "err", "MESSAGE", "Message")
# what a structured logger puts beside the message when it logs an error: zap/zerolog `error`/`err`, pino and
# bunyan `err` ({type, message, stack}), ECS `error` ({message, type, stack_trace}), structlog `exception`,
# python-json-logger `exc_info`, logstash `stack_trace`. The message alone ("request failed") hides the cause.
ERROR_KEYS = (
    "error", "err", "exception", "exc_info", "stack", "stacktrace", "stack_trace", "error.message", "cause", "@x",
    # flattened as ECS writes them (and zap with dotted keys): "error.type", "error.reason"
    "error.type", "error.reason",
    "Exception",
    # the answer a failed call got, as a structured logger keeps it; the first failure of a batch call
    "response_body", "response_error", "first_failure",
)  # fmt: skip
# the HTTP status a failed call got, kept beside the message as `status=403`
_STATUS_KEYS = ("http_status", "status_code", "response_status", "http.status_code", "statusCode")
_ERROR_SUBKEYS = (
    "type", "kind", "name", "class", "code", "Code", "codeName", "message", "msg", "errmsg", "reason", "stack_trace",
    "stack", "stacktrace",
)  # fmt: skip
# journald (`journalctl -o json`): PRIORITY is the syslog severity, 0 emerg .. 7 debug
JOURNAL_PRIORITY = {
    "0": "fatal",
    "1": "fatal",
    "2": "fatal",
    "3": "error",
    "4": "warn",
    "5": "info",
    "6": "info",
    "7": "debug",
}
# logfmt (logrus, Go's slog text handler): time=2024-06-12T14:03:01Z level=error msg="..."
LOGFMT_TIME = re.compile(r"\b(?:time|ts|timestamp)=\"?(\d{4}-\d{2}-\d{2}[T ][0-9:.]+(?:Z|[+-]\d{2}:?\d{2})?)")
# dmesg: "[8126684.123456] msg" (seconds since boot: no wall-clock time, so ts is None), `dmesg -r`'s "<3>"
# syslog priority before it, and `dmesg -T`'s "[Mon Nov 23 19:02:11 2026] msg"
DMESG_RE = re.compile(r"(?:<(?P<pri>[0-7])>)?\[\s*(?P<up>\d+\.\d+)\]\s?")
DMESG_CTIME_RE = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<ctime>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?"
)
# day-month-year with the month's name: PHP ("[02-Dec-2025 08:12:00 UTC]"), Tomcat/Catalina ("02-Dec-2025
# 08:12:00.123"); Apache 2.4's error log ("[Tue Dec 02 08:12:00.123456 2025]")
DMY_RE = re.compile(
    r"(?P<d>\d{1,2})-(?P<mon>[A-Z][a-z]{2})-(?P<y>\d{4})(?: |::)(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d{1,6}))?"
    r"(?: (?:UTC|GMT))?"
)
# Boost.Log's default stamp (C++ services): "[2024-May-21 13:58:37.351930] <error>: ..."
YMON_RE = re.compile(
    r"(?P<y>\d{4})-(?P<mon>[A-Z][a-z]{2})-(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?"
)
_BOOST_LEVEL = re.compile(r"<(trace|debug|info|warning|error|fatal)>:?\s*")
APACHE_RE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) (?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<f>\d{1,6}))? (?P<y>\d{4})"
)
PHP_LEVEL = re.compile(r"\bPHP (Fatal error|Parse error|Warning|Notice|Deprecated|Recoverable fatal error)\b")
_PHP_LEVELS = {"Warning": "warn", "Notice": "info", "Deprecated": "info"}
CONTINUATION_STARTS = ("Caused by:", "... ", "[signal ", "goroutine ", "created by ")
# a Go stack frame's function line, printed at column 0 under a panic: `net/http.(*conn).serve.func1()`,
# `github.com/acme/svc/internal/quote.applyPromo(0xc000412f00, 0x0)`, `panic({0x91c2a0?, 0xdb7e30?})`
_GO_FRAME = re.compile(r"^(?:panic|[\w\-]+(?:[./][\w\-*()]+)+)\(.*\)$")
# a qualified exception class opening a line: "System.Threading.Tasks.TaskCanceledException: A task was canceled."
_EXCEPTION_HEAD = re.compile(r"(?:[A-Za-z_][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)(?: \(\w+\))?(?::\s|$)")
# what comes before the time on some lines: a syslog priority ("<11>", RFC 5424's "<11>1 "), PostgreSQL's
# `log_line_prefix = '< %m >'`, Ruby's Logger ("E, [2025-01-02T03:04:05.123456 #1234] ERROR -- : ..."),
# Erlang's error_logger ("=ERROR REPORT==== 2-Jan-2025::03:04:05.123456 ===")
LEAD_RE = re.compile(r"<(?P<pri>\d{1,3})>(?:1 )?|< |[DIWEFAU], (?=\[)|=(?P<erl>[A-Z]+) REPORT==== ")
# a level (and a [thread]) before the time: log4j's "%-5p [%t] %d" (Cassandra: "ERROR [main] 2025-01-02 ...")
LEAD_LEVEL_RE = re.compile(
    r"(?P<lvl>FATAL|ERROR|WARN|WARNING|INFO|DEBUG|TRACE)\s+(?:\[[^\]]{0,80}\]\s+)?(?=\d{4}-\d{2}-\d{2}[T ]\d)"
)
TORNADO_RE = re.compile(
    r"\[(?P<lvl>[DIWEC]) (?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<f>\d+))?(?P<tz>)? [\w.\-]+ [\w.\-]+:\d+\] "
)
_TORNADO_LEVELS = {"D": "debug", "I": "info", "W": "warn", "E": "error", "C": "fatal"}
# Microsoft.Extensions.Logging's console: "fail: Category[12]" with the message indented below it
DOTNET_RE = re.compile(r"(?P<lvl>fail|crit|warn|info|dbug|trce): ")
# Redis and Sentinel: "<pid>:<role> 14 Aug 2025 00:00:01.004 <level> msg", role M/S/C/X, level . - * #
REDIS_RE = re.compile(
    r"\d+:[MSCX] (?P<d>\d{1,2}) (?P<mon>[A-Z][a-z]{2}) (?P<y>\d{4}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<f>\d{1,6}))? (?P<lvl>[.\-*#]) "
)
REDIS_LEVELS = {".": "debug", "-": "debug", "*": "info", "#": "warn"}
# MySQL 5.x / MariaDB 10.0 error log: "250102  3:04:05 [ERROR] ..." (yymmdd, space-padded hour)
# a month-first date, as US-culture tools print it (NetApp ONTAP's event log, Windows exports): 3/9/2024 22:21:18,
# 11/27/2024, 2:28:19 PM; a first number over 12 is the day
SLASH_DATE_RE = re.compile(
    r"(?P<mo>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4}),? +(?P<h>\d{1,2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?"
    r"(?: ?(?P<ap>[AP]M))?\b"
)
YYMMDD_RE = re.compile(r"(?P<y>\d{2})(?P<mo>\d{2})(?P<d>\d{2}) {1,2}(?P<h>\d{1,2}):(?P<mi>\d{2}):(?P<s>\d{2})\b")
# SSSD's debug logs (sssd_<domain>.log, krb5_child.log): "(2024-02-19  7:58:14): [be[corp.example.com]] [fn]
# (0x0020): msg", since 2.x with microseconds; before, "(Mon Feb 19 07:58:14 2024) [sssd[be[corp]]] [fn] (0x0020):".
# The hex is the debug level the line was logged at: 0x0010 fatal, 0x0020 critical, 0x0040 an operation failed,
# 0x0080 a minor failure, higher is tracing.
SSSD_RE = re.compile(
    r"\((?:(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2}) +(?P<h>\d{1,2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,6}))?|"
    r"\w{3} (?P<mon>\w{3}) +(?P<d2>\d{1,2}) (?P<h2>\d{2}):(?P<mi2>\d{2}):(?P<s2>\d{2})(?:[:.]\d+)? (?P<y2>\d{4}))\):? "
    r"(?P<rest>(?:\[[^\]\s]*(?:\[[^\]]*\])*\]+ ){1,3}\((?P<lvl>0x[0-9a-fA-F]{4,5})\): .*)$"
)


def _sssd_level(hexlevel: str) -> str:
    n = int(hexlevel, 16)
    return "error" if n <= 0x0040 else "warn" if n == 0x0080 else "info" if n <= 0x0400 else "debug"


# MongoDB's text log before 4.4: "<time> E NETWORK  [conn12] ..." (a severity letter, a component)
MONGO_SEV_RE = re.compile(r"(?P<lvl>[FEWID])\d?\s+(?:[A-Z_]+|-)\s+\[")
# containerd/CRI-O files under /var/log/pods: "<time> stderr F msg"; P marks a line split by the runtime
CRI_TAG = re.compile(r"(?:stdout|stderr) (?P<tag>[FP]) ?")
# a level word after the padding some layouts put before it ("2025-...Z  WARN 1 --- [main]", tracing's
# "2025-...Z  INFO my_crate: ..."): a new record, not an indented stack-trace line
_PADDED_LEVEL = re.compile(r" {1,4}(?:FATAL|ERROR|WARN|WARNING|INFO|DEBUG|TRACE|NOTICE|CRITICAL)\b")
MAX_CONTINUATION = 4000  # characters a stack trace may add to its record
_SNIFF = 50


def normalise_level(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return PINO_LEVELS.get(int(value))
    if isinstance(value, dict):  # ECS: {"log": {"level": "error"}}
        return normalise_level(value.get("level"))
    return LEVELS.get(str(value).strip().lower())


# a program's own line relayed by another at INFO (Airflow's spark-submit and subprocess hooks, a CI runner): after
# the relay's level comes the program's own time and level, "INFO - 24/08/14 02:11:24 ERROR TaskSetManager: ..."
_RELAYED = re.compile(
    r"[\s:-]*\[?\d{2,4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+"
    r"(?P<lvl>ERROR|WARN|WARNING|FATAL|CRITICAL|SEVERE)\b"
)


# BIND's "<category>: <severity>: message" ("security: error: client ... denied", "xfer-in: info: ...")
_BIND_LEVEL = re.compile(r"^[a-z][\w\-]{1,20}: (critical|error|warning|notice|info|debug(?: \d+)?): ")


def _level_in(text: str) -> str | None:
    if text[:1].islower() and (b := _BIND_LEVEL.match(text)) is not None:
        return LEVELS.get(b.group(1).split()[0], "info")
    for m in LEVEL_TOKEN.finditer(text, 0, 120):
        word = m["up"]
        if word is None:
            word = m["kv"] or m["br"] or m["ang"]
        elif word not in UPPER_LEVELS:
            continue
        level = LEVELS.get(word.lower())
        if level == "info" and (inner := _RELAYED.match(text, m.end())) is not None:
            return LEVELS.get(inner["lvl"].lower(), level)
        if level:
            return level
    return None


# the first line of a crash, written without a level: Go's runtime, Python, Java
CRASH_STARTS = (
    ("panic: ", "fatal"),
    ("fatal error: ", "fatal"),
    ("Traceback (most recent call last)", "error"),
    ("Exception in thread ", "error"),
)


# `kubectl logs --prefix` (several pods of a selector in one output): "[pod/<pod>/<container>] <line>"
KUBECTL_POD_PREFIX = re.compile(r"\[pod/[^\]\s]+\] ?")
# `aws logs tail` puts the log stream between its timestamp and the message: an ECS stream
# ("ecs/projector/74cd8216b39fc832b8d5531e6bbdd2c0") or a Lambda one ("2025/08/05/[$LATEST]0f1e2d3c...")
AWS_STREAM_PREFIX = re.compile(r"(?:[\w.\-]+/)+(?:\[\$?\w+\])?[0-9a-f]{16,} ")


class LineParser:
    """Parses one log line at a time. Formats that leave the year out (syslog, klog) get this year, or last
    year for a month still ahead; `yearless` says a timestamp was guessed so, for the loader to correct."""

    def __init__(self, now: float | None = None) -> None:
        self.now = now if now is not None else time.time()
        self.yearless = False
        self._guessed = False

    def parse(self, line: str) -> tuple[float | None, str | None, str]:
        if line[:5] == "[pod/" and (p := KUBECTL_POD_PREFIX.match(line)):
            line = line[p.end() :]  # `kubectl logs --prefix`: the pod and container the line came from
        m = KUBECTL_TS_PREFIX.match(line)
        if not m:
            return self.parse_body(line, None)
        cri = CRI_TAG.match(line, m.end()) if line[m.end() : m.end() + 3] == "std" else None
        stream = None if cri else AWS_STREAM_PREFIX.match(line, m.end())
        return self.parse_body(line[(cri or stream or m).end() :], m[1])

    def parse_body(self, line: str, prefix_ts: str | None) -> tuple[float | None, str | None, str]:
        """A line without its `kubectl logs --timestamps` prefix, and that prefix (or None)."""
        # kubectl's prefix is the time the line was received, with its zone and to the nanosecond: it wins
        ts = parse_ts(prefix_ts) if prefix_ts else None
        body = line.lstrip()
        if body.startswith("{"):
            rec = self._json(body, want_ts=ts is None)
            if rec is not None:
                return (rec[0] if ts is None else ts), rec[1], rec[2]
        self._guessed = False
        own_ts, level, msg = self._text(body, ts is not None)
        if ts is None:
            self.yearless |= self._guessed and own_ts is not None
            ts = own_ts
        if level is None:
            level = next((lvl for start, lvl in CRASH_STARTS if msg.startswith(start)), None)
        return ts, level, msg

    def _json(self, body: str, want_ts: bool = True) -> tuple[float | None, str | None, str] | None:
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        return record_fields(obj, body, want_ts) if isinstance(obj, dict) else None

    def _text(self, body: str, dated: bool = False) -> tuple[float | None, str | None, str]:
        """`dated`: the line had an RFC 3339 prefix, so no level-before-time layout is looked for."""
        if body[:1] == "(" and (m := SSSD_RE.match(body)) is not None:
            if m["y"]:
                fields = (int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
            else:
                fields = (
                    int(m["y2"]),
                    MONTHS.get(m["mon"], 1),
                    int(m["d2"]),
                    int(m["h2"]),
                    int(m["mi2"]),
                    int(m["s2"]),
                )
            frac = float(f"0.{m['f']}") if m["f"] else 0.0
            return calendar.timegm((*fields, 0, 0, 0)) + frac, _sssd_level(m["lvl"]), m["rest"]
        if body[:1] == "[" and body[2:3] == " " and (m := TORNADO_RE.match(body)) is not None:
            # Tornado's (JupyterHub's) "[I 2025-10-06 08:54:31.166 JupyterHub spawner:2940] ...": level, time, the
            # application and the module:line that logged it (not a host:port)
            return iso_match(m), _TORNADO_LEVELS[m["lvl"]], body[m.end() :]
        m = DMESG_RE.match(body) or DMESG_CTIME_RE.match(body)
        if m:
            rest = body[m.end() :]
            stamp = _ctime(m["ctime"]) if "ctime" in m.groupdict() else None
            level = JOURNAL_PRIORITY.get(m.groupdict().get("pri") or "") or _level_in(rest)
            return stamp, level, rest
        m = KLOG_RE.match(body)
        if m:
            self._guessed = not m["yy"]
            end = body.find("] ", m.end())
            msg = body[end + 2 :] if 0 <= end < m.end() + 60 else body[m.end() :].strip()
            return klog_match(m, year_for(int(m["mo"]), self.now)), LEVELS[m["lvl"].lower()], msg
        lead_level: str | None = None
        first = body[:1]
        if first in "<=" or body[1:3] == ", ":
            m = LEAD_RE.match(body)
            if m:
                body = body[m.end() :]
                if m["pri"]:
                    lead_level = JOURNAL_PRIORITY.get(str(int(m["pri"]) % 8))
                elif m["erl"]:
                    lead_level = LEVELS.get(m["erl"].lower())
                first = body[:1]
        elif first in "EWIDTF" and not dated:
            m = LEAD_LEVEL_RE.match(body)
            if m:
                lead_level, body, first = LEVELS[m["lvl"].lower()], body[m.end() :], body[m.end() : m.end() + 1]
        elif first in "fcwidt":
            m = DOTNET_RE.match(body)
            if m:
                return None, LEVELS[m["lvl"]], body[m.end() :]
        start = 1 if first == "[" else 0
        ts: float | None = None
        end = 0
        m = ISO_RE.match(body, start)
        if m and m["h"]:
            ts, end = iso_match(m), m.end()
        else:
            m = EPOCH_PREFIX.match(body, start)
            if m:
                ts, end = parse_ts(m[1]), m.end()
            elif (
                first.isdigit()
                and (body[6:7] == " " or ":" in body[1:8])
                and (m := REDIS_RE.match(body) or YYMMDD_RE.match(body)) is not None
            ):
                mon = MONTHS.get(m["mon"], 0) if "mon" in m.groupdict() else int(m["mo"])
                year = int(m["y"]) + (2000 if len(m["y"]) == 2 else 0)
                fields = (year, mon, int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
                frac = float(f"0.{m['f']}") if m.groupdict().get("f") else 0.0
                ts = calendar.timegm((*fields, 0, 0, 0)) + frac if 1 <= mon <= 12 else None
                rest = body[m.end() :].lstrip()
                redis = m.groupdict().get("lvl")
                return ts, REDIS_LEVELS[redis] if redis else _level_in(rest), rest
            elif first.isdigit() and "/" in body[1:3] and (m := SLASH_DATE_RE.match(body, start)) is not None:
                mo, d = int(m["mo"]), int(m["d"])
                mo, d = (d, mo) if mo > 12 else (mo, d)
                h = int(m["h"]) % 12 + (12 if m["ap"] == "PM" else 0) if m["ap"] else int(m["h"])
                frac = float(f"0.{m['f']}") if m["f"] else 0.0
                ts = calendar.timegm((int(m["y"]), mo, d, h, int(m["mi"]), int(m["s"]), 0, 0, 0)) + frac
                rest = body[m.end() :].lstrip(" ]\t|-:")
                return ts, lead_level or _level_in(rest), rest
            else:
                m = DMY_RE.match(body, start) or APACHE_RE.match(body, start) or YMON_RE.match(body, start)
                if m and m["mon"] in MONTHS:
                    frac = float(f"0.{m['f']}") if m["f"] else 0.0
                    fields = (int(m["y"]), MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
                    ts, end = calendar.timegm((*fields, 0, 0, 0)) + frac, m.end()
                    rest = body[end:].lstrip(" ]\t|-:")
                    if rest[:1] == "<" and (boost := _BOOST_LEVEL.match(rest)):  # Boost.Log's "<error>: "
                        return ts, LEVELS.get(boost[1], boost[1]), rest[boost.end() :]
                    php = PHP_LEVEL.search(rest, 0, 80)
                    level = _PHP_LEVELS.get(php[1], "error") if php else lead_level or _level_in(rest)
                    return ts, level, rest
                m = (
                    MDY_TEXT_RE.match(body, start)
                    if body[start + 3 : start + 4] in (" ", ".", "e", "i", "r", "u")
                    else None
                )
                if m and m["mon"] in MONTHS:  # a dashboard's events: "Nov 29, 2024 at 3:12 PM"
                    h = int(m["h"]) % 12 + (12 if m["ap"].upper() == "PM" else 0) if m["ap"] else int(m["h"])
                    fields = (int(m["y"]), MONTHS[m["mon"]], int(m["d"]), h, int(m["mi"]), int(m["s"] or 0))
                    rest = body[m.end() :].lstrip(" ]\t|-:")
                    return calendar.timegm((*fields, 0, 0, 0)), lead_level or _level_in(rest), rest
                m = SYSLOG_RE.match(body, start)
                if m:
                    self._guessed = True
                    ts, end = syslog_match(m, _syslog_year(m["mon"], self.now)), m.end()
                    # syslog's stamp is local time with no zone; the program's own stamp after "unit[pid]: "
                    # often carries its offset ("2026-04-22T13:46:15.900-04:00"): that one is exact
                    own = _OWN_ZONED_TS.match(body, end, end + 100)
                    if own and (exact := parse_ts(own.group(1))) is not None:
                        ts, self._guessed = exact, False
                else:
                    m = CLF_RE.search(body, 0, 200)
                    if m:  # an access log: the status code is not a level
                        return clf_match(m), None, body
        if end and body[end : end + 1] == "," and (samba := _SAMBA_LEVEL.match(body, end)) is not None:
            # Samba's "[2024/07/09 08:14:02.149436,  2] ../source3/winbindd/x.c:1442(fn)" then the message
            return ts, _SAMBA_LEVELS.get(int(samba.group(1)), "debug"), body[samba.end() :].strip()
        rest = body[end:].lstrip(" ]\t|-:>") if end else body
        if ts is None and "deployed as release " in body and (m := CAPISTRANO_RELEASE.search(body)) is not None:
            ts = _release_time(m[1])
        if ts is None and "=" in body:
            m = LOGFMT_TIME.search(body)
            if m:
                ts = parse_ts(m[1])
        if lead_level:
            return ts, lead_level, rest
        if ts is not None and rest[1:2] in (" ", "1", "2", "3", "4", "5"):
            m = MONGO_SEV_RE.match(rest)
            if m:
                return ts, LEVELS[m["lvl"].lower()], rest
        return ts, _level_in(rest), rest


# a date as dashboards and consoles print it: "Nov 29, 2024 at 3:12 PM", "November 29, 2024, 15:12:05"
MDY_TEXT_RE = re.compile(
    r"(?P<mon>[A-Z][a-z]{2})[a-z]*\.? (?P<d>\d{1,2}), (?P<y>\d{4}),?(?: at)? (?P<h>\d{1,2}):(?P<mi>\d{2})"
    r"(?::(?P<s>\d{2}))?(?: ?(?P<ap>[AaPp][Mm])\b)?"
)


# Samba's debug level after its timestamp (0 error, 1 warning, 2 notice, 3 and up detail) and the source location
_SAMBA_LEVEL = re.compile(r",\s+(\d+)(?:, [^\]]*)?\] \S+:\d+\(\w+\)\s*")
_SAMBA_LEVELS = {0: "error", 1: "warn", 2: "info", 3: "info"}


# a Capistrano revisions.log line: "Branch main (at 4be91c2) deployed as release 20261104130214 by jenkins"
CAPISTRANO_RELEASE = re.compile(r"\bdeployed as release (\d{14})\b")


def _release_time(release: str) -> float | None:
    """Capistrano names a release by its UTC time (20261104130214); a number that is no time names nothing."""
    try:
        return float(calendar.timegm(time.strptime(release, "%Y%m%d%H%M%S")))
    except ValueError:
        return None


def _inner_json(text: str) -> tuple[float | None, str | None, str] | None:
    try:
        inner = json.loads(text)
    except ValueError:
        return None
    return record_fields(inner, text.rstrip("\n")) if isinstance(inner, dict) else None


def _ctime(text: str) -> float | None:
    try:
        return calendar.timegm(time.strptime(" ".join(text.split()), "%b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def _syslog_year(mon: str, now: float) -> int | None:
    mo = MONTHS.get(mon)
    return year_for(mo, now) if mo else None


# a timestamp with its zone at the start of a syslog message: "...[2231]: 2026-04-22T13:46:15.900-04:00 ERR ..."
_OWN_ZONED_TS = re.compile(r"[^:]{0,60}?:\s+(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")
# a URL whose host names a non-production system by one of its labels: api.sandbox.push.apple.com,
# payments-staging.example.net, ds-mtf.example-scheme.net (a card scheme's test facility), uat.bank.example; only
# addresses of services called (a gs:// or s3:// "staging" bucket is a data pipeline's scratch area)
NONPROD_URL = re.compile(
    r"\b(?:https?|wss?|grpcs?|amqps?|mqtts?|ldaps?|tcp|tls)://(?:[\w\-]+[.\-])*?(sandbox|staging|stage|stg|uat|qa|test|testing|preprod|nonprod|mtf)"
    r"(?:[.\-][\w\-.]*)?(?::\d+)?(?=[/\s\"',;)]|$)",
    re.I,
)
_CLEF_HOLE = re.compile(r"\{[@$]?(\w+)(?:[,:][^}]*)?\}")


def record_fields(obj: dict[str, Any], raw: str, want_ts: bool = True) -> tuple[float | None, str | None, str]:
    ts = next((parse_ts(obj[k]) for k in TS_KEYS if k in obj), None) if want_ts else None
    level = None
    for k in LEVEL_KEYS:
        if k in obj:
            level = normalise_level(obj[k])
            if level:
                break
    if level is None and isinstance(obj.get("log"), dict):
        level = normalise_level(obj["log"])
    if level is None and "PRIORITY" in obj:
        level = JOURNAL_PRIORITY.get(str(obj["PRIORITY"]))
    msg_key = next((k for k in MSG_KEYS if isinstance(obj.get(k), str)), None)
    if msg_key is None:
        access = _azure_access(obj)
        if access is not None:
            return ts, access[0], access[1]
        kong = _kong_access(obj)
        if kong is not None:
            return (kong[0] if want_ts else None), kong[1], kong[2]
        return ts, level, raw
    msg: str = obj[msg_key]
    if msg_key == "@mt":  # CLEF without a rendered message: fill the template's {Property} holes
        msg = _CLEF_HOLE.sub(lambda m: str(obj.get(m[1], m[0])), msg)
    if level is None and msg_key in ("@m", "@mt"):
        level = "info"  # CLEF leaves @l out for Information
    if level is None:  # docker's json-file wraps a text line: {"log": "E0612 ...", "stream": "stderr"}
        level = _level_in(msg)
    if msg_key == "log" and msg[:1] == "{" and (inner := _inner_json(msg)) is not None:
        # docker json-file wrapping a JSON logger's line: the inner record's level and message
        return (inner[0] if inner[0] is not None else ts), inner[1] or level, inner[2]
    text = with_error_details(msg, obj, skip=msg_key)
    for nest in ("attr", "fields"):  # MongoDB's attr, tracing-subscriber's JSON fields
        if isinstance(obj.get(nest), dict):
            text = with_error_details(text, obj[nest])
            inner = obj[nest].get("message")
            if level in ("error", "fatal", "warn") and isinstance(inner, str) and inner and inner not in text:
                # mongod's "WiredTiger error" says what failed only in attr.message ("... No space left on device")
                text = f"{text.rstrip()}: {inner.strip()[:600]}"
    if isinstance(obj.get("attr"), dict) and "ctx" in obj:  # mongod: who connected, how many, on what
        text = _with_mongo_attrs(text, obj["attr"])
    if level in ("error", "fatal", "warn"):
        text = with_peer(text, obj)
        text = _with_rejection(text, obj)
        status = next((obj[k] for k in _STATUS_KEYS if isinstance(obj.get(k), int) and 400 <= obj[k] < 600), None)
        if status is not None and f"status={status}" not in text:
            text = f"{text.rstrip()} status={status}"
    if "://" in raw and NONPROD_URL.search(raw):
        # an address of a sandbox, staging or test system in any field of any record ("apns client initialised"
        # with endpoint=https://api.sandbox.push.apple.com): kept, for the rule on production sent to one
        extra = [f"{k}={v}" for k, v in obj.items() if isinstance(v, str) and NONPROD_URL.search(v) and v not in text]
        if extra:
            text = f"{text.rstrip()} {' '.join(extra[:2])}"
    return ts, level, text.rstrip("\n")


def _kong_access(obj: dict[str, Any]) -> tuple[float | None, str, str] | None:
    """(time, level, access-log line) of a Kong log plugin's record (file-log, http-log, tcp-log): the request, the
    response status, who answered it (`source`: kong itself or the upstream), the service, route and consumer."""
    req, resp = obj.get("request"), obj.get("response")
    if not (isinstance(req, dict) and isinstance(resp, dict) and "latencies" in obj and "started_at" in obj):
        return None
    status = resp.get("status")
    line = f'"{req.get("method", "GET")} {req.get("uri") or req.get("url") or "/"}" {status}'
    lat: dict[str, Any] = obj["latencies"] if isinstance(obj.get("latencies"), dict) else {}
    line += f" latency={lat.get('request', '-')}ms upstream_latency={lat.get('proxy', '-')}ms"
    for key, label in (("service", "service"), ("route", "route"), ("consumer", "consumer")):
        part = obj.get(key)
        name = part.get("name") or part.get("username") if isinstance(part, dict) else None
        if name:
            line += f" {label}={name}"
    service: dict[str, Any] = obj["service"] if isinstance(obj.get("service"), dict) else {}
    if service.get("host"):
        line += f" upstream={service['host']}:{service.get('port', '')}".rstrip(":")
    if obj.get("source"):
        line += f" source={obj['source']}"  # "kong": the gateway answered it itself (auth, rate limit, no route)
    if isinstance(resp.get("headers"), dict) and (msg := resp.get("body") or resp.get("message")):
        line += f" {str(msg)[:200]}"
    started = obj.get("started_at")
    ts = float(started) / 1000.0 if isinstance(started, int | float) and started > 1e11 else None
    code = int(str(status)) if str(status).isdigit() else 0
    return ts, ("error" if code >= 500 else "warn" if code >= 400 else "info"), line


def _azure_access(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(level, access-log line) of an Azure resource log's request record: Front Door / CDN access logs
    (httpMethod, requestUri, httpStatusCode, errorInfo, originName) and Application Gateway's (requestUri,
    httpStatus, serverRouted, serverStatus)."""
    p = obj.get("properties")
    if not isinstance(p, dict) or "category" not in obj:
        return None
    status = p.get("httpStatusCode") or p.get("httpStatus")
    uri = p.get("requestUri") or p.get("requestQuery")
    if status is None or uri is None:
        return None
    line = f'"{p.get("httpMethod", "GET")} {uri} HTTP/{str(p.get("httpVersion") or "1.1").removesuffix(".0")}" {status}'
    line += f" {p.get('responseBytes', p.get('sentBytes', '-'))} latency={p.get('timeTaken', '-')}s"
    error = p.get("errorInfo")
    if error and error != "NoError":
        line += f" errorInfo={error}"
    upstream = p.get("originName") or p.get("serverRouted")
    if upstream:
        line += f" upstream={upstream}"
    if p.get("serverStatus"):
        line += f" upstream_status={p['serverStatus']}"
    code = int(status) if str(status).isdigit() else 0
    return ("error" if code >= 500 else "warn" if code >= 400 else "info"), line


# fields a structured logger (OpenTelemetry semantic conventions, ECS, zap/logrus/pino habits) uses to name the
# other side of a call; kept on error and warning records as key=value, so a failed call names its upstream
PEER_KEYS = (
    "peer.service",
    "peer.address",
    "net.peer.name",
    "server.address",
    "grpc.target",
    "grpc.service",
    "target",
    "upstream",
    # (a nested peer object: pino's {"upstream": {"host": ..., "path": ...}})
    "upstream.host",
    "upstream.url",
    "target.host",
    "remote.host",
    "server.host",
    "upstream_host",
    "upstream_cluster",
    "remote_addr",
    "dependency",
    "url.full",
    # the Elasticsearch/OpenSearch JavaScript client's error: the node it called, under meta.meta.connection
    "meta.meta.connection.url",
    "redis.host",
    "redis_addr",
    "db.host",
    "http.url",
    "url",
    "endpoint",
    # a business field naming the external provider called (weaker than a host: the target rules read it last)
    "provider",
    "vendor",
)


def _dotted(obj: dict[str, Any], key: str) -> Any:
    if key in obj:
        return obj[key]
    head, _, rest = key.partition(".")
    inner = obj.get(head)
    return _dotted(inner, rest) if rest and isinstance(inner, dict) else None


# mongod's attr fields that say what a line is about (a connection's client and count, a slow query's namespace)
_MONGO_ATTRS = (("connectionCount", "connectionCount"), ("doc.application.name", "appName"), ("ns", "ns"),
                ("durationMillis", "durationMillis"), ("planSummary", "planSummary"))  # fmt: skip


def _with_mongo_attrs(msg: str, attr: dict[str, Any]) -> str:
    extra = [f"{name}={v}" for key, name in _MONGO_ATTRS if isinstance(v := _dotted(attr, key), str | int | float)]
    return f"{msg.rstrip()} {' '.join(extra)}" if extra else msg


# what a warning or error about a refused record carries beside its message: the validator's own words and whose
# record it was ({"msg": "batch rejected", "partner": "acme", "first_error": "items[0].qty: expected integer"})
_REJECTION_KEYS = ("first_error", "validation_error", "validation_errors", "detail", "details")  # (strings)
_PRODUCER_KEYS = ("partner", "supplier", "producer", "merchant", "feed", "carrier")
_REFUSED_RECORD = re.compile(r"reject|invalid|validat|malformed|dead.?letter|skipp|quarantin|pars(?:e|ing)", re.I)


def _with_rejection(msg: str, obj: dict[str, Any]) -> str:
    if not _REFUSED_RECORD.search(msg):
        return msg
    extra = [
        f"{k}={v}"
        for k in (*_PRODUCER_KEYS, *_REJECTION_KEYS)
        if isinstance(v := obj.get(k), str) and v and len(v) <= 300 and v not in msg
    ]
    return f"{msg.rstrip()} {' '.join(extra[:4])}" if extra else msg


def with_peer(msg: str, obj: dict[str, Any]) -> str:
    """`msg` with the fields that name the called peer (PEER_KEYS) appended as `key=value`."""
    extra = []
    # the record's own fields, then those of the error object it carries (pino's err.url, an axios error's config)
    nested = [obj[k] for k in ("err", "error", "exception") if isinstance(obj.get(k), dict)]
    for source in (obj, *nested):
        for k in PEER_KEYS:
            v = _dotted(source, k)
            if isinstance(v, str) and v and len(v) <= 300 and v not in msg and f"{k}={v}" not in extra:
                extra.append(f"{k}={v}")
    return f"{msg.rstrip()} {' '.join(extra[:3])}" if extra else msg


def with_error_details(msg: str, obj: Any, skip: str | None = None) -> str:
    """`msg` with the error fields a structured logger put beside it (see ERROR_KEYS) appended."""
    if not isinstance(obj, dict):
        return msg
    details = [d for k in ERROR_KEYS if k != skip and (d := _error_text(obj.get(k))) and d not in msg]
    return f"{msg.rstrip()}: {'; '.join(details)}"[: MAX_CONTINUATION + 200] if details else msg


def _error_text(value: Any, depth: int = 0) -> str:
    """An error field as text: a string, or the type, message and stack of an error object."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        parts = [str(value[k]).strip() for k in _ERROR_SUBKEYS if isinstance(value.get(k), str | int) and value[k]]
        # the HTTP status an SDK's error carries (Stripe's and axios' statusCode), said before the stack: a 5xx is
        # the server's failure, not the caller's
        status = next(
            (value[k] for k in ("statusCode", "status_code", "httpStatus") if isinstance(value.get(k), int)), None
        )
        if status is not None and status >= 400:
            stack = next((n for n, k in enumerate(_ERROR_SUBKEYS) if k.startswith("stack")), len(_ERROR_SUBKEYS))
            head = [
                str(value[k]).strip()
                for k in _ERROR_SUBKEYS[:stack]
                if isinstance(value.get(k), str | int) and value[k]
            ]
            parts = [*head, f"status {status}", *parts[len(head) :]]
        text = ": ".join(dict.fromkeys(p for p in parts if p))
        cause = value.get("caused_by") or value.get("cause")  # Elasticsearch, and chained error objects
        if isinstance(cause, dict) and depth < 3:
            inner = _error_text(cause, depth + 1)
            text = f"{text}; caused by {inner}" if inner else text
        return text
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):  # a traceback as lines
        return "\n".join(v.rstrip("\n") for v in value)
    return ""


def _kubectl_source(path: str) -> tuple[str, dict[str, Any]] | None:
    m = KUBECTL_PATH.search(path)
    if not m:
        return None
    ns, pod, container = m["ns"], m["pod"], m["container"]
    previous = False
    for suffix in (".previous", "-previous"):
        if container and container.endswith(suffix):
            container, previous = container[: -len(suffix)], True
        elif not container and pod.endswith(suffix):
            pod, previous = pod[: -len(suffix)], True
    obj = f"Pod/{ns}/{pod}/{container}" if container else f"Pod/{ns}/{pod}"
    return obj, {"namespace": ns, "pod": pod, "container": container, "previous": previous, "path": path}


# the commands that print one source's log in a saved terminal session
_LOG_COMMAND = re.compile(
    r"^(?:sudo\s+)?(?:(?P<docker>docker|podman)(?:\s+container)?\s+logs\b(?P<dargs>.*)"
    r"|(?P<kubectl>kubectl|oc)\s+logs\b(?P<kargs>.*)"
    r"|journalctl\b(?P<jargs>.*\s(?:-u|--unit)[= ]?(?P<unit>[\w@.\-]+).*))$"
)


_KUBECTL_VALUE_FLAGS = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-c": "container",
    "--container": "container",
    "--tail": "",
    "--since": "",
    "--since-time": "",
    "-l": "",
    "--selector": "",
    "--context": "",
    "--kubeconfig": "",
}


# a command whose output was cut after its first lines: what it printed ends there, whatever came next
_CUT_BY_HEAD = re.compile(r"\|\s*head\b(?!.*\|\s*tail\b)")


def _command_source(command: str, path: str) -> tuple[str, dict[str, Any]] | None:
    """The source a `docker logs NAME`, `kubectl logs POD -n NS -c C` or `journalctl -u UNIT` speaks for."""
    m = _LOG_COMMAND.match(command.strip())
    if not m:
        return None
    if m["docker"]:
        words, skip = [], False
        for w in m["dargs"].split("|")[0].split():
            if skip or ">" in w or "<" in w:  # a flag's value, a redirection (2>&1, > out.txt)
                skip = False
                continue
            skip = w in ("--since", "--until", "--tail", "-n")
            if not w.startswith("-") and not w.isdigit():
                words.append(w)
        return (f"container/{words[-1]}", {"container": words[-1], "path": path}) if words else None
    if m["kubectl"]:
        args = m["kargs"].split("|")[0]
        values: dict[str, str] = {}
        pods: list[str] = []
        words = args.split()
        while words:
            word = words.pop(0)
            flag, eq, value = word.partition("=")
            if flag in _KUBECTL_VALUE_FLAGS:
                values[_KUBECTL_VALUE_FLAGS[flag]] = value if eq else (words.pop(0) if words else "")
            elif not word.startswith("-"):
                pods.append(word.removeprefix("pod/").removeprefix("pods/"))
        if not pods:
            return None
        namespace = values.get("namespace") or "default"
        c = values.get("container", "")
        obj = f"Pod/{namespace}/{pods[0]}/{c}" if c else f"Pod/{namespace}/{pods[0]}"
        previous = bool(re.search(r"(?:^|\s)(?:-p|--previous)\b", args))
        return obj, {"namespace": namespace, "pod": pods[0], "container": c, "previous": previous, "path": path}
    unit = m["unit"].removesuffix(".service")
    return f"unit/{unit}", {"service": unit, "path": path}


def detect(doc: Document) -> bool:
    if doc.shape == "json":  # a one-line JSON log is parsed whole
        v = doc.value
        return isinstance(v, dict) and any(k in v for k in MSG_KEYS) and any(k in v for k in (*TS_KEYS, "level"))
    if _kubectl_source(doc.path) or _command_source(doc.command, doc.path):
        return True
    parser = LineParser()
    seen = hits = 0
    for line in doc.lines():
        if not line.strip() or (seen and _continues(line)):
            continue  # blank, or a stack trace's line: part of the record above, not a line of its own
        seen += 1
        ts, level, _ = parser.parse(line)
        hits += ts is not None or level is not None or DMESG_RE.match(line.lstrip()) is not None
        if seen >= _SNIFF:
            break
    # a pasted `systemctl status` or `kubectl logs` under a command and its report header: a few stamped lines
    # among the header's are still a log
    return seen > 0 and (hits >= max(1, seen * 0.3) or (hits >= 3 and hits >= seen * 0.15))


# SQL Server's ERRORLOG says an error's number and severity on one line and its text on the next; severity 16
# and up are errors (11-16 the user's, 17-25 the server's), 10 and below informational
_MSSQL_ERROR = re.compile(r"\bError: \d+, Severity: (?P<severity>\d+), State: \d+\.?$")
MSSQL_ERROR_SEVERITY = 16


@FORMATS.format("log", shapes={"text", "jsonl", "json"}, detect=detect, order=100)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    found = _kubectl_source(doc.path) or _command_source(doc.command, doc.path)
    obj, source = found if found else (doc.path, {"path": doc.path})
    if doc.command and "command" not in source:
        source = {**source, "command": doc.command[:300]}  # what printed it (`ssh web-1 tail /srv/app/...`)
    if _CUT_BY_HEAD.search(doc.command):
        source = {**source, "cut": True}  # `... | head -n 60`: the log ends where head stopped, not where it did
    records: deque[dict[str, Any]] = deque(maxlen=ctx.max_log_records)
    total = 0
    if doc.shape == "json":
        ts, level, msg = record_fields(doc.value, json.dumps(doc.value))
        records.append({"ts": ts, "level": level, "msg": msg, "line": 1})
        total = 1
    parser = LineParser()
    if doc.shape != "json":
        last: dict[str, Any] | None = None
        partial = False
        prefixed = ""  # the first `kubectl logs --prefix` pod seen: it names the log when its file name does not
        for n, line in enumerate(doc.lines(), 1):
            if not line.strip() or (doc.command and TERMINAL_PROMPT.match(line)):
                continue  # blank, or the command that printed this output
            if line[:5] == "[pod/" and (p := KUBECTL_POD_PREFIX.match(line)):
                prefixed = prefixed or p.group(0)
                line = line[p.end() :]
            m = KUBECTL_TS_PREFIX.match(line)
            body = line[m.end() :].rstrip("\r") if m else line.rstrip("\r")
            cri = CRI_TAG.match(body) if m and body[:3] == "std" else None
            if m and not cri and (stream := AWS_STREAM_PREFIX.match(body)):
                body = body[stream.end() :]
            if cri:
                body = body[cri.end() :]
                joined = partial and last is not None
                partial = cri["tag"] == "P"
                if joined and last is not None:  # the rest of a line the runtime split
                    last["msg"] = f"{last['msg']}{body}"[: MAX_CONTINUATION + 200]
                    continue
            if last is not None and (
                _continues(body)
                or _ends_python_traceback(last["msg"], body)
                # logback, log4j and .NET print the exception on the line under the error (or warning) message, at
                # column 0: it belongs to that record, at that record's level
                or (last["level"] in ("error", "fatal", "warn") and _EXCEPTION_HEAD.match(body) is not None)
                or (last["level"] in ("error", "fatal") and _KEYED_DETAIL.match(body) is not None)
            ):
                if len(last["msg"]) < MAX_CONTINUATION:  # past it, the rest of the trace is dropped
                    last["msg"] = f"{last['msg']}\n{body.rstrip()}"[: MAX_CONTINUATION + 200]
                elif (body.startswith("Caused by:") or _ends_python_traceback(last["msg"], body)) and len(
                    last["msg"]
                ) < 2 * MAX_CONTINUATION:
                    # but not its root causes: Java prints the one that explains the rest last, Python the error
                    # itself under the frames
                    last["msg"] = f"{last['msg']}\n{body.rstrip()[:300]}"
                continue
            ts, level, msg = parser.parse_body(body, m[1] if m else None)
            if not msg and level is None:  # a blank line behind a --timestamps prefix
                continue
            if (
                ts is None
                and last is not None
                and last["ts"] is not None
                and last["level"] in ("error", "fatal")
                and not body.startswith("Traceback (")  # a Python traceback is a record of its own
            ):
                # in a timed log, an untimed line under an error is part of it (the SQL it ran, its exception)
                if len(last["msg"]) < MAX_CONTINUATION:
                    last["msg"] = f"{last['msg']}\n{body.rstrip()}"[: MAX_CONTINUATION + 200]
                continue
            if ts is None and last is not None and (body.startswith("Traceback (") or level == "fatal"):
                # in a timed log, a traceback is printed when the line above it was (logging.exception), and a
                # crash's last words (Go's "panic: ...", a fatal error) just after the last line it logged
                ts = last["ts"]
            if (
                last is not None
                and last["ts"] is not None
                and ts is not None
                and abs(ts - last["ts"]) <= 1.0
                and level in (None, "info", last["level"])
                and (
                    _continues(relayed := _RELAY_PREFIX.sub("", msg, count=1) if msg[:1] == "{" else msg)
                    or (last["level"] in ("error", "fatal", "warn") and _EXCEPTION_HEAD.match(relayed) is not None)
                )
            ):
                # a stack trace relayed line by line, each line under the relay's own time and level (Airflow's
                # "{spark_submit.py:634} INFO - \tat org.apache..."; a CI runner's timestamped output)
                if len(last["msg"]) < MAX_CONTINUATION or relayed.lstrip().startswith("Caused by:"):
                    last["msg"] = f"{last['msg']}\n{relayed.rstrip()[:600]}"[: 2 * MAX_CONTINUATION]
                continue
            if level is None and last is not None and ":  " in msg[:80] and _PG_DETAIL.match(msg):
                if len(last["msg"]) < MAX_CONTINUATION:  # PostgreSQL's DETAIL / STATEMENT belong to the error above
                    last["msg"] = f"{last['msg']}\n{msg}"[: MAX_CONTINUATION + 200]
                continue
            if level is None and last is not None and last.get("mssql_error") and last["ts"] == ts:
                # SQL Server's ERRORLOG: "Error: 4864, Severity: 16, State: 1." then the message on its own line
                last["msg"] = f"{last['msg']} {msg}"[: MAX_CONTINUATION + 200]
                del last["mssql_error"]
                continue
            if level is None and (sev := _MSSQL_ERROR.search(msg)) and int(sev["severity"]) >= MSSQL_ERROR_SEVERITY:
                level = "error"
            last = {"ts": ts, "level": level, "msg": msg, "line": n}
            if sev := _MSSQL_ERROR.search(msg):
                last["mssql_error"] = True
            records.append(last)
            total += 1
        if prefixed and not found and (pm := re.match(r"\[pod/([^/\]]+)/([^\]]+)\]", prefixed)):
            source = {**source, "pod": pm.group(1), "container": pm.group(2)}
    for r in records:
        r.pop("mssql_error", None)
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {"records": list(records), "source": source, "truncated": total > len(records)}
    yearless = doc.shape != "json" and parser.yearless
    item = ctx.item(doc.path, "log", obj, data, max(stamps) if stamps else None, dated=not yearless)
    if yearless:
        pending = ctx.shared.setdefault("yearless_items", [])
        if not pending:
            ctx.after.append(_correct_years)
        pending.append(item)
    yield item


def _correct_years(ctx: ParseContext) -> None:
    """Give yearless records (syslog, klog) the year of the bundle's own dated evidence, not today's: a bundle
    from an incident two years ago keeps its order. A record more than a day ahead of the newest dated
    evidence goes back one more year (December lines in a January bundle)."""
    ref = ctx.latest_dated_ts
    if ref is None:
        return
    ref_year = time.gmtime(ref).tm_year
    for item in ctx.shared.get("yearless_items", []):
        stamps = []
        for r in item.data["records"]:
            if r["ts"] is not None:
                r["ts"] = _with_year(r["ts"], ref_year, ref)
                stamps.append(r["ts"])
        item.ts = max(stamps) if stamps else None


def _with_year(ts: float, year: int, ref: float) -> float:
    t = time.gmtime(ts)
    frac = ts - int(ts)
    for y in (year, year - 1):
        day = min(t.tm_mday, 28) if (t.tm_mon, t.tm_mday) == (2, 29) else t.tm_mday
        moved = calendar.timegm((y, t.tm_mon, day, t.tm_hour, t.tm_min, t.tm_sec, 0, 0, 0)) + frac
        if moved <= ref + 86400:
            return moved
    return moved


# Python prints a traceback's exception last, unindented ("UnicodeDecodeError: 'utf-8' codec can't decode ...",
# "psycopg2.errors.NotNullViolation: null value in column ..."), and chains with unindented separator lines
_PY_EXC_LINE = re.compile(r"(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?::\s|$)")
_PY_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")


def _ends_python_traceback(record: str, body: str) -> bool:
    """The unindented exception line (or chain separator) that closes the Python traceback of the record above."""
    if "Traceback (most recent call last)" not in record:
        return False
    tail = record.rsplit("\n", 1)[-1]
    if body.startswith(_PY_CHAIN):
        return True
    if body.startswith("Traceback (most recent call last)"):  # the chained traceback, not a new error
        return tail.startswith(_PY_CHAIN)
    # only right after a frame line: once the exception line is joined, the record is complete
    return tail[:1] in (" ", "\t") and _PY_EXC_LINE.match(body) is not None


# PostgreSQL writes an error's detail, hint and statement as lines of their own, after the same prefix
# ("[1234] DETAIL:  Key (id)=(42) already exists."): they belong to the error above
_PG_DETAIL = re.compile(r"(?:\[\d+(?:-\d+)?\]:? )?(?:\S*@\S* )?(?:DETAIL|HINT|STATEMENT|CONTEXT|QUERY|LOCATION):  ")


# the prefix a relay puts before each line of the program it runs (Airflow: "{spark_submit.py:634} INFO - ")
_RELAY_PREFIX = re.compile(r"^\{[\w.\-]{1,60}:\d+\} [A-Z]+ - ")


# the block a migration tool prints under its error (Flyway: "SQL State  : 23505", "Message    : ERROR: could not
# create unique index ...", a rule of dashes): part of that error
_KEYED_DETAIL = re.compile(r"(?:SQL State|Error Code|Message|Location|Line|Statement|Detail)\s*: |-{20,}\s*$")


def _continues(body: str) -> bool:
    """A stack-trace line (indented; Java's "Caused by:", "... 12 more"; Go's "[signal", "goroutine 1
    [running]:") continues the record above; `body` is the line without its --timestamps prefix."""
    if body[:1] == " ":
        return _PADDED_LEVEL.match(body) is None
    return (
        body[:1] == "\t"
        or body.startswith(CONTINUATION_STARTS)
        or (body.endswith(")") and _GO_FRAME.match(body) is not None)
    )


# --- event and audit exports as CSV (vCenter events, feature-flag audit, change logs, SIEM exports) ------------

_CSV_TIME = re.compile(r"^(?:@?timestamp|time(?:stamp)?|ts|date(?:time)?|created(?:_?(?:time|at|on))?|event_?time|when|"
                       r"occurred(?:_?at)?|changed_?at|updated_?at|logged_?at|"
                       r"time_?created|time_?generated|date and time|date ?time|(?:timestamp|timegenerated) \[utc\])$",
                       re.I)  # fmt: skip
# (Log Analytics suffixes a custom log's string columns with _s: Log_s, Message_s)
_CSV_MESSAGE = re.compile(r"^@?(?:message|msg|description|summary|text|details?|event|log|log_?message)(?:_s)?$", re.I)
# the column that names whose log it is (Log Analytics' ContainerAppName_s, App Insights' cloud_RoleName)
_CSV_SERVICE = re.compile(
    r"^(?:service(?:_?name)?|app(?:_?name)?|application|containerappname|container_?name|cloud_?rolename|"
    r"function_?name)(?:_s)?$",
    re.I,
)
_CSV_LEVEL = re.compile(r"^(?:severity|level|log_?level|priority|status|level_?display_?name)$", re.I)


# other names a dated column goes by: start_utc, LAST_LOAD_TIME, event_date, received_at_ms
_CSV_TIMEISH = re.compile(r"time|date|_at(?:_|$)|^ts_|_ts$|start|utc", re.I)


def csv_time_column(doc: Document) -> str | None:
    exact = next((h for h in doc.header if _CSV_TIME.match(h.strip())), None)
    if exact is not None:
        return exact
    try:
        first = next(doc.rows(), None)
    except FormatError:
        return None
    if first is None:
        return None
    return next((h for h in doc.header if _CSV_TIMEISH.search(h) and parse_ts(first.get(h)) is not None), None)


def detect_event_csv(doc: Document) -> bool:
    """A CSV whose rows are dated events: a time column whose first value parses, and something else to say."""
    col = csv_time_column(doc)
    if col is None or len(doc.header) < 2:
        return False
    try:
        first = next(doc.rows(), None)
    except FormatError:
        return False
    return first is not None and parse_ts(first.get(col)) is not None


_SERVICE_KEYS = ("service", "service.name", "app", "application")


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


@FORMATS.format("event-csv", shapes={"csv"}, detect=detect_event_csv, order=90)
def parse_event_csv(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each row becomes a log record: its message column first, then every other column as `name=value`, so the
    analyzers read a flag change, a vCenter event or an audit entry as they read a log line."""
    tcol = csv_time_column(doc)
    assert tcol is not None
    mcol = next((h for h in doc.header if _CSV_MESSAGE.match(h.strip())), None)
    lcol = next((h for h in doc.header if _CSV_LEVEL.match(h.strip())), None)
    records: list[dict[str, Any]] = []
    services: Counter[str] = Counter()  # the service its structured lines name (`"service": "billing-webhooks"`)
    line_parser = LineParser()
    scol = next((h for h in doc.header if _CSV_SERVICE.match(h.strip())), None)
    for n, row in enumerate(doc.rows(), 2):
        if len(records) >= ctx.max_log_records:
            break
        rest = " ".join(f"{k}={v}" for k, v in row.items() if k not in (tcol, mcol) and v not in ("", None))
        level = normalise_level(row.get(lcol)) if lcol else None
        if scol and row.get(scol):
            services[row[scol]] += 1
        msg = str(row[mcol] or "") if mcol else ""
        own: str | None = None
        if (obj := _json_object(msg)) is not None:
            # a structured log line in the message column (CloudWatch Logs Insights' @message): its message,
            # error details, level and service
            _, own, msg = record_fields(obj, msg, want_ts=False)
            if service := next((str(obj[k]) for k in _SERVICE_KEYS if obj.get(k)), None):
                services[service] += 1
        elif msg:  # a whole log line in the column (Log Analytics' Log_s): its own level
            own = line_parser.parse(msg)[1]
        level = level or own
        msg = f"{msg} ({rest})" if mcol and rest else (msg if mcol else rest)
        records.append({"ts": parse_ts(row.get(tcol)), "level": level, "msg": msg, "line": n})
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {"records": records, "source": {"path": doc.path, "format": "csv"}, "truncated": False}
    named = services.most_common(1)[0][0] if services and len(services) == 1 else None
    yield ctx.item(doc.path, "log", named or doc.path, data, max(stamps) if stamps else None)


# --- saved command output with errors and no timestamps (a terminal session, a tool's report) ------------------

# the shapes programs print an error in, at the start of a line; prose rarely takes them
_UNTIMED_ERROR = re.compile(
    # an exception class, alone or after the program's name: "java.net.ConnectException: ...", "ValueError: ..."
    # (Jenkins prints a pipeline's trace innermost first, the outer errors under "Caused: ")
    r"^(?:Caused(?: by)?: |[a-z][\w.\-]*: )?(?:[A-Za-z_$][\w$]*\.)*[A-Z]\w*(?:Exception|Error)(?::\s|$)"
    # "<program>: ... failed / refused / timed out ..." (curl, psql, cp, rsync, ssh, pg_dump ...)
    r"|^[a-z][\w.\-]*: (?![\"'\[{|>])(?:\(\d+\) )?.*?\b(?i:error|failed|failure|refused|timed out|"
    r"no space left on device|permission denied|cannot|could not|unreachable|not found|denied)\b"
    # "error: ...", "fatal: ...", "verify error:num=10:..." (git, openssl, kubectl, npm)
    r"|^(?:[a-z]+ )?(?i:error|fatal)(?::|\[\w+\]:)"
    # a syscall error at the end of the line: "dial tcp 10.0.0.5:5432: connect: connection refused"
    r"|^\S.*: (?i:connection refused|connection reset by peer|i/o timeout|no such host|no route to host|"
    r"no space left on device|too many open files|permission denied|timed out|no servers could be reached)\s*$"
    # an HTTP status line with a 5xx (curl -i / -v), and the kernel's OOM killer
    r"|^(?:< )?HTTP/[\d.]+ 5\d\d\b|^Out of memory: Kill"
    # a JVM thread dump's verdict, and Go's runtime when every goroutine waits on another
    r"|^Found (?:one|\d+) Java-level deadlock|^fatal error: all goroutines are asleep - deadlock"
    # a file that fails its check: `md5sum -c` / `sha256sum -c` ("x.gz: FAILED", "WARNING: 3 computed checksums did
    # NOT match"), `gzip -t` on a truncated file
    r"|^[\w.\-/]+: FAILED(?: open or read)?\s*$|computed checksums? did NOT match|: unexpected end of file\s*$"
)
_HTTP_5XX = re.compile(r"^(?:< )?HTTP/[\d.]+ 5\d\d\b")
# the URL an HTTP client's command line fetched (`curl -si https://registry.internal/schemas/ids/1187`)
_CLIENT_URL = re.compile(r"^(?:curl|wget|http|https|xh)\b.*?\s['\"]?(https?://[^\s'\"|]+)")
# what a saved terminal prints before a line: dig's ";;", curl -v's "*"
_UNTIMED_PREFIX = re.compile(r"^(?:;;\s*|\*\s+)")
# Markdown (release notes, changelogs, runbooks) and `kubectl describe`: prose and reports, not program errors
_MARKDOWN = re.compile(r"^(?:#{2,6} \S|```|\|[ :-]*-{3}|\* \[[ x]\] )", re.M)
_DESCRIBE = re.compile(r"^Name:\s+\S.*\n(?:.*\n){0,3}?Namespace:\s+\S", re.M)
# YAML, properties, `key: value` reports: data about something, whatever words its values hold
_KEY_VALUE = re.compile(r"^\s*-?\s*[\w.\-]+:(?:\s|$)")
_UNTIMED_MAX_LINE = 400


def _untimed_errors(doc: Document) -> Iterator[tuple[int, str]]:
    held: tuple[int, str] | None = None  # an error line, while the keyed detail block under it is read
    for n, line in enumerate(doc.lines(), 1):
        body = _UNTIMED_PREFIX.sub("", line.rstrip("\r"))
        if held is not None and _KEYED_DETAIL.match(body.lstrip()) and len(held[1]) < MAX_CONTINUATION:
            if not body.lstrip().startswith("-"):
                held = (held[0], f"{held[1]}\n{body.strip()[:300]}")
            continue
        if body and len(body) <= _UNTIMED_MAX_LINE and _UNTIMED_ERROR.search(body):
            if held is not None:
                yield held
            held = (n, body.strip())
            continue
        if held is not None:
            yield held
            held = None
    if held is not None:
        yield held


def detect_untimed_errors(doc: Document) -> bool:
    head = doc.text[:65536]
    if _MARKDOWN.search(head) or _DESCRIBE.search(head):
        return False
    lines = [line for line in head.splitlines()[:200] if line.strip()]
    key_value = sum(1 for line in lines if _KEY_VALUE.match(line) and not _UNTIMED_ERROR.search(line.strip()))
    if key_value * 2 >= len(lines):
        return False
    return next(_untimed_errors(doc), None) is not None


@FORMATS.format("untimed-errors", shapes={"text"}, detect=detect_untimed_errors, order=110)
def parse_untimed_errors(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Offered after the log format: a file with no timestamps or levels whose lines include errors in the shapes
    programs print them. Those lines (only those) become records without a time, level error."""
    url = _CLIENT_URL.search(doc.command or "")
    records = [
        # a 5xx status line under the HTTP client that printed it names what answered it
        {
            "ts": None,
            "level": "error",
            "msg": f"{msg} from {url[1]}" if url and _HTTP_5XX.match(msg) else msg,
            "line": n,
        }
        for n, msg in _untimed_errors(doc)
    ]
    records = records[-ctx.max_log_records :]
    source: dict[str, Any] = {"path": doc.path, "untimed": True}
    if doc.command:
        source["command"] = doc.command[:300]  # what printed it (`openssl s_client -connect api.example.com:443`)
    data = {"records": records, "source": source, "truncated": False}
    yield ctx.item(doc.path, "log", doc.path, data, None)


# --- stern: many pods' logs in one stream, each line led by its pod and container ------------------------------

# "checkoutservice-7c9d5f6b84-mw4tz server {...}"; with --all-namespaces the namespace comes first
_STERN_POD = r"(?P<pod>[a-z0-9][a-z0-9\-]*?-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|[a-z0-9]{5}|\d+))"
_STERN = re.compile(rf"^{_STERN_POD} (?P<container>[a-z][a-z0-9\-]{{0,62}}) (?P<rest>\S.*)$")
_STERN_NS = re.compile(
    rf"^(?P<ns>[a-z0-9][a-z0-9\-]{{0,62}}) {_STERN_POD} (?P<container>[a-z][a-z0-9\-]{{0,62}}) (?P<rest>\S.*)$"
)


def _stern(line: str) -> tuple[str, str, str, str] | None:
    """(namespace or '', pod, container, the line itself): the shorter reading first (a container is a name,
    never a date)."""
    m = _STERN.match(line)
    if m and not _STERN_NS.match(line):
        return "", m["pod"], m["container"], m["rest"]
    m2 = _STERN_NS.match(line)
    if m2:
        return m2["ns"], m2["pod"], m2["container"], m2["rest"]
    return ("", m["pod"], m["container"], m["rest"]) if m else None


def detect_stern(doc: Document) -> bool:
    lines = [line for line in itertools.islice(doc.lines(), 60) if line.strip()]
    lines = [line for line in lines if not (doc.command and TERMINAL_PROMPT.match(line))]
    return len(lines) >= 3 and sum(_stern(line) is not None for line in lines) >= 0.8 * len(lines)


@FORMATS.format("stern", shapes={"text"}, detect=detect_stern, order=95)
def parse_stern(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One log per pod and container; the namespace from the line, else from the bundle's Pod objects, else
    `default` (resolved once every file is read)."""
    parser = LineParser()
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    last: dict[str, Any] | None = None
    for n, line in enumerate(doc.lines(), 1):
        m = _stern(line)
        if m is None:
            if last is not None and line.strip() and _continues(line):
                last["msg"] = f"{last['msg']}\n{line.rstrip()}"[: MAX_CONTINUATION + 200]
            continue
        ts, level, msg = parser.parse(m[3])
        last = {"ts": ts, "level": level, "msg": msg, "line": n}
        groups.setdefault(m[:3], []).append(last)

    def emit(ctx: ParseContext) -> Iterator[EvidenceItem]:
        known = ctx.shared.get("pod_namespaces", {})
        for (ns, pod, container), records in groups.items():
            kept = records[-ctx.max_log_records :]
            stamps = [r["ts"] for r in kept if r["ts"] is not None]
            space = ns or known.get(pod, "default")
            source = {"path": doc.path, "export": "stern"}  # the object names the pod and container
            data = {"records": kept, "source": source, "truncated": len(kept) < len(records)}
            yield ctx.item(doc.path, "log", f"Pod/{space}/{pod}/{container}", data, max(stamps) if stamps else None)

    ctx.deferred.append(emit)
    return iter(())


# --- logs printed as a table by a cloud CLI (`gcloud functions logs read`, `gcloud app logs read`) ---------------
# LEVEL    NAME            EXECUTION_ID  TIME_UTC                 LOG
# E        catalog-ingest  hp4c0frmxjfl  2025-11-20 05:07:09.108  load job ... failed: 400 Error while reading data

_TABLE_TIME = re.compile(r"^(?:TIME(?:_UTC|STAMP)?|DATE(?:_?TIME)?|TIME_GENERATED|WHEN)$")
_TABLE_MESSAGE = re.compile(r"^(?:LOG|MESSAGE|MSG|TEXT(?:_?PAYLOAD)?)$")
_TABLE_LEVEL = re.compile(r"^(?:LEVEL|SEVERITY)$")
_TABLE_NAME = re.compile(r"^(?:NAME|SERVICE|FUNCTION|RESOURCE|INSTANCE)$")
_LETTER_LEVEL = {"D": "debug", "I": "info", "N": "info", "W": "warn", "E": "error", "C": "fatal", "A": "fatal"}


def _table_header(line: str) -> list[tuple[str, int]] | None:
    """A log table's header: upper-case column names two or more spaces apart, a time column and, last, the
    message; each with the offset where its column starts."""
    cols = [(m.group(0), m.start()) for m in re.finditer(r"\S+", line)]
    names = [c for c, _ in cols]
    if len(cols) < 3 or not all(n.isupper() or "_" in n for n in names):
        return None
    if not _TABLE_MESSAGE.match(names[-1]) or not any(_TABLE_TIME.match(n) for n in names):
        return None
    return cols


def _log_table(doc: Document) -> tuple[int, list[tuple[str, int]]] | None:
    for n, line in enumerate(itertools.islice(doc.lines(), 5), 1):
        if TERMINAL_PROMPT.match(line) or not line.strip():
            continue
        cols = _table_header(line.rstrip())
        return (n, cols) if cols else None
    return None


def detect_log_table(doc: Document) -> bool:
    return _log_table(doc) is not None


# --- a cloud CLI's table of operations: what the provider did to a cluster, instance or database, and when ------
# $ gcloud container operations list
# NAME              TYPE           LOCATION      TARGET    STATUS_MESSAGE  STATUS  START_TIME            END_TIME
# operation-17410.. UPGRADE_NODES  europe-west4  web-pool                  DONE    2025-03-04T02:01:00Z  2025-03-..
_OP_TYPE = re.compile(r"^(?:TYPE|OPERATION_?TYPE|OPERATION|ACTION)$")
_OP_START = re.compile(r"^(?:START_?TIME|START|CREATE_?TIME|CREATION_?TIME|INSERT_?TIME|CREATED)$")
_OP_END = re.compile(r"^(?:END_?TIME|END|COMPLETED|FINISHED|DONE_?TIME)$")
_OP_TARGET = re.compile(r"^(?:TARGET|TARGET_?LINK|RESOURCE|INSTANCE|CLUSTER|NODE_?POOL)$")
_OP_FAILED = re.compile(r"^(?:FAILED|ERROR|ABORTING|ABORTED|CANCELLED)$", re.I)


def _operations_header(doc: Document) -> tuple[int, list[tuple[str, int]]] | None:
    for n, line in enumerate(itertools.islice(doc.lines(), 5), 1):
        if TERMINAL_PROMPT.match(line) or not line.strip():
            continue
        cols = [(m.group(0), m.start()) for m in re.finditer(r"\S+", line.rstrip())]
        names = [c for c, _ in cols]
        if len(cols) < 3 or not all(c.isupper() for c in names) or "STATUS" not in names:
            return None
        if any(_OP_TYPE.match(c) for c in names) and any(_OP_START.match(c) for c in names):
            return n, cols
        return None
    return None


def _cells_by_offset(line: str, starts: list[int]) -> list[str]:
    """A table row's cells: each word goes to the column that starts at or just after it (a column a character off
    its header still reads right; an empty cell stays empty)."""
    cells: list[list[str]] = [[] for _ in starts]
    for m in re.finditer(r"\S+", line):
        i = max((k for k, s in enumerate(starts) if s <= m.start() + 2), default=0)
        cells[i].append(m.group(0))
    return [" ".join(c) for c in cells]


@FORMATS.format("operations-table", shapes={"text"}, detect=lambda doc: _operations_header(doc) is not None, order=93)
def parse_operations_table(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each operation a record at its start: its type in words, its target and status, and when it ended."""
    found = _operations_header(doc)
    assert found is not None
    header_line, cols = found
    names = [c for c, _ in cols]

    def col(rx: re.Pattern[str]) -> int | None:
        return next((i for i, c in enumerate(names) if rx.match(c)), None)

    tcol, scol, ecol = col(_OP_TYPE), col(_OP_START), col(_OP_END)
    gcol, stcol, ncol = col(_OP_TARGET), names.index("STATUS"), col(re.compile(r"^NAME$"))
    records: list[dict[str, Any]] = []
    for n, line in enumerate(doc.lines(), 1):
        if n <= header_line:
            continue
        if not line.strip() or TERMINAL_PROMPT.match(line):
            break  # the table ends; what follows is another command's output
        cells = _cells_by_offset(line, [start for _, start in cols])
        assert tcol is not None and scol is not None
        ts = parse_ts(cells[scol])
        kind = cells[tcol].replace("_", " ").lower()
        target = cells[gcol] if gcol is not None and cells[gcol] else cells[ncol] if ncol is not None else ""
        status = cells[stcol]
        end = cells[ecol] if ecol is not None and cells[ecol] else ""
        msg = f"operation {kind} of {target}: {status}" + (f", ended {end}" if end else "")
        level = "error" if _OP_FAILED.match(status) else "info"
        records.append({"ts": ts, "level": level, "msg": msg, "line": n})
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {"records": records, "source": {"path": doc.path, "format": "operations"}, "truncated": False}
    yield ctx.item(doc.path, "log", doc.path, data, max(stamps) if stamps else None)


@FORMATS.format("log-table", shapes={"text"}, detect=detect_log_table, order=94)
def parse_log_table(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each row a record: its time and level columns, the message column (the rest of the line) as the message;
    named by the resource column (the function, the service) when the table holds one."""
    found = _log_table(doc)
    assert found is not None
    header_line, cols = found
    names = [c for c, _ in cols]
    tcol = next(i for i, c in enumerate(names) if _TABLE_TIME.match(c))
    lcol = next((i for i, c in enumerate(names) if _TABLE_LEVEL.match(c)), None)
    ncol = next((i for i, c in enumerate(names) if _TABLE_NAME.match(c)), None)
    records: list[dict[str, Any]] = []
    resources: Counter[str] = Counter()
    for n, line in enumerate(doc.lines(), 1):
        if n <= header_line or not line.strip() or TERMINAL_PROMPT.match(line):
            continue
        cells = [
            line[start : cols[i + 1][1] if i + 1 < len(cols) else None].strip() for i, (_, start) in enumerate(cols)
        ]
        ts = parse_ts(cells[tcol])
        if ts is None:
            if records and line.strip():  # a wrapped message
                records[-1]["msg"] = f"{records[-1]['msg']}\n{line.strip()}"[: MAX_CONTINUATION + 200]
            continue
        text = line[cols[-1][1] :].rstrip()
        last = records[-1] if records else None
        if last is not None and last["ts"] == ts and (text[:1].isspace() or last["msg"].startswith("Traceback")):
            # a traceback printed one line per row, all at one time: one record, as the program wrote it
            last["msg"] = f"{last['msg']}\n{text}"[: MAX_CONTINUATION + 200]
            continue
        raw = cells[lcol] if lcol is not None else ""
        level = _LETTER_LEVEL.get(raw) or (normalise_level(raw) if raw else None)
        if ncol is not None and cells[ncol]:
            resources[cells[ncol]] += 1
        records.append({"ts": ts, "level": level, "msg": cells[-1], "line": n})
        if len(records) >= ctx.max_log_records:
            break
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {"records": records, "source": {"path": doc.path, "format": "log-table"}, "truncated": False}
    named = resources.most_common(1)[0][0] if len(resources) == 1 else None
    yield ctx.item(doc.path, "log", named or doc.path, data, max(stamps) if stamps else None)
