"""Consolidation, in the spirit of sleep-time compute: while the service is idle, tidy what it remembers.

Expire cache entries and stale facts, write the cache's pending hit counts, save the index files (a restart
then loads them instead of rebuilding from the database), merge duplicate episodes, and list plans that
succeeded repeatedly as playbook candidates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from memory.cache import SemanticCache
from memory.episodic import EpisodicMemory
from memory.semantic import SemanticMemory

log = structlog.get_logger(__name__)


def consolidate(
    cache: SemanticCache | None, episodes: EpisodicMemory, facts: SemanticMemory, *, reload_indexes: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    if reload_indexes:  # vectors changed under us (memory_reembed): every partition reloads from the database
        for index in [episodes.index, facts.index] + ([cache.index] if cache is not None else []):
            index.drop()
    report: dict[str, Any] = {
        "facts_expired": facts.expire(),
        "episodes_merged": episodes.merge_duplicates(),
        "indexes_reloaded": reload_indexes,
    }
    if cache is not None:
        report["cache_expired"] = cache.expire()
        cache.flush_hits()
        cache.index.save()
    episodes.index.save()
    facts.index.save()
    report["playbook_candidates"] = episodes.playbook_candidates()
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


class Consolidator:
    """Runs consolidate() every interval in a background thread, and on demand."""

    def __init__(
        self,
        cache: SemanticCache | None,
        episodes: EpisodicMemory,
        facts: SemanticMemory,
        every_s: float,
        reembedded_at: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.cache, self.episodes, self.facts = cache, episodes, facts
        self.every_s = every_s
        self.reembedded_at = reembedded_at
        self._seen_reembed = reembedded_at()
        self.last: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_now(self) -> dict[str, Any]:
        with self._lock:  # one consolidation at a time
            stamp = self.reembedded_at()
            reload_indexes, self._seen_reembed = stamp > self._seen_reembed, max(stamp, self._seen_reembed)
            report = consolidate(self.cache, self.episodes, self.facts, reload_indexes=reload_indexes)
            self.last = {**report, "at": time.time()}
            return self.last

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.every_s):
                try:
                    report = self.run_now()
                    log.info("memory consolidated", **{k: v for k, v in report.items() if k != "playbook_candidates"})
                except Exception as exc:
                    log.warning("consolidation failed", error=repr(exc))

        self._thread = threading.Thread(target=loop, name="memory-consolidation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.run_now()  # leave index files and hit counts written for the next start
        except Exception as exc:
            log.warning("final consolidation failed", error=repr(exc))
