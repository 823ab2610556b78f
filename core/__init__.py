"""The smallest shared layer: settings, persistence, events, shared types. Imports nothing above it."""

from core.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
