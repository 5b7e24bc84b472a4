"""Embedded mode: the control plane is the config file plus the state files.

``Reloader`` re-parses everything and, if valid, swaps in a new snapshot
numbered one higher; an invalid edit is logged with every problem and the
last good snapshot keeps serving. It runs when a watched file changes (polled
every second, so a key minted with ``farebox keys create`` is live within
about a second, no restart) and right after an admin API write.
``EmbeddedControl`` is the admin API's store: it appends to a state file and
reloads before answering, so the change is live when the caller hears back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from farebox.settings import Settings, load_settings
from proxy.control.problems import ConfigError
from proxy.control.snapshot import Snapshot
from proxy.control.statefile import append_jsonl

log = logging.getLogger("farebox.reload")


def _stamp(*paths: Path) -> tuple:
    out: list[tuple[int, int] | None] = []
    for p in paths:
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


class Reloader:
    def __init__(self, settings: Settings, swap: Callable[[Snapshot], None]) -> None:
        self.settings = settings
        self.swap = swap
        self.version = settings.snapshot.version
        self.last_hash = settings.snapshot.content_hash
        self._seen = _stamp(*settings.watched_files)
        self._lock = asyncio.Lock()

    async def reload_now(self) -> Snapshot | None:
        """Re-read config and state; the new snapshot if anything changed. Raises ConfigError."""
        async with self._lock:
            self._seen = _stamp(*self.settings.watched_files)
            fresh = await asyncio.to_thread(load_settings, self.settings.config_path)
            if fresh.snapshot.content_hash == self.last_hash:
                return None
            self.version += 1
            self.last_hash = fresh.snapshot.content_hash
            snapshot = replace(fresh.snapshot, version=self.version)
            self.swap(snapshot)
            log.info("snapshot %d live (%s)", self.version, self.last_hash[:12])
            return snapshot

    async def watch(self, interval_s: float = 1.0) -> None:
        """Runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            if _stamp(*self.settings.watched_files) == self._seen:
                continue
            try:
                await self.reload_now()
            except ConfigError as exc:
                log.error("config change rejected, still serving snapshot %d:\n%s", self.version, exc)


class EmbeddedControl:
    """The admin API's writes in embedded mode: a state-file line, then a reload."""

    def __init__(self, settings: Settings, reloader: Reloader) -> None:
        self.settings = settings
        self.reloader = reloader

    async def set_budget(self, record: dict[str, Any]) -> None:
        # The admin handler validated the record against the live snapshot, so the file stays loadable.
        await asyncio.to_thread(append_jsonl, self.settings.budgets_file, record)
        try:
            await self.reloader.reload_now()
        except ConfigError:
            log.exception("a budget change made the config invalid")
            raise
