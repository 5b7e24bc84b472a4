"""A client surface: how the one chat pipeline's answers are written for the API the client speaks.

Every surface goes through the same admission, routing, metering and events (``proxy.api.chat.serve``); it
differs only in how it reads the request (its handler) and how it writes the answer: ``render`` turns the
gateway's chat completion into the surface's JSON body, ``encoder`` makes the stream relay's encoder
(``proxy.upstream.streaming.Encoder``), and ``settled`` writes what the surface keeps of a non-stream answer
(the Responses API's stored responses) before its bytes go out. ``CHAT`` is Chat Completions itself; the Anthropic Messages surface is
``proxy.api.messages.handler.MESSAGES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ledger.usage import TokenUsage
from proxy.upstream.streaming import Encoder, Stamp, Tap

Render = Callable[[dict[str, Any], TokenUsage, str, str], dict[str, Any]]  # (completion, usage, request id, alias)
MakeEncoder = Callable[[str, int, str, "Tap | None"], Encoder]  # (request id, created, alias, cache tap)


@dataclass(frozen=True, slots=True)
class Surface:
    name: str  # chat | responses | messages
    render: Render
    encoder: MakeEncoder
    settled: Callable[[], Awaitable[None]] | None = None  # None: it keeps nothing


CHAT = Surface("chat", lambda completion, usage, request_id, alias: completion, Stamp)
