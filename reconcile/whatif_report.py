"""The what-if's report: per scope who would have been refused, from when, how many, and the spend difference;
per split variant (``fb.variant``) the same side by side.

Pure summaries of a ``reconcile.whatif.WhatIf``, then two renderings: a
plain-text table and a JSON document. Money is integer micro-units of the
budget currency (JSON carries ``*_micro`` integers; the table shows exact
decimals); a difference is proposed minus real.

A scope's spend is the sum of its per-scope charges over the window's
attempts: a settled request's ``cost_by_scope``, an expired one's full hold, an
open one's hold; an attempt really refused but admitted under the proposal is
charged its hold (its actual cost is unknown: the worst case, counted in
``worst_case``). A scope is listed when it refused anything, really or under
the proposal, or, for teams and business units, when its spend differs (the
JSON lists every scope whose spend differs, keys and runs too). A per-request
cap refusal names no scope: it is listed under ``CAP``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from ledger.codec import format_time
from pricing.money import to_decimal
from reconcile.whatif import Outcome, Verdict, WhatIf

CAP = "(per-request cap)"


@dataclass(slots=True)
class ScopeRow:
    """One scope's what-if: refusals under the proposal and in reality, and its spend both ways."""

    scope: str
    refused_from: datetime | None = None  # the proposal's first refusal naming this scope
    refused: int = 0  # attempts the proposal refuses on this scope
    really_refused: int = 0  # attempts really refused on this scope
    newly_refused: int = 0  # really admitted, refused on this scope under the proposal
    newly_admitted: int = 0  # really refused on this scope, admitted under the proposal (worst case)
    spend_real_micro: int = 0
    spend_proposed_micro: int = 0

    @property
    def difference_micro(self) -> int:
        return self.spend_proposed_micro - self.spend_real_micro


@dataclass(frozen=True, slots=True)
class Totals:
    attempts: int
    really_refused: int
    refused: int
    newly_refused: int
    newly_admitted: int
    spend_real_micro: int  # request costs, each counted once (not summed over scopes)
    spend_proposed_micro: int

    @property
    def difference_micro(self) -> int:
        return self.spend_proposed_micro - self.spend_real_micro

    @property
    def same_as_reality(self) -> bool:
        return self.newly_refused == 0 and self.newly_admitted == 0


def scope_rows(whatif: WhatIf, *, every: bool = False) -> list[ScopeRow]:
    """The listed scopes (see the module docstring), by scope id; ``every``: each scope whose spend differs."""
    rows: dict[str, ScopeRow] = {}

    def row(scope: str | None) -> ScopeRow:
        name = CAP if scope is None else scope
        return rows.setdefault(name, ScopeRow(name))

    for o in whatif.outcomes:
        if not o.proposed.admitted:
            r = row(o.proposed.scope)
            r.refused += 1
            r.refused_from = r.refused_from or o.time
            r.newly_refused += o.real.admitted
        if not o.real.admitted:
            r = row(o.real.scope)
            r.really_refused += 1
            r.newly_admitted += o.proposed.admitted
        real, proposed = o.charges("real"), o.charges("proposed")
        for scope in real.keys() | proposed.keys():
            r = row(scope)
            r.spend_real_micro += real.get(scope, 0)
            r.spend_proposed_micro += proposed.get(scope, 0)
    listed = [r for r in rows.values() if r.refused or r.really_refused or (
        r.difference_micro and (every or r.scope.startswith(("team:", "bu:"))))]
    return sorted(listed, key=lambda r: r.scope)


def totals(whatif: WhatIf) -> Totals:
    outcomes = whatif.outcomes
    return Totals(
        attempts=len(outcomes),
        really_refused=len(whatif.refused("real")),
        refused=len(whatif.refused("proposed")),
        newly_refused=len(whatif.newly_refused()),
        newly_admitted=len(whatif.newly_admitted()),
        spend_real_micro=sum(o.cost("real") for o in outcomes),
        spend_proposed_micro=sum(o.cost("proposed") for o in outcomes),
    )


@dataclass(slots=True)
class VariantRow:
    """A split variant's attempts under the proposal and in reality, and its spend both ways."""

    variant: str
    attempts: int = 0
    refused: int = 0
    really_refused: int = 0
    spend_real_micro: int = 0
    spend_proposed_micro: int = 0


def variant_rows(whatif: WhatIf) -> list[VariantRow]:
    """Per split variant (the requests a split served; none when the window has none), so a proposal is seen
    side by side for the current and the candidate model."""
    rows: dict[str, VariantRow] = {}
    for o in whatif.outcomes:
        if o.variant is None:
            continue
        row = rows.setdefault(o.variant, VariantRow(o.variant))
        row.attempts += 1
        row.refused += not o.proposed.admitted
        row.really_refused += not o.real.admitted
        row.spend_real_micro += o.cost("real")
        row.spend_proposed_micro += o.cost("proposed")
    return [rows[name] for name in sorted(rows)]


