"""``MemoryVectors``: the embedded-mode semantic store, in process, bounded three ways, with a TTL per entry.

Bounds: at most ``max_per_namespace`` entries per namespace (what one lookup
scans; the oldest of the namespace leaves first), and at most ``max_entries``
entries and ``max_bytes`` (answer bytes plus 4 bytes per vector component)
over all namespaces, the least recently used leaving first. An expired entry
is dropped when a lookup of its namespace meets it, or when it reaches the
LRU end. A lookup is a linear scan in pure Python (``scan``: the namespace's
entries in chunks of ``SCAN_CHUNK``, each chunk scored by
``proxy.cache.similarity.best_match``, the event loop free between chunks, so
other requests run while a long namespace is scored). Its cost grows with the
entries and their dimensions (docs/budgets.md: Response cache), hence the bound.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, TypeVar

from proxy.body import kept
from proxy.cache.port import Match
from proxy.cache.similarity import best_match, is_hit

K = TypeVar("K")
SCAN_CHUNK = 64  # entries scored between two yields to the event loop
DEFAULT_MAX_PER_NAMESPACE = 256


async def scan(query: Sequence[float], candidates: Iterable[tuple[K, Sequence[float]]]) -> tuple[K, float] | None:
    """``best_match`` over the candidates, ``SCAN_CHUNK`` at a time with the event loop free in between
    (the same answer: the most similar, the first of equals)."""
    best: tuple[K, float] | None = None
    chunk: list[tuple[K, Sequence[float]]] = []
    for candidate in candidates:
        chunk.append(candidate)
        if len(chunk) == SCAN_CHUNK:
            best = _better(best, best_match(query, chunk))
            chunk = []
            await asyncio.sleep(0)
    return _better(best, best_match(query, chunk))


def _better(a: tuple[K, float] | None, b: tuple[K, float] | None) -> tuple[K, float] | None:
    return b if a is None or (b is not None and b[1] > a[1]) else a


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

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024,
                 max_per_namespace: int = DEFAULT_MAX_PER_NAMESPACE,
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
        found = await scan(vector, [(i, self._items[i].vector) for i in ids])  # a copy: adds may come meanwhile
        if found is None:
            return None
        i, score = found
        item = self._items.get(i)  # an add while the scan yielded may have evicted it
        if item is None or not is_hit(score, threshold):
            return Match(score, None)
        self._items.move_to_end(i)
        return Match(score, item.value)

    async def add(self, namespace: str, vector: array, value: bytes, ttl_s: float) -> None:
        item = _Item(namespace, self.clock() + ttl_s, vector, kept(value))
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
