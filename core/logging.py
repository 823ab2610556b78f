"""Structured logs for every process; secrets are masked before anything is written."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

# Keys whose string values are secrets wherever they appear (arguments, events, answers, log fields).
# "passw"/"pwd", not "pass": a count called "passed" is not a password.
_SECRET_KEYS = re.compile(
    r"(passw|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|authorization|credential|cookie)",
    re.I,
)
# ...unless the key names a reference to a secret, not the secret: a Kubernetes volume's "secretName", a
# "tokenPath", a "passwordFile" are what an operator needs to see
_SECRET_REFERENCE_KEYS = re.compile(r"(name|ref|path|file|id|count|type|len|length|expiry|expires(_at)?)$", re.I)
_MASK = "***"


# Text patterns, applied in order. Each keeps what an operator needs to read the line (the scheme, the user,
# the key's name) and masks only the secret itself.
def _mask_assignment(m: re.Match[str]) -> str:
    key = re.match(r"[\w.-]*", m.group(1))
    if key and _SECRET_REFERENCE_KEYS.search(key.group(0)):  # secretName: db-creds names a secret; keep it
        return m.group(0)
    quote = m.group(2) or m.group(3) or ""
    return f"{m.group(1)}{quote}***{quote}"  # a quoted value stays quoted


_TEXT_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # PEM private keys, whole
    (
        re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.S),
        r"-----BEGIN \1PRIVATE KEY-----***-----END \1PRIVATE KEY-----",
    ),
    # the password of a URL: postgresql://user:secret@host, redis://:secret@host (never the port or path)
    (re.compile(r"([a-z][a-z0-9+.-]*://[^:/@\s]*:)([^@\s/]+)(@)", re.I), r"\1***\3"),
    # Authorization headers, whatever the scheme (Bearer, Basic, Token, Digest, AWS4-HMAC-SHA256 ...)
    (
        re.compile(r"((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:([a-z0-9-]+)\s+)?[^\s\"',;]+", re.I),
        r"\1\2 ***",
    ),
    # a bearer token on its own
    (re.compile(r"\b(bearer)\s+[a-z0-9._~+/=-]{8,}", re.I), r"\1 ***"),
    # key=value and key: value secrets (DSNs in key=value form, env files, query strings, JSON text)
    (
        re.compile(
            r"([\w.-]*(?:passw(?:or)?d|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key)[\w.-]*"
            r"[\"']?\s*[=:]\s*)(?:(\")[^\"]*\"|(')[^']*'|[^\s&;,\"']+)",
            re.I,
        ),
        _mask_assignment,
    ),
    # opsgraph API keys
    (re.compile(r"\bog_[A-Za-z0-9_-]{16,}"), "og_***"),
    # AWS access key ids
    (re.compile(r"\b(AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), r"\1***"),
    # well-known token shapes: GitHub, Slack, OpenAI-style, JWTs
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{30,}"), r"\1***"),
    (re.compile(r"\b(xox[abprs]-)[A-Za-z0-9-]{10,}"), r"\1***"),
    (re.compile(r"\b(sk-)[A-Za-z0-9_-]{20,}"), r"\1***"),
    (re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"), "***jwt***"),
]


def redact(text: str) -> str:
    """Mask secrets in free text: URL passwords, Authorization headers, bearer and API tokens, `password=...`
    (DSNs in key=value form), opsgraph keys (og_...), AWS access key ids, private keys.

    The one text redaction of opsgraph: arguments, events, answers, node results and logs all go through it
    (via `redact_value`)."""
    if not text:
        return text
    for pattern, replacement in _TEXT_RULES:
        text = pattern.sub(replacement, text)
    return text


def redact_value(value: Any) -> Any:
    """`redact` applied to every string inside a JSON-like value; a string under a secret-named key
    (password, token, api_key, authorization ...) is masked whole. Numbers and booleans are kept."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_item(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def _redact_item(key: str, value: Any) -> Any:
    if isinstance(value, str) and value and _SECRET_KEYS.search(key) and not _SECRET_REFERENCE_KEYS.search(key):
        return _MASK
    return redact_value(value)


def _redact_processor(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return {
        k: (redact(v) if k == "event" and isinstance(v, str) else _redact_item(k, v)) for k, v in event_dict.items()
    }


_plain_factory = logging.getLogRecordFactory()
_exception_formatter = logging.Formatter()


def _redacting_record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """Every standard-library record (uvicorn, celery, httpx, whatever handlers they bring) is redacted when it
    is made, so no handler or formatter ever sees the secret; tracebacks included."""
    record = _plain_factory(*args, **kwargs)
    # redact the template and each argument, keeping their shape: some formatters read record.args themselves
    # (uvicorn's access log unpacks it)
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if isinstance(record.args, tuple):
        record.args = tuple(_redact_arg(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = redact_value(record.args)
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(_exception_formatter.formatException(record.exc_info))
    return record


def _redact_arg(arg: Any) -> Any:
    if arg is None or isinstance(arg, bool | int | float):  # %d and %.2f keep working
        return arg
    if isinstance(arg, str | dict | list | tuple):
        return redact_value(arg)
    # an exception, a URL object, anything whose str() may carry a secret: formatted here, then redacted
    return redact(str(arg))


def install_record_redaction() -> None:
    if logging.getLogRecordFactory() is not _redacting_record_factory:
        logging.setLogRecordFactory(_redacting_record_factory)


class _CurrentStderr:
    """sys.stderr as it is when a line is written, not when logging was configured: a stream swapped out since
    (a test's capture, a daemon's redirect) and closed must not break every later log line."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO", json_logs: bool = False) -> None:
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level.upper(), force=True)
    install_record_redaction()
    renderer: Any = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            _redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
