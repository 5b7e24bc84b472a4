"""Config snapshots over the compacted config topic (``fb.config``): the Kafka adapters of the snapshot ports.

The ports are ``proxy.control.publish.SnapshotPublisher`` / ``SnapshotFeed``
(matched by shape: ``streams`` does not import ``proxy``). One record per
committed snapshot, key ``snapshot``, value the JSON
``{"version", "content_hash", "document"}``; compaction keeps the latest
record per key, so a fresh reader of the topic finds the current snapshot
without the history. The topic also carries ``config.published`` audit events
(keyed by their id, see ``streams.kafka.log``): the feed skips them.

``KafkaSnapshotPublisher.publish`` never blocks and never fails the commit
that called it: it records the newest version wanted and wakes a background
task that produces it (acks=all) and, when Kafka is away, logs and retries
every ``retry_s`` with a fresh producer. Only the newest wanted version is
sent (an older one still unsent is superseded), so one publisher never writes
versions out of order. Two committing processes can (a pod retrying v5 while
the CLI wrote v6): the config database stays the source of truth, and pods
that find a newer version there than on the topic publish it again
(``proxy.control.follow``), which repairs the topic.

``KafkaSnapshotFeed`` reads partition 0 of the topic from the beginning with
no consumer group and keeps the newest (version, content hash, document) in
memory; ``head`` and ``document`` are memory reads, cheap enough for the
follower to call every poll. A record whose content hash does not match its
document is refused (logged). Kafka down: the feed keeps what it has, and
aiokafka reconnects; a crash of the read loop restarts it after ``retry_s``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.kafka.clients import ID_HEADER, abandon_producer, stop_consumer, stop_if_cancelled

log = logging.getLogger("farebox.config_topic")

SNAPSHOT_KEY = b"snapshot"
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024  # the topic's max.message.bytes (infra/kafka/topics.py) matches

Digest = Callable[[dict[str, Any]], str]


def encode_snapshot(version: int, content_hash: str, document: dict[str, Any]) -> bytes:
    return orjson.dumps({"version": version, "content_hash": content_hash, "document": document})


def decode_snapshot(value: bytes, digest: Digest) -> tuple[int, str, dict[str, Any]]:
    """(version, content hash, document); ValueError if the record is malformed or its hash is wrong."""
    try:
        body = orjson.loads(value)
        version, claimed, document = int(body["version"]), str(body["content_hash"]), body["document"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed snapshot record: {exc}") from exc
    if not isinstance(document, dict) or digest(document) != claimed:
        raise ValueError(f"snapshot {version}: content hash does not match the document")
    return version, claimed, document


class KafkaSnapshotPublisher:
    """Create inside a running event loop; ``close`` (or ``flush``) before the loop ends."""

    def __init__(self, bootstrap: str, topic: str, digest: Digest, *, client_id: str = "farebox-config",
                 retry_s: float = 1.0, send_timeout_s: float = 10.0) -> None:
        self.bootstrap, self.topic, self.digest = bootstrap, topic, digest
        self.client_id, self.retry_s, self.send_timeout_s = client_id, retry_s, send_timeout_s
        self.sent_version = 0  # the newest version Kafka acknowledged from this publisher
        self.failures = 0  # failed sends so far (retried)
        self._wanted: tuple[int, dict[str, Any]] | None = None
        self._wake = asyncio.Event()
        self._done = asyncio.Event()
        self._done.set()
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def publish(self, version: int, document: dict[str, Any]) -> None:
        """Queue ``version`` for the topic; returns at once (a newer version supersedes an unsent one)."""
        if self._closed or version <= self.sent_version or (self._wanted is not None and version <= self._wanted[0]):
            return
        self._wanted = (version, document)
        self._done.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="config-publisher")
        self._wake.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the newest queued version is acknowledged; False if it is not within ``timeout_s``."""
        try:
            await asyncio.wait_for(self._done.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self, timeout_s: float = 5.0) -> None:
        """Flush for up to ``timeout_s`` (what is still unsent is left to the database fallback), then stop."""
        self._closed = True
        if not await self.flush(timeout_s) and self._wanted is not None:
            log.warning("snapshot %d not on %s at shutdown; pods will find it in the config database",
                        self._wanted[0], self.topic)
        if self._task is not None:
            await _cancelled(self._task, "config publisher")
        await self._drop_producer(graceful=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._wanted is not None and self._wanted[0] > self.sent_version:
                version, document = self._wanted
                try:
                    await asyncio.wait_for(self._send(version, document), self.send_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Kafka away: the commit stands, retry later
                    stop_if_cancelled()  # a cancel aiokafka turned into an error: close() is waiting
                    self.failures += 1
                    log.warning("could not publish snapshot %d to %s (%s); retrying in %.1fs",
                                version, self.topic, type(exc).__name__, self.retry_s)
                    await self._drop_producer(graceful=False)
                    stop_if_cancelled()
                    await asyncio.sleep(self.retry_s)
                    continue
                self.sent_version = max(self.sent_version, version)
                log.info("snapshot %d published to %s", version, self.topic)
            if self._wanted is not None and self._wanted[0] <= self.sent_version:
                self._wanted = None
                self._done.set()

    async def _send(self, version: int, document: dict[str, Any]) -> None:
        if self._producer is None:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all",
                                        enable_idempotence=True, compression_type="gzip",
                                        max_request_size=MAX_SNAPSHOT_BYTES, request_timeout_ms=5000)
            self._producer = producer
            await producer.start()
        value = encode_snapshot(version, self.digest(document), document)
        await self._producer.send_and_wait(self.topic, value, key=SNAPSHOT_KEY,
                                           headers=[(ID_HEADER, f"snapshot/{version}".encode())])

    async def _drop_producer(self, graceful: bool) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if graceful:
            try:
                await asyncio.wait_for(producer.stop(), 5.0)
                return
            except Exception:  # noqa: BLE001 - fall through to abandoning it
                log.debug("config publisher: producer stop failed", exc_info=True)
        await abandon_producer(producer)


class KafkaSnapshotFeed:
    """The newest snapshot on the topic, in memory. ``start`` in a running loop; ``close`` to stop."""

    def __init__(self, bootstrap: str, topic: str, digest: Digest, *, client_id: str = "farebox-config-feed",
                 retry_s: float = 1.0) -> None:
        self.bootstrap, self.topic, self.digest = bootstrap, topic, digest
        self.client_id, self.retry_s = client_id, retry_s
        self.records = 0  # snapshot records read (including superseded ones)
        self._latest: tuple[int, str, dict[str, Any]] | None = None
        self._next_offset: int | None = None  # where to resume after a restart of the read loop
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="config-feed")

    async def close(self) -> None:
        if self._task is not None:
            await _cancelled(self._task, "config feed")
            self._task = None

    def head(self) -> tuple[int, str] | None:
        return (self._latest[0], self._latest[1]) if self._latest is not None else None

    def document(self, version: int) -> dict[str, Any]:
        if self._latest is None or self._latest[0] != version:
            raise LookupError(f"snapshot {version} is not the newest on {self.topic}")
        return self._latest[2]

    def take(self, key: bytes | None, value: bytes | None) -> bool:
        """Fold one record in; True if it is a newer snapshot than the one held."""
        if key != SNAPSHOT_KEY or value is None:
            return False  # a config.published audit event, or a tombstone
        try:
            version, digest, document = decode_snapshot(value, self.digest)
        except ValueError as exc:
            log.error("refused a record on %s: %s", self.topic, exc)
            return False
        self.records += 1
        if self._latest is not None and version <= self._latest[0]:
            return False
        self._latest = (version, digest, document)
        return True

    async def _run(self) -> None:
        tp = TopicPartition(self.topic, 0)
        while True:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, client_id=self.client_id,
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES, request_timeout_ms=5000)
            try:
                await consumer.start()
                consumer.assign([tp])
                if self._next_offset is None:
                    await consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, self._next_offset)
                while True:
                    batch = await consumer.getmany(tp, timeout_ms=1000)
                    stop_if_cancelled()
                    for record in batch.get(tp, []):
                        self.take(record.key, record.value)
                        self._next_offset = record.offset + 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep serving what we hold; read again shortly
                stop_if_cancelled()  # a cancel aiokafka turned into an error: close() is waiting
                log.warning("config feed on %s stopped (%s); restarting in %.1fs", self.topic,
                            type(exc).__name__, self.retry_s)
                await asyncio.sleep(self.retry_s)
            finally:
                await stop_consumer(consumer)


async def _cancelled(task: asyncio.Task[None], what: str, timeout_s: float = 5.0) -> None:
    """Cancel a background loop and wait for it, at most ``timeout_s``: a loop still running then (a cancel
    swallowed where no check sees it) is left to the process exit rather than holding a shutdown forever."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        log.warning("%s did not stop within %.0fs of its cancel; left to the process exit", what, timeout_s)
    elif not task.cancelled() and task.exception() is not None:  # retrieved, so asyncio does not warn
        log.debug("%s ended with an error", what, exc_info=task.exception())
