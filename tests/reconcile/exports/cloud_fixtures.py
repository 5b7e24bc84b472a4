"""One day of each cloud export, written in the shape its provider documents (a uniquely named test helper module).

``write_aws`` (Bedrock invocation logs in the S3 key layout, gzipped JSON lines, and a CUR 2.0 CSV),
``write_google`` (Cloud Billing export rows, newline-delimited JSON) and ``write_azure`` (a Cost Management
export CSV) each write ``tokens`` (token type -> count) of one model at ``prices`` (token type -> USD per 1M
tokens), plus the rows a real export also holds that are not this account's model usage (tax, another service,
another product, a credit, a non-token meter, another day), so the parsers' skipping is exercised too.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MILLION = Decimal(1_000_000)


def usd(tokens: int, per_million: str) -> Decimal:
    return Decimal(tokens) * Decimal(per_million) / MILLION


def _at(day: date, hour: int, minute: int = 0) -> str:
    return datetime.combine(day, time(hour, minute), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- AWS ---------------------------------------------------------------------------------------------------------

_AWS_KINDS = {"input": "input-tokens", "cached_input": "cache-read-input-token-count",
              "cache_write": "cache-write-input-token-count", "output": "output-tokens"}


def write_aws(root: Path, day: date, model_id: str, billing_name: str, tokens: Mapping[str, int],
              prices: Mapping[str, str], *, requests: int = 4, parquet: bool = False) -> tuple[Path, Path]:
    """Invocation logs under ``root/logs`` (``requests`` records splitting the tokens) and CUR under ``root/cur``
    (gzipped CSV, or ``parquet`` with the columns typed as AWS types them: doubles and a UTC timestamp)."""
    folder = root / "logs" / "AWSLogs" / "123456789012" / "BedrockModelInvocationLogs" / "us-east-1" / \
        f"{day:%Y/%m/%d}" / "10"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for n in range(requests):
        share = {k: v // requests + (v % requests if n == 0 else 0) for k, v in tokens.items()}
        lines.append({
            "schemaType": "ModelInvocationLog", "schemaVersion": "1.0", "timestamp": _at(day, 10, n),
            "accountId": "123456789012", "identity": {"arn": "arn:aws:iam::123456789012:role/farebox-gateway"},
            "region": "us-east-1", "requestId": f"req-{n}", "operation": "Converse",
            "modelId": f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{model_id}",
            "input": {"inputContentType": "application/json", "inputTokenCount": share.get("input", 0),
                      "cacheReadInputTokenCount": share.get("cached_input", 0),
                      "cacheWriteInputTokenCount": share.get("cache_write", 0)},
            "output": {"outputContentType": "application/json", "outputTokenCount": share.get("output", 0)}})
    late = dict(lines[0], timestamp=_at(day + timedelta(days=1), 0, 5))  # tomorrow's, in a folder of its own
    (folder / "20261120T100000Z_a1b2c3.json.gz").write_bytes(gzip.compress(
        "\n".join(json.dumps(line) for line in lines).encode() + b"\n"))
    other = root / "logs" / "AWSLogs" / "123456789012" / "BedrockModelInvocationLogs" / "us-east-1" / \
        f"{day + timedelta(days=1):%Y/%m/%d}" / "00"
    other.mkdir(parents=True, exist_ok=True)
    (other / "late.json.gz").write_bytes(gzip.compress(json.dumps(late).encode() + b"\n"))

    columns = ["identity_line_item_id", "bill_invoice_id", "bill_payer_account_id", "line_item_usage_account_id",
               "line_item_line_item_type", "line_item_usage_start_date", "line_item_usage_end_date",
               "line_item_product_code", "line_item_usage_type", "line_item_operation", "line_item_usage_amount",
               "pricing_unit", "line_item_unblended_rate", "line_item_unblended_cost", "line_item_currency_code",
               "line_item_iam_principal", "product_region_code"]
    rows = []
    start, end = _at(day, 0), _at(day + timedelta(days=1), 0)
    for kind, count in tokens.items():
        rows.append({"line_item_line_item_type": "Usage", "line_item_product_code": "AmazonBedrock",
                     "line_item_usage_type": f"USE1-{billing_name}-{_AWS_KINDS[kind]}",
                     "line_item_usage_amount": str(Decimal(count) / 1000), "pricing_unit": "1K tokens",
                     "line_item_unblended_rate": str(Decimal(prices[kind]) / 1000),
                     "line_item_unblended_cost": str(usd(count, prices[kind]))})
    rows.append({"line_item_line_item_type": "Tax", "line_item_product_code": "AmazonBedrock",
                 "line_item_usage_type": "", "line_item_usage_amount": "0", "pricing_unit": "",
                 "line_item_unblended_rate": "", "line_item_unblended_cost": "1.23"})
    rows.append({"line_item_line_item_type": "Usage", "line_item_product_code": "AmazonS3",
                 "line_item_usage_type": "USE1-TimedStorage-ByteHrs", "line_item_usage_amount": "12.5",
                 "pricing_unit": "GB-Mo", "line_item_unblended_rate": "0.023", "line_item_unblended_cost": "0.2875"})
    lines = [{"identity_line_item_id": f"li-{n}", "bill_invoice_id": "EUINUS26-1234567",
              "bill_payer_account_id": "111122223333", "line_item_usage_account_id": "123456789012",
              "line_item_usage_start_date": start, "line_item_usage_end_date": end,
              "line_item_operation": "InvokeModelInference", "line_item_currency_code": "USD",
              "line_item_iam_principal": "arn:aws:iam::123456789012:role/farebox-gateway",
              "product_region_code": "us-east-1", **row} for n, row in enumerate(rows)]
    cur = root / "cur" / "farebox-cur" / "data" / f"BILLING_PERIOD={day:%Y-%m}"
    cur.mkdir(parents=True, exist_ok=True)
    if parquet:
        typed = {name: [_typed(name, line[name]) for line in lines] for name in columns}
        pq.write_table(pa.table(typed), cur / "farebox-cur-00001.snappy.parquet")
        return root / "logs", root / "cur"
    out = io.StringIO()
    writer = csv.DictWriter(out, columns)
    writer.writeheader()
    writer.writerows(lines)
    (cur / "farebox-cur-00001.csv.gz").write_bytes(gzip.compress(out.getvalue().encode()))
    return root / "logs", root / "cur"


def _typed(column: str, text: str) -> object:
    """A CUR 2.0 cell as the Parquet export types it."""
    if column.endswith(("_amount", "_rate", "_cost")):
        return float(text) if text else None
    if column.endswith("_date"):
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    return text


# --- Google Cloud ------------------------------------------------------------------------------------------------

_GOOGLE_KINDS = {"input": "Input text token count", "cached_input": "Cached input text token count",
                 "output": "Output text token count", "reasoning": "Thinking output token count"}


def write_google(root: Path, day: date, billing_name: str, tokens: Mapping[str, int], prices: Mapping[str, str],
                 *, credit: Decimal = Decimal(0), search: bool = False) -> Path:
    """Billing export rows, one per token type (a credit on the output row: ``cost`` + ``credits`` is net)."""
    def row(service: str, sku: str, amount: object, unit: str, cost: Decimal, credits: list | None = None,
            at: date = day, cost_type: str = "regular") -> dict:
        return {"billing_account_id": "01A2B3-C4D5E6-F7G8H9", "service": {"id": "C7E2-9256-1C43",
                                                                        "description": service},
                "sku": {"id": f"SKU-{abs(hash(sku)) % 10_000:04d}", "description": sku},
                "usage_start_time": f"{at:%Y-%m-%d} 10:00:00 UTC", "usage_end_time": f"{at:%Y-%m-%d} 11:00:00 UTC",
                "project": {"id": "retail-genai-prod", "number": "123456789", "name": "retail-genai-prod"},
                "location": {"location": "asia-south1", "region": "asia-south1"},
                "cost": float(cost), "currency": "USD", "currency_conversion_rate": 1.0,
                "usage": {"amount": amount, "unit": unit, "amount_in_pricing_units": amount,
                          "pricing_unit": unit},
                "credits": credits or [], "invoice": {"month": f"{at:%Y%m}"}, "cost_type": cost_type}

    rows = []
    for kind, count in tokens.items():
        cost = usd(count, prices[kind])
        credits = [{"name": "Committed use discount", "amount": float(-credit), "type": "COMMITTED_USAGE_DISCOUNT"}] \
            if credit and kind == "output" else None
        rows.append(row("Vertex AI", f"{billing_name} {_GOOGLE_KINDS[kind]}", count, "count", cost + (
            credit if credits else 0), credits))
    if search:  # traffic that never passed the gateway: billed, and farebox prices no such unit
        rows.append(row("Vertex AI", "Vertex AI Search Enterprise query", 10, "count", Decimal("0.04")))
    rows.append(row("Compute Engine", "N2 Instance Core running in Mumbai", 3600, "seconds", Decimal("0.11")))
    rows.append(row("Vertex AI", f"{billing_name} {_GOOGLE_KINDS['input']}", 999, "count", Decimal("1"),
                    at=day + timedelta(days=1)))
    rows.append(row("Vertex AI", "Tax", 0, "count", Decimal("0.50"), cost_type="tax"))
    path = root / "billing" / f"gcp_billing_export_v1_{day:%Y%m%d}-000000000000.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path.parent


# --- Azure -------------------------------------------------------------------------------------------------------

_AZURE_KINDS = {"input": "Inp glbl Tokens", "cached_input": "cchd Inp glbl Tokens", "output": "Outp glbl Tokens"}


def write_azure(root: Path, day: date, billing_name: str, tokens: Mapping[str, int], prices: Mapping[str, str]
                ) -> Path:
    """A cost and usage details CSV (customer agreement schema), quantities in thousands of tokens."""
    columns = ["InvoiceSectionName", "BillingAccountId", "BillingAccountName", "BillingCurrency", "InvoiceId",
               "SubscriptionId", "SubscriptionName", "ResourceGroup", "ResourceLocation", "Date", "ProductName",
               "MeterCategory", "MeterSubCategory", "MeterId", "MeterName", "MeterRegion", "UnitOfMeasure",
               "Quantity", "EffectivePrice", "CostInBillingCurrency", "UnitPrice", "ResourceId", "ChargeType",
               "Frequency", "PricingModel"]

    def row(meter: str, category: str, sub: str, quantity: Decimal, unit: str, cost: Decimal, at: date = day,
            charge: str = "Usage") -> dict:
        return {"InvoiceSectionName": "Retail", "BillingAccountId": "1234abcd", "BillingAccountName": "Retail Ltd",
                "BillingCurrency": "USD", "InvoiceId": "G012345678", "SubscriptionId": "0000-aaaa",
                "SubscriptionName": "retail-genai", "ResourceGroup": "rg-genai", "ResourceLocation": "southindia",
                "Date": f"{at:%m/%d/%Y}", "ProductName": f"Azure OpenAI - {meter}", "MeterCategory": category,
                "MeterSubCategory": sub, "MeterId": f"m-{abs(hash(meter)) % 10_000}", "MeterName": meter,
                "MeterRegion": "South India", "UnitOfMeasure": unit, "Quantity": str(quantity),
                "EffectivePrice": "", "CostInBillingCurrency": str(cost), "UnitPrice": "",
                "ResourceId": "/subscriptions/0000-aaaa/resourceGroups/rg-genai/providers/Microsoft.CognitiveServices/"
                              "accounts/retail-aoai", "ChargeType": charge, "Frequency": "UsageBased",
                "PricingModel": "OnDemand"}

    rows = [row(f"{billing_name} {_AZURE_KINDS[kind]}", "Cognitive Services", "Azure OpenAI",
                Decimal(count) / 1000, "1K", usd(count, prices[kind])) for kind, count in tokens.items()]
    rows.append(row("Standard Training Hours", "Cognitive Services", "Azure OpenAI", Decimal("1.5"), "1 Hour",
                    Decimal("0")))
    rows.append(row("S1 Transactions", "Cognitive Services", "Language", Decimal("3"), "1K", Decimal("3")))
    rows.append(row(f"{billing_name} {_AZURE_KINDS['input']}", "Cognitive Services", "Azure OpenAI", Decimal("5"),
                    "1K", Decimal("1"), at=day - timedelta(days=1)))
    rows.append(row(f"{billing_name} {_AZURE_KINDS['output']}", "Cognitive Services", "Azure OpenAI", Decimal("1"),
                    "1K", Decimal("-0.5"), charge="Refund"))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns)
    writer.writeheader()
    writer.writerows(rows)
    path = root / "azure" / "retail-daily" / f"{day:%Y%m01}-{day:%Y%m%d}" / "part_0_0001.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out.getvalue())
    return root / "azure"
