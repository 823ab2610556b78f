"""The tool catalog: what actually touches systems. Each tool is a ToolSpec registered in CATALOG."""

from tools import anomalies, datastores, host, logs, net, pools  # noqa: F401  (registration)
from tools._registry import CATALOG
from tools.base import ToolArgs, ToolContext, ToolSpec, Toolset, finding

__all__ = ["CATALOG", "ToolArgs", "ToolContext", "ToolSpec", "Toolset", "finding"]
