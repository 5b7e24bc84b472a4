"""The Anthropic Messages dialect: request parsing and response bytes (no I/O).

Stream event order (as the real API sends it): ``message_start`` (usage with
``input_tokens`` and ``output_tokens: 1``), ``content_block_start``, ``ping``,
``content_block_delta`` per token (``text_delta`` or ``input_json_delta``,
the latter preceded by one empty ``partial_json``), ``content_block_stop``,
``message_delta`` (``stop_reason``, ``stop_sequence``, cumulative
``output_tokens``), ``message_stop``. Errors are
``{"type": "error", "error": {"type", "message"}}``, in-stream as
``event: error``. ``usage.input_tokens`` excludes cache reads and writes, as
Anthropic reports it; reasoning tokens are folded into ``output_tokens`` and
billed as output (Anthropic does not split thinking out). With ``thinking``
enabled the answer starts with a signed ``thinking`` block (``thinking_delta``
then ``signature_delta`` when streamed); ``cache_control`` breakpoints cache
their prefix (``infra.simulator.prompt_cache``), reported with the
``cache_creation`` split by TTL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from infra.simulator.billing import BillableUsage
from infra.simulator.generation import ChatRequest, Plan, RequestError, Tool, count_tokens, stable_id
from infra.simulator.prompt_cache import Breakpoint, signature

NAME = "anthropic"
REPORTS_CACHE_WRITE = True
MESSAGE_PARAMS = frozenset("""model messages max_tokens system metadata stop_sequences stream
    temperature top_k top_p tools tool_choice thinking service_tier container mcp_servers
    context_management output_config""".split())  # noqa: SIM905
STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool": "tool_use", "stop_sequence": "stop_sequence"}
_ERR_TYPES = {
    "invalid_request": "invalid_request_error", "authentication": "authentication_error",
    "not_found": "not_found_error", "rate_limit": "rate_limit_error", "server_error": "api_error",
    "unavailable": "overloaded_error", "overloaded": "overloaded_error",
    "content_policy": "invalid_request_error", "context_length": "invalid_request_error",
}


def api_key(headers: Mapping[str, str]) -> str | None:
    """``x-api-key``, or the ``Authorization: Bearer`` the current SDKs send the same key as."""
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer[7:].strip() if bearer[:7].lower() == "bearer " else "") or None


def check_headers(headers: Mapping[str, str]) -> None:
    if not headers.get("anthropic-version"):
        raise _bad("anthropic-version: header is required")


def auth_error(missing: bool) -> RequestError:
    return RequestError(401, "authentication", "x-api-key header is required" if missing else "invalid x-api-key")


def error_body(err: RequestError) -> bytes:
    return orjson.dumps({"type": "error",
                         "error": {"type": _ERR_TYPES.get(err.kind, "api_error"), "message": err.message}})


def fault_error(kind: str, model: str, retry_after: float) -> RequestError:
    if kind == "429":
        return RequestError(429, "rate_limit",
                            "This request would exceed the rate limit for your organization of 50 requests per "
                            "minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
                            headers={"retry-after": f"{retry_after:g}"})
    if kind == "500":
        return RequestError(500, "server_error", "Internal server error")
    if kind in ("503", "529"):
        return RequestError(529, "overloaded", "Overloaded")
    if kind == "content_policy":
        return RequestError(400, "content_policy", "Output blocked by content filtering policy")
    raise ValueError(kind)


def context_error(input_tokens: int, max_tokens: int | None, window: int) -> RequestError:
    if input_tokens > window or not max_tokens:
        return RequestError(400, "context_length",
                            f"prompt is too long: {max(input_tokens, window + 1)} tokens > {window} maximum")
    return RequestError(400, "context_length",
                        f"input length and `max_tokens` exceed context limit: {input_tokens} + {max_tokens} "
                        f"> {window}, decrease input length or `max_tokens` and try again")


def _bad(message: str) -> RequestError:
    return RequestError(400, "invalid_request", message)


def _mark(block: Any, texts: list[str], marks: list[tuple[int, str]], path: str) -> None:
    """A ``cache_control`` breakpoint on ``block``: the prefix ends after the text appended for it."""
    control = block.get("cache_control") if isinstance(block, dict) else None
    if control is None:
        return
    if not isinstance(control, dict) or control.get("type") != "ephemeral" or control.get("ttl", "5m") not in ("5m", "1h"):
        raise _bad(f"{path}.cache_control: Input should be {{'type': 'ephemeral', 'ttl': '5m' | '1h'}}")
    marks.append((len(texts), control.get("ttl", "5m")))


def _blocks(content: Any, path: str, texts: list[str], marks: list[tuple[int, str]]) -> tuple[int, bool]:
    """Append the text in a message's content; return (images, has_tool_result)."""
    if isinstance(content, str):
        texts.append(content)
        return 0, False
    if not isinstance(content, list):
        raise _bad(f"{path}: Input should be a valid string or list of content blocks")
    images, tool_result = 0, False
    for i, block in enumerate(content):
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif btype in ("image", "document"):
            images += 1
        elif btype == "tool_use":
            texts.append(f"{block.get('name', '')} {orjson.dumps(block.get('input', {})).decode()}")
        elif btype == "tool_result":
            tool_result = True
            inner = block.get("content", "")
            if inner:
                more, _ = _blocks(inner, f"{path}.{i}.content", texts, marks)
                images += more
        elif btype == "thinking":
            thought = block.get("thinking")
            if not isinstance(thought, str) or block.get("signature") != signature(thought):
                raise _bad(f"{path}.{i}: Invalid `signature` in `thinking` block")
            texts.append(thought)
        elif btype == "redacted_thinking":
            if not isinstance(block.get("data"), str):
                raise _bad(f"{path}.{i}.data: Field required")
        else:
            raise _bad(f"{path}.{i}: Input tag {btype!r} found using 'type' does not match any of the "
                       "expected tags")
        _mark(block, texts, marks, f"{path}.{i}")
    return images, tool_result


