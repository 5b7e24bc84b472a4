"""What the Kafka event log holds for an append on its way to Kafka: the item, its spool record, its id's fate.

* ``Item``: one append (id, topic, key, value) and the future its caller holds;
  ``pack`` / ``unpack`` are its record in the disk spool (``streams.spool``):
  three little-endian lengths (id, topic, key; ``0xFFFF``: no key), then the
  id, topic, key and value bytes.
* ``SentIds``: the newest ``size`` event ids the log has taken, each with what
  became of it: its Kafka offset + 1, ``SPOOLED`` (0: durable in the spool, not
  yet in Kafka), or the future of its first append while that is unresolved.
  An append whose id is known resolves as the first one did and is not sent
  again (the port's dedupe by id); a known offset is never replaced by
  ``SPOOLED``.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from streams.eventlog import EventLogFailed

SPOOLED = 0  # the offset a spooled (not yet replayed) append resolves with
_PACK = struct.Struct("<HHH")  # lengths of id, topic, key (0xFFFF: no key); the value follows
_NO_KEY = 0xFFFF


@dataclass(slots=True, eq=False)
class Item:
    id: str
    topic: str
    key: bytes | None
    value: bytes
    future: asyncio.Future[int]
    since: float = field(default_factory=time.monotonic)

    def pack(self) -> bytes:
        id_b, topic_b = self.id.encode(), self.topic.encode()
        key_len = _NO_KEY if self.key is None else len(self.key)
        return _PACK.pack(len(id_b), len(topic_b), key_len) + id_b + topic_b + (self.key or b"") + self.value


def unpack(record: bytes) -> tuple[str, str, bytes | None, bytes]:
    """(event id, topic, key, value) of a spool record written by ``Item.pack``."""
    id_len, topic_len, key_len = _PACK.unpack_from(record)
    pos = _PACK.size
    event_id = record[pos : pos + id_len].decode()
    pos += id_len
    topic = record[pos : pos + topic_len].decode()
    pos += topic_len
    key = None
    if key_len != _NO_KEY:
        key = record[pos : pos + key_len]
        pos += key_len
    return event_id, topic, key, record[pos:]


class SentIds:
    """Event id -> Kafka offset + 1, ``SPOOLED``, or the future of its first append (the newest ``size``)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: OrderedDict[str, int | asyncio.Future[int]] = OrderedDict()

    def get(self, event_id: str) -> int | asyncio.Future[int] | None:
        return self._ids.get(event_id)

    def claim(self, item: Item) -> bool:
        """True when the id is known: the item's future then follows the first one's. Else it is recorded."""
        known = self._ids.get(item.id)
        if known is None:
            self._ids[item.id] = item.future
            if len(self._ids) > self.size:
                self._ids.popitem(last=False)
            return False
        if isinstance(known, int):
            item.future.set_result(known)
        else:
            known.add_done_callback(functools.partial(_copy, target=item.future))
        return True

    def remember(self, event_id: str, offset: int) -> None:
        """Record where ``event_id`` is; ``SPOOLED`` never replaces a Kafka offset."""
        if offset or not isinstance(self._ids.get(event_id), int):
            self._ids[event_id] = offset


def _copy(source: asyncio.Future[int], target: asyncio.Future[int]) -> None:
    if target.done():
        return
    if source.cancelled() or source.exception() is not None:
        target.set_exception(source.exception() or EventLogFailed("cancelled"))
    else:
        target.set_result(source.result())
