"""Hashing on the event loop without handing the GIL away.

hashlib lets the GIL go while it hashes a buffer of 2,048 bytes or more. On the event loop that hands the
interpreter to a busy thread (the event-log writer, the archiver, ``to_thread`` workers) until it gives it back,
up to the switch interval (5 ms): a request hashing a 4 KB body could wait milliseconds for a few microseconds
of work. Fed in slices of 2,047 bytes, hashlib keeps the GIL; the digest is the same.
"""

from __future__ import annotations

import hashlib
from typing import Any

GIL_HELD_CHUNK = 2047  # the largest update hashlib hashes without releasing the GIL


def held_update(digest: Any, data: bytes) -> Any:
    """``digest.update(data)`` in slices that keep the GIL; returns ``digest``."""
    if len(data) <= GIL_HELD_CHUNK:
        digest.update(data)
        return digest
    view = memoryview(data)
    for i in range(0, len(data), GIL_HELD_CHUNK):
        digest.update(view[i:i + GIL_HELD_CHUNK])
    return digest


def sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()``, keeping the GIL."""
    return held_update(hashlib.sha256(), data).hexdigest()
