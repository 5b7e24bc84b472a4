"""AWS Bedrock: model invocation logs (tokens) and the CUR 2.0 data export (money), from local copies of their
S3 folders.

Invocation logs, as Bedrock delivers them to S3: ``AWSLogs/<account id>/
BedrockModelInvocationLogs/<region>/YYYY/MM/DD/HH/<name>.json.gz``, each line
one JSON record ``{"schemaType": "ModelInvocationLog", "schemaVersion",
"timestamp" (RFC 3339), "accountId", "identity": {"arn"}, "region",
"requestId", "operation" (Converse, ConverseStream, InvokeModel, ...),
"modelId" (a model id, an inference profile id, or either's ARN), "input":
{"inputTokenCount", "cacheReadInputTokenCount", "cacheWriteInputTokenCount"},
"output": {"outputTokenCount"}}``. ``inputTokenCount`` excludes the cache reads
and writes, as Converse's ``usage.inputTokens`` does (the gateway's
``bedrock_converse`` dialect reads the same split). One record is one request;
the day is the record's UTC ``timestamp`` (the folder hour only narrows what is
read). An ARN's model is the part after its last ``/``.

CUR 2.0 (Data Exports, CSV, plain or gzipped): ``<export>/data/
BILLING_PERIOD=YYYY-MM/*.csv[.gz]`` with the documented columns, of which
this reads ``line_item_usage_start_date``, ``line_item_product_code``,
``line_item_line_item_type``, ``line_item_usage_type``,
``line_item_usage_amount``, ``pricing_unit``, ``line_item_unblended_cost``,
``line_item_currency_code``, ``line_item_usage_account_id``,
``line_item_iam_principal`` and ``bill_invoice_id``. Bedrock's token usage
types read ``<REGION>-<model>-<kind>`` (``USE1-Claude3.5Sonnet-v2-input-tokens``,
``…-cache-read-input-token-count``): the region code is dropped and the rest
read by ``billing_text.token_kind``; another Bedrock usage type is money of a
type of its own, with no token count. Rows of other products, and lines that are not usage (tax,
credits, refunds: ``line_item_line_item_type`` not ``Usage``), are not model
charges and are skipped. Money is the CSV's decimal text, exact.

CUR 2.0 in Parquet (``*.parquet``, the Data Exports default) has the same
columns, typed: amounts and costs are doubles, the usage start a timestamp
(UTC; a timestamp without a zone is read as UTC). A double is read through its
shortest round-trip text (``repr``) into a Decimal, so the figure is the one
AWS wrote, and no arithmetic is ever done on a float.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from datetime import date, datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from reconcile.exports.billing_text import (
    Models,
    Money,
    add_money,
    cost_rows,
    export_files,
    quantity,
    read_text,
    token_kind,
    unit_tokens,
    utc_time,
    whole,
)
from reconcile.exports.rows import CostRow, ExportParseError, UsageRow, UsageSums

PROVIDER = "aws"
LOG_TYPES = ("input", "cached_input", "cache_write", "output")
BEDROCK_PRODUCTS = ("AmazonBedrock", "AmazonBedrockService")
CUR_COLUMNS = ("line_item_usage_start_date", "line_item_product_code", "line_item_line_item_type",
               "line_item_usage_type", "line_item_usage_amount", "pricing_unit", "line_item_unblended_cost",
               "line_item_currency_code")
_CUR_OPTIONAL = ("bill_invoice_id", "line_item_usage_account_id", "line_item_iam_principal")
_REGION = re.compile(r"^[A-Z]{2,4}\d?-")
_LOG_FIELDS = (("input", "inputTokenCount", "input"), ("input", "cacheReadInputTokenCount", "cached_input"),
               ("input", "cacheWriteInputTokenCount", "cache_write"), ("output", "outputTokenCount", "output"))


def invocation_log_files(root: Path, day: date) -> list[Path]:
    """The log files of ``day`` (its UTC hour folders) under a local copy of the bucket's ``AWSLogs`` folder."""
    return export_files(root, [f"**/BedrockModelInvocationLogs/*/{day:%Y/%m/%d}/*/*.json*"])


