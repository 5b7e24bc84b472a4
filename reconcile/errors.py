"""The one root of ``reconcile``'s errors, and what each kind means to whoever called.

    ReconcileError                 the command could not do what was asked with what it found (exit 1)
    ├── FocusError                 reconcile.focus.columns: a month that cannot be exported as asked
    ├── WarehouseError             reconcile.warehouse: no archive, a view that cannot be built
    ├── RerateError                reconcile.rerate.reprice: a re-rate that cannot be planned
    ├── WhatIfError                reconcile.whatif: a what-if that cannot be run
    ├── InputError (ValueError)    what the caller passed is wrong (exit 2)
    │   ├── ExportParseError       reconcile.exports.rows: a provider export that does not parse
    │   ├── DriftInputError        reconcile.drift: tolerances or rows that make no sense
    │   └── ReconcileInputError    reconcile.daily: a day or account that cannot be reconciled
    └── SourceUnavailable (RuntimeError)   a source that did not answer (exit 3)
        └── ExportFetchError       reconcile.exports.fetch: a provider's usage API

Each error says what went wrong in words a finance user can act on; ``kind`` is how the CLI
(``farebox/cli``) maps it to an exit code, so commands never catch these one by one.
"""

from __future__ import annotations


class ReconcileError(Exception):
    """Root of every error ``reconcile`` raises on purpose."""

    kind = "failed"


class InputError(ReconcileError, ValueError):
    """What the caller passed (a file, a date, an option) is wrong."""

    kind = "input"


class SourceUnavailable(ReconcileError, RuntimeError):
    """A source the command needs (a provider's API) did not answer."""

    kind = "unavailable"