def parse_chat(body: dict, strict: bool) -> ChatRequest:
    """Validate a Messages body into a :class:`ChatRequest` (raises RequestError)."""
    if strict:
        for key in body:
            if key not in MESSAGE_PARAMS:
                raise _bad(f"{key}: Extra inputs are not permitted")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: Field required")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise _bad("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _bad("max_tokens: Input should be a valid integer greater than or equal to 1")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: Field required" if messages is None else "messages: at least one message is required")
    texts: list[str] = []
    marks: list[tuple[int, str]] = []  # cache_control breakpoints: (texts before the prefix's end, ttl)
    framed = len(messages)
    system = body.get("system")
    if system:
        framed += 1
        if isinstance(system, str):
            texts.append(system)
        elif isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in system):
            for j, block in enumerate(system):
                texts.append(str(block.get("text", "")))
                _mark(block, texts, marks, f"system.{j}")
        else:
            raise _bad("system: Input should be a valid string or list of text blocks")
    images, last_tool_result = 0, False
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant", "system"):
            raise _bad(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        more, last_tool_result = _blocks(msg.get("content"), f"messages.{i}.content", texts, marks)
        images += more
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _bad("stop_sequences: Input should be a valid list of strings")
    before_tools = len(texts)
    tools = _parse_tools(body.get("tools"), texts, marks)
    forced = _forced_tool(body.get("tool_choice"), tools)
    return ChatRequest(model=model, stream=body.get("stream") is True, texts=texts, framed=framed, images=images,
                       max_tokens=max_tokens, stop=stops, tools=tools, forced_tool=forced,
                       last_is_tool_result=last_tool_result and messages[-1].get("role") == "user",
                       tool_results=sum(isinstance(b, dict) and b.get("type") == "tool_result" for m in messages
                                        if isinstance(m.get("content"), list) for b in m["content"]),
                       thinking=_thinking(body.get("thinking"), max_tokens),
                       cache_prefix=_prefix(texts, marks, before_tools))


def _thinking(raw: Any, max_tokens: int) -> bool:
    """Whether extended thinking is on (``enabled`` with a budget, or ``adaptive``); a bad value is a 400."""
    if raw is None:
        return False
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("thinking: Input tag found using 'type' does not match any of the expected tags: "
                   "'enabled', 'disabled', 'adaptive'")
    if kind == "enabled":
        budget = raw.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
            raise _bad("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= max_tokens:
            raise _bad("`max_tokens` must be greater than `thinking.budget_tokens`")
    return kind != "disabled"


def _prefix(texts: list[str], marks: list[tuple[int, str]], before_tools: int) -> list[Breakpoint]:
    """The prefix each breakpoint caches, in Anthropic's order (tools, system, messages)."""
    ordered = [*texts[before_tools:], *texts[:before_tools]]
    out = []
    for at, ttl in marks:
        end = at - before_tools if at > before_tools else at + len(texts) - before_tools
        text = "\n".join(ordered[:end])
        out.append(Breakpoint(text, count_tokens(text), ttl))
    return out


def _parse_tools(raw: Any, texts: list[str], marks: list[tuple[int, str]]) -> list[Tool]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad("tools: Input should be a valid list")
    tools = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise _bad(f"tools.{i}.name: Field required")
        if t.get("type") not in (None, "custom"):  # server tools (web search...) have no schema
            texts.append(t["name"])
            _mark(t, texts, marks, f"tools.{i}")
            continue
        schema = t.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"tools.{i}.custom.input_schema: Field required")
        texts.append(f"{t['name']} {t.get('description', '')} {orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()}")
        tools.append(Tool(t["name"], schema))
        _mark(t, texts, marks, f"tools.{i}")
    return tools


def _forced_tool(choice: Any, tools: list[Tool]) -> str | None:
    if choice is None:
        return None
    ctype = choice.get("type") if isinstance(choice, dict) else None
    if ctype in ("auto", "none"):
        return None
    if ctype == "any":
        if not tools:
            raise _bad("tool_choice: 'any' requires tools")
        return tools[0].name
    if ctype == "tool":
        name = choice.get("name")
        if not any(t.name == name for t in tools):
            raise _bad(f"tool_choice: tool {name!r} is not in tools")
        return name
    raise _bad("tool_choice: Input tag found using 'type' does not match any of the expected tags: "
               "'auto', 'any', 'tool', 'none'")


def usage(plan: Plan, sent: int | None = None) -> dict:
    out = plan.output_tokens if sent is None else sent
    return {"input_tokens": plan.uncached_input, "cache_creation_input_tokens": plan.cache_write_tokens,
            "cache_read_input_tokens": plan.cached_tokens, "output_tokens": out + plan.reasoning_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": plan.cache_write_tokens - plan.cache_write_1h,
                               "ephemeral_1h_input_tokens": plan.cache_write_1h},
            "service_tier": plan.service_tier or "standard"}


