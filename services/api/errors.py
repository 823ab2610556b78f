"""Every error leaves the API as {"error": {"code", "message", "details"?}} with a 4xx for bad input, and every
status code an operation can return is in the OpenAPI document (`document_errors`)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agents.errors import PlanInvalid
from core.errors import Conflict, LimitReached, NotFound, OpsgraphError, TooLarge, UserError
from core.policies import PolicyInvalid
from services.api.auth import Forbidden, Unauthenticated

_STATUS_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorEnvelope(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


# status -> what it means and the codes it carries (docs/limits-and-metrics.md lists them too)
ERROR_STATUSES: dict[int, str] = {
    400: "Unreadable body: `invalid_json` (not JSON, or not UTF-8).",
    401: "`unauthenticated`: no valid credential.",
    403: "`forbidden`: the credential lacks the scope.",
    404: "`not_found`: no such resource (or another tenant's).",
    409: "`conflict`, `schedule_limit`: the resource's state forbids it, or a per-tenant cap is reached.",
    413: "`body_too_large`, `bundle_too_large`: the body is over its configured size.",
    422: "`invalid_request`, `unknown_field`, `plan_invalid`, `policy_invalid`: the request is well-formed but wrong.",
    429: "`rate_limited`, `too_many_streams`, `tuning_queue_full`: over a limit; retry after `Retry-After` seconds.",
    503: "A dependency (database, Redis) is unavailable.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds until a retry may succeed.", "schema": {"type": "integer"}}}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries of these statuses, each the error envelope."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorEnvelope, "description": ERROR_STATUSES[status]}
        if status == 429:
            entry["headers"] = _RETRY_AFTER
        out[status] = entry
    return out


_UNAUTHENTICATED_PATHS = {"/healthz", "/readyz"}


def document_errors(app: FastAPI) -> None:
    """Add to each operation of the OpenAPI document the error statuses every route shares, by what the
    operation takes: any may be refused (401, 403, 429) or meet a dependency down (503); one with parameters
    or a body may get 422; one with a path parameter 404; a write 413 (the body limit applies to every write);
    one with a body 400. Statuses only some routes return (409, 429 of a cap) are named on those routes with
    `error_responses`. Done on the document, not on the routes: it then covers routes of included routers."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = generate()
        envelope = ErrorEnvelope.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name, sub in envelope.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas.setdefault("ErrorEnvelope", envelope)
        for path, operations in doc.get("paths", {}).items():
            for method, op in operations.items():
                responses = op.setdefault("responses", {})
                for status in _statuses_of(path, method, op):
                    entry: dict[str, Any] = {
                        "description": ERROR_STATUSES[status],
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
                    }
                    if status == 429:
                        entry["headers"] = _RETRY_AFTER
                    responses.setdefault(str(status), entry)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _statuses_of(path: str, method: str, op: dict[str, Any]) -> set[int]:
    statuses = {429, 503} if path in _UNAUTHENTICATED_PATHS else {401, 403, 429, 503}
    params = op.get("parameters", [])
    if params or "requestBody" in op:
        statuses.add(422)
    if any(p.get("in") == "path" for p in params):
        statuses.add(404)
    if method.upper() in {"POST", "PUT", "PATCH", "DELETE"}:
        statuses.add(413)
        if "requestBody" in op:
            statuses.add(400)
    return statuses


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        err["details"] = details
    return {"error": err}


def status_of(exc: OpsgraphError) -> int:
    named = getattr(exc, "http_status", None)  # an error that names its own status (400 for a bad archive)
    if isinstance(named, int):
        return named
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, LimitReached):
        return 429
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, UserError):
        return 422  # well-formed but wrong, as request validation answers
    return 503


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(error_body("invalid_json", "request body is not valid JSON"), status_code=400)
        details = [
            {"loc": [str(p) for p in e.get("loc", [])], "msg": e.get("msg"), "type": e.get("type")} for e in errors
        ]
        unknown = [d for d in details if d["type"] == "extra_forbidden"]
        code = "unknown_field" if unknown else "invalid_request"
        first = details[0] if details else {"loc": [], "msg": "invalid"}
        msg = f"{'.'.join(first['loc'][1:]) or 'body'}: {first['msg']}"
        return JSONResponse(error_body(code, msg, details), status_code=422)

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="opsgraph"'}
        return JSONResponse(error_body("unauthenticated", str(exc)), status_code=401, headers=headers)

    @app.exception_handler(Forbidden)
    async def _forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse(error_body("forbidden", str(exc)), status_code=403)

    @app.exception_handler(OpsgraphError)
    async def _opsgraph(_: Request, exc: OpsgraphError) -> JSONResponse:
        if isinstance(exc, PlanInvalid | PolicyInvalid):
            return JSONResponse(error_body(exc.code, str(exc), exc.reasons), status_code=422)
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, LimitReached) else None
        return JSONResponse(error_body(exc.code, str(exc)), status_code=status_of(exc), headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI reads JSON bodies as UTF-8 and reports a decode error as a generic 400
            return JSONResponse(error_body("invalid_json", "request body is not UTF-8 encoded JSON"), status_code=400)
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


class BodyLimitMiddleware:
    """Refuses bodies above the limit with 413 before any handler reads them (also for chunked bodies).

    `overrides` gives some paths their own limit (an evidence bundle upload is larger than any JSON request).
    A chunked body has no Content-Length: the limit trips while the route reads the body, and FastAPI turns
    any exception raised while reading into its own 400 answer. So the middleware also holds back whatever
    the application answers once the limit has tripped, and sends its 413 instead."""

    def __init__(self, app: ASGIApp, max_bytes: int, overrides: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.overrides = overrides or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.overrides.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await self._refuse(send, max_bytes)
            return
        seen = 0
        too_large = False
        started = False

        async def limited() -> Message:
            nonlocal seen, too_large
            if too_large:
                raise _TooLarge
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large and not started:
                return  # the application's answer to a body it could not read: ours goes out instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, limited, guarded_send)
        if too_large and not started:
            await self._refuse(send, max_bytes)

    async def _refuse(self, send: Send, max_bytes: int) -> None:
        body = json.dumps(error_body("body_too_large", f"request body over {max_bytes} bytes")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),  # the rest of the body is not read
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
