"""``MemoryCache``: the embedded-mode cache, an in-process LRU with a TTL per entry.

Bounded twice: at most ``max_entries`` entries and ``max_bytes`` of values;
the least recently used entries leave first. An expired entry is dropped
when it is read (and, like any other, when it reaches the LRU end).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from proxy.body import kept


class MemoryCache:
    __slots__ = ("max_entries", "max_bytes", "clock", "_items", "_bytes")

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 256 * 1024 * 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key -> (expires at, value)
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    async def get(self, key: str) -> bytes | None:
        found = self._items.get(key)
        if found is None:
            return None
        expires, value = found
        if expires <= self.clock():
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        if len(value) > self.max_bytes or ttl_s <= 0:
            return
        if key in self._items:
            self._drop(key)
        self._items[key] = (self.clock() + ttl_s, kept(value))
        self._bytes += len(value)
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._items)))

    def _drop(self, key: str) -> None:
        _, value = self._items.pop(key)
        self._bytes -= len(value)

    async def close(self) -> None:
        self._items.clear()
        self._bytes = 0
