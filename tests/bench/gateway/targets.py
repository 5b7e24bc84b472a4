"""The bench's targets and its one request: the direct and gateway endpoints with pre-encoded
bodies (one pair per dialect), the client session, and ``call`` (one request, timed to the
end and, for streams, to the first content token)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp
import orjson
from yarl import URL

from infra.simulator.generation import VOCAB
from tests.harness import Stack

PROMPT = " ".join(VOCAB[i % len(VOCAB)] for i in range(1000))[:4096]
MAX_TOKENS = 64
SIM_OPENAI_KEY = "sk-sim-openai-retail-0001"        # examples/simulator.yaml, account acct-retail
SIM_ANTHROPIC_KEY = "sk-sim-anthropic-retail-0001"  # account acct-retail-anthropic
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Target:
    """One endpoint with its pre-encoded bodies; ``wire`` is the dialect of the response stream."""

    name: str
    url: str
    headers: dict[str, str]
    body: bytes
    stream_body: bytes
    wire: str  # "openai" | "anthropic" | "responses" | "gemini" | "bedrock"
    stream_url: str | None = None  # where a stream is asked for, when not ``url`` (Gemini, Bedrock)


def openai_target(name: str, url: str, model: str, key: str) -> Target:
    obj = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": MAX_TOKENS}
    stream = obj | {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return Target(name, url, headers, orjson.dumps(obj), orjson.dumps(stream), "openai")


def anthropic_target(name: str, url: str, model: str, key: str) -> Target:
    obj = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    return Target(name, url, headers, orjson.dumps(obj), orjson.dumps(obj | {"stream": True}), "anthropic")


def responses_target(name: str, url: str, model: str, key: str, store: bool = True) -> Target:
    """A Responses API request (``store`` at its default, true: the response is kept, as most clients ask)."""
    obj = {"model": model, "input": PROMPT, "max_output_tokens": MAX_TOKENS}
    if not store:
        obj["store"] = False
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return Target(name, url, headers, orjson.dumps(obj), orjson.dumps(obj | {"stream": True}), "responses")


def pairs(stack: Stack, anthropic: bool = True) -> dict[str, tuple[Target, Target]]:
    """(direct, gateway) per dialect."""
    out = {
        "openai": (
            openai_target("direct", stack.sim_url + "/v1/chat/completions", "sim-gpt-mid-2026-08", SIM_OPENAI_KEY),
            openai_target("gateway", stack.gateway_url + "/v1/chat/completions", "chat-openai", stack.key),
        )
    }
    if anthropic:
        out["anthropic"] = (
            anthropic_target("direct", stack.sim_url + "/v1/messages", "sim-claude-mid-2026-08", SIM_ANTHROPIC_KEY),
            # the gateway speaks OpenAI to the caller and Anthropic to the provider
            openai_target("gateway", stack.gateway_url + "/v1/chat/completions", "chat-anthropic", stack.key),
        )
    return out


def new_session() -> aiohttp.ClientSession:
    """One keep-alive pool per target, kept for the whole run (no connects inside measurements)."""
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=120, force_close=False)
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                 auto_decompress=False, skip_auto_headers=("User-Agent",))




class RequestFailed(Exception):
    pass


def _first_content(line: bytes, wire: str) -> bool:
    if wire == "gemini":
        return line.startswith(b"data: ") and b'"text":"' in line and b'"text":""' not in line
    if wire == "responses":
        return line.startswith(b"data: ") and b'"response.output_text.delta"' in line
    if wire == "openai":
        if not line.startswith(b"data: {") or b'"content"' not in line:
            return False
        choices = orjson.loads(line[6:]).get("choices") or ()
        return bool(choices and (choices[0].get("delta") or {}).get("content"))
    if not line.startswith(b"data: ") or b"content_block_delta" not in line:
        return False
    delta = orjson.loads(line[6:]).get("delta") or {}
    return bool(delta.get("text") or delta.get("partial_json"))


_END = {"openai": b"data: [DONE]", "anthropic": b'"message_stop"}', "responses": b'"type":"response.completed"',
        "gemini": b'"finishReason"'}


async def event_stream(resp: aiohttp.ClientResponse) -> tuple[float, float]:
    """A Bedrock ConverseStream read to its end: (end, first contentBlockDelta) times."""
    from botocore.eventstream import EventStreamBuffer

    buffer, first, last = EventStreamBuffer(), None, None
    while data := await resp.content.readany():
        buffer.add_data(data)
        for message in buffer:
            last = message.headers.get(":event-type")
            if first is None and last == "contentBlockDelta":
                first = time.perf_counter()
    if first is None or last != "metadata":
        raise RequestFailed(f"event stream not complete (last event {last!r})")
    return time.perf_counter(), first


async def call(session: aiohttp.ClientSession, target: Target, stream: bool,
               timing: list[str] | None = None) -> tuple[float, float | None]:
    """Do one request; returns (end, first-content-token time) as perf_counter values, or raises RequestFailed.
    ``timing``: a whole answer's ``Server-Timing`` header is appended to it."""
    url = URL((target.stream_url or target.url) if stream else target.url, encoded=True)  # as signed (Bedrock)
    async with session.post(url, data=target.stream_body if stream else target.body, headers=target.headers) as resp:
        if resp.status != 200:
            body = await resp.read()
            raise RequestFailed(f"HTTP {resp.status}: {body[:200]!r}")
        if not stream:
            await resp.read()
            if timing is not None:
                timing.append(resp.headers.get("server-timing", ""))
            return time.perf_counter(), None
        if target.wire == "bedrock":
            return await event_stream(resp)
        first = None
        while True:
            line = await resp.content.readline()
            if not line:
                raise RequestFailed("stream ended before the first content token")
            if _first_content(line, target.wire):
                first = time.perf_counter()
                break
        rest = await resp.content.read()
        end = time.perf_counter()
        last = rest.rstrip()
        if not (_END[target.wire] in last.rsplit(b"\n", 1)[-1] if target.wire in ("responses", "gemini")
                else last.endswith(_END[target.wire])):
            raise RequestFailed(f"stream not terminated: ...{last[-120:]!r}")
        return end, first
