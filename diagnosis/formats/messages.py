"""Message samples: what a queue, topic or webhook delivered, peeked by an operator -> one `messages` item per
file (or per command of a terminal session), {queue, dead_letter, messages: [{ts, payload, text, producer,
version, receive_count, offset, encoding}]}.

- SQS ReceiveMessage (`aws sqs receive-message`): `{"Messages": [{MessageId, Body, Attributes,
  MessageAttributes}]}`; an SNS envelope in the body (`Type: Notification`, `Message`) and EventBridge's
  (`detail-type`, `detail`) are opened to the payload inside.
- Pub/Sub pull (`gcloud pubsub subscriptions pull --format=json`, or the REST `receivedMessages`): `[{ackId,
  message: {data (base64), attributes, publishTime}}]`.
- A captured webhook delivery: `{headers, body, ...}`, one object or a list of them.
- kcat (also `-J`), kafka-console-consumer and `rpk topic consume` output, in a terminal session whose command
  names the tool: each JSON value is a message (rpk's `value` is opened); kcat's `-f` metadata lines (`offset=`,
  `partition=`, `ts=`, `key:`, `headers:`) belong to the message under them, and a line that is not JSON is a
  message in a binary encoding (protobuf, Avro).

Who produced a message is read from its headers or attributes (`producer`, `source`, `user-agent`, SQS's
`SenderId`) or its payload (`source`, `producer`, `publisher`); its version from `producer_version`, an
`*-api-version` header, `schema_version`, `api_version` or the source's `version`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, Document, ParseContext
from diagnosis.model import EvidenceItem

MAX_MESSAGES = 500
_TEXT_CHARS = 300

_CONSUMER_COMMAND = re.compile(
    r"\b(?:kcat|kafkacat|kafka-console-consumer|kafka-avro-console-consumer|kafka-protobuf-console-consumer"
    r"|kafka-json-schema-console-consumer)(?:\.sh)?\b|\brpk topic consume\b"
)
_TOPIC_ARG = re.compile(r"(?:^|\s)(?:-t|--topic)[ =](?P<t>[\w.\-]+)|\brpk topic consume (?P<r>[\w.\-]+)")
_QUEUE_URL = re.compile(r"--queue-url[ =]\S*/(?P<q>[\w.\-]+)")
_SUBSCRIPTION = re.compile(r"subscriptions pull (?P<s>[\w.\-/]+)")
# kcat -f metadata: "partition=7 offset=18422391 ts=1752061926304", "offset=88412 key=... size=612 ts=..."
_META = re.compile(r"^(?:%?\s*)(?:partition|offset|ts|key|size|topic)[=:]\s*\S*")
_META_FIELD = re.compile(r"\b(?P<k>partition|offset|ts|key|topic)[=:]\s*(?P<v>[^\s,]*)")
_HEADERS = re.compile(r"^headers?:\s*(?P<h>.*)$", re.I)
_KCAT_NOTE = re.compile(r"^%\s")  # "% Reached end of partition ..."
# kafka-console-consumer's print.timestamp and print.key: "CreateTime:1747912323236 | VH-13207 | {...}"
_CONSOLE_PREFIX = re.compile(
    r"^(?:(?:CreateTime|LogAppendTime):(?P<ts>\d+)|NO_TIMESTAMP)\s*(?:[|\t]\s*)?(?:(?P<key>[^\s|{\[]+)\s*[|\t]\s*)?"
)

_PRODUCER_KEYS = ("producer", "x-producer", "source", "x-source", "publisher", "origin", "app", "application")
_VERSION_KEYS = ("producer_version", "x-producer-version", "schema_version", "schemaVersion", "api_version",
                 "apiVersion", "event_version", "eventVersion", "version", "fw", "firmware", "firmware_version",
                 "fwVersion", "app_version", "appVersion", "sdk_version", "client_version")  # fmt: skip


def _parse_json(text: Any) -> Any:
    if isinstance(text, dict | list):
        return text
    if not isinstance(text, str) or text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _opened(payload: Any) -> Any:
    """The event inside an SNS notification or an EventBridge envelope; else the payload itself."""
    for _ in range(2):
        if not isinstance(payload, dict):
            return payload
        if payload.get("Type") == "Notification" and "Message" in payload:
            inner = _parse_json(payload.get("Message"))
            payload = inner if inner is not None else payload
        elif "detail-type" in payload and isinstance(payload.get("detail"), dict):
            payload = payload["detail"]
        else:
            return payload
    return payload


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _flat_headers(headers: Any) -> dict[str, str]:
    """Headers or attributes as {name: text}: SQS's MessageAttributes ({name: {StringValue}}) are unwrapped."""
    out: dict[str, str] = {}
    if isinstance(headers, dict):
        for k, v in headers.items():
            if isinstance(v, dict):
                v = v.get("StringValue", v.get("stringValue", v.get("Value")))
            if isinstance(v, str | int | float):
                out[str(k).lower()] = str(v)
    return out


