"""Provider usage exports, parsed into one typed row (pure; the fetching lives in ``fetch``).

Modules: ``rows`` (``UsageRow``, ``CostRow``, ``ExportParseError``, the shared
rules), ``simulator`` (the provider simulator's export, JSON or CSV),
``openai`` (organization completions usage and costs), ``anthropic``
(messages usage report and cost report), ``fetch`` (the HTTP clients).
"""

from reconcile.exports.anthropic import parse_anthropic_costs, parse_anthropic_usage
from reconcile.exports.openai import USAGE_KINDS as OPENAI_USAGE_KINDS
from reconcile.exports.openai import parse_openai_costs, parse_openai_usage
from reconcile.exports.rows import PRICED_TYPES, CostRow, ExportParseError, UsageRow
from reconcile.exports.simulator import parse_simulator_csv, parse_simulator_export

__all__ = [
    "OPENAI_USAGE_KINDS",
    "PRICED_TYPES",
    "CostRow",
    "ExportParseError",
    "UsageRow",
    "parse_anthropic_costs",
    "parse_anthropic_usage",
    "parse_openai_costs",
    "parse_openai_usage",
    "parse_simulator_csv",
    "parse_simulator_export",
]
