"""When a request may use the exact response cache, and under which key: pure functions.

``cache_use`` decides from the alias's opt-in, the caller's ``x-fb-cache``
(``on`` / ``off``; anything else is a 400 naming the header, even when the
alias does not cache), ``Cache-Control`` and the request itself:

* never for restricted data, nor for a request whose body was redacted for
  an outside deployment (the answer carries the restored values, which must
  not be stored), nor for tool calls (``tools`` / ``functions`` /
  ``tool_choice`` or tool turns in the messages) or ``logprobs``;
* never above ``max_temperature`` (an absent temperature is the OpenAI
  default, 1.0);
* ``Cache-Control: no-store``: neither read nor written; ``no-cache``:
  not read, but the fresh answer is stored.

A bypassed request that asked for the cache says why (``bypass``); one that
did not ask is ``OFF`` and carries no cache header.

Keys (``chat_key``, ``embeddings_key``) hash, as canonical JSON (sorted keys,
SHA-256), the team, the resolved deployment's model and every body field
that can change the output: all of them except the few listed in
``NOT_OUTPUT`` (transport and bookkeeping). An unknown parameter is in the
key: a miss is cheaper than a wrong hit.

The semantic cache (an alias's ``cache.semantic``) follows the same decision
and adds its own reach: it embeds the conversation's last turn when that is
the user's and plain text (``last_user_text``), and searches the namespace
``semantic_namespace``: the exact key's hash of everything *but* that text,
plus the model that embedded it (vectors of two models never compare). So a
different system prompt, earlier turn, parameter or model is a different
namespace, and only the last question may be phrased differently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest
from proxy.hashing import sha256_hex

HEADER = "x-fb-cache"
RESTRICTED = "restricted"
DEFAULT_TEMPERATURE = 1.0  # what providers use when the caller sends none
NOT_OUTPUT = frozenset({"model", "stream", "stream_options", "user", "metadata", "store", "service_tier",
                        "prompt_cache_key", "safety_identifier"})
_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")
SEMANTIC_MAX_CHARS = 8_000  # a longer last turn is a document, not a question: not embedded


@dataclass(frozen=True, slots=True)
class CacheUse:
    """Whether to look the answer up (``read``) and to store a fresh one (``write``)."""

    read: bool
    write: bool
    bypass: str | None = None  # asked for, but not allowed here: why

    @property
    def asked(self) -> bool:
        return self.read or self.write or self.bypass is not None


OFF = CacheUse(False, False)


def parse_header(value: str | None) -> bool | None:
    """``x-fb-cache``: True (on), False (off) or None (absent); anything else is a 400 naming the header."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("on", "off"):
        return v == "on"
    raise InvalidRequest(f"{HEADER} must be 'on' or 'off', got {value[:40]!r}.", param=HEADER,
                         code="invalid_cache_header")


def cache_control(value: str | None) -> frozenset[str]:
    """The request's ``Cache-Control`` directives, lower case, without arguments."""
    if not value:
        return frozenset()
    return frozenset(d.split("=", 1)[0].strip().lower() for d in value.split(","))


def cache_use(*, alias_on: bool, header: str | None, control: str | None, kind: str, body: Mapping[str, Any],
              data_class: str, redacted: bool, max_temperature: float) -> CacheUse:
    """The request's use of the cache (raises ``InvalidRequest`` for a malformed ``x-fb-cache``)."""
    asked = parse_header(header)
    if not (alias_on if asked is None else asked):
        return OFF
    directives = cache_control(control)
    reason = _bypass(directives, kind, body, data_class, redacted, max_temperature)
    if reason is not None:
        return CacheUse(False, False, reason)
    return CacheUse(read="no-cache" not in directives, write=True)


def _bypass(directives: frozenset[str], kind: str, body: Mapping[str, Any], data_class: str, redacted: bool,
            max_temperature: float) -> str | None:
    if "no-store" in directives:
        return "no_store"
    if data_class == RESTRICTED:
        return "restricted"
    if redacted:
        return "redacted"
    if kind != "chat":
        return None
    if any(body.get(f) is not None for f in _TOOL_FIELDS) or _tool_turns(body.get("messages")):
        return "tool_calls"
    if body.get("logprobs") or body.get("top_logprobs"):
        return "logprobs"
    if body.get("thinking") is not None:  # extended thinking: its signed blocks are not kept by the cache
        return "thinking"
    temperature = body.get("temperature")
    if (DEFAULT_TEMPERATURE if temperature is None else float(temperature)) > max_temperature:
        return "temperature"
    return None


def _tool_turns(messages: Any) -> bool:
    for m in messages or ():
        if isinstance(m, dict) and (m.get("role") in ("tool", "function") or m.get("tool_calls")
                                    or m.get("function_call")):
            return True
    return False


def chat_key(team: str, model: str, body: Mapping[str, Any], max_output_tokens: int) -> str:
    """The key of a chat answer; ``max_output_tokens`` is the cap the gateway sends (the alias default too)."""
    return _digest("chat", team, model, {**_params(body), "max_output_tokens": max_output_tokens})


def embeddings_key(team: str, model: str, body: Mapping[str, Any]) -> str:
    return _digest("embeddings", team, model, _params(body))


def _params(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in NOT_OUTPUT}


def _digest(kind: str, team: str, model: str, params: Mapping[str, Any]) -> str:
    canonical = orjson.dumps([kind, team, model, params], option=orjson.OPT_SORT_KEYS)
    return f"{kind}:{sha256_hex(canonical)}"


def last_user_text(body: Mapping[str, Any]) -> str | None:
    """The last turn's text when it is the user's: a string, or its text parts joined by newlines.

    None when the last turn is not the user's, carries anything but text (an image, audio), or its text
    is empty or longer than ``SEMANTIC_MAX_CHARS``: such a request is not looked up semantically.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):
            return None
        content = "\n".join(p["text"] for p in content)
    if not isinstance(content, str) or not content.strip() or len(content) > SEMANTIC_MAX_CHARS:
        return None
    return content


def semantic_namespace(team: str, model: str, embedding_model: str, body: Mapping[str, Any],
                       max_output_tokens: int) -> str:
    """Where a chat answer's vector is stored: ``chat_key``'s fields with the last turn's text left out."""
    messages = list(body.get("messages") or ())
    if messages and isinstance(messages[-1], dict):
        messages[-1] = {**messages[-1], "content": None}
    params = {**_params(body), "messages": messages, "max_output_tokens": max_output_tokens,
              "embedding_model": embedding_model}
    return _digest("semantic", team, model, params)