def _who(headers: dict[str, str], payload: Any) -> tuple[str | None, str | None]:
    """The producer and its version, from the headers, then the payload."""
    producer = version = None
    for key in _PRODUCER_KEYS:
        if headers.get(key):
            producer = headers[key]
            break
    if producer is None and headers.get("senderid"):
        producer = headers["senderid"].rsplit(":", 1)[-1]  # "AROA...:crm-sync-publisher": the role session
    if producer is None and headers.get("user-agent"):
        producer = headers["user-agent"].split("/", 1)[0].strip() or None
    for key in _VERSION_KEYS:
        if headers.get(key.lower()):
            version = headers[key.lower()]
            break
    if version is None:
        version = next((v for k, v in headers.items() if k.endswith("-api-version") and v), None)
    if isinstance(payload, dict):
        src = payload.get("source") or payload.get("producer") or payload.get("publisher")
        if isinstance(src, dict):
            name = src.get("system") or src.get("name") or src.get("service") or src.get("app")
            producer = producer or (str(name) if name else None)
            if version is None and src.get("version") is not None:
                version = str(src["version"])
        elif isinstance(src, str) and src and producer is None:
            producer = src
        if producer is None and isinstance(payload.get("vendor"), str):  # a device fleet's maker
            producer = payload["vendor"]
        if version is None:
            version = next((str(payload[k]) for k in _VERSION_KEYS if isinstance(payload.get(k), str | int)), None)
    return producer, version


def _message(
    raw: Any, headers: dict[str, str], ts: float | None, *, receive_count: Any = None, offset: Any = None
) -> dict[str, Any]:
    payload = _opened(_parse_json(raw))
    producer, version = _who(headers, payload)
    text = _text_of(raw)
    binary = payload is None and isinstance(raw, str) and _looks_binary(raw)
    return {
        "ts": ts,
        "payload": payload if isinstance(payload, dict) else None,
        "text": text[:_TEXT_CHARS],
        "producer": producer,
        "version": version,
        "receive_count": int(receive_count) if str(receive_count or "").isdigit() else None,
        "offset": str(offset) if offset is not None else None,
        "encoding": "json" if payload is not None else ("binary" if binary else "text"),
    }


