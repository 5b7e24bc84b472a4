"""Hashing that keeps the GIL: the same digests as hashlib, fed in slices hashlib hashes without letting go."""

from __future__ import annotations

import hashlib

import pytest

from proxy.hashing import GIL_HELD_CHUNK, held_update, sha256_hex


@pytest.mark.parametrize("size", [0, 1, 2047, 2048, 4096, 10_001])
def test_the_digest_is_hashlibs(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert held_update(hashlib.blake2b(digest_size=16), data).digest() == hashlib.blake2b(data, digest_size=16).digest()


def test_no_update_is_large_enough_to_release_the_gil() -> None:
    seen: list[int] = []

    class Spy:
        def update(self, chunk: bytes) -> None:
            seen.append(len(chunk))

    held_update(Spy(), b"x" * 9_000)
    assert max(seen) == GIL_HELD_CHUNK < 2048 and sum(seen) == 9_000