def billable(plan: Plan, sent: int) -> BillableUsage:
    return BillableUsage(input=plan.uncached_input, cached_input=plan.cached_tokens,
                         cache_write=plan.cache_write_tokens, output=sent + plan.reasoning_tokens)


def _block(plan: Plan, full: bool) -> dict:
    if plan.kind == "tool":
        return {"type": "tool_use", "id": stable_id("toolu_", plan.tool_id_seed), "name": plan.tool_name,
                "input": _tool_input(plan.content) if full else {}}
    return {"type": "text", "text": plan.content if full else ""}


def _tool_input(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # cut short by max_tokens
        return {}


def _thinking_block(plan: Plan, full: bool) -> dict:
    return {"type": "thinking", "thinking": plan.thinking if full else "",
            "signature": signature(plan.thinking) if full else ""}


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    thought = [_thinking_block(plan, True)] if plan.thinking else []
    return orjson.dumps({
        "id": rid, "type": "message", "role": "assistant", "model": model, "content": [*thought, _block(plan, True)],
        "stop_reason": STOP_REASON[plan.finish], "stop_sequence": plan.stop_sequence, "usage": usage(plan),
    })


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class StreamEncoder:
    """Bytes of one Messages stream: ``head()``, ``piece(text)`` per token, ``tail(sent)``."""

    def __init__(self, plan: Plan, rid: str, created: int, model: str, include_usage: bool = True) -> None:
        self.plan, self.rid, self.model = plan, rid, model
        kind = b"input_json_delta" if plan.kind == "tool" else b"text_delta"
        field = b"partial_json" if plan.kind == "tool" else b"text"
        self.index = 1 if plan.thinking else 0  # the answer's block follows the thinking block
        self._pre = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                     + str(self.index).encode() + b',"delta":{"type":"' + kind + b'","' + field + b'":')
        self._post = b"}}\n\n"

    def head(self) -> bytes:
        start_usage = {**usage(self.plan, 0), "output_tokens": 1}
        message: dict[str, Any] = {"id": self.rid, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": start_usage}
        out = _event("message_start", {"type": "message_start", "message": message})
        if self.plan.thinking:
            out += (_event("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": _thinking_block(self.plan, False)})
                    + _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                        "type": "thinking_delta", "thinking": self.plan.thinking}})
                    + _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                        "type": "signature_delta", "signature": signature(self.plan.thinking)}})
                    + _event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        out += (_event("content_block_start", {"type": "content_block_start", "index": self.index,
                                               "content_block": _block(self.plan, False)})
                + _event("ping", {"type": "ping"}))
        if self.plan.kind == "tool":
            out += self._pre + b'""' + self._post
        return out

    def piece(self, text: str) -> bytes:
        return self._pre + orjson.dumps(text) + self._post

    def tail(self, sent: int) -> bytes:
        return (_event("content_block_stop", {"type": "content_block_stop", "index": self.index})
                + _event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": STOP_REASON[self.plan.finish],
                                                     "stop_sequence": self.plan.stop_sequence},
                                           "usage": {"output_tokens": sent + self.plan.reasoning_tokens}})
                + _event("message_stop", {"type": "message_stop"}))

    @staticmethod
    def error(err: RequestError) -> bytes:
        return b"event: error\ndata: " + error_body(err) + b"\n\n"
