"""Every error leaves the API as {"error": {"code", "message", "details"?}} with a 4xx for bad input."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agents.errors import PlanInvalid
from core.errors import Conflict, NotFound, OpsgraphError, UserError
from core.policies import PolicyInvalid
from services.api.auth import Forbidden, Unauthenticated

_STATUS_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        err["details"] = details
    return {"error": err}


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
        status = 404 if isinstance(exc, NotFound) else 409 if isinstance(exc, Conflict) else 400
        status = getattr(exc, "http_status", status)  # an error that names its own status (413 for a bundle)
        if isinstance(exc, PlanInvalid | PolicyInvalid):
            return JSONResponse(error_body(exc.code, str(exc), exc.reasons), status_code=422)
        if not isinstance(exc, UserError):
            status = 503
        return JSONResponse(error_body(exc.code, str(exc)), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


class BodyLimitMiddleware:
    """Refuses bodies above the limit with 413 before any handler reads them (also for chunked bodies).
    `overrides` gives some paths their own limit (an evidence bundle upload is larger than any JSON request)."""

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

        async def limited() -> Message:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(send, max_bytes)

    async def _refuse(self, send: Send, max_bytes: int) -> None:
        import json

        body = json.dumps(error_body("body_too_large", f"request body over {max_bytes} bytes")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
