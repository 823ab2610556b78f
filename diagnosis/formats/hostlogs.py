"""Host logs whose records span several lines or carry their time in their own shape, read as `log` items:

- Linux audit records (`/var/log/audit/audit.log`, `ausearch` raw or `-i` output): `type=AVC msg=audit(<epoch or
  MM/DD/YYYY hh:mm:ss.mmm>:<serial>): ...`. One record per audit event; an SELinux denial reads as
  "SELinux denied read to nginx (httpd_t) on hero.webp labelled default_t", at level error, with the event's path
  (from its PATH record) when there is one.
- IBM MQ error logs (`AMQERR01.LOG`): entries that open with "MM/DD/YYYY hh:mm:ss AM - Process(...)" (and carry
  `Time(<ISO>)` in UTC), and whose message is the `AMQnnnnX: text` line; the letter is the severity (I info, W
  warning, E error, S severe).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_AUDIT = re.compile(
    r"^type=(?P<type>\w+) msg=audit\((?P<when>[\d/]+ [\d:.]+|\d+\.\d+):(?P<serial>\d+)\)\s*:\s*(?P<body>.*)$"
)
_FIELD = re.compile(r"\b(\w+)=(\"[^\"]*\"|\S+)")
_AVC = re.compile(r"avc:\s+denied\s+\{\s*(?P<perm>[^}]+?)\s*\}")


def _audit_ts(when: str) -> float | None:
    if "/" not in when:
        return float(when)
    try:
        return datetime.strptime(when, "%m/%d/%Y %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _selinux_type(context: str) -> str:
    parts = context.split(":")
    return parts[2] if len(parts) >= 3 else context


def _detect_audit(doc: Document) -> bool:
    head = doc.text[:20_000]
    return "msg=audit(" in head and sum(1 for line in head.splitlines()[:200] if _AUDIT.match(line)) >= 2


@FORMATS.format("linux-audit", shapes={"text"}, detect=_detect_audit, order=19)
def parse_audit(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    events: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(doc.text.splitlines(), 1):
        m = _AUDIT.match(line.strip())
        if not m:
            continue
        ev = events.setdefault(m["serial"], {"ts": _audit_ts(m["when"]), "line": n, "parts": {}})
        fields = {k: v.strip('"') for k, v in _FIELD.findall(m["body"])}
        ev["parts"][m["type"]] = (fields, m["body"], n)
    records: list[dict[str, Any]] = []
    for ev in events.values():
        parts = ev["parts"]
        if "AVC" in parts or "USER_AVC" in parts:
            fields, body, n = parts.get("AVC") or parts["USER_AVC"]
            avc = _AVC.search(body)
            path_fields: dict[str, str] = parts["PATH"][0] if "PATH" in parts else {}
            path = path_fields.get("name") or fields.get("name", "?")
            who = fields.get("comm", "?")
            src = _selinux_type(fields.get("scontext", ""))
            msg = (
                f"SELinux denied {avc['perm'] if avc else 'access'} to {who} ({src})"
                f" on {path} labelled {_selinux_type(fields.get('tcontext', ''))} (tclass={fields.get('tclass', '?')}, "
                f"permissive={fields.get('permissive', '?')})"
            )
            records.append({"ts": ev["ts"], "level": "error", "msg": msg, "line": n})
        else:
            kind, (fields, body, n) = next(iter(parts.items()))
            failed = fields.get("success") == "no" or fields.get("res") in ("failed", "no")
            records.append({"ts": ev["ts"], "level": "error" if failed else "info", "msg": f"{kind} {body}", "line": n})
    records.sort(key=lambda r: (r["ts"] is None, r["ts"] or 0.0))
    stamps = [r["ts"] for r in records if r["ts"] is not None]
    data = {"records": records, "source": {"path": doc.path, "format": "linux audit"}, "truncated": False}
    yield ctx.item(doc.path, "log", f"audit/{doc.stem}", data, max(stamps) if stamps else None)


_MQ_HEAD = re.compile(r"^(?P<ts>\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2}(?: [AP]M)?) - Process\(")
_MQ_TIME = re.compile(r"\bTime\((?P<iso>\d{4}-\d{2}-\d{2}T[\d:.]+Z)\)")
_MQ_QMGR = re.compile(r"\bQMgr\((?P<qm>[\w.]+)\)")
_MQ_MSG = re.compile(r"^(?P<code>AMQ\d{4}(?P<sev>[IWESA])): (?P<msg>.+)$")
_MQ_LEVEL = {"I": "info", "W": "warning", "E": "error", "S": "error", "A": "error"}


def _detect_mq(doc: Document) -> bool:
    lines = doc.text[:20_000].splitlines()
    return any(_MQ_HEAD.match(line) for line in lines) and any(_MQ_MSG.match(line.strip()) for line in lines)


@FORMATS.format("ibm-mq-errors", shapes={"text"}, detect=_detect_mq, order=19)
def parse_mq(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    records: list[dict[str, Any]] = []
    ts: float | None = None
    qmgr = ""
    lines = doc.text.splitlines()
    for n, line in enumerate(lines, 1):
        if m := _MQ_HEAD.match(line):
            fmt = "%m/%d/%Y %I:%M:%S %p" if m["ts"].endswith("M") else "%m/%d/%Y %H:%M:%S"
            try:
                ts = datetime.strptime(m["ts"], fmt).replace(tzinfo=UTC).timestamp()
            except ValueError:
                ts = None
        elif (t := _MQ_TIME.search(line)) and (iso := parse_ts(t["iso"])) is not None:
            ts = iso  # the entry's own UTC time wins over the header's local one
        elif q := _MQ_QMGR.search(line):
            qmgr = q["qm"]
        elif (mm := _MQ_MSG.match(line.strip())) and ts is not None:
            text = mm["msg"]
            k = n
            while k < len(lines) and lines[k].strip() and not lines[k].startswith("EXPLANATION"):
                text += " " + lines[k].strip()  # a message wrapped onto the next lines
                k += 1
            records.append({"ts": ts, "level": _MQ_LEVEL[mm["sev"]], "msg": f"{mm['code']}: {text}", "line": n})
    stamps = [r["ts"] for r in records]
    data = {"records": records, "source": {"path": doc.path, "format": "ibm mq error log"}, "truncated": False}
    yield ctx.item(doc.path, "log", f"mq/{qmgr or doc.stem}", data, max(stamps) if stamps else None)