# --- renderings ---------------------------------------------------------------------------------


def _verdict(v: Verdict) -> dict[str, Any]:
    return {"admitted": True} if v.admitted else {"admitted": False, "code": v.code, "scope": v.scope}


def _change(o: Outcome) -> dict[str, Any]:
    return {"request_id": o.request_id, "time": format_time(o.time), "team": o.team,
            "real": _verdict(o.real), "proposed": _verdict(o.proposed), "hold_micro": o.hold_micro,
            "cost_real_micro": o.cost("real"), "cost_proposed_micro": o.cost("proposed"),
            "worst_case": o.worst_case}


def to_json(whatif: WhatIf, currency: str) -> bytes:
    """The whole report: window, totals, listed scopes, every changed request and every refusal under the proposal."""
    t = totals(whatif)
    doc = {
        "from": f"{whatif.start:%Y-%m-%d}",
        "to": f"{whatif.end - timedelta(days=1):%Y-%m-%d}",
        "currency": currency,
        "totals": {"attempts": t.attempts, "really_refused": t.really_refused, "refused": t.refused,
                   "newly_refused": t.newly_refused, "newly_admitted_worst_case": t.newly_admitted,
                   "spend_real_micro": t.spend_real_micro, "spend_proposed_micro": t.spend_proposed_micro,
                   "difference_micro": t.difference_micro, "same_as_reality": t.same_as_reality},
        "scopes": [{"scope": r.scope, "refused_from": r.refused_from and format_time(r.refused_from),
                    "refused": r.refused, "really_refused": r.really_refused, "newly_refused": r.newly_refused,
                    "newly_admitted_worst_case": r.newly_admitted, "spend_real_micro": r.spend_real_micro,
                    "spend_proposed_micro": r.spend_proposed_micro, "difference_micro": r.difference_micro}
                   for r in scope_rows(whatif, every=True)],
        "variants": [{"variant": v.variant, "attempts": v.attempts, "refused": v.refused,
                      "really_refused": v.really_refused, "spend_real_micro": v.spend_real_micro,
                      "spend_proposed_micro": v.spend_proposed_micro} for v in variant_rows(whatif)],
        "changes": [_change(o) for o in whatif.outcomes if o.real.admitted != o.proposed.admitted],
        "refusals": [{"request_id": o.request_id, "time": format_time(o.time), **_verdict(o.proposed)}
                     for o in whatif.refused("proposed")],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


def _money(micro: int) -> str:
    return f"{to_decimal(micro):,.6f}"


def to_table(whatif: WhatIf, currency: str) -> str:
    """A table per scope, then the totals; worst-case admissions are called out."""
    t = totals(whatif)
    header = ("scope", "refused from", "refused", "really", "newly refused", "newly admitted*",
              f"real {currency}", f"proposed {currency}", f"difference {currency}")
    body = [(r.scope, format_time(r.refused_from)[:19] + "Z" if r.refused_from else "-", str(r.refused),
             str(r.really_refused), str(r.newly_refused), str(r.newly_admitted), _money(r.spend_real_micro),
             _money(r.spend_proposed_micro), _money(r.difference_micro)) for r in scope_rows(whatif)]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
             for line in [header, *body]]
    if not body:
        lines.append("(no scope refused anything, really or under the proposal, and no spend changed)")
    lines += [
        "",
        f"{whatif.start:%Y-%m-%d}..{whatif.end - timedelta(days=1):%Y-%m-%d}: {t.attempts} admission attempts; "
        f"really refused {t.really_refused}, refused under the proposal {t.refused} "
        f"({t.newly_refused} newly refused, {t.newly_admitted} newly admitted*).",
        f"spend: real {_money(t.spend_real_micro)} {currency}, proposed {_money(t.spend_proposed_micro)} {currency}, "
        f"difference {_money(t.difference_micro)} {currency}.",
    ]
    for v in variant_rows(whatif):
        lines.append(f"split variant {v.variant}: {v.attempts} attempts, refused {v.refused} under the proposal "
                     f"({v.really_refused} really); spend real {_money(v.spend_real_micro)} {currency}, proposed "
                     f"{_money(v.spend_proposed_micro)} {currency}.")
    if t.newly_admitted:
        lines.append("* really refused, so their actual cost is unknown: each is charged its full hold (the worst "
                     "case).")
    if t.same_as_reality:
        lines.append("The proposal refuses exactly the requests that were really refused.")
    return "\n".join(lines)
