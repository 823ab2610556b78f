"""A background thread that calls one function every so often, logs its failures and stops on request."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class Periodic:
    def __init__(self, name: str, every_s: float, call: Callable[[], Any]) -> None:
        self.name, self.every_s, self.call = name, every_s, call
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.call()
            except Exception as exc:  # the next round tries again
                log.warning("periodic job failed", job=self.name, error=repr(exc))
