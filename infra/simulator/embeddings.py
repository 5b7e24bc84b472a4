"""Deterministic embedding vectors: unit vectors seeded from a hash of the input.

The same text (or token array) and dimension always give the same vector, and
so do texts that differ only in case, punctuation and spacing (the text's
words, lower-cased, are what is hashed): a near-identical question embeds the
same, any other text at a random angle. That is all the semantics the
simulator has; the semantic cache's real quality is measured with a real
model (``make bench-privacy``). ``encode_base64`` packs a vector as
little-endian float32, as OpenAI does for ``encoding_format: "base64"``.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import re
import struct
from functools import lru_cache

from infra.simulator.generation import count_tokens

_WORD = re.compile(r"\w+")


def input_key(item: str | list[int]) -> str:
    if isinstance(item, str):
        return " ".join(_WORD.findall(item.lower()))
    return "tokens:" + ",".join(map(str, item))


def input_tokens(item: str | list[int]) -> int:
    return count_tokens(item) if isinstance(item, str) else len(item)


@lru_cache(maxsize=4096)
def embedding_vector(key: str, dims: int) -> tuple[float, ...]:
    """A unit vector of ``dims`` floats seeded from ``key``."""
    seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    rng = random.Random(seed)
    vec = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    # round-trip through float32 so float and base64 encodings agree exactly
    return struct.unpack(f"<{dims}f", struct.pack(f"<{dims}f", *(v / norm for v in vec)))


def encode_base64(vec: tuple[float, ...]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def decode_base64(data: str) -> list[float]:
    raw = base64.b64decode(data)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
