"""GET /v1/models: only the aliases the calling key may use; in Anthropic's shape when asked with
``anthropic-version`` (the Anthropic SDKs send it)."""

from __future__ import annotations

from aiohttp import web

from proxy.errors import NotFound
from proxy.runtime import RUNTIME

OWNER = "farebox"


def _model(name: str) -> dict:
    # ``created`` is not meaningful for an alias; 0 keeps the OpenAI shape.
    return {"id": name, "object": "model", "created": 0, "owned_by": OWNER}


def _anthropic_model(name: str) -> dict:
    return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}


async def list_models(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    key = request["key"]
    names = sorted(a for a in key.aliases if a in rt.snapshot.aliases)
    if "anthropic-version" in request.headers:
        return web.json_response({"data": [_anthropic_model(n) for n in names], "has_more": False,
                                  "first_id": names[0] if names else None, "last_id": names[-1] if names else None})
    return web.json_response({"object": "list", "data": [_model(n) for n in names]})


async def get_model(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    name = request.match_info["model"]
    if name not in request["key"].aliases or name not in rt.snapshot.aliases:
        raise NotFound(f"The model '{name}' does not exist or this key may not use it.", param="model", code="model_not_found")
    return web.json_response(_anthropic_model(name) if "anthropic-version" in request.headers else _model(name))
