"""Embedded mode: pick up config and key-file changes while serving.

Every ``interval_s`` the watcher compares the config file's and key file's
(mtime, size); on a change it re-parses everything and, if valid, swaps in a
new snapshot numbered one higher. An invalid edit is logged with every
problem and the last good snapshot keeps serving. So a key minted with
``farebox keys create`` is usable within about a second, with no restart.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from farebox.settings import Settings, load_settings
from proxy.control.problems import ConfigError
from proxy.control.snapshot import Snapshot

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


async def watch(settings: Settings, swap: Callable[[Snapshot], None], interval_s: float = 1.0) -> None:
    """Runs until cancelled."""
    paths = settings.watched_files
    seen = _stamp(*paths)
    version = settings.snapshot.version
    last_hash = settings.snapshot.content_hash
    while True:
        await asyncio.sleep(interval_s)
        now = _stamp(*paths)
        if now == seen:
            continue
        seen = now
        try:
            fresh = await asyncio.to_thread(load_settings, settings.config_path)
        except ConfigError as exc:
            log.error("config change rejected, still serving snapshot %d:\n%s", version, exc)
            continue
        if fresh.snapshot.content_hash == last_hash:
            continue
        version += 1
        last_hash = fresh.snapshot.content_hash
        swap(_renumbered(fresh.snapshot, version))
        log.info("snapshot %d live (%s)", version, last_hash[:12])


def _renumbered(snapshot: Snapshot, version: int) -> Snapshot:
    return replace(snapshot, version=version)
