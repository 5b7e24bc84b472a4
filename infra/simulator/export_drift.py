"""Drift the simulator can be told to put into one account's usage export, to test reconciliation.

Set with ``POST /_sim/accounts/{account}`` (fields below, each optional and
overlaid on the account's current drift), read with ``GET``, cleared by
``POST /_sim/reset``. Only the export is changed; billing itself stays true.

* ``export_factor``: a decimal string (``"0.97"``; a JSON float is refused so
  the factor is exactly what was written) >= 0. Every token count of the
  account's rows is multiplied by it and rounded to the nearest whole token,
  halves up (``ROUND_HALF_UP``); ``requests`` is not scaled. ``"1"`` clears it.
* ``extra_token_type``: a lower-case name (``input_audio``) the gateway never
  sees; each of the account's rows gains that count column with
  ``extra_tokens_per_request`` (default 10) x the row's requests. ``null``
  clears it. It may not shadow a column the export already has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from infra.simulator.billing import CSV_FIELDS, TOKEN_FIELDS
from infra.simulator.config import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_FIELDS = ("export_factor", "extra_token_type", "extra_tokens_per_request")


@dataclass(frozen=True, slots=True)
class AccountDrift:
    export_factor: Decimal = Decimal(1)
    extra_token_type: str | None = None
    extra_tokens_per_request: int = 10

    def to_dict(self) -> dict[str, Any]:
        return {"export_factor": str(self.export_factor), "extra_token_type": self.extra_token_type,
                "extra_tokens_per_request": self.extra_tokens_per_request}

    @property
    def is_none(self) -> bool:
        return self.export_factor == 1 and self.extra_token_type is None


def parse_drift_update(data: Any, base: AccountDrift) -> AccountDrift:
    """Overlay a request body on ``base``; raise :class:`ConfigError` listing every problem."""
    if not isinstance(data, dict):
        raise ConfigError(["drift: must be a JSON object"])
    errors = [f"drift.{key}: unknown field" for key in data if key not in _FIELDS]
    values: dict[str, Any] = {}
    if "export_factor" in data:
        raw = data["export_factor"]
        try:
            factor = Decimal(raw) if isinstance(raw, str) or (isinstance(raw, int) and not isinstance(raw, bool)) \
                else None
        except InvalidOperation:
            factor = None
        if factor is None or not factor.is_finite() or factor < 0:
            errors.append('drift.export_factor: must be a decimal string >= 0 such as "0.97"')
        else:
            values["export_factor"] = factor
    if "extra_token_type" in data:
        name = data["extra_token_type"]
        if name is not None and (not isinstance(name, str) or not _NAME.match(name)):
            errors.append("drift.extra_token_type: must be a lower-case name like 'input_audio', or null")
        elif name in CSV_FIELDS:
            errors.append(f"drift.extra_token_type: {name!r} is already a column of the export")
        else:
            values["extra_token_type"] = name
    if "extra_tokens_per_request" in data:
        per = data["extra_tokens_per_request"]
        if isinstance(per, bool) or not isinstance(per, int) or per < 0:
            errors.append("drift.extra_tokens_per_request: must be an integer >= 0")
        else:
            values["extra_tokens_per_request"] = per
    if errors:
        raise ConfigError(errors)
    return replace(base, **values)


def scale(tokens: int, factor: Decimal) -> int:
    """``tokens`` x ``factor`` to the nearest whole token, halves up."""
    return int((Decimal(tokens) * factor).to_integral_value(rounding=ROUND_HALF_UP))


def apply_drift(rows: list[dict[str, Any]], drifts: Mapping[str, AccountDrift]) -> list[dict[str, Any]]:
    """The export rows as the drift of their accounts reports them (new dicts; the input is not changed)."""
    out = []
    for row in rows:
        drift = drifts.get(row["account"])
        if drift is None or drift.is_none:
            out.append(row)
            continue
        new = dict(row)
        if drift.export_factor != 1:
            for kind in TOKEN_FIELDS:
                new[kind] = scale(row[kind], drift.export_factor)
        if drift.extra_token_type is not None:
            new[drift.extra_token_type] = drift.extra_tokens_per_request * row["requests"]
        out.append(new)
    return out
