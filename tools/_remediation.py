"""What the write tools share: how a refusal reads, and how a query is shown without the data in it."""

from __future__ import annotations

import re
from typing import Any

from core.types import ToolResult, ToolStatus

# the prefix of every PostgreSQL application_name opsgraph connects with: its own sessions are never a target
OPSGRAPH_APPLICATION_NAME = "opsgraph"

_SQL_STRING = re.compile(r"(?:\b[EeBbXxUu]&?)?'(?:[^']|'')*'")
_SQL_DOLLAR_QUOTED = re.compile(r"\$([A-Za-z_]\w*)?\$.*?\$\1\$", re.S)
_SQL_NUMBER = re.compile(r"(?<![\w$.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b")


def mask_sql_literals(query: str, limit: int = 300) -> str:
    """A query as an approver may see it: string, dollar-quoted and numeric literals become `?` (they may be
    personal data or secrets); identifiers and parameters ($1) stay, so the statement is still recognisable."""
    masked = _SQL_DOLLAR_QUOTED.sub("?", query)
    masked = _SQL_STRING.sub("?", masked)
    masked = _SQL_NUMBER.sub("?", masked)
    masked = " ".join(masked.split())
    return masked if len(masked) <= limit else masked[: limit - 1] + "…"


def refused(summary: str, **data: Any) -> ToolResult:
    """The write was not done because a rule forbids it (not a failure of the target)."""
    return ToolResult(status=ToolStatus.ERROR, summary=summary, data={"error_code": "refused", **data})


def failed(summary: str, code: str, **data: Any) -> ToolResult:
    """The target could not be read or changed (unreachable, gone, an error it returned)."""
    return ToolResult(status=ToolStatus.ERROR, summary=summary, data={"error_code": code, **data})
