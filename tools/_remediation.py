"""What the write tools share: how a refusal reads. Queries are shown masked by tools.pg.mask_query."""

from __future__ import annotations

from typing import Any

from core.types import ToolResult, ToolStatus

# the prefix of every PostgreSQL application_name opsgraph connects with: its own sessions are never a target
OPSGRAPH_APPLICATION_NAME = "opsgraph"


def refused(summary: str, **data: Any) -> ToolResult:
    """The write was not done because a rule forbids it (not a failure of the target)."""
    return ToolResult(status=ToolStatus.ERROR, summary=summary, data={"error_code": "refused", **data})


def failed(summary: str, code: str, **data: Any) -> ToolResult:
    """The target could not be read or changed (unreachable, gone, an error it returned)."""
    return ToolResult(status=ToolStatus.ERROR, summary=summary, data={"error_code": code, **data})
