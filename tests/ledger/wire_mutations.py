"""Wire objects made wrong one way at a time: the edges of every check ``ledger.codec.from_dict`` makes
(a uniquely named module: shared by the bulk-check and archive tests)."""

from __future__ import annotations

from typing import Any

# values a field is replaced by: every kind of JSON value, the edges of each check
PALETTE: list[Any] = [
    None, "", "x", "ok", "provider", "estimated", "team-1", 0, 1, -1, 2, 2**70, True, False, 1.5, -0.0, [], ["x"],
    {}, {"": 1}, {"": "x"}, {"a": -1}, {"a": True}, {"a": "s"}, {"a": 1}, {"a": ""}, {"a": 1.0}, {"key:k": 1},
    "2026-10-03T10:15:02.123456Z", "2026-02-30T10:15:02.123456Z", "2026-10-03 10:15:02.123456Z",
    "2026-10-03T24:15:02.123456Z", "2026-10-03T10:15:60.123456Z", "2026-10-03T10:15:02.12345Z",
    "2026-10-03T10:15:02.123456+", "2026-10-03T10:15:02,123456Z", "2026-1O-03T10:15:02.123456Z",
    "request.admitted", "request.settled", 4, 2,
    {"input": 1, "cached_input": 0, "cache_write": 0, "output": 1, "reasoning": 0, "source": "provider"},
    {"input": -1, "cached_input": 0, "cache_write": 0, "output": 1, "reasoning": 0, "source": "provider"},
    {"input": True, "cached_input": 0, "cache_write": 0, "output": 1, "reasoning": 0, "source": "provider"},
    {"input": 1, "cached_input": 0, "cache_write": 0, "output": 1, "reasoning": 0, "source": "guess"},
    {"input": 1, "cached_input": 0, "cache_write": 0, "output": 1, "source": "provider"},
    {"input": 1, "cached_input": 0, "cache_write": 0, "output": 1, "reasoning": 0, "source": ["provider"]},
]


IDS = {"request.admitted": "{request_id}/admitted", "request.attempted": "{request_id}/attempt/{attempt}",
       "request.settled": "{request_id}/settled", "hold.expired": "{request_id}/expired"}


def mutated(wire: dict, how: str, field: str, value: Any) -> dict:
    """``wire`` with ``field`` set to ``value`` (``rederive``: then its id and key made to match, so the
    envelope check does not hide the field's own), set inside (``nested``), dropped, or a field added."""
    out = dict(wire)
    if how == "rederive":
        out[field] = value
        try:
            out.update(id=IDS[out["type"]].format(**out), key=out["team"])
        except (KeyError, TypeError, ValueError, IndexError):
            pass
    elif how == "drop":
        out.pop(field)
    elif how == "add":
        out[f"{field}_extra"] = value
    elif how == "nested" and isinstance(out.get(field), dict) and out[field]:
        inner = dict(out[field])
        inner[sorted(inner)[0]] = value
        out[field] = inner
    else:
        out[field] = value
    return out
