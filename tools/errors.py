"""Tool-level errors: a target outside the configured roots is the caller's mistake, not a crash."""

from core.errors import UserError


class TargetNotAllowed(UserError):
    code = "target_not_allowed"
