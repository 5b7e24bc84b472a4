"""What showback and the usage API may group by: the archive's dimension columns (``variant``, ``batch`` and
``priority``, ``shadow`` are farebox's own tags: the split variant that served, the batch a request was a line
of, its class, the alias a shadow leg copied; ``service_tier`` the tier the answer was served at, ``standard``
unless the provider named another), plus month and day for usage.

Plain names, apart from the warehouse, so the CLI's parser and a pod's usage port name them without loading
DuckDB.
"""

from __future__ import annotations

DIMENSIONS = ("team", "business_unit", "app", "key_id", "cost_centre", "alias", "deployment", "provider", "model",
              "region", "data_class", "api", "variant", "batch", "priority", "shadow", "service_tier")
USAGE_DIMENSIONS = (*DIMENSIONS, "month", "day")
