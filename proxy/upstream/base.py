"""The port every provider dialect implements.

A dialect is pure translation: OpenAI-shaped request in, provider HTTP
request out; provider response (or SSE events) in, OpenAI-shaped completion
or ``chat.completion.chunk`` dicts out. It does no I/O: the relay
(``proxy/upstream/relay.py``) sends the request and feeds it bytes, so the
same dialect is tested against recorded wire fixtures.

Chunks and completions a dialect returns omit ``id``, ``object``,
``created`` and ``model``: the relay stamps the gateway's own (request id,
alias). The dialect never emits a usage chunk; it records usage on its
translator and the relay decides whether the caller gets one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol

from ledger.usage import TokenUsage
from proxy.errors import UpstreamError
from proxy.snapshot import Deployment


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    url: str
    headers: Mapping[str, str]
    body: bytes  # JSON
    method: str = "POST"

    def __repr__(self) -> str:  # headers may carry a provider key: never print them
        return f"UpstreamRequest({self.method} {self.url}, {len(self.body)} bytes)"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str | None  # the ``event:`` field, None when absent
    data: str  # ``data:`` lines joined with "\n"


@dataclass
class ChatResult:
    """A non-streaming answer: the OpenAI completion body without id/model."""

    body: dict
    usage: TokenUsage
    finish_reason: str | None = None
    native: dict | None = None  # the provider's own body, when the client's API is the provider's (passthrough)


class FrameParser(Protocol):
    """Cuts a stream's raw body bytes into events: SSE for most providers (``proxy.upstream.sse.SSEParser``),
    AWS's binary event-stream for Bedrock (``proxy.upstream.bedrock.eventstream``). Bytes may arrive split
    anywhere; an event is returned once it is complete."""

    def feed(self, data: bytes) -> list[SSEEvent]: ...

    def close(self) -> list[SSEEvent]:
        """Events the end of the body completes (a trailing event without its blank line)."""
        ...


class Signer(Protocol):
    """A credential that signs the whole request (AWS SigV4): the headers to add for this method, URL, body."""

    def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]: ...


# What ``UpstreamClient.credential`` hands a dialect: an API key or bearer token, a request signer, or nothing.
Credential = str | Signer | None


class StreamTranslator(Protocol):
    """Turns one upstream stream's SSE events into OpenAI chunks, in order."""

    usage: TokenUsage | None  # provider-reported usage, once known
    finish_reason: str | None
    done: bool  # the upstream said the stream is complete

    def feed(self, event: SSEEvent) -> list[dict]:
        """Chunks to relay for this event (often one, sometimes none).

        Raises ``UpstreamError`` for an in-stream error event.
        """
        ...

    def text_so_far(self) -> str:
        """All content and tool-argument text emitted so far (for estimating usage)."""
        ...


class Dialect(Protocol):
    name: str

    def validate(self, body: dict, deployment: Deployment) -> None:
        """Raise ``UnsupportedParameter`` naming any parameter this deployment cannot honour."""
        ...

    def chat_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: Credential,
        *,
        max_output_tokens: int,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest:
        """Build the provider request. Streams always ask the provider for usage."""
        ...

    def parse_chat(self, data: dict) -> ChatResult:
        """A 2xx answer's body; raises ``UpstreamError`` for an error object in it (a 200 that is no answer).
        Usage is read through ``proxy.upstream.usage_check`` (invalid counts come back marked, never raised)."""
        ...

    def stream_translator(self) -> StreamTranslator: ...

    def stream_parser(self) -> FrameParser:
        """A fresh parser for one stream's body (how the provider frames its events)."""
        ...

    def parse_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        """Classify a non-2xx answer (429 / 5xx / 400 / context length / policy / auth)."""
        ...

    def embeddings_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: Credential,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest: ...

    def parse_embeddings(self, data: dict) -> ChatResult: ...


def chunk(delta: dict, finish: str | None = None) -> dict:
    """One translated ``chat.completion.chunk`` body (unstamped) with a single choice."""
    return {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


@dataclass
class StreamState:
    """Shared bookkeeping for translators (tool-call indices, emitted text)."""

    text: list[str] = field(default_factory=list)

    def emitted(self, piece: str) -> None:
        if piece:
            self.text.append(piece)

    def joined(self) -> str:
        return "".join(self.text)
