"""Deterministic values that satisfy a JSON Schema (tool arguments, json_schema output).

Covers what tool and structured-output schemas use in practice: ``type``
(including lists), ``const``, ``enum``, ``properties``/``required``,
``items``/``prefixItems``/``minItems``/``maxItems``/``uniqueItems``,
``minimum``/``maximum`` (and exclusive forms), ``multipleOf``,
``minLength``/``maxLength``, common ``format`` values, simple ``pattern``
checks, ``anyOf``/``oneOf`` (first usable branch), ``allOf`` (merged) and
local ``$ref`` into ``$defs``/``definitions``. Choices such as which enum
member or word comes from ``seed``, so the same seed gives the same value.
"""

from __future__ import annotations

import math
import re
from typing import Any

_WORDS = ("alpha", "bravo", "cedar", "delta", "ember", "fjord", "grove", "harbor",
          "island", "juniper", "kestrel", "lumen", "meadow", "nectar", "orbit", "prairie")
_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "12:00:00Z",
    "email": "user@example.com",
    "uri": "https://example.com/resource",
    "url": "https://example.com/resource",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
}
_MAX_DEPTH = 12  # below this, optional properties and one array item are filled in
_GIVE_UP_DEPTH = 64


class SchemaValueGenerator:
    """Generates one value for a root schema; ``$ref`` resolves against the root."""

    def __init__(self, root: Any, seed: int = 0) -> None:
        self.root = root if isinstance(root, dict) else {}
        self.seed = seed
        self._n = 0

    def _pick(self, n: int) -> int:
        self._n += 1
        return (self.seed + self._n * 2654435761) % n if n > 0 else 0

    def _resolve(self, schema: dict) -> dict:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            target: Any = self.root
            if not isinstance(ref, str) or not ref.startswith("#"):
                return {}
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part, {}) if isinstance(target, dict) else {}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else rest
            seen += 1
        return schema if isinstance(schema, dict) else {}

    def generate(self, schema: Any = None, depth: int = 0) -> Any:
        if schema is None:
            schema = self.root
        if schema is True or not isinstance(schema, dict):
            return "value"
        if depth > _GIVE_UP_DEPTH:  # an unsatisfiable (infinitely recursive) schema
            return None
        s = self._resolve(schema)
        if "allOf" in s and isinstance(s["allOf"], list):
            merged = {k: v for k, v in s.items() if k != "allOf"}
            for part in s["allOf"]:
                part = self._resolve(part) if isinstance(part, dict) else {}
                for k, v in part.items():
                    if k == "properties" and isinstance(v, dict):
                        merged["properties"] = {**merged.get("properties", {}), **v}
                    elif k == "required" and isinstance(v, list):
                        merged["required"] = list(dict.fromkeys([*merged.get("required", []), *v]))
                    else:
                        merged.setdefault(k, v)
            s = merged
        if "const" in s:
            return s["const"]
        if isinstance(s.get("enum"), list) and s["enum"]:
            return s["enum"][self._pick(len(s["enum"]))]
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                branches = [b for b in s[key] if not (isinstance(b, dict) and b.get("type") == "null")]
                base = {k: v for k, v in s.items() if k != key}
                branch = (branches or s[key])[0]
                branch = self._resolve(branch) if isinstance(branch, dict) else {}
                return self.generate({**base, **branch}, depth + 1)
        typ = s.get("type")
        if isinstance(typ, list):
            non_null = [t for t in typ if t != "null"]
            typ = non_null[0] if non_null else "null"
        if typ is None:
            if "properties" in s or "required" in s:
                typ = "object"
            elif "items" in s:
                typ = "array"
            else:
                typ = "string"
        gen = getattr(self, f"_gen_{typ}", None)
        return gen(s, depth) if gen else None

    def _gen_null(self, s: dict, depth: int) -> None:
        return None

    def _gen_boolean(self, s: dict, depth: int) -> bool:
        return self._pick(2) == 0

    def _gen_integer(self, s: dict, depth: int) -> int:
        lo, hi = _bounds(s, integer=True)
        mult = s.get("multipleOf")
        start = lo if lo is not None else (min(hi, 0) if hi is not None else 0)
        value = int(start) + (self._pick(10) if lo is not None and hi is None else 0)
        if hi is not None and value > hi:
            value = int(hi)
        if isinstance(mult, int) and mult > 0:
            value = math.ceil(value / mult) * mult
            if hi is not None and value > hi:
                value -= mult
        return value

    def _gen_number(self, s: dict, depth: int) -> float | int:
        if isinstance(s.get("multipleOf"), int):
            return self._gen_integer(s, depth)
        lo, hi = _bounds(s, integer=False)
        if lo is not None and hi is not None:
            return (lo + hi) / 2
        if lo is not None:
            return lo + 1.5
        if hi is not None:
            return hi - 1.5
        return 0.5 + self._pick(10)

    def _gen_string(self, s: dict, depth: int) -> str:
        min_len = s.get("minLength", 0) if isinstance(s.get("minLength"), int) else 0
        max_len = s.get("maxLength") if isinstance(s.get("maxLength"), int) else None
        fmt = s.get("format")
        candidates = []
        if isinstance(fmt, str) and fmt in _FORMATS:
            candidates.append(_FORMATS[fmt])
        word = _WORDS[self._pick(len(_WORDS))]
        candidates += [word, "a", "A1", "0", "abc123", "example"]
        pattern = s.get("pattern")
        for cand in candidates:
            text = _fit(cand, min_len, max_len)
            if not isinstance(pattern, str) or _matches(pattern, text):
                return text
        return _fit(word, min_len, max_len)

    def _gen_array(self, s: dict, depth: int) -> list:
        min_items = s.get("minItems", 0) if isinstance(s.get("minItems"), int) else 0
        max_items = s.get("maxItems") if isinstance(s.get("maxItems"), int) else None
        prefix: list = s["prefixItems"] if isinstance(s.get("prefixItems"), list) else []
        count = max(min_items, len(prefix), 0 if depth >= _MAX_DEPTH else 1)
        if max_items is not None:
            count = min(count, max_items)
        items = s.get("items", {})
        out: list = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            value = self.generate(sub if isinstance(sub, dict) else {}, depth + 1)
            if s.get("uniqueItems") and value in out:
                value = self._unique(sub, out, depth)
            out.append(value)
        return out

    def _unique(self, sub: Any, taken: list, depth: int) -> Any:
        for _ in range(32):
            value = self.generate(sub if isinstance(sub, dict) else {}, depth + 1)
            if value not in taken:
                return value
        return value

    def _gen_object(self, s: dict, depth: int) -> dict:
        props: dict = s["properties"] if isinstance(s.get("properties"), dict) else {}
        required = [r for r in s.get("required", []) if isinstance(r, str)]
        out: dict = {}
        for name in required:
            out[name] = self.generate(props.get(name, {}), depth + 1)
        if depth < _MAX_DEPTH:
            for name, sub in props.items():
                if name not in out:
                    out[name] = self.generate(sub, depth + 1)
        min_props = s.get("minProperties")
        extra = s.get("additionalProperties", True)
        while isinstance(min_props, int) and len(out) < min_props and extra is not False:
            out[f"extra_{len(out)}"] = self.generate(extra if isinstance(extra, dict) else {}, depth + 1)
        return out


