"""Following the control plane: every pod polls the config database's version counter (and, in
distributed mode, follows the config topic first).

``SnapshotFollower`` keeps the pod's snapshot current. Every
``poll_interval_s`` (default 0.2 s) it reads the head row (one primary-key
read); a newer version's document is fetched, compiled, swapped into the
runtime with one reference change, saved as the last good snapshot on local
disk, and recorded as ``config.published`` in the pod's event log (event id
``config/{version}``, so once per log however many times it is adopted). A
change made through this pod's admin API is adopted before the call returns.

When the database is unreachable the pod keeps serving what it has (and
starts from ``state_dir/snapshot.json`` if it must); polling continues and
the pod catches up as soon as the database is back.

Distributed mode adds a ``feed`` (``streams.config_topic.KafkaSnapshotFeed``, attached by
``farebox.config_topic``,
the compacted config topic held in memory) and a ``publisher``. Every poll
reads the feed (a memory read) and adopts a newer snapshot from it (source
``topic``); the database is then read only every ``db_poll_s`` as the
fallback and the source of truth. When the database is ahead of the topic (a
publish lost while Kafka was away, a commit by ``farebox config apply``, two
publishers racing) the pod adopts the database's version and publishes it
again, which repairs the topic for every other pod; extra copies are harmless
(the feed keeps the highest version). A topic *ahead* of the database (the
database restored from a backup, or replaced while the topic was kept) is not
trusted: the pod goes back to the database's version and refuses those topic
versions. Neither Kafka nor the database being down stops the pod: it serves
what it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from ledger.events import ConfigPublished
from proxy.control.db.store import ConfigDB
from proxy.control.document import compile_document, save_last_good
from proxy.control.errors import ControlUnavailable
from proxy.control.problems import ConfigError
from proxy.control.publish import SnapshotFeed, SnapshotPublisher
from proxy.snapshot import Secrets, Snapshot

log = logging.getLogger("farebox.reload")

Resolve = Callable[[Sequence[str]], tuple[dict[str, str], list[str]]]  # secret names -> (found, missing)

AUTHORITATIVE = ("database", "topic")  # sources a pod does not re-adopt the same version from


class SnapshotFollower:
    """Keeps one pod's snapshot current (module docstring). ``state_dir`` holds the last good snapshot;
    ``resolve`` finds provider secrets a new snapshot names (from the environment or the secrets file: the
    composition root's, as ``(found, missing)``)."""

    def __init__(self, state_dir: Path, poll_interval_s: float, resolve: Resolve, db: ConfigDB | None,
                 swap: Callable[[Snapshot], None], secrets: Secrets, emit: Callable[[Any], object] | None = None, *,
                 feed: SnapshotFeed | None = None, publisher: SnapshotPublisher | None = None,
                 db_poll_s: float | None = None) -> None:
        self.state_dir = state_dir
        self.poll_interval_s = poll_interval_s
        self.resolve = resolve
        self.feed = feed
        self.publisher = publisher  # told when the database is ahead of the feed
        self.db_poll_s = db_poll_s  # None: the database every poll (no feed)
        self._db_polled_at = float("-inf")
        self._refused = 0  # topic versions up to this one are not taken (did not compile, or beyond the database)
        self.db = db
        self.swap = swap
        self.secrets = secrets
        self.emit = emit
        self.version = 0
        self.content_hash = ""
        self.source = "none"  # database | topic | disk
        self.db_ok = db is not None
        self.adopted_at = 0.0
        self._lock = asyncio.Lock()
        # Called with a new version and its document before it is swapped in: a config canary keeps the requests
        # outside its slice on the baseline from the first request of the new version (``rollout_runner.prepare``).
        self.prepare: Callable[[int, dict[str, Any]], Awaitable[None]] | None = None

    def status(self) -> dict[str, Any]:
        out = {"version": self.version, "content_hash": self.content_hash, "source": self.source,
               "database": "ok" if self.db_ok else "unreachable"}
        if self.feed is not None:
            head = self.feed.head()
            out["topic_version"] = head[0] if head is not None else None
        return out

    def adopt_sync(self, version: int, doc: dict[str, Any], source: str) -> Snapshot:
        """Compile, swap, save to disk (start-up). Raises ConfigError if the document does not compile."""
        snap = compile_document(doc, version)
        self.install(version, snap, source)
        if source == "database":
            save_last_good(self.state_dir, version, doc)
        return snap

    def install(self, version: int, snap: Snapshot, source: str) -> None:
        """Swap ``snap`` in (one reference change) and record it; on the event loop."""
        refs = {d.secret_ref for d in snap.deployments.values() if d.secret_ref} - self.secrets.names()
        if refs:
            found, missing = self.resolve(sorted(refs))
            self.secrets.merge(found)
            for name in missing:  # the name only, never a value
                log.error("snapshot %d: provider key %s is not declared, or not set in the environment or the secrets "
                          "file", version, name)
        self.swap(snap)
        self.version, self.content_hash, self.source, self.adopted_at = version, snap.content_hash, source, time.time()
        if self.emit is not None:
            self.emit(ConfigPublished(version=version, content_hash=snap.content_hash, time=_utcnow()))
        log.info("snapshot %d live from %s (%s)", version, source, snap.content_hash[:12])

    async def adopt(self, version: int, doc: dict[str, Any], source: str = "database", *, force: bool = False) -> None:
        async with self._lock:
            if version <= self.version and self.source in AUTHORITATIVE and not force:
                return
            snap = await asyncio.to_thread(compile_document, doc, version)
            if self.prepare is not None:
                try:
                    await self.prepare(version, doc)
                except Exception:  # the config database down: the runner's next tick catches up
                    log.exception("config canary not prepared for snapshot %d", version)
            self.install(version, snap, source)
            await asyncio.to_thread(save_last_good, self.state_dir, version, doc)

    async def poll_once(self) -> None:
        await self.poll_feed()
        if self.db is None:
            return
        now = time.monotonic()
        if self.feed is not None and self.db_poll_s is not None and now - self._db_polled_at < self.db_poll_s:
            return
        self._db_polled_at = now
        try:
            head = await asyncio.to_thread(self.db.head)
            if head is not None and (head[0] > self.version or self.source not in AUTHORITATIVE):
                doc = await asyncio.to_thread(self.db.document, head[0])
                await self.adopt(head[0], doc)
                self.repair_topic(head[0], doc)
            elif head is not None and head[0] < self.version and self.source == "topic":
                await self.distrust_topic(head[0])
            elif head is not None and self.topic_behind(head[0]):
                self.repair_topic(head[0], await asyncio.to_thread(self.db.document, head[0]))
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

    async def poll_feed(self) -> None:
        """Adopt the feed's snapshot if it is newer than ours (a memory read; no I/O unless it is)."""
        head = self.feed.head() if self.feed is not None else None
        if head is None or head[0] <= self.version or head[0] <= self._refused:
            return
        try:
            await self.adopt(head[0], self.feed.document(head[0]), "topic")  # type: ignore[union-attr]
        except LookupError:
            return  # superseded between the two reads: the next poll takes the newer one
        except ConfigError as exc:
            self._refused = max(self._refused, head[0])  # said once, not every poll
            log.error("snapshot %d from the config topic does not compile on this pod, still serving %d:\n%s",
                      head[0], self.version, exc)

    async def distrust_topic(self, db_version: int) -> None:
        """The topic is ahead of the database (restored, or replaced under a kept topic): the database
        wins. Topic versions up to the one served are refused from now on; publish the database's."""
        log.error("config topic ahead of the config database (topic %d, database %d): following the database",
                  self.version, db_version)
        self._refused = max(self._refused, self.version)
        doc = await asyncio.to_thread(self.db.document, db_version)  # type: ignore[union-attr]
        await self.adopt(db_version, doc, force=True)
        if self.publisher is not None:
            self.publisher.publish(db_version, doc)  # compaction keeps the last written: fresh pods get this

    def topic_behind(self, version: int) -> bool:
        """Is the config topic (as this pod's feed sees it) older than ``version``?"""
        if self.feed is None or self.publisher is None:
            return False
        head = self.feed.head()
        return head is None or head[0] < version

    def repair_topic(self, version: int, doc: dict[str, Any]) -> None:
        """The database is ahead of the topic: publish its version (never blocks; a repeat is a no-op)."""
        if self.topic_behind(version):
            log.info("config topic behind the database (snapshot %d): publishing it", version)
            self.publisher.publish(version, doc)  # type: ignore[union-attr]

    async def follow(self) -> None:
        """Runs until cancelled."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.poll_once()
            except Exception:  # a bug must not stop the pod from following
                log.exception("snapshot poll failed")


async def follow_ctx(app: Any, follower: SnapshotFollower, emit: Callable[[Any], object],
                     db: ConfigDB | None) -> AsyncIterator[None]:
    """A pod's lifetime (aiohttp cleanup context, via ``functools.partial``): record the snapshot it
    starts on (``config.published``), follow newer ones, and close the config database at the end."""
    emit(ConfigPublished(version=follower.version, content_hash=follower.content_hash, time=_utcnow()))
    task = asyncio.create_task(follower.follow())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if db is not None:
        await asyncio.to_thread(db.close)


def _utcnow():  # type: ignore[no-untyped-def]
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
