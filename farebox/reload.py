"""Following the control plane: every pod polls the config database's version counter.

``SnapshotFollower`` keeps the pod's snapshot current. Every
``poll_interval_s`` (default 0.2 s) it reads the head row (one primary-key
read); a newer version's document is fetched, compiled, swapped into the
runtime with one reference change, saved as the last good snapshot on local
disk, and recorded as ``config.published`` in the pod's event log (event id
``config/{version}``, so once per log however many times it is adopted). A
change made through this pod's admin API is adopted before the call returns.

When the database is unreachable the pod keeps serving what it has (and
starts from ``state_dir/snapshot.json`` if it must); polling continues and
the pod catches up as soon as the database is back. The same poll imports
lines appended to the legacy state files (``keys.jsonl`` ...).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from farebox.control import import_state_files
from farebox.settings import Settings, resolve_secrets
from ledger.events import ConfigPublished
from proxy.control.db.store import ConfigDB
from proxy.control.document import compile_document, save_last_good
from proxy.control.errors import ConfigRejected, ControlUnavailable
from proxy.control.problems import ConfigError
from proxy.control.snapshot import Secrets, Snapshot

log = logging.getLogger("farebox.reload")


class SnapshotFollower:
    def __init__(self, settings: Settings, db: ConfigDB | None, swap: Callable[[Snapshot], None],
                 secrets: Secrets, emit: Callable[[Any], None] | None = None) -> None:
        self.settings = settings
        self.db = db
        self.swap = swap
        self.secrets = secrets
        self.emit = emit
        self.version = 0
        self.content_hash = ""
        self.source = "none"  # database | disk
        self.db_ok = db is not None
        self.adopted_at = 0.0
        self._offsets: dict[str, int] = {}
        self._lock = asyncio.Lock()

    def status(self) -> dict[str, Any]:
        return {"version": self.version, "content_hash": self.content_hash, "source": self.source,
                "database": "ok" if self.db_ok else "unreachable"}

    def adopt_sync(self, version: int, doc: dict[str, Any], source: str) -> Snapshot:
        """Compile, swap, save to disk (start-up). Raises ConfigError if the document does not compile."""
        snap = compile_document(doc, version)
        self.install(version, snap, source)
        if source == "database":
            save_last_good(self.settings.state_dir, version, doc)
        return snap

    def install(self, version: int, snap: Snapshot, source: str) -> None:
        """Swap ``snap`` in (one reference change) and record it; on the event loop."""
        refs = {d.secret_ref for d in snap.deployments.values() if d.secret_ref} - self.secrets.names()
        if refs:
            found, missing = resolve_secrets(self.settings, sorted(refs))
            self.secrets.merge(found)
            for name in missing:  # the name only, never a value
                log.error("snapshot %d: provider key %s is not set in the environment or the secrets file", version, name)
        self.swap(snap)
        self.version, self.content_hash, self.source, self.adopted_at = version, snap.content_hash, source, time.time()
        if self.emit is not None:
            self.emit(ConfigPublished(version=version, content_hash=snap.content_hash, time=_utcnow()))
        log.info("snapshot %d live from %s (%s)", version, source, snap.content_hash[:12])

    async def adopt(self, version: int, doc: dict[str, Any]) -> None:
        async with self._lock:
            if version <= self.version and self.source == "database":
                return
            snap = await asyncio.to_thread(compile_document, doc, version)
            self.install(version, snap, "database")
            await asyncio.to_thread(save_last_good, self.settings.state_dir, version, doc)

    async def poll_once(self) -> None:
        if self.db is None:
            return
        try:
            await asyncio.to_thread(import_state_files, self.db, self.settings.state_dir, self._offsets)
        except ConfigRejected as exc:
            log.error("state file import rejected:\n%s", exc.message)
        except ControlUnavailable:
            pass  # reported by the head read below
        try:
            head = await asyncio.to_thread(self.db.head)
            if head is not None and (head[0] > self.version or self.source != "database"):
                doc = await asyncio.to_thread(self.db.document, head[0])
                await self.adopt(head[0], doc)
        except ControlUnavailable:
            if self.db_ok:
                log.warning("config database unreachable; serving snapshot %d until it is back", self.version)
            self.db_ok = False
            return
        except ConfigError as exc:
            log.error("published snapshot does not compile on this pod, still serving %d:\n%s", self.version, exc)
        if not self.db_ok:
            log.info("config database reachable again (snapshot %d)", self.version)
        self.db_ok = True

    async def follow(self) -> None:
        """Runs until cancelled."""
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            try:
                await self.poll_once()
            except Exception:  # a bug must not stop the pod from following
                log.exception("snapshot poll failed")


def _utcnow():  # type: ignore[no-untyped-def]
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
