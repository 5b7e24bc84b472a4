"""The last request bodies the simulator received: a test aid (``GET /_sim/requests?n=10``).

End-to-end tests read it to check what a provider saw, e.g. that redacted
prompts carry placeholders only.

Invariants:
- Bounded: a ring of ``capacity`` entries, oldest dropped first; cleared by reset.
- Holds the path and the body only, never headers (no API key is ever kept).
"""

from __future__ import annotations

from collections import deque
from typing import Any

DEFAULT_CAPACITY = 256


class ReceivedLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = 0

    def record(self, path: str, body: Any) -> None:
        """Keep one received body (the parsed JSON, or None when it was not JSON)."""
        self._seq += 1
        self._entries.append({"seq": self._seq, "path": path, "body": body})

    def last(self, n: int) -> list[dict[str, Any]]:
        """The ``n`` most recent entries, oldest first."""
        return list(self._entries)[-n:] if n > 0 else []

    def reset(self) -> None:
        self._entries.clear()
        self._seq = 0


def parse_n(raw: str | None, capacity: int) -> int:
    """The ``n`` query parameter: 10 when absent, else an integer in 1..capacity (ValueError otherwise)."""
    if raw is None:
        return 10
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"n must be an integer between 1 and {capacity}, got {raw!r}") from None
    if not 1 <= n <= capacity:
        raise ValueError(f"n must be an integer between 1 and {capacity}, got {raw!r}")
    return n
