"""The finance and audit side: the DuckDB warehouse over the Parquet archive and the reports built on it.

* ``sql/views.sql``: the views finance queries (events, requests, attempts, ledger_entries, scope_balances,
  minute_rollups, daily_cost), usable from the plain ``duckdb`` shell;
* ``warehouse``: DuckDB over an archive root with those views; every unreadable archive is a ``WarehouseError``
  naming the file;
* ``showback``: the monthly showback report and the usage query of the admin usage API's port;
* ``render``: results as a table, CSV or JSON.

Imports point inward: ``ledger``, ``pricing`` and ``streams`` (the archive layout), never ``proxy`` nor
``farebox``; budgets and settings arrive as plain values.
"""
