"""The provider invoices reconciliation has seen: (provider account, billing month) -> invoice id(s).

Some exports name the invoice a charge is on (AWS CUR 2.0 ``bill_invoice_id``, Azure ``InvoiceId``; the
OpenAI, Anthropic and Google exports name none). ``farebox reconcile`` records what it read in
``<state_dir>/reconcile/invoices.json`` (``{"<account>": {"YYYY-MM": ["<invoice id>", ...]}}``, sorted, merged
with what was there, written to a temporary name and renamed), and the FOCUS export fills ``InvoiceId`` from
it: the rows of an account and billing month whose charges sit on exactly one invoice carry its id; where there
are several (AWS can split a month by seller) or none, ``InvoiceId`` stays null rather than guess.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import orjson

from reconcile.exports.rows import CostRow

Invoices = dict[str, dict[str, list[str]]]


def invoices_path(state_dir: Path) -> Path:
    return state_dir / "reconcile" / "invoices.json"


def read_invoices(path: Path) -> Invoices:
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not the invoices file reconciliation writes ({exc})") from None
    return {str(a): {str(m): sorted({str(i) for i in ids}) for m, ids in months.items()}
            for a, months in data.items()} if isinstance(data, dict) else {}


def seen_invoices(costs: Iterable[CostRow]) -> Invoices:
    out: Invoices = {}
    for c in costs:
        if c.invoice:
            ids = out.setdefault(c.account, {}).setdefault(f"{c.day:%Y-%m}", [])
            if c.invoice not in ids:
                ids.append(c.invoice)
    return out


def record_invoices(path: Path, costs: Iterable[CostRow]) -> Invoices:
    """Merge the invoices ``costs`` name into the file at ``path``; what it holds now."""
    merged = read_invoices(path)
    for account, months in seen_invoices(costs).items():
        for month, ids in months.items():
            have = merged.setdefault(account, {}).setdefault(month, [])
            merged[account][month] = sorted(set(have) | set(ids))
    if merged:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(merged, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
        tmp.replace(path)
    return merged


def invoice_ids(invoices: Mapping[str, Mapping[str, list[str]]]) -> dict[tuple[str, str], str]:
    """(account, YYYY-MM) -> the invoice id, where the month's charges sit on exactly one invoice."""
    return {(account, month): ids[0] for account, months in invoices.items() for month, ids in months.items()
            if len(ids) == 1}
