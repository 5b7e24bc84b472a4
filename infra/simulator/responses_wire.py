"""The OpenAI Responses API dialect (``POST /v1/responses``): request parsing and response bytes (no I/O).

A Response's ``output`` holds, in order: a ``reasoning`` item when the request asks for reasoning (``reasoning.
effort`` low or above: its text is a signed simulated thought, its tokens are ``output_tokens_details.
reasoning_tokens``; ``summary`` filled when ``reasoning.summary`` asks; ``encrypted_content`` when ``include``
asks for ``reasoning.encrypted_content``), then a ``message`` (``output_text``) or a ``function_call``. A
reasoning item passed back must carry encrypted content this simulator issued, unaltered (a store-less request
cannot name a stored one, as with OpenAI). Streams are typed events, each with ``sequence_number``:
``response.created``, ``response.in_progress``, ``response.output_item.added`` / ``.done`` per item,
``response.content_part.added`` / ``.done``, ``response.output_text.delta`` / ``.done`` or
``response.function_call_arguments.delta`` / ``.done``, then ``response.completed`` (``response.incomplete``
when cut by ``max_output_tokens``) with the usage; an in-stream failure is an ``error`` event. Tools: functions,
functions grouped in a ``namespace``, and built-in tools (accepted, never called). Errors are OpenAI's
(``openai_wire``). Nothing is stored: ``previous_response_id`` and ``item_reference`` find nothing.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from infra.simulator.billing import BillableUsage
from infra.simulator.generation import ChatRequest, Plan, RequestError, Tool, stable_id
from infra.simulator.openai_wire import api_key, auth_error, check_headers, context_error, error_body, fault_error
from infra.simulator.prompt_cache import signature

__all__ = ["api_key", "auth_error", "check_headers", "context_error", "error_body", "fault_error"]

NAME = "responses"
REPORTS_CACHE_WRITE = False
PARAMS = frozenset("""model input instructions tools tool_choice parallel_tool_calls text reasoning max_output_tokens
    max_tool_calls metadata store stream stream_options include previous_response_id prompt_cache_key
    prompt_cache_retention safety_identifier user service_tier temperature top_p top_logprobs truncation
    background conversation prompt client_metadata""".split())  # noqa: SIM905
THINKING_EFFORTS = frozenset({"low", "medium", "high", "xhigh"})


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, "invalid_request", message, param=param)


def encrypted(thought: str) -> str:
    """A reasoning item's encrypted content: the thought and the simulator's seal of it (opaque to clients)."""
    return "sim1." + base64.b64encode(thought.encode()).decode() + "." + signature(thought)


def _decrypted(blob: object) -> str | None:
    if not isinstance(blob, str) or not blob.startswith("sim1.") or blob.count(".") != 2:
        return None
    _, body, seal = blob.split(".")
    try:
        thought = base64.b64decode(body, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return thought if signature(thought) == seal else None


def parse_chat(body: dict, strict: bool) -> ChatRequest:
    """Validate a Responses body into a :class:`ChatRequest` (raises RequestError)."""
    if strict:
        for key in body:
            if key not in PARAMS:
                raise _bad(f"Unknown parameter: '{key}'.", key)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("Missing required parameter: 'model'.", "model")
    if body.get("previous_response_id") is not None:
        raise RequestError(404, "not_found", f"Previous response with id '{body['previous_response_id']}' not "
                           "found.", param="previous_response_id", code="previous_response_not_found")
    texts: list[str] = []
    framed = 0
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("Invalid type for 'instructions': expected a string.", "instructions")
        texts.append(instructions)
        framed += 1
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise _bad("Missing required parameter: 'input'.", "input")
    images, tool_results = 0, 0
    for i, item in enumerate(items):
        images += _item(item, f"input[{i}]", texts)
        tool_results += isinstance(item, dict) and item.get("type") == "function_call_output"
        framed += 1
    tools = _tools(body.get("tools"), texts)
    cap = body.get("max_output_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 16):
        raise _bad("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16.",
                   "max_output_tokens")
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    json_schema = fmt.get("schema") if isinstance(fmt, dict) and fmt.get("type") == "json_schema" else None
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
    last = items[-1]
    return ChatRequest(model=model, stream=body.get("stream") is True, texts=texts, framed=framed, images=images,
                       max_tokens=cap, tools=tools, forced_tool=_forced_tool(body.get("tool_choice"), tools),
                       last_is_tool_result=isinstance(last, dict) and last.get("type") == "function_call_output",
                       json_schema=json_schema, json_object=isinstance(fmt, dict) and fmt.get("type") == "json_object",
                       include_usage=True, tool_results=tool_results,
                       thinking=reasoning.get("effort") in THINKING_EFFORTS, echo=_echo(body),
                       service_tier=body["service_tier"] if body.get("service_tier") in ("flex", "scale", "priority")
                       else None,
                       cache_key=body.get("prompt_cache_key") if isinstance(body.get("prompt_cache_key"), str) else None)


ECHOED = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "previous_response_id", "reasoning",
          "store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "user")


def _echo(body: dict) -> dict:
    """The request fields a Response repeats, with OpenAI's defaults."""
    out = {"instructions": None, "max_output_tokens": None, "metadata": {}, "parallel_tool_calls": True,
           "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": True,
           "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
           "top_p": 1.0, "truncation": "disabled", "user": None}
    out.update({k: body[k] for k in ECHOED if body.get(k) is not None})
    return out


