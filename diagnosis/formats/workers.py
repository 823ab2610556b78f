"""Cloudflare Workers' own logs, read as one log per Worker (script):

- `wrangler tail --format json` (and Logpush's Workers Trace Events): one JSON object per invocation, {scriptName,
  outcome, eventTimestamp, event: {request: {url, method}, response: {status}}, logs: [{message: [...], level,
  timestamp}], exceptions: [{name, message, timestamp}]}. Each console line is a record at its own time; each
  exception an error record; an invocation whose outcome is not "ok" ("exception", "exceededCpu",
  "exceededMemory", "canceled") an error record naming its request.
- Workers Logs (the dashboard's Observability export): [{timestamp, $metadata: {service, level, message, error},
  $workers: {scriptName, outcome, event}}].
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

_LEVELS = {"log": "info", "info": "info", "debug": "debug", "warn": "warn", "warning": "warn", "error": "error"}


def _objects(doc: Document) -> list[dict[str, Any]]:
    if doc.shape == "json":
        v = doc.value
        return [x for x in (v if isinstance(v, list) else [v]) if isinstance(x, dict)]
    out = []
    for line in doc.text.splitlines()[:200_000]:
        line = line.strip()
        if line[:1] == "{":
            try:
                x = json.loads(line)
            except ValueError:
                continue
            if isinstance(x, dict):
                out.append(x)
    return out


def _is_tail(x: dict[str, Any]) -> bool:
    return "scriptName" in x and ("eventTimestamp" in x or "EventTimestampMs" in x) and "outcome" in x


def _is_workers_logs(x: dict[str, Any]) -> bool:
    return isinstance(x.get("$metadata"), dict) and ("$workers" in x or x.get("dataset") == "cloudflare-workers")


def detect(doc: Document) -> bool:
    head = doc.value[:5] if doc.shape == "json" and isinstance(doc.value, list) else None
    if doc.shape == "json" and not isinstance(doc.value, list | dict):
        return False
    objs = [x for x in head if isinstance(x, dict)] if head is not None else _objects_head(doc)
    return bool(objs) and all(_is_tail(x) or _is_workers_logs(x) for x in objs)


def _objects_head(doc: Document) -> list[dict[str, Any]]:
    if doc.shape == "json":
        return [doc.value] if isinstance(doc.value, dict) else []
    out = []
    for line in doc.text[:65536].splitlines()[:5]:
        try:
            x = json.loads(line)
        except ValueError:
            return []
        if isinstance(x, dict):
            out.append(x)
    return out


def _ms(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value / 1000.0 if value > 10**11 else float(value)
    return parse_ts(value)


def _text(message: Any) -> str:
    if isinstance(message, list):
        return " ".join(m if isinstance(m, str) else json.dumps(m, default=str) for m in message)
    return message if isinstance(message, str) else json.dumps(message, default=str)


def _tail_records(x: dict[str, Any]) -> Iterator[dict[str, Any]]:
    when = _ms(x.get("eventTimestamp", x.get("EventTimestampMs")))
    for entry in x.get("logs") or x.get("Logs") or ():
        if isinstance(entry, dict):
            level = _LEVELS.get(str(entry.get("level") or "log").lower(), "info")
            yield {"ts": _ms(entry.get("timestamp")) or when, "level": level, "msg": _text(entry.get("message"))}
    for exc in x.get("exceptions") or x.get("Exceptions") or ():
        if isinstance(exc, dict):
            msg = f"{exc.get('name') or 'Error'}: {exc.get('message') or ''}".strip()
            yield {"ts": _ms(exc.get("timestamp")) or when, "level": "error", "msg": msg}
    outcome = str(x.get("outcome") or x.get("Outcome") or "ok")
    event: dict[str, Any] = x["event"] if isinstance(x.get("event"), dict) else {}
    request: dict[str, Any] = event["request"] if isinstance(event.get("request"), dict) else {}
    response: dict[str, Any] = event["response"] if isinstance(event.get("response"), dict) else {}
    status = response.get("status")
    what = f"{request.get('method') or ''} {request.get('url') or ''}".strip() or str(
        event.get("cron") or event.get("queue") or ""
    )
    if outcome != "ok":
        yield {"ts": when, "level": "error", "msg": f"invocation outcome {outcome}: {what}".strip()}
    elif isinstance(status, int) and status >= 500:
        yield {"ts": when, "level": "error", "msg": f"{what} answered {status}"}


def _workers_logs_record(x: dict[str, Any]) -> dict[str, Any]:
    meta = x["$metadata"]
    workers: dict[str, Any] = x["$workers"] if isinstance(x.get("$workers"), dict) else {}
    msg = str(meta.get("message") or (x.get("source") or {}).get("message") or "")
    if meta.get("error"):
        msg = f"{msg}: {meta['error']}" if msg else str(meta["error"])
    level = _LEVELS.get(str(meta.get("level") or "").lower())
    if workers.get("outcome") not in (None, "ok"):
        msg = f"{msg} (outcome {workers['outcome']})"
        level = "error"
    return {"ts": _ms(x.get("timestamp") or meta.get("now")), "level": level, "msg": msg}


@FORMATS.format("cloudflare-workers", shapes={"json", "jsonl"}, detect=detect, order=40)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    by_script: dict[str, list[dict[str, Any]]] = {}
    for n, x in enumerate(_objects(doc), 1):
        if _is_tail(x):
            script = str(x.get("scriptName"))
            records = list(_tail_records(x))
        elif _is_workers_logs(x):
            workers: dict[str, Any] = x["$workers"] if isinstance(x.get("$workers"), dict) else {}
            script = str(workers.get("scriptName") or x["$metadata"].get("service") or "worker")
            records = [_workers_logs_record(x)]
        else:
            continue
        for r in records:
            r["line"] = n
        by_script.setdefault(script, []).extend(records)
    for script, records in by_script.items():
        records.sort(key=lambda r: r["ts"] or 0.0)
        stamps = [r["ts"] for r in records if r["ts"] is not None]
        data = {"records": records, "source": {"path": doc.path, "service": script}, "truncated": False}
        yield ctx.item(doc.path, "log", f"worker/{script}", data, max(stamps) if stamps else None)
