"""The simulator's own billing record: the independent "provider invoice".

Every request that consumed tokens is billed once, when it ends: input split
into ``input`` (uncached), ``cached_input`` and ``cache_write``, plus the
``output`` tokens actually sent and ``reasoning`` tokens. Requests refused
before generation (400/401/429/5xx faults, hangs) are not billed. Rows are
aggregated per account, UTC day, model and tier (``service_tier``: ``batch`` for the lines of a provider batch,
which the export shows as rows of their own, as the providers' usage reports group them; absent for the rest); with ``billing_file`` each billed
request is also appended as one JSON line (an audit copy; not re-read).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from typing import IO

import orjson

TOKEN_FIELDS = ("input", "cached_input", "cache_write", "output", "reasoning")
CSV_FIELDS = ("account", "date", "model", "requests", *TOKEN_FIELDS)


@dataclass(frozen=True, slots=True)
class BillableUsage:
    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0


def utc_day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


class BillingLedger:
    """In-memory aggregate ``(account, day, model) -> [requests, *tokens]``."""

    def __init__(self, path: str | None = None) -> None:
        self._rows: dict[tuple[str, str, str, str], list[int]] = {}
        self._path = path
        self._fh: IO[bytes] | None = None

    def record(self, account: str, model: str, usage: BillableUsage, ts: float | None = None,
               request_id: str = "", tier: str = "") -> None:
        ts = time.time() if ts is None else ts
        day = utc_day(ts)
        row = self._rows.get((account, day, model, tier))
        if row is None:
            row = self._rows[(account, day, model, tier)] = [0, 0, 0, 0, 0, 0]
        row[0] += 1
        row[1] += usage.input
        row[2] += usage.cached_input
        row[3] += usage.cache_write
        row[4] += usage.output
        row[5] += usage.reasoning
        if self._path:
            self._append({"ts": ts, "request_id": request_id, "account": account, "date": day,
                          "model": model, "input": usage.input, "cached_input": usage.cached_input,
                          "cache_write": usage.cache_write, "output": usage.output,
                          "reasoning": usage.reasoning, **({"service_tier": tier} if tier else {})})

    def _append(self, record: dict) -> None:
        if self._fh is None and self._path:
            self._fh = open(self._path, "ab")  # noqa: SIM115 - closed in close()
        assert self._fh is not None
        self._fh.write(orjson.dumps(record) + b"\n")
        self._fh.flush()

    def export(self, account: str | None = None, date: str | None = None) -> list[dict]:
        """Aggregated rows, sorted by account, date, model; filters are optional."""
        out = []
        for (acct, day, model, tier), row in sorted(self._rows.items()):
            if (account is None or acct == account) and (date is None or day == date):
                out.append({"account": acct, "date": day, "model": model, "requests": row[0],
                            **dict(zip(TOKEN_FIELDS, row[1:])), **({"service_tier": tier} if tier else {})})
        return out

    @staticmethod
    def to_csv(rows: list[dict]) -> str:
        """CSV with a header; a count column only some rows carry (an injected type) is 0 in the others."""
        extra = sorted({key for row in rows for key in row} - set(CSV_FIELDS) - {"service_tier"})
        if any("service_tier" in row for row in rows):  # a text column: empty where the row has no tier
            extra.append("service_tier")
            rows = [{"service_tier": "", **row} for row in rows]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=[*CSV_FIELDS, *extra], restval=0, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()

    def reset(self) -> None:
        self._rows.clear()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
