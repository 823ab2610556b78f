"""Dated events inside JSON of no known shape: a `--query` projection of a cloud CLI, a custom API export, a
script's report. Offered after every specific format: wherever the JSON pairs a timestamp with a sentence
(`{"createdAt": ..., "message": ...}` or `["2026-06-02T12:41:09Z", "unable to place a task ..."]`), that pair is
read as a log record, so the analyzers read it as they read any log instead of the file being ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.formats.logs import normalise_level
from diagnosis.model import EvidenceItem

# keys that date an event and keys that say what happened, as APIs and exports spell them
_TIME_KEY = re.compile(
    r"^(?:@?timestamp|time(?:stamp)?|ts|date(?:time)?|created(?:_?(?:at|time|on|date))?|event_?time|"
    r"(?:last_?|first_?)?(?:seen|timestamp)|occurred(?:_?at)?|started_?at|updated_?at|changed_?at|when|"
    r"time_?(?:created|generated)|start_?time|end_?time|insert_?time|event_?timestamp)$",
    re.I,
)
_MESSAGE_KEY = re.compile(
    r"^(?:message|msg|description|summary|text|details?|reason|status_?reason|status_?message|error|event|"
    r"event_?(?:name|message)|title|note)$",
    re.I,
)
_OP_KEY = re.compile(r"^(?:operation_?type|event_?name|event_?type|action)$", re.I)
_OP_TARGET = re.compile(r"^(?:target_?link|target|resource_?name|resource|resource_?id)$", re.I)
_LEVEL_KEY = re.compile(r"^(?:level|severity|log_?level|priority|type)$", re.I)
# a sentence, not a code: some letters and a space
_SENTENCE = re.compile(r"[A-Za-z]{3,}.*\s.*\S")
_FAILED = re.compile(
    r"unable to|failed|failure|unhealthy|error|exception|stopped|denied|not found|refused|timed? ?out|"
    r"exceeded|killed|crash|invalid|rejected|unavailable",
    re.I,
)
# the object a cloud CLI was asked about: `--services quotes-api`, `--function-name resize`
_TARGET_FLAG = re.compile(
    r"--(?:services?|service-name|function-name|db-instance-identifier|db-cluster-identifier|stack-name|"
    r"queue-name|cluster-name|app|name)[= ]+['\"]?([\w.\-/:]+)"
)
_MAX_DEPTH = 8


def _events(value: Any, depth: int = 0) -> Iterator[tuple[float, str, str | None]]:
    """(ts, message, level) for every dated sentence in value, in document order."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        ts = next((t for k, v in value.items() if _TIME_KEY.match(str(k)) and (t := _ts(v)) is not None), None)
        msg = next(
            (v for k, v in value.items() if _MESSAGE_KEY.match(str(k)) and isinstance(v, str) and _SENTENCE.search(v)),
            None,
        )
        if ts is not None and msg is not None:
            # what kind of event and on what, when the record says so apart from its sentence (GCE operations:
            # operationType compute.instances.hostError on targetLink .../instances/<vm>)
            op = next((v for k, v in value.items() if _OP_KEY.match(str(k)) and isinstance(v, str) and v), None)
            target = next((v for k, v in value.items() if _OP_TARGET.match(str(k)) and isinstance(v, str)), "")
            name = target.rstrip("/").rsplit("/", 1)[-1]
            if op and op not in msg:
                msg = f"{op} {name}: {msg}".replace(" :", ":")
            elif name and name not in msg:
                msg = f"{name}: {msg}"  # the resource an Azure activity log entry is about
            level = next(
                (normalise_level(v) for k, v in value.items() if _LEVEL_KEY.match(str(k)) and isinstance(v, str)),
                None,
            )
            yield ts, msg, level
            return
        for v in value.values():
            yield from _events(v, depth + 1)
    elif isinstance(value, list):
        if 2 <= len(value) <= 4 and all(isinstance(v, (str, int, float)) or v is None for v in value):
            stamps = [t for v in value if isinstance(v, str) and (t := _ts(v)) is not None]
            words = [v for v in value if isinstance(v, str) and _ts(v) is None and _SENTENCE.search(v)]
            if stamps and words:
                yield stamps[0], max(words, key=len), None
                return
        for v in value:
            yield from _events(v, depth + 1)


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not 8 <= len(value) <= 40 or not value[:1].isdigit():
        return None
    return parse_ts(value)


def detect(doc: Document) -> bool:
    return next(_events(doc.value), None) is not None


@FORMATS.format("json-events", shapes={"json"}, detect=detect, order=105)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """The dated sentences, oldest first, as the log of what the command was asked about (or of the file)."""
    found = sorted(_events(doc.value), key=lambda e: e[0])[: ctx.max_log_records]
    records = [
        {"ts": ts, "level": level or ("error" if _FAILED.search(msg) else "info"), "msg": msg, "line": n}
        for n, (ts, msg, level) in enumerate(found, 1)
    ]
    target = _TARGET_FLAG.search(doc.command) if doc.command else None
    obj = target[1] if target else doc.path
    data = {"records": records, "source": {"path": doc.path, "format": "json events"}, "truncated": False}
    yield ctx.item(doc.path, "log", obj, data, max(ts for ts, _, _ in found) if found else None)
