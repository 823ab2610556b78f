"""Celery app, pools and queues, the one task that runs a tool, and the dispatcher that releases nodes."""

from workers.dispatch import Dispatcher, DispatchProgress

__all__ = ["DispatchProgress", "Dispatcher"]