def _item(item: Any, p: str, texts: list[str]) -> int:
    """Append an input item's text; the number of images it holds."""
    if not isinstance(item, dict):
        raise _bad(f"Invalid type for '{p}': expected an object.", p)
    kind = item.get("type", "message")
    if kind == "message":
        if item.get("role") not in ("user", "assistant", "system", "developer"):
            raise _bad(f"Invalid value: '{item.get('role')}'. Supported values are: 'user', 'assistant', 'system', "
                       "and 'developer'.", f"{p}.role")
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
            return 0
        if not isinstance(content, list):
            raise _bad(f"Invalid type for '{p}.content': expected a string or an array.", f"{p}.content")
        images = 0
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "output_text"):
                texts.append(str(part.get("text", "")))
            elif kind in ("input_image", "input_file"):
                images += 1
            elif kind == "refusal":
                texts.append(str(part.get("refusal", "")))
            else:
                raise _bad(f"Invalid value: '{kind}'.", f"{p}.content")
        return images
    if kind == "function_call":
        texts.append(f"{item.get('name', '')} {item.get('arguments', '')}")
    elif kind == "function_call_output":
        output = item.get("output")
        texts.append(output if isinstance(output, str) else orjson.dumps(output).decode())
    elif kind == "reasoning":
        blob = item.get("encrypted_content")
        if blob is None:
            raise RequestError(404, "not_found", f"Item with id '{item.get('id')}' not found. Items are not "
                               "persisted when `store` is set to false.", param=p)
        thought = _decrypted(blob)
        if thought is None:
            raise _bad(f"The encrypted content for item {item.get('id')} could not be verified.", p)
        texts.append(thought)
    elif kind == "item_reference":
        raise RequestError(404, "not_found", f"Item with id '{item.get('id')}' not found.", param=p)
    elif kind in ("custom_tool_call", "custom_tool_call_output", "web_search_call", "local_shell_call",
                  "local_shell_call_output"):
        texts.append(orjson.dumps(item).decode())
    else:
        raise _bad(f"Invalid value: '{kind}'.", f"{p}.type")
    return 0


def _tools(raw: Any, texts: list[str]) -> list[Tool]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad("Invalid type for 'tools': expected an array.", "tools")
    out: list[Tool] = []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        group = tool.get("tools") if kind == "namespace" else [tool]
        if not isinstance(group, list):
            raise _bad(f"Missing required parameter: 'tools[{i}].tools'.", f"tools[{i}].tools")
        for fn in group:
            if not isinstance(fn, dict) or fn.get("type") != "function":
                texts.append(str((fn or {}).get("type") if isinstance(fn, dict) else fn))  # built-in: never called
                continue
            if not isinstance(fn.get("name"), str):
                raise _bad(f"Missing required parameter: 'tools[{i}].name'.", f"tools[{i}].name")
            params = fn.get("parameters") or {"type": "object", "properties": {}}
            texts.append(f"{fn['name']} {fn.get('description', '')} "
                         f"{orjson.dumps(params, option=orjson.OPT_SORT_KEYS).decode()}")
            out.append(Tool(fn["name"], params))
    return out


def _forced_tool(choice: Any, tools: list[Tool]) -> str | None:
    if choice in (None, "auto", "none"):
        return None
    if choice == "required":
        if not tools:
            raise _bad("Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice")
        return tools[0].name
    if isinstance(choice, dict) and choice.get("type") == "function":
        if not any(t.name == choice.get("name") for t in tools):
            raise _bad(f"Tool choice '{choice.get('name')}' not found in 'tools' parameter.", "tool_choice")
        return choice["name"]
    raise _bad("Invalid value for 'tool_choice'.", "tool_choice")