def _bounds(s: dict, integer: bool) -> tuple[float | None, float | None]:
    lo = s.get("minimum")
    hi = s.get("maximum")
    xlo, xhi = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    step = 1 if integer else 0.5
    if isinstance(xlo, (int, float)) and not isinstance(xlo, bool):
        cand = (math.floor(xlo) + 1) if integer else xlo + step
        lo = cand if lo is None else max(lo, cand)
    if isinstance(xhi, (int, float)) and not isinstance(xhi, bool):
        cand = (math.ceil(xhi) - 1) if integer else xhi - step
        hi = cand if hi is None else min(hi, cand)
    if integer:
        lo = math.ceil(lo) if isinstance(lo, (int, float)) else None
        hi = math.floor(hi) if isinstance(hi, (int, float)) else None
    if not integer and isinstance(xlo, (int, float)) and isinstance(hi, (int, float)) and lo is not None and lo > hi:
        lo = (xlo + hi) / 2
    if not integer and isinstance(xhi, (int, float)) and isinstance(lo, (int, float)) and hi is not None and hi < lo:
        hi = (lo + xhi) / 2
    return lo, hi


def _fit(text: str, min_len: int, max_len: int | None) -> str:
    while len(text) < min_len:
        text += "x"
    if max_len is not None:
        text = text[:max_len]
    return text


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True


def generate_value(schema: Any, seed: int = 0) -> Any:
    """A value satisfying ``schema`` (best effort for exotic keywords), deterministic in ``seed``."""
    return SchemaValueGenerator(schema, seed).generate()