def _looks_binary(text: str) -> bool:
    """Protobuf or Avro bytes as a terminal shows them (`cat -v`'s ^J and M-^@, or replacement characters)."""
    marks = text.count("^") + text.count("M-") + text.count("\ufffd") + sum(ch < " " for ch in text if ch != "\t")
    return marks >= max(3, len(text) // 40)


def _millis(value: Any) -> float | None:
    s = str(value or "")
    if s.isdigit():
        n = int(s)
        return n / 1000.0 if n > 10**11 else float(n)
    return parse_ts(s) if s else None


def _item(ctx: ParseContext, doc: Document, queue: str, messages: list[dict[str, Any]], dlq: bool) -> EvidenceItem:
    stamps = [m["ts"] for m in messages if isinstance(m.get("ts"), int | float)]
    data = {"queue": queue, "dead_letter": dlq, "messages": messages[:MAX_MESSAGES], "command": doc.command}
    return ctx.item(doc.path, "messages", f"messages/{queue}", data, ts=max(stamps) if stamps else None)


def _dead_letter(name: str) -> bool:
    return bool(re.search(r"(?:^|[-_.])(?:dlq|dead[-_]?letter|deadletter|errors?|parking)(?:$|[-_.])", name, re.I))


# ---------------------------------------------------------------- SQS


def _is_sqs(v: Any) -> bool:
    msgs = v.get("Messages") if isinstance(v, dict) else None
    return isinstance(msgs, list) and bool(msgs) and all(isinstance(m, dict) and "Body" in m for m in msgs[:5])


@FORMATS.format("sqs-messages", shapes={"json"}, detect=lambda d: _is_sqs(d.value), order=40)
def parse_sqs(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    queue = (m["q"] if (m := _QUEUE_URL.search(doc.command)) else "") or doc.stem
    messages = []
    source_arn = ""
    for m in doc.value["Messages"]:
        attrs = m.get("Attributes") if isinstance(m.get("Attributes"), dict) else {}
        source_arn = source_arn or str(attrs.get("DeadLetterQueueSourceArn") or "")
        headers = {**_flat_headers(m.get("MessageAttributes")), **_flat_headers(attrs)}
        body = m.get("Body")
        parsed = _parse_json(body)
        if isinstance(parsed, dict) and parsed.get("Type") == "Notification":  # SNS: its attributes are headers
            headers = {**_flat_headers(parsed.get("MessageAttributes")), **headers}
        messages.append(
            _message(
                body,
                headers,
                _millis(attrs.get("SentTimestamp")),
                receive_count=attrs.get("ApproximateReceiveCount"),
                offset=m.get("MessageId"),
            )
        )
    yield _item(ctx, doc, queue, messages, bool(source_arn) or _dead_letter(queue))


# ---------------------------------------------------------------- Pub/Sub


def _pubsub_list(v: Any) -> list[dict[str, Any]] | None:
    if isinstance(v, dict) and isinstance(v.get("receivedMessages"), list):
        v = v["receivedMessages"]
    head = v[:5] if isinstance(v, list) else []
    if head and all(
        isinstance(x, dict) and isinstance(x.get("message"), dict) and ("ackId" in x or "ack_id" in x) for x in head
    ):
        return v
    return None


@FORMATS.format("pubsub-messages", shapes={"json"}, detect=lambda d: _pubsub_list(d.value) is not None, order=40)
def parse_pubsub(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    received = _pubsub_list(doc.value) or []
    messages = []
    for x in received:
        msg = x["message"]
        data = msg.get("data")
        try:
            raw: Any = base64.b64decode(str(data or ""), validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            raw = data
        messages.append(
            _message(
                raw,
                _flat_headers(msg.get("attributes")),
                parse_ts(msg.get("publishTime") or msg.get("publish_time")),
                receive_count=x.get("deliveryAttempt"),
                offset=msg.get("messageId") or msg.get("message_id"),
            )
        )
    queue = (m["s"].rsplit("/", 1)[-1] if (m := _SUBSCRIPTION.search(doc.command)) else "") or doc.stem
    yield _item(ctx, doc, queue, messages, _dead_letter(queue))


# ---------------------------------------------------------------- webhook deliveries


def _is_delivery(x: Any) -> bool:
    return isinstance(x, dict) and isinstance(x.get("headers"), dict) and "body" in x and len(x) <= 12


def _deliveries(v: Any) -> list[dict[str, Any]] | None:
    if _is_delivery(v):
        return [v]
    if isinstance(v, list) and v and all(_is_delivery(x) for x in v[:5]):
        return [x for x in v if isinstance(x, dict)]
    return None


@FORMATS.format("webhook-deliveries", shapes={"json"}, detect=lambda d: _deliveries(d.value) is not None, order=40)
def parse_deliveries(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    messages = []
    route = ""
    for x in _deliveries(doc.value) or []:
        route = route or str(x.get("route") or x.get("path") or x.get("url") or "")
        headers = _flat_headers(x.get("headers"))
        ts = next(
            (t for k in ("received_at", "captured_at", "timestamp", "ts", "time") if (t := parse_ts(x.get(k)))), None
        )
        attempt = next(
            (v for k, v in headers.items() if k.endswith("delivery-attempt") or k.endswith("-attempt")), None
        )
        messages.append(_message(x.get("body"), headers, ts, receive_count=attempt))
    yield _item(ctx, doc, route or doc.stem, messages, False)


# ---------------------------------------------------------------- Kafka consumers' output


def _detect_consumer_output(doc: Document) -> bool:
    return bool(doc.command) and _CONSUMER_COMMAND.search(doc.command) is not None


def _kafka_record(v: Any) -> dict[str, Any] | None:
    """kcat -J's or rpk's JSON record: {topic, partition, offset, payload|value, ts|timestamp, headers}."""
    if (
        isinstance(v, dict)
        and "offset" in v
        and ("payload" in v or "value" in v)
        and ("topic" in v or "partition" in v)
    ):
        return v
    return None


@FORMATS.format("kafka-consumer-output", shapes={"text", "jsonl", "json"}, detect=_detect_consumer_output, order=40)
def parse_consumer_output(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    topic_m = _TOPIC_ARG.search(doc.command)
    topic = (topic_m["t"] or topic_m["r"]) if topic_m else doc.stem
    messages: list[dict[str, Any]] = []
    meta: dict[str, str] = {}
    headers: dict[str, str] = {}

    def add(raw: Any) -> None:
        nonlocal meta, headers
        record = _kafka_record(_parse_json(raw) if isinstance(raw, str) else raw)
        if record is not None:
            hdrs = record.get("headers")
            hdrs = (
                dict(hdrs)
                if isinstance(hdrs, dict)
                else {str(h.get("key")): h.get("value") for h in hdrs or [] if isinstance(h, dict)}
            )
            body = record.get("payload", record.get("value"))
            ts = _millis(record.get("ts", record.get("timestamp")))
            messages.append(_message(body, _flat_headers(hdrs), ts, offset=record.get("offset")))
        else:
            messages.append(_message(raw, headers, _millis(meta.get("ts")), offset=meta.get("offset")))
        meta, headers = {}, {}

    if doc.shape == "json":
        values = doc.value if isinstance(doc.value, list) else [doc.value]
        for v in values:
            add(v)
    else:
        text = doc.text
        decoder = json.JSONDecoder()
        lines = text.splitlines()
        i = 0
        while i < len(lines) and len(messages) < MAX_MESSAGES:
            line = lines[i].rstrip("\r")
            stripped = line.strip()
            i += 1
            if not stripped or _KCAT_NOTE.match(stripped) or (doc.command and stripped.endswith(doc.command)):
                continue
            if (h := _HEADERS.match(stripped)) is not None:
                for part in h["h"].split(","):
                    if "=" in part:
                        k, v = part.split("=", 1)
                        headers[k.strip().lower()] = v.strip()
                continue
            if (console := _CONSOLE_PREFIX.match(stripped)) is not None:
                meta["ts"] = console["ts"] or ""
                stripped = stripped[console.end() :]
            if _META.match(stripped) and not stripped.startswith("{"):
                meta.update({m["k"]: m["v"] for m in _META_FIELD.finditer(stripped)})
                continue
            if stripped[:1] in ("{", "["):
                chunk = "\n".join([stripped, *lines[i : i + 200]])
                try:
                    value, end = decoder.raw_decode(chunk)
                except json.JSONDecodeError:
                    add(stripped)
                    continue
                i += chunk[:end].count("\n")  # a pretty-printed value spans lines
                add(value)
                continue
            if meta or _looks_binary(stripped):
                add(stripped)
    if messages:
        yield _item(ctx, doc, topic, messages, _dead_letter(topic))
