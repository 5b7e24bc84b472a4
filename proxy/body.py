"""Reading a request's JSON body: the one parser the model API and the admin API share.

Every failure is a 400 ``invalid_json`` naming what is wrong; nothing here
knows which route asked.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import InvalidRequest


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; a clear 400 when it is empty, not JSON, or not an object."""
    if not raw.strip():
        raise InvalidRequest("The request body is empty; expected a JSON object.", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body
