"""A mail saved as a file (.eml, an mbox message): cron's mail of a job's output, a monitoring or vendor notice.

Offered after the log format (a mail whose body is a log with its own times is read there) and before the untimed
error lines: its Date header times what its body says. The body (the text/plain part, decoded) is read as a log
whose lines without a time of their own take the mail's; its Subject is the first record ("Cron <ledger@batch02>
/opt/ledger-upload/...", "[FIRING:1] DiskFull"). One `log` item, named by the mail's sender and subject.
"""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import Any

from diagnosis.formats import logs
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_HEADER = re.compile(r"^[A-Za-z][\w\-]{1,40}: ")
_HEADER_MAX_LINES = 60
_BODY_MAX = 200_000


def _headers(doc: Document) -> list[str]:
    """The header block's field names (up to the first blank line), or [] when the text does not start with one."""
    names: list[str] = []
    for n, line in enumerate(doc.text[:16384].splitlines()):
        if not line.strip():
            break
        if n >= _HEADER_MAX_LINES:
            return []
        if line[:1] in (" ", "\t"):
            continue  # a folded header's continuation
        if not _HEADER.match(line) and not (n == 0 and line.startswith("From ")):  # mbox's "From " line
            return []
        names.append(line.split(":", 1)[0].lower())
    return names


def detect(doc: Document) -> bool:
    names = set(_headers(doc))
    return "date" in names and bool(names & {"from", "subject"}) and not doc.command


@FORMATS.format("mail", shapes={"text"}, detect=detect, order=105)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    msg = email.message_from_string(doc.text, policy=email.policy.default)
    try:
        sent = parsedate_to_datetime(str(msg["Date"])).timestamp()
    except (TypeError, ValueError, IndexError):
        sent = None
    part: Any = msg.get_body(preferencelist=("plain",)) if msg.is_multipart() else msg
    try:
        body = str(part.get_content()) if part is not None else ""
    except (LookupError, ValueError):  # an unknown charset or a broken encoding: the raw payload
        body = str(part.get_payload()) if part is not None else ""
    subject = " ".join(str(msg["Subject"] or "").split())
    sender = str(msg["From"] or "")
    text = body[:_BODY_MAX]
    items = list(logs.parse(Document(doc.path, "text", text=text), ctx)) if text.strip() else []
    if not items:
        items = [ctx.item(doc.path, "log", doc.path, {"records": [], "source": {"path": doc.path}}, sent)]
    for item in items:
        records: list[dict[str, Any]] = item.data.get("records") or []
        for r in records:
            if r.get("ts") is None:
                r["ts"] = sent
        if subject:
            records.insert(0, {"ts": sent, "level": None, "msg": f"Subject: {subject}", "line": 1})
        item.data["records"] = records
        item.data["source"] = {**(item.data.get("source") or {}), "path": doc.path, "mail_from": sender[:200]}
        stamps = [r["ts"] for r in records if isinstance(r.get("ts"), int | float)]
        item.ts = max(stamps) if stamps else sent
        yield item
