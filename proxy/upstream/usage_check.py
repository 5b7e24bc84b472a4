"""The usage boundary: what a provider says it served is checked before anything is priced, stored or folded.

Every dialect reads its provider's usage object through this module, and the
shells check the result against the request's own bound (``within``) before
the attempt is metered. A count is valid when it is a JSON integer (never a
bool, a float or a string), at least 0 and at most the bound; the parts must
also add up (cached input within the prompt, reasoning within the output
where the provider nests them). A usage object that fails any check is
*invalid* as a whole: ``invalid(raw)`` gives zero counts with source
``provider_invalid`` and a short text of what was received; the shells then
estimate the counts exactly as for a provider that reported nothing
(``estimated_as``), so the answer still reaches the client, the attempt is
billed a positive estimate, and the event says what the provider sent.

Invariant: no value a provider sends reaches an event unchecked, so no
provider can make an event unencodable (counts fit in 64 bits with room for
any price) or charge a negative amount.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import orjson

from ledger.usage import SERVICE_TIER, STANDARD_TIERS, TokenUsage

# No single request reports more tokens than this (the largest context windows are a few million);
# the per-request bound (context window + output cap) is usually far lower.
MAX_COUNT = 100_000_000
RECEIVED_CHARS = 300  # what an event keeps of an invalid usage object

# Zero counts marked "estimated": the provider reported no usage at all (some OpenAI-compatible servers
# omit it). Callers test ``needs_estimate``, never the counts, to tell it apart from a real zero.
UNREPORTED = TokenUsage(source="estimated")


class InvalidUsage(ValueError):
    """A usage count or shape that fails the boundary; ``dialect`` code turns it into ``invalid(raw)``."""


def count(raw: Mapping, key: str) -> int:
    """The count ``raw[key]``: absent or null is 0; anything but an integer in [0, MAX_COUNT] is invalid."""
    value = raw.get(key)
    if value is None:
        return 0
    if type(value) is int and 0 <= value <= MAX_COUNT:
        return value
    raise InvalidUsage(f"{key} is {value!r}")


def details(raw: Mapping, key: str) -> Mapping:
    """A nested details object (``prompt_tokens_details`` …): absent or null is empty; a non-object is invalid."""
    value = raw.get(key)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    raise InvalidUsage(f"{key} is not an object")


def received(raw: object) -> str:
    """A short, always-encodable text of what the provider sent."""
    try:
        text = orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # an integer outside 64 bits, say: orjson refuses it
        text = repr(raw)
    return text if len(text) <= RECEIVED_CHARS else text[: RECEIVED_CHARS - 1] + "…"


def invalid(raw: object) -> TokenUsage:
    """The marker for a usage object that failed the boundary: zero counts, to be estimated."""
    return TokenUsage(source="provider_invalid", received=received(raw))


def openai_usage(raw: object) -> TokenUsage:
    """An OpenAI ``usage`` object (Chat Completions, vLLM and compatibles) as disjoint priced types."""
    if raw is None:
        return UNREPORTED
    if not isinstance(raw, Mapping):
        return invalid(raw)
    try:
        prompt = count(raw, "prompt_tokens")
        completion = count(raw, "completion_tokens")
        cached = count(details(raw, "prompt_tokens_details"), "cached_tokens")
        reasoning = count(details(raw, "completion_tokens_details"), "reasoning_tokens")
        if cached > prompt or reasoning > completion:
            raise InvalidUsage("a detail exceeds its total")
        if "total_tokens" in raw and count(raw, "total_tokens") < prompt + completion:
            raise InvalidUsage("total_tokens below prompt + completion")
    except InvalidUsage:
        return invalid(raw)
    return TokenUsage(input=prompt - cached, cached_input=cached, output=completion - reasoning, reasoning=reasoning)


def responses_usage(raw: object) -> TokenUsage:
    """An OpenAI Responses ``usage`` object (``input_tokens`` with cached, ``output_tokens`` with reasoning)."""
    if raw is None:
        return UNREPORTED
    if not isinstance(raw, Mapping):
        return invalid(raw)
    try:
        given = count(raw, "input_tokens")
        output = count(raw, "output_tokens")
        cached = count(details(raw, "input_tokens_details"), "cached_tokens")
        reasoning = count(details(raw, "output_tokens_details"), "reasoning_tokens")
        if cached > given or reasoning > output:
            raise InvalidUsage("a detail exceeds its total")
        if "total_tokens" in raw and count(raw, "total_tokens") < given + output:
            raise InvalidUsage("total_tokens below input + output")
    except InvalidUsage:
        return invalid(raw)
    return TokenUsage(input=given - cached, cached_input=cached, output=output - reasoning, reasoning=reasoning)


def bedrock_usage(raw: object) -> TokenUsage:
    """A Bedrock Converse ``usage`` object: ``inputTokens`` excludes the cache reads and writes reported beside it
    (``totalTokens`` is their sum with ``outputTokens``)."""
    if raw is None:
        return UNREPORTED
    if not isinstance(raw, Mapping):
        return invalid(raw)
    try:
        given, output = count(raw, "inputTokens"), count(raw, "outputTokens")
        read, write = count(raw, "cacheReadInputTokens"), count(raw, "cacheWriteInputTokens")
        if "totalTokens" in raw and count(raw, "totalTokens") < given + output:
            raise InvalidUsage("totalTokens below inputTokens + outputTokens")
    except InvalidUsage:
        return invalid(raw)
    return TokenUsage(input=given, cached_input=read, cache_write=write, output=output)


def gemini_usage(raw: object) -> TokenUsage:
    """A Gemini ``usageMetadata``: ``promptTokenCount`` includes ``cachedContentTokenCount``; thoughts
    (``thoughtsTokenCount``) are apart from ``candidatesTokenCount`` and billed as output (our reasoning);
    ``toolUsePromptTokenCount`` is input."""
    if raw is None:
        return UNREPORTED
    if not isinstance(raw, Mapping):
        return invalid(raw)
    try:
        prompt, cached = count(raw, "promptTokenCount"), count(raw, "cachedContentTokenCount")
        output, thoughts = count(raw, "candidatesTokenCount"), count(raw, "thoughtsTokenCount")
        tool_prompt = count(raw, "toolUsePromptTokenCount")
        if cached > prompt:
            raise InvalidUsage("cachedContentTokenCount exceeds promptTokenCount")
        if "totalTokenCount" in raw and count(raw, "totalTokenCount") < prompt + output + thoughts:
            raise InvalidUsage("totalTokenCount below its parts")
    except InvalidUsage:
        return invalid(raw)
    return TokenUsage(input=prompt - cached + tool_prompt, cached_input=cached, output=output, reasoning=thoughts)


def openai_embedding_usage(raw: object) -> TokenUsage:
    """An OpenAI embeddings ``usage`` object (``prompt_tokens`` only)."""
    if raw is None:
        return UNREPORTED
    if not isinstance(raw, Mapping):
        return invalid(raw)
    try:
        return TokenUsage(input=count(raw, "prompt_tokens"))
    except InvalidUsage:
        return invalid(raw)


def served_tier(raw: object) -> str | None:
    """The tier a provider says it served at, when not its standard one; None for standard, absent or a value
    that is not a short name (never a reason to refuse an answer: such a request is priced as standard)."""
    if not isinstance(raw, str):
        return None
    tier = raw.strip().lower()
    return None if tier in STANDARD_TIERS or not SERVICE_TIER.match(tier) else tier


def with_tier(usage: TokenUsage, raw: object) -> TokenUsage:
    """``usage`` marked with the tier ``raw`` names; reported usage only (an estimate stays as it is)."""
    tier = served_tier(raw)
    if tier is None or usage.source != "provider" or usage is UNREPORTED:
        return usage
    return replace(usage, service_tier=tier)


def needs_estimate(usage: TokenUsage | None) -> bool:
    """Whether the counts are not the provider's: nothing reported, or what was reported failed the boundary."""
    return usage is None or usage is UNREPORTED or usage.source == "provider_invalid"


def within(usage: TokenUsage, limit: int) -> TokenUsage:
    """``usage`` when every total is within ``limit`` tokens (context window + output cap); else invalid."""
    if usage.source != "provider":
        return usage
    if usage.prompt_tokens <= limit and usage.completion_tokens <= limit:
        return usage
    return invalid({"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                    "bound": limit})


def estimated_as(usage: TokenUsage | None, *, input_tokens: int, output_tokens: int) -> TokenUsage:
    """farebox's estimate in place of ``usage``: marked ``provider_invalid`` (with what was received) when
    the provider sent something invalid, ``estimated`` when it sent nothing."""
    if usage is not None and usage.source == "provider_invalid":
        return TokenUsage(input=input_tokens, output=output_tokens, source="provider_invalid",
                          received=usage.received)
    return TokenUsage(input=input_tokens, output=output_tokens, source="estimated")
