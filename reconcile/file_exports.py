"""The export sources read from files: a local copy of what a cloud provider writes to a bucket or a table.

``read_file_export(source, account, day, path, cur_path, models, ours)`` reads one account's day:

* ``aws``: Bedrock model invocation logs under ``path`` (tokens and requests) and the CUR 2.0 export under
  ``cur_path`` (money; its token quantities too when there are no logs, never both: one count per token);
* ``google``: the Cloud Billing export rows (newline-delimited JSON) at ``path``;
* ``azure``: the Cost Management export (CSV) under ``path``.

A day with no file at all is a ``SourceUnavailable`` naming the folder (the export has not landed yet, or the
path is wrong), never an empty report that would flag every row of ours as missing from theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path

from reconcile.errors import SourceUnavailable
from reconcile.exports import aws, azure, gcp
from reconcile.exports.billing_text import Models
from reconcile.exports.rows import CostRow, UsageRow

FILE_SOURCES = ("aws", "google", "azure")


def _need(files: list[Path], what: str, where: str | Path, day: date) -> list[Path]:
    if not files:
        raise SourceUnavailable(f"no {what} for {day.isoformat()} under {where} (not exported yet, or the wrong path)")
    return files


def read_file_export(source: str, account: str, day: date, path: str | None, cur_path: str | None,
                     models: Mapping[str, str], ours: Iterable[str]) -> tuple[list[UsageRow], list[CostRow]]:
    """One account's usage and cost rows of ``day`` from a file source (see the module docstring)."""
    names = Models(models, ours)
    if source == "aws":
        usage: list[UsageRow] = []
        if path:
            logs = _need(aws.invocation_log_files(Path(path), day), "Bedrock invocation logs", path, day)
            usage = aws.parse_invocation_logs(logs, account, day, names)
        costs: list[CostRow] = []
        if cur_path:
            cur_usage, costs = aws.parse_cur(_need(aws.cur_files(Path(cur_path), day), "CUR 2.0 files", cur_path,
                                                   day), account, day, names)
            usage = usage if path else cur_usage
        return usage, costs
    if source == "google":
        files = _need(gcp.billing_files(Path(path or "")), "Cloud Billing export files", path or "", day)
        return gcp.parse_billing_export(files, account, day, names)
    if source == "azure":
        files = _need(azure.cost_export_files(Path(path or "")), "Azure cost export files", path or "", day)
        return azure.parse_cost_export(files, account, day, names)
    raise ValueError(f"not a file source: {source!r}")
