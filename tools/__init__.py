"""The tool catalog: what actually touches systems. Each tool is a ToolSpec registered in CATALOG."""

from tools import (  # noqa: F401  (registration)
    anomalies,
    datastores,
    host,
    logs,
    net,
    pools,
    remediation_alerts,
    remediation_db,
    remediation_host,
    remediation_redis,
)
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, Toolset, ToolSpec, finding


def load_tool_modules(modules: list[str]) -> Toolset:
    """Import the extra tool modules named in settings (each registers its tools in CATALOG)."""
    import importlib

    for name in modules:
        importlib.import_module(name)
    return CATALOG


__all__ = ["CATALOG", "ToolArgs", "ToolContext", "ToolSpec", "Toolset", "finding", "load_tool_modules"]
