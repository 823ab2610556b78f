"""Errors split as pydantic-ai does: you used it wrong (UserError) or it failed while running (RunError)."""

from __future__ import annotations


class OpsgraphError(Exception):
    """Base of every opsgraph error. `code` is the machine-readable name the API returns."""

    code = "opsgraph_error"


class UserError(OpsgraphError):
    """The caller asked for something invalid; the message says how to fix it."""

    code = "invalid_request"


class NotFound(UserError):
    code = "not_found"


class Conflict(UserError):
    code = "conflict"


class RunError(OpsgraphError):
    """Something failed at run time (a dependency down, a tool broke)."""

    code = "run_error"