def usage(plan: Plan, sent: int | None = None) -> dict:
    out = (plan.output_tokens if sent is None else sent) + plan.reasoning_tokens
    return {"input_tokens": plan.input_tokens, "input_tokens_details": {"cached_tokens": plan.cached_tokens},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
            "total_tokens": plan.input_tokens + out}


def billable(plan: Plan, sent: int) -> BillableUsage:
    return BillableUsage(input=plan.input_tokens - plan.cached_tokens, cached_input=plan.cached_tokens,
                         output=sent, reasoning=plan.reasoning_tokens)


def _items(plan: Plan, rid: str, full: bool) -> list[dict]:
    """The output items (``full``: as done; else as first added)."""
    out: list[dict] = []
    if plan.thinking:
        out.append({"type": "reasoning", "id": f"rs_{rid[5:]}", "summary": [],
                    "encrypted_content": encrypted(plan.thinking)})
    if plan.kind == "tool":
        out.append({"type": "function_call", "id": f"fc_{rid[5:]}", "call_id": stable_id("call_", plan.tool_id_seed),
                    "name": plan.tool_name, "arguments": plan.content if full else "",
                    "status": "completed" if full else "in_progress"})
    else:
        out.append({"type": "message", "id": f"msg_{rid[5:]}", "status": "completed" if full else "in_progress",
                    "role": "assistant", "content": [{"type": "output_text", "text": plan.content, "annotations": [],
                                                      "logprobs": []}] if full else []})
    return out


def _response(plan: Plan, rid: str, created: int, model: str, status: str, sent: int | None) -> dict:
    done = status != "in_progress"
    return {"id": rid, "object": "response", "created_at": created, "status": status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": model, "output": _items(plan, rid, True) if done else [], **plan.echo,
            "service_tier": plan.service_tier or "default", "usage": usage(plan, sent) if done else None}


def _status(plan: Plan) -> str:
    return "incomplete" if plan.finish == "length" else "completed"


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    return orjson.dumps(_response(plan, rid, created, model, _status(plan), None))


class StreamEncoder:
    """Bytes of one Responses stream: ``head()``, ``piece(text)`` per token, ``tail(sent)``."""

    def __init__(self, plan: Plan, rid: str, created: int, model: str, include_usage: bool = True) -> None:
        self.plan, self.rid, self.created, self.model = plan, rid, created, model
        self.seq = 0
        self.at = 1 if plan.thinking else 0  # the output index of the answer's item
        self.item = _items(plan, rid, False)[-1]

    def _event(self, kind: str, data: dict) -> bytes:
        out = b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data,
                                                                      "sequence_number": self.seq}) + b"\n\n"
        self.seq += 1
        return out

    def head(self) -> bytes:
        shell = _response(self.plan, self.rid, self.created, self.model, "in_progress", None)
        out = self._event("response.created", {"response": shell}) + self._event("response.in_progress",
                                                                                {"response": shell})
        if self.plan.thinking:
            reasoning = _items(self.plan, self.rid, True)[0]
            out += (self._event("response.output_item.added", {"output_index": 0, "item": reasoning})
                    + self._event("response.output_item.done", {"output_index": 0, "item": reasoning}))
        out += self._event("response.output_item.added", {"output_index": self.at, "item": self.item})
        if self.plan.kind != "tool":
            out += self._event("response.content_part.added", {
                "item_id": self.item["id"], "output_index": self.at, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}})
        return out

    def piece(self, text: str) -> bytes:
        if self.plan.kind == "tool":
            return self._event("response.function_call_arguments.delta", {
                "item_id": self.item["id"], "output_index": self.at, "delta": text})
        return self._event("response.output_text.delta", {"item_id": self.item["id"], "output_index": self.at,
                                                          "content_index": 0, "delta": text, "logprobs": []})

    def tail(self, sent: int) -> bytes:
        done = _items(self.plan, self.rid, True)[-1]
        ref = {"item_id": self.item["id"], "output_index": self.at}
        if self.plan.kind == "tool":
            out = self._event("response.function_call_arguments.done", {**ref, "arguments": done["arguments"]})
        else:
            part = done["content"][0]
            out = (self._event("response.output_text.done", {**ref, "content_index": 0, "text": part["text"],
                                                             "logprobs": []})
                   + self._event("response.content_part.done", {**ref, "content_index": 0, "part": part}))
        out += self._event("response.output_item.done", {"output_index": self.at, "item": done})
        status = _status(self.plan)
        final = _response(self.plan, self.rid, self.created, self.model, status, sent)
        return out + self._event(f"response.{status}", {"response": final})

    def error(self, err: RequestError) -> bytes:
        body = orjson.loads(error_body(err))["error"]
        return self._event("error", {"code": body.get("code"), "message": body.get("message"),
                                     "param": body.get("param")})