def parse_invocation_logs(files: Iterable[Path], account: str, day: date, models: Models) -> list[UsageRow]:
    """Token counts and requests per model of ``day`` from invocation log files."""
    sums = UsageSums(PROVIDER, account, LOG_TYPES)
    for path in files:
        for n, line in enumerate(read_text(path).splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name} line {n}"
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ExportParseError(where, f"not JSON ({exc})") from None
            if not isinstance(record, dict) or record.get("schemaType") != "ModelInvocationLog":
                raise ExportParseError(where, "not a ModelInvocationLog record")
            when = utc_time(record.get("timestamp"), f"{where}.timestamp")
            if when.date() != day:
                continue
            model_id = record.get("modelId")
            if not isinstance(model_id, str) or not model_id:
                raise ExportParseError(f"{where}.modelId", f"must be a model id, got {model_id!r}")
            model = models(model_id.rsplit("/", 1)[-1])
            for part, name, kind in _LOG_FIELDS:
                section = record.get(part) or {}
                value = section.get(name, 0) if isinstance(section, dict) else None
                if type(value) is not int or value < 0:
                    raise ExportParseError(f"{where}.{part}.{name}", f"must be a non-negative integer, got {value!r}")
                sums.add(day, model, kind, value)
            sums.add_requests(day, model, 1)
    return sums.rows()


def cur_files(root: Path, day: date) -> list[Path]:
    """The CUR 2.0 files of ``day``'s billing period under a local copy of the export's folder."""
    return export_files(root, [f"**/BILLING_PERIOD={day:%Y-%m}/*.{ext}" for ext in ("csv", "csv.gz", "parquet")])


def parse_cur(files: Iterable[Path], account: str, day: date, models: Models) -> tuple[list[UsageRow], list[CostRow]]:
    """Bedrock usage (tokens) and money of ``day`` from CUR 2.0 files; money per (model, token type, invoice)."""
    sums = UsageSums(PROVIDER, account, ())
    money: Money = {}
    for path in files:
        for where, row in _cur_lines(path):
            if row["line_item_product_code"] not in BEDROCK_PRODUCTS or row["line_item_line_item_type"] != "Usage":
                continue
            if utc_time(row["line_item_usage_start_date"], f"{where}.line_item_usage_start_date").date() != day:
                continue
            usage_type = _REGION.sub("", row["line_item_usage_type"])
            kind = token_kind(usage_type)
            model, token_type = (models(kind[0]), kind[1]) if kind else ("*", usage_type)
            amount = quantity(row["line_item_usage_amount"], f"{where}.line_item_usage_amount")
            tokens = None  # another usage type (provisioned hours, ...): money of its own, no token count
            if kind is not None:
                tokens = whole(amount * unit_tokens(row.get("pricing_unit"), where), where)
                sums.add(day, model, token_type, tokens)
            cost = quantity(row["line_item_unblended_cost"], f"{where}.line_item_unblended_cost", signed=True)
            currency = row["line_item_currency_code"].strip().upper()
            if not currency:
                raise ExportParseError(f"{where}.line_item_currency_code", "is empty")
            add_money(money, (model, token_type, row.get("bill_invoice_id") or None, currency), cost, tokens)
    return sums.rows(), cost_rows(PROVIDER, account, day, money, "invoice")




def _cur_lines(path: Path) -> Iterable[tuple[str, dict[str, str]]]:
    """(where, row as text by column) of one CUR 2.0 file, CSV or Parquet; the needed columns checked first."""
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise ExportParseError(path.name, f"not a readable Parquet file ({exc})") from None
        _check_columns(path, table.column_names)
        names = [c for c in table.column_names if c in CUR_COLUMNS or c in _CUR_OPTIONAL]
        for n, row in enumerate(table.select(names).to_pylist(), 1):
            yield f"{path.name} row {n}", {k: _cell(v) for k, v in row.items()}
        return
    reader = csv.DictReader(io.StringIO(read_text(path)))
    _check_columns(path, reader.fieldnames or ())
    for n, row in enumerate(reader, 2):
        yield f"{path.name} line {n}", row


def _check_columns(path: Path, names: Iterable[str]) -> None:
    missing = set(CUR_COLUMNS) - set(names)
    if missing:
        raise ExportParseError(path.name, f"not a CUR 2.0 file: no column {', '.join(sorted(missing))}")


def _cell(value: object) -> str:
    """A typed Parquet cell as the CSV would carry it: a double by its shortest round-trip text, a time with its
    offset (UTC when it has none), nothing as the empty string."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    return str(value)
