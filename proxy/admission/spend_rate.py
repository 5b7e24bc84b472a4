"""The fast spend bucket: an optional money-per-hour limit per key and per team.

Monthly budgets are settled from events; a runaway loop can burn a lot of
money in the minutes before that matters. So a key or team scope whose budget
entry sets ``spend_per_hour`` gets a token bucket of that many micro-units per
hour, refilled continuously, drawn by the request's hold at admission (with the
rate-limit buckets, in the same all-or-nothing reservation) and settled to the
actual cost afterwards, exactly as token buckets settle (actual − reserved).
Short of it: 429 ``spend_rate_exceeded`` with Retry-After.

Units: the ``Buckets`` port counts integers exactly only while capacity ×
window stays below 2**53 / 1e6 (``bucket.max_capacity``), i.e. about 2.5
currency units per hour at micro-unit grain. So a bucket counts in a
*quantum* of 10^k micro-units, the smallest that fits the limit; amounts are
rounded up to whole quanta (so the bucket never under-counts). With the
largest quantum one unit is below limit / 250,000: the rounding is far below
any price. The quantum is part of the bucket key, so changing a limit never
mixes grains. Pure: builds draws and messages.
"""

from __future__ import annotations

import re

from proxy.limits.bucket import bucket_spec, max_capacity
from proxy.limits.draws import Draw
from proxy.snapshot import KeyRecord, Snapshot

WINDOW_S = 3600
KIND = "spend"  # the draw kind ``ratelimit`` settles by cost and words per hour
CODE = "spend_rate_exceeded"
_MAX_UNITS = max_capacity(WINDOW_S)
_FORMAT = re.compile(r"^[0-9]+(\.[0-9]{1,6})?$")


def quantum(limit_micro: int) -> int:
    """Micro-units per bucket unit: the smallest power of ten whose count of the limit fits a bucket."""
    q = 1
    while -(-limit_micro // q) > _MAX_UNITS:
        q *= 10
    return q


def units(micro: int, q: int) -> int:
    """``micro`` in whole quanta, rounded up."""
    return -(-max(micro, 0) // q)


def spend_draws(snap: Snapshot, key: KeyRecord, hold_micro: int) -> list[Draw]:
    """One draw per key/team scope with a ``spend_per_hour``: the hold, in the scope's quanta."""
    draws = []
    for scope, who in ((f"key:{key.key_id}", "This key"), (f"team:{key.team}", f"Team {key.team}")):
        limit = snap.budgets.scopes.get(scope)
        per_hour = limit.spend_per_hour_micro if limit is not None else None
        if not per_hour:
            continue
        q = quantum(per_hour)
        spec = bucket_spec(f"spend:{scope}:{q}", units(per_hour, q), WINDOW_S)
        draws.append(Draw(spec, units(hold_micro, q), KIND, CODE, who, quantum=q, currency=snap.currency))
    return draws


def parse_spend_per_hour(value: object) -> tuple[int | None, str | None]:
    """A ``spend_per_hour`` value -> (micro-units, None) or (None, why it is refused).

    Only a quoted decimal string in currency units: ``"50"``, ``"12.5"``, at most 6 decimals,
    greater than zero. A YAML/JSON number is refused (a float is never money), as are a
    sign, an exponent, a currency symbol or code, and separators.
    """
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return None, f"must be a quoted decimal string such as \"50.00\", not a number ({value!r})"
    if not isinstance(value, str):
        return None, f"must be a quoted decimal string such as \"50.00\", got {type(value).__name__}"
    text = value.strip()
    if text.startswith("-"):
        return None, f"must not be negative, got {value!r}"
    if not _FORMAT.match(text):
        return None, (f"must be an amount in the budget currency's units, digits with at most 6 decimal places "
                      f"and no symbol, code or exponent (e.g. \"50.00\"), got {value!r}")
    whole, _, frac = text.partition(".")
    micro = int(whole) * 1_000_000 + int((frac + "000000")[:6])
    if micro <= 0:
        return None, f"must be greater than 0, got {value!r}"
    return micro, None
