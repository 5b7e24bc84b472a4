"""A client surface: how the one chat pipeline's answers are written for the API the client speaks.

Every surface goes through the same admission, routing, metering and events (``proxy.api.chat.serve``); it
differs only in how it reads the request (its handler) and how it writes the answer: ``render`` turns the
gateway's chat completion into the surface's JSON body, ``encoder`` makes the stream relay's encoder
(``proxy.upstream.streaming.Encoder``), and ``settled`` writes what the surface keeps of a non-stream answer
(the Responses API's stored responses) before its bytes go out. A surface whose API a deployment dialect speaks
itself has a ``Passthrough``: to such a deployment the client's request goes as it was written and the
provider's answer comes back as it was sent (with the privacy policy's placeholders in and out, when it
redacts for that deployment: ``redaction``). ``CHAT`` is Chat Completions itself; the Anthropic Messages surface is
``proxy.api.messages.handler.surface_for``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ledger.usage import TokenUsage
from proxy.privacy.redact import Redaction
from proxy.snapshot import Deployment
from proxy.upstream.base import Dialect
from proxy.upstream.streaming import Encoder, Stamp, Tap

Render = Callable[[dict[str, Any], TokenUsage, str, str], dict[str, Any]]  # (completion, usage, request id, alias)
MakeEncoder = Callable[[str, int, str, "Tap | None"], Encoder]  # (request id, created, alias, cache tap)


@dataclass(frozen=True, slots=True)
class Passthrough:
    dialect: str  # the deployment dialect that speaks this surface's API
    make: Callable[[Redaction | None], Dialect]  # the attempt's dialect: the request as the client wrote it
    render: Callable[[dict[str, Any], TokenUsage, str, str, dict[str, Any]], dict[str, Any]]
    # (the provider's body, settled usage, request id, alias, x_farebox) -> the answer
    encoder: Callable[[Any, str, str, "Tap | None", Redaction | None], Encoder]
    # (the raw events, request id, alias, cache tap, the redaction to undo) -> the stream's encoder
    needs: str | None = None  # a capability the deployment must have too ("responses": it serves that API)
    redacts: bool = True  # False: a request the privacy policy redacts for the deployment is translated instead

    def serves(self, dep: Deployment, redacted: bool) -> bool:
        return (dep.dialect == self.dialect and (self.needs is None or self.needs in dep.capabilities)
                and (self.redacts or not redacted))


@dataclass(frozen=True, slots=True)
class Surface:
    name: str  # chat | responses | messages
    render: Render
    encoder: MakeEncoder
    settled: Callable[[], Awaitable[None]] | None = None  # None: it keeps nothing
    passthrough: Passthrough | None = None  # None: every deployment is translated to


CHAT = Surface("chat", lambda completion, usage, request_id, alias: completion, Stamp)
