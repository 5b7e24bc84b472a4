"""Corrections: re-rated charges, appended to a later billing period, never edits.

A correction says: this charge (one usage row's dimensions: day, deployment,
token type, team/app/key/alias, cost centre, tags) was billed at
``original_price_version`` as ``original_tokens`` for ``original_micro``; it
should have been ``corrected_tokens`` at ``corrected_price_version`` for
``corrected_micro``. Re-rating (its own issue) writes them, one per re-rated
charge, with amounts it rated per attempt with ``pricing.rating`` (rounded up
once per attempt, as the ledger does); the export does not re-price them.

Design: **a reversal row plus a corrected row**, not one delta row. The reversal
repeats the original charge with negated quantity and cost, at the original
price version's unit price; the corrected row is the charge as it should have
been, at the corrected version's unit price. So every row keeps
ListCost = ListUnitPrice x PricingQuantity, the SkuPriceId (the same across
versions) ties the pair to the original row, and the sum of all rows (usage,
reversals, corrected) is what should have been billed: nothing is counted
twice. Both rows have ChargeClass ``Correction``, the ChargePeriod of the day
the cost was incurred, and the BillingPeriod of ``billing_month``: the first
period still open when the correction was recorded, never the charge's own
period (whose file is final once the month has ended, so exporting it again
gives the same file).

On disk (the shape re-rating writes): Parquet files of ``CORRECTION_SCHEMA``
anywhere under a corrections folder (default ``<state_dir>/corrections``).
A correction id appearing twice is read once; two different corrections with
one id are an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reconcile.focus.columns import FOCUS_TYPES, ChargeLine, FocusError, month_bounds
from reconcile.focus.usage import UnitPrice

CORRECTION_SCHEMA = pa.schema([
    ("correction_id", pa.string()),
    ("recorded_at", pa.timestamp("us", tz="UTC")),
    ("charge_day", pa.date32()),
    ("deployment", pa.string()),
    ("provider", pa.string()),
    ("account", pa.string()),
    ("model", pa.string()),
    ("region", pa.string()),
    ("token_type", pa.string()),
    ("team", pa.string()),
    ("app", pa.string()),
    ("business_unit", pa.string()),
    ("key_id", pa.string()),
    ("alias", pa.string()),
    ("cost_centre", pa.string()),
    ("tags", pa.map_(pa.string(), pa.string())),
    ("requests", pa.int64()),
    ("attempts", pa.int64()),
    ("original_price_version", pa.int64()),
    ("original_tokens", pa.int64()),
    ("original_micro", pa.int64()),
    ("corrected_price_version", pa.int64()),
    ("corrected_tokens", pa.int64()),
    ("corrected_micro", pa.int64()),
    ("reason", pa.string()),
    ("project", pa.string()),  # optional in a file: older files have no sub-account column
])
_OPTIONAL = frozenset({"project"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Correction:
    """One re-rated charge (see the module docstring); amounts in micro-units of the billing currency."""

    correction_id: str
    recorded_at: datetime
    charge_day: date
    deployment: str
    provider: str
    account: str
    model: str
    region: str
    token_type: str
    team: str
    original_price_version: int
    original_tokens: int
    original_micro: int
    corrected_price_version: int
    corrected_tokens: int
    corrected_micro: int
    requests: int = 0
    attempts: int = 0
    app: str | None = None
    business_unit: str | None = None
    key_id: str | None = None
    alias: str | None = None
    cost_centre: str | None = None
    tags: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    reason: str = ""
    project: str | None = None  # the sub-account under ``account`` the attempt billed to

    def __post_init__(self) -> None:
        at = self.recorded_at
        if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"correction {self.correction_id!r}: recorded_at must be timezone-aware, got {at!r}")
        object.__setattr__(self, "recorded_at", at.astimezone(timezone.utc))
        if isinstance(self.charge_day, datetime) or not isinstance(self.charge_day, date):
            raise ValueError(f"correction {self.correction_id!r}: charge_day must be a date")
        if self.token_type not in FOCUS_TYPES:
            raise ValueError(f"correction {self.correction_id!r}: token_type {self.token_type!r} is not one of "
                             f"{', '.join(FOCUS_TYPES)}")
        for name in ("original_price_version", "corrected_price_version", "original_tokens", "original_micro",
                     "corrected_tokens", "corrected_micro", "requests", "attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"correction {self.correction_id!r}: {name} must be a non-negative int, "
                                 f"got {value!r}")
        tags = self.tags.items() if isinstance(self.tags, Mapping) else self.tags
        object.__setattr__(self, "tags", tuple(sorted((str(k), str(v)) for k, v in tags)))

    @property
    def billing_month(self) -> date:
        """The first open period when recorded: the recording month, and never before the month after the charge."""
        recorded = self.recorded_at.date().replace(day=1)
        _, after_charge = month_bounds(self.charge_day.replace(day=1))
        return max(recorded, after_charge.date())


def unique(corrections: Iterable[Correction]) -> list[Correction]:
    """Each correction id once, in id order; the same id with different content is a FocusError."""
    seen: dict[str, Correction] = {}
    for c in corrections:
        first = seen.setdefault(c.correction_id, c)
        if first != c:
            raise FocusError(f"correction {c.correction_id!r} appears twice with different content; "
                             "corrections are append-only: publish a new correction id instead")
    return [seen[k] for k in sorted(seen)]


def correction_lines(corrections: Iterable[Correction], billing_month: date,
                     prices: Mapping[tuple[int, str, str], UnitPrice]) -> list[ChargeLine]:
    """The reversal and corrected line of every correction billed in ``billing_month``."""
    lines = []
    for c in unique(corrections):
        if c.billing_month != billing_month:
            continue
        for side, sign, version, tokens, micro in (
                ("reversal", -1, c.original_price_version, c.original_tokens, c.original_micro),
                ("corrected", 1, c.corrected_price_version, c.corrected_tokens, c.corrected_micro)):
            price = prices[(version, c.deployment, c.token_type)]
            lines.append(ChargeLine(
                charge_day=c.charge_day, billing_month=billing_month, deployment=c.deployment,
                provider=c.provider, account=c.account, model=c.model, region=c.region, token_type=c.token_type,
                price_version=version, team=c.team, app=c.app, business_unit=c.business_unit, key_id=c.key_id,
                alias=c.alias, cost_centre=c.cost_centre, tags=c.tags, tokens=sign * tokens,
                billed_micro=sign * micro, requests=sign * c.requests, attempts=sign * c.attempts,
                unit_price=price.billing, pricing_currency=price.book_currency, pricing_unit_price=price.book,
                correction_id=c.correction_id, correction_side=side, project=c.project))
    return lines


def priced_versions(corrections: Iterable[Correction], billing_month: date) -> dict[date, list[tuple[int, str]]]:
    """Charge month -> the (price version, deployment) pairs the month's corrections need unit prices for."""
    needed: dict[date, set[tuple[int, str]]] = {}
    for c in corrections:
        if c.billing_month == billing_month:
            pairs = needed.setdefault(c.charge_day.replace(day=1), set())
            pairs |= {(c.original_price_version, c.deployment), (c.corrected_price_version, c.deployment)}
    return {month: sorted(pairs) for month, pairs in sorted(needed.items())}


