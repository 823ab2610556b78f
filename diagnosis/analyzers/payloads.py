"""A producer changed the messages it sends: the consumer's error is the symptom, the data the cause.

`payload_changed`: a consumer raises on a key its messages no longer carry (Python's `KeyError: 'sku'`, Jackson's
"Missing required creator property", a schema validator's "'x' is a required property", Go's "cannot unmarshal
... into Go struct field") and the message samples beside it (a DLQ peek, kcat, a captured webhook delivery: see
formats/messages.py) show the new shape: some messages carry the key and others do not (old and new side by
side), or the ones that do not carry it under a new name or a new place (`skuId`, `customer.id`, `data.order`).
The producer and its version come from the samples. It is the producer's change (data quality), not the
consumer's code: the consumer's own release just before the first error, with no sample of the old shape, is
left to the release rules (a consumer that started reading a key nobody sends).

`payload_encoding_changed`: a consumer fails to decode its records (protobuf's InvalidProtocolBufferException,
"Unknown magic byte", a JSON parser's error) and the samples show records in another encoding among the topic's
own (JSON text on a protobuf topic, bytes where JSON belongs): whoever wrote those records wrote the wrong format.
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.analyzers._common import Rec, is_error, object_tags, ref_of, service_of, span_text
from diagnosis.analyzers.base import ANALYZERS
from diagnosis.analyzers.regressions import releases
from diagnosis.evidence import EvidenceSet
from diagnosis.model import Action, Category, Domain, EvidenceItem, EvidenceRef, Finding

# the key a consumer looked for and did not find
_MISSING_KEY = re.compile(
    r"\bKeyError: [\"'](?P<py>[\w.\-]{2,60})[\"']|"
    r"Missing required (?:creator )?property [\"'](?P<jackson>\w{2,60})[\"']|"
    r"JSONObject\[\"(?P<org>\w{2,60})\"\] not found|"
    r"[\"'](?P<schema>\w{2,60})[\"'] is a required property|"
    r"\bmissing (?:required )?(?:field|key|property|attribute)[: ]+[\"'`]?(?P<generic>\w{2,60})|"
    r"\b(?:field|key|property) [\"'`](?P<req>\w{2,60})[\"'`] (?:is )?(?:required|missing|not found)|"
    r"\bkey not found: (?P<scala>\w{2,60})|"
    r"into Go struct field \w+\.(?P<go>\w{2,60}) of type"
)
# a decoder refusing the bytes of a record
_DECODE_ERROR = re.compile(
    r"InvalidProtocolBufferException|Protocol message (?:end-group tag|contained an invalid tag|had invalid wire "
    r"type)|proto: cannot parse invalid wire-format data|Unknown magic byte|Error deserializing (?:Avro|Protobuf|"
    r"key/value)|JSONDecodeError|JsonParseException|Unexpected token .{1,20} in JSON|is not valid JSON"
)
# a consumer dereferencing a value that is not there (the key a message no longer fills)
_NULL_DEREF = re.compile(
    r"nil pointer dereference|NullPointerException|'NoneType' object (?:is not subscriptable|has no attribute)|"
    r"Cannot read propert(?:y|ies) (?:of (?:null|undefined)|.{1,40} of (?:null|undefined))|undefined method .{1,60} "
    r"for nil|Object reference not set to an instance of an object"
)
_EXPECTS_BINARY = re.compile(r"Protobuf|Protocol message|proto:|magic byte|Avro", re.I)
CONSUMER_RELEASE_WINDOW_S = 2 * 3600.0
# what the consumer's failure on the changed data shows as
_SHAPE_EXPLAINS = (
    "crash_code",
    "errors",
    "exception",
    "crash_loop",
    "pod_restarts",
    "http_5xx",
    "alert:*",
    "metric_shift",
    "queue_backlog",
    "consumer_lag",
    "job_failed",
    "bad_data",
    "deploy_failed",
)
_DECODE_EXPLAINS = (
    "crash_code",
    "errors",
    "exception",
    "crash_loop",
    "pod_restarts",
    "alert:*",
    "metric_shift",
    "consumer_lag",
    "queue_backlog",
    "bad_data",
)
MAX_DEPTH = 3


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def _keys(payload: Any, depth: int = 0, path: str = "") -> list[tuple[str, str]]:
    """(key, dotted path) of every key down to MAX_DEPTH levels (lists: their first element)."""
    out: list[tuple[str, str]] = []
    if depth > MAX_DEPTH:
        return out
    if isinstance(payload, list) and payload:
        return _keys(payload[0], depth + 1, path + "[0]")
    if isinstance(payload, dict):
        for k, v in payload.items():
            p = f"{path}.{k}" if path else str(k)
            out.append((str(k), p))
            out += _keys(v, depth + 1, p)
    return out


def _renamed(field: str, payload: dict[str, Any]) -> str | None:
    """Where a message that lacks `field` at its top carries it now: the same key deeper (`data.order`), or a
    key of a related name (`sku` -> `skuId`, `customer_id` -> `customer.id`, `shipping_address` ->
    `shippingAddress`)."""
    want = _norm(field)
    for key, path in _keys(payload):
        if path == field:
            continue
        k = _norm(key)
        if key == field or k == want:
            return path
        short, long = sorted((k, want), key=len)
        if len(short) >= 3 and long.startswith(short) and len(long) - len(short) <= 4 and "." not in path:
            return path
        if "." in path and _norm(path.replace(".", "")) == want:  # customer.id for customer_id
            return path
    return None


def _error_line(msg: str) -> str:
    """The line of a multi-line record that says what failed (a traceback's last line, a panic's first)."""
    for rx in (_MISSING_KEY, _DECODE_ERROR, _NULL_DEREF):
        if (m := rx.search(msg)) is not None:
            start = msg.rfind("\n", 0, m.start()) + 1
            end = msg.find("\n", m.end())
            return msg[start : end if end >= 0 else len(msg)].strip()[:200]
    return msg.strip()[:160]


def _missing_key(msg: str) -> str | None:
    m = _MISSING_KEY.search(msg)
    return next((g for g in m.groups() if g), None) if m else None


def _consumer_released(evidence: EvidenceSet, who: str, first_ts: float | None) -> bool:
    if first_ts is None:
        return False
    for r in releases(evidence):
        if (r.workload in who or who in r.workload) and 0 <= first_ts - r.ts <= CONSUMER_RELEASE_WINDOW_S:
            return True
    return False


def _samples(evidence: EvidenceSet) -> list[tuple[EvidenceItem, int, dict[str, Any]]]:
    return [
        (item, i, m)
        for item in evidence.kind("messages")
        for i, m in enumerate(item.data.get("messages") or ())
        if isinstance(m, dict)
    ]


def _sample_ref(item: EvidenceItem, index: int, message: dict[str, Any]) -> EvidenceRef:
    return EvidenceRef(item=item.id, field=f"messages.{index}", value=str(message.get("text") or "")[:300])


def _from(messages: list[dict[str, Any]]) -> str:
    """'wms-publisher 7.0.0' (the producer and version most of the messages name), or ''."""
    names: dict[str, int] = {}
    for m in messages:
        producer, version = str(m.get("producer") or ""), str(m.get("version") or "")
        who = producer if version and version in producer else " ".join(x for x in (producer, version) if x)
        if who:
            names[who] = names.get(who, 0) + 1
    return max(names.items(), key=lambda kv: kv[1])[0] if names else ""


def _error_groups(evidence: EvidenceSet) -> dict[tuple[str, str], list[Rec]]:
    """Consumer errors by (consumer, missing key or 'decode'), oldest first."""
    groups: dict[tuple[str, str], list[Rec]] = {}
    for item in evidence.kind("log"):
        who = service_of(item) or item.object
        for r in item.data.get("records") or ():
            msg = str(r.get("msg") or "")
            if not any(w in msg for w in ("rror", "Exception", "missing", "nil", "Object reference", "undefined")):
                continue
            rec = Rec(item, r.get("ts"), msg, r.get("line"), None)
            key = _missing_key(msg)
            if key is None and _DECODE_ERROR.search(msg):
                key = "\0decode"
            elif key is None and _NULL_DEREF.search(msg):
                key = "\0null"
            if key is None or not (is_error(r) or "Traceback" in msg or "Exception" in msg or "panic" in msg):
                continue
            groups.setdefault((who, key), []).append(rec)
    for recs in groups.values():
        recs.sort(key=lambda r: r.ts if isinstance(r.ts, int | float) else 0.0)
    return groups


@ANALYZERS.analyzer(domain=Domain.LOGS, reads={"messages"})
def payload_changed(evidence: EvidenceSet) -> list[Finding]:
    samples = _samples(evidence)
    if not samples:
        return []
    findings: list[Finding] = []
    for (who, key), recs in _error_groups(evidence).items():
        if key == "\0decode":
            finding = _decode_mismatch(who, recs, samples)
        elif key == "\0null":
            finding = _nulled(evidence, who, recs, samples)
        else:
            finding = _shape_change(evidence, who, key, recs, samples)
        if finding is not None:
            findings.append(finding)
    return findings


Sample = tuple[EvidenceItem, int, dict[str, Any]]


def _shape_change(evidence: EvidenceSet, who: str, key: str, recs: list[Rec], samples: list[Sample]) -> Finding | None:
    with_json = [(item, i, m) for item, i, m in samples if isinstance(m.get("payload"), dict)]
    having = [s for s in with_json if key in s[2]["payload"]]
    lacking = [s for s in with_json if key not in s[2]["payload"]]
    if not lacking:
        return None
    moved = next((p for s in lacking if (p := _renamed(key, s[2]["payload"]))), None)
    if not having and moved is None:
        return None
    if not having and _consumer_released(evidence, who, recs[0].ts):
        return None  # the consumer's new code may read a key nobody sends: the release rules decide
    return _changed(who, key, recs, lacking, having, moved, "lack")


def _nulled(evidence: EvidenceSet, who: str, recs: list[Rec], samples: list[Sample]) -> Finding | None:
    """A consumer that dereferences nothing, beside messages where a key turned null: under a new name
    (`shipping_address: null` beside `shippingAddress`), or null only from a new producer version."""
    with_json = [(item, i, m) for item, i, m in samples if isinstance(m.get("payload"), dict)]
    for item, i, m in with_json:
        payload = m["payload"]
        for key, value in payload.items():
            if value is not None:
                continue
            filled = {k: v for k, v in payload.items() if v is not None and k != key}
            moved = _renamed(key, filled)
            nulls = [s for s in with_json if key in s[2]["payload"] and s[2]["payload"][key] is None]
            having = [s for s in with_json if s[2]["payload"].get(key) is not None]
            new_versions = {s[2].get("version") for s in nulls if s[2].get("version")}
            old_versions = {s[2].get("version") for s in having if s[2].get("version")}
            only_new = bool(new_versions) and not (new_versions & old_versions) and bool(having)
            if moved is None and not only_new:
                continue
            if not having and _consumer_released(evidence, who, recs[0].ts):
                return None
            lacking = [s for s in nulls if moved is None or _renamed(key, s[2]["payload"]) == moved]
            return _changed(who, key, recs, lacking or [(item, i, m)], having, moved, "carry null for")
    return None


def _changed(
    who: str, key: str, recs: list[Rec], lacking: list[Sample], having: list[Sample], moved: str | None, how: str
) -> Finding:
    new = [s[2] for s in lacking]
    producer = _from(new)
    old_from = _from([s[2] for s in having])
    first, last = recs[0], recs[-1]
    now = f" (now {moved})" if moved else ""
    by = f" from {producer}" if producer else ""
    mixed = (
        f"; {len(having)} sampled message(s){' from ' + old_from if old_from else ''} still carry it" if having else ""
    )
    return Finding(
        analyzer="payload_changed",
        domain=Domain.LOGS,
        role="cause",
        code="payload_changed",
        category=Category.DATA_QUALITY,
        title=f"messages{by} {how} '{key}'{now}: {who} fails on them ({len(recs)}x)",
        mechanism=(
            f"The messages{by} changed shape: {len(lacking)} sampled message(s) on "
            f"{lacking[0][0].data.get('queue') or lacking[0][0].object} {how} '{key}'{now}{mixed}, and {who}, "
            f"which reads '{key}', fails on each ('{_error_line(first.msg)}' x{len(recs)} "
            f"{span_text(first.ts, last.ts)}). The producer's payload no longer matches the contract the consumer "
            "was built on: the data changed, not the consumer's code."
        ),
        object=producer or who,
        score=0.8,
        ts=first.ts,
        tags=object_tags(first.item, who),
        explains=list(_SHAPE_EXPLAINS),
        evidence=[ref_of(first), _sample_ref(*lacking[0])] + ([_sample_ref(*having[0])] if having else []),
        actions=[
            Action(
                description=f"Compare the new messages{by} with the old ones: the keys the consumer reads",
                command="aws sqs receive-message --queue-url <dlq-url> --max-number-of-messages 10 "
                "--visibility-timeout 0  # or: kcat -C -b <broker> -t <topic> -o -10 -e",
            ),
            Action(
                description=f"Have the producer{by} restore '{key}' (roll back, or publish both shapes) or release "
                "the consumer that reads the new shape; then redrive the failed messages",
                command="aws sqs start-message-move-task --source-arn <dlq-arn>",
                kind="write",
            ),
        ],
    )


def _decode_mismatch(
    who: str, recs: list[Rec], samples: list[tuple[EvidenceItem, int, dict[str, Any]]]
) -> Finding | None:
    first = recs[0]
    expects_binary = _EXPECTS_BINARY.search(first.msg) is not None
    odd = [s for s in samples if s[2].get("encoding") == ("json" if expects_binary else "binary")]
    usual = [s for s in samples if s[2].get("encoding") == ("binary" if expects_binary else "json")]
    if not odd or (not usual and not expects_binary):
        return None
    item, index, message = odd[0]
    where = item.data.get("queue") or item.object
    at = f" from offset {message['offset']}" if message.get("offset") else ""
    wrong, right = ("JSON text", "its binary encoding") if expects_binary else ("bytes that are not JSON", "JSON")
    return Finding(
        analyzer="payload_changed",
        domain=Domain.LOGS,
        role="cause",
        code="payload_encoding_changed",
        category=Category.DATA_QUALITY,
        title=f"{where} holds records in the wrong encoding ({wrong}){at}: {who} cannot decode them",
        mechanism=(
            f"{len(odd)} sampled record(s) on {where}{at} are {wrong} where the topic carries {right}; {who} fails "
            f"to decode them ('{_error_line(first.msg)}' x{len(recs)} {span_text(first.ts, recs[-1].ts)}) and stops "
            "at the first one. Whoever wrote those records wrote the wrong format: the data is bad, not the consumer."
        ),
        object=where,
        score=0.8,
        ts=first.ts,
        tags=object_tags(first.item, who),
        explains=list(_DECODE_EXPLAINS),
        evidence=[ref_of(first), _sample_ref(item, index, message)],
        actions=[
            Action(
                description="Find who wrote the first odd record (its headers, its time: a replay or backfill job)",
                command=f"kcat -C -b <broker> -t {where} -o <offset> -c 1 -f 'ts=%T headers=%h key=%k\\n'",
            ),
            Action(
                description="Skip the bad records: move the consumer group's offset past them",
                command=f"kafka-consumer-groups --bootstrap-server <broker> --group <group> --topic {where} "
                "--reset-offsets --to-offset <first good offset> --execute",
                kind="write",
            ),
        ],
    )


def epoch_unit_split(evidence: EvidenceSet) -> str:
    """A time field the sampled messages carry in two units (epoch seconds in some, milliseconds in others), as
    ": field recordedAt is in seconds in the messages from teltrack 4.2.0 and in milliseconds in the others";
    else ""."""
    with_json = [m for _, _, m in _samples(evidence) if isinstance(m.get("payload"), dict)]
    fields: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for m in with_json:
        for key, value in m["payload"].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                seconds, millis = fields.setdefault(key, ([], []))
                if 1e9 <= value < 1e10:
                    seconds.append(m)
                elif 1e12 <= value < 1e13:
                    millis.append(m)
    for key, (seconds, millis) in fields.items():
        if seconds and millis:
            # the new unit is the one the later messages carry (else the fewer)
            at_s, at_ms = _median_ts(seconds), _median_ts(millis)
            new_is_seconds = at_s > at_ms if at_s and at_ms else len(seconds) <= len(millis)
            unit, other = ("seconds", "milliseconds") if new_is_seconds else ("milliseconds", "seconds")
            by = _from(seconds if new_is_seconds else millis)
            return (
                f": field {key} is in {unit} in the messages{' from ' + by if by else ''} and in {other} in the others"
            )
    return ""


def _median_ts(messages: list[dict[str, Any]]) -> float:
    stamps = sorted(m["ts"] for m in messages if isinstance(m.get("ts"), int | float))
    return stamps[len(stamps) // 2] if stamps else 0.0
