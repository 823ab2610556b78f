"""Errors split as pydantic-ai does: you used it wrong (UserError) or it failed while running (RunError)."""

from __future__ import annotations


class OpsgraphError(Exception):
    """Base of every opsgraph error. `code` is the machine-readable name the API returns."""

    code = "opsgraph_error"

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        if code is not None:  # one class, several machine-readable names (schedule_limit, bundle_too_large ...)
            self.code = code


class UserError(OpsgraphError):
    """The caller asked for something invalid; the message says how to fix it."""

    code = "invalid_request"


class NotFound(UserError):
    code = "not_found"


class Conflict(UserError):
    code = "conflict"


class LimitReached(UserError):
    """A cap that frees up with time (queued tuning runs, open event streams): the API answers 429 with
    Retry-After."""

    code = "limit_reached"

    def __init__(self, *args: object, code: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(*args, code=code)
        self.retry_after_s = max(1, retry_after_s)


class TooLarge(UserError):
    """A body, bundle or upload above its configured size: 413."""

    code = "too_large"


class RunError(OpsgraphError):
    """Something failed at run time (a dependency down, a tool broke)."""

    code = "run_error"