# --- the Parquet shape ---------------------------------------------------------------------


def write_corrections(path: str | Path, corrections: Sequence[Correction]) -> Path:
    """Write ``corrections`` as one Parquet file of ``CORRECTION_SCHEMA`` (re-rating's output; tests)."""
    rows = []
    for c in corrections:
        row = asdict(c)
        row["tags"] = list(c.tags)
        rows.append(row)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=CORRECTION_SCHEMA), path)
    return path


def read_corrections(folder: str | Path) -> list[Correction]:
    """Every correction in the Parquet files under ``folder`` (none if it does not exist)."""
    folder = Path(folder)
    out: list[Correction] = []
    for path in sorted(folder.glob("**/*.parquet")) if folder.is_dir() else []:
        try:
            table = pq.read_table(path)
            missing = set(CORRECTION_SCHEMA.names) - set(table.schema.names) - _OPTIONAL
            if missing:
                raise FocusError(f"{path}: not a corrections file (no column {', '.join(sorted(missing))})")
            for name in _OPTIONAL - set(table.schema.names):
                table = table.append_column(name, pa.nulls(table.num_rows, CORRECTION_SCHEMA.field(name).type))
            table = table.select(CORRECTION_SCHEMA.names).cast(CORRECTION_SCHEMA)
        except (pa.ArrowException, OSError) as exc:
            raise FocusError(f"{path}: not a readable corrections file ({exc})") from None
        for n, row in enumerate(table.to_pylist()):
            row["tags"] = tuple(row["tags"] or ())
            try:
                out.append(Correction(**row))
            except (TypeError, ValueError) as exc:
                raise FocusError(f"{path} row {n}: {exc}") from None
    return out
