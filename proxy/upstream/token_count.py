"""A provider's own token count for a request (``POST /v1/messages/count_tokens``, ``POST /v1/responses/
input_tokens``), for the token-count endpoints of the surfaces whose API the deployment speaks.

``provider_count`` asks and returns the count, or None for anything but a clean answer (unreachable, an error
status, a body without a non-negative integer count, slower than ``timeout_s``): the caller then answers with
farebox's own estimate. The provider's key goes only where it was declared (``UpstreamClient.secret_for``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from proxy.errors import GatewayError
from proxy.snapshot import Deployment
from proxy.upstream import anthropic, openai_chat
from proxy.upstream.relay import UpstreamClient

log = logging.getLogger("farebox.proxy")

PATHS = {"anthropic": "/v1/messages/count_tokens", "openai": "/responses/input_tokens"}
_HEADERS = {"anthropic": anthropic.headers, "openai": openai_chat.headers}


async def provider_count(upstream: UpstreamClient, dep: Deployment, body: Mapping[str, Any],
                         extra_headers: Mapping[str, str], timeout_s: float = 5.0) -> int | None:
    path = PATHS.get(dep.dialect)
    if path is None:
        return None
    try:
        secret = upstream.secret_for(dep)
        sent = {**body, "model": dep.model}
        async with asyncio.timeout(timeout_s):
            async with upstream.session.post(dep.base_url.rstrip("/") + path, data=orjson.dumps(sent),
                                             headers=_HEADERS[dep.dialect](secret, extra_headers,
                                                                           stream=False)) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    log.info("token count from %s: status %d; answering farebox's estimate", dep.id, resp.status)
                    return None
        count = orjson.loads(raw).get("input_tokens")
    except (GatewayError, aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, AttributeError):
        log.info("token count from %s failed; answering farebox's estimate", dep.id)
        return None
    return count if type(count) is int and count >= 0 else None
