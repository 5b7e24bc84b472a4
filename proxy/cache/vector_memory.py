"""``MemoryVectors``: the embedded-mode semantic store, in process, bounded three ways, with a TTL per entry.

Bounds: at most ``max_per_namespace`` entries per namespace (what one lookup
scans; the oldest of the namespace leaves first), and at most ``max_entries``
entries and ``max_bytes`` (answer bytes plus 4 bytes per vector component)
over all namespaces, the least recently used leaving first. An expired entry
is dropped when a lookup of its namespace meets it, or when it reaches the
LRU end. A lookup is a linear scan (``proxy.cache.similarity.best_match``) in
pure Python: its cost grows with the namespace's entries, hence the bound.
"""

from __future__ import annotations

import itertools
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable

from proxy.cache.port import Match
from proxy.cache.similarity import best_match, is_hit


@dataclass(slots=True)
class _Item:
    namespace: str
    expires: float
    vector: array
    value: bytes

    @property
    def size(self) -> int:
        return len(self.value) + 4 * len(self.vector)


class MemoryVectors:
    __slots__ = ("max_entries", "max_bytes", "max_per_namespace", "clock", "_items", "_spaces", "_bytes", "_ids")

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024, max_per_namespace: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_per_namespace = max_per_namespace
        self.clock = clock
        self._items: OrderedDict[int, _Item] = OrderedDict()  # every entry, least recently used first
        self._spaces: dict[str, dict[int, None]] = {}  # namespace -> its entry ids, oldest first
        self._bytes = 0
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    async def nearest(self, namespace: str, vector: array, threshold: Decimal) -> Match | None:
        ids = self._spaces.get(namespace)
        if not ids:
            return None
        now = self.clock()
        for i in [i for i in ids if self._items[i].expires <= now]:
            self._drop(i)
        found = best_match(vector, ((i, self._items[i].vector) for i in ids))
        if found is None:
            return None
        i, score = found
        if not is_hit(score, threshold):
            return Match(score, None)
        self._items.move_to_end(i)
        return Match(score, self._items[i].value)

    async def add(self, namespace: str, vector: array, value: bytes, ttl_s: float) -> None:
        item = _Item(namespace, self.clock() + ttl_s, vector, value)
        if ttl_s <= 0 or item.size > self.max_bytes:
            return
        i = next(self._ids)
        self._items[i] = item
        ids = self._spaces.setdefault(namespace, {})
        ids[i] = None
        self._bytes += item.size
        while len(ids) > self.max_per_namespace:
            self._drop(next(iter(ids)))
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._items)))

    def _drop(self, i: int) -> None:
        item = self._items.pop(i)
        self._bytes -= item.size
        ids = self._spaces[item.namespace]
        del ids[i]
        if not ids:
            del self._spaces[item.namespace]

    async def close(self) -> None:
        self._items.clear()
        self._spaces.clear()
        self._bytes = 0
