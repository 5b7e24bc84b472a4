"""Reading a request's JSON body: the one parser the model API and the admin API share.

Every failure is a 400 ``invalid_json`` naming what is wrong; nothing here
knows which route asked.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import InvalidRequest

# Deepest nesting of arrays and objects a body may have: far above any real request (tool schemas included),
# below what the JSON encoder re-serialising it for a provider accepts (orjson: 255).
MAX_DEPTH = 64


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; a clear 400 when it is empty, not JSON, not an object, or nested too deep."""
    if not raw.strip():
        raise InvalidRequest("The request body is empty; expected a JSON object.", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _too_deep(body, MAX_DEPTH):  # counting is the fast path
        raise InvalidRequest(f"The request body nests arrays and objects deeper than {MAX_DEPTH} levels.",
                             code="invalid_json")
    return body


def _too_deep(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``value`` nests arrays and objects deeper than ``limit``, level by level (no recursion)."""
    level: list[Any] = [value]
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper = []
        for node in level:
            for child in (node.values() if type(node) is dict else node):
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        level = deeper
        depth += 1
    return False


def kept(data: bytes) -> bytes:
    """``data`` in a bytes object of its own size, for what is kept long (caches, idempotency answers, stored
    responses). orjson's output keeps the whole buffer it wrote into: a 700-byte answer holds 8 KB for as long as
    it lives (``tests/proxy/test_kept_bytes.py``), so a store bounded by ``len()`` would hold ten times its bound."""
    return memoryview(data).tobytes()
