"""``make bench-finance``: the finance warehouse at the scale of a month (``python -m tests.bench.finance``).

Generates a synthetic 30-day month (default 10,000,000 request events, 200
teams, a realistic mix: ``synthetic.py``) straight to Parquet, then reports
(and writes to var/bench/finance.json):

* archive throughput through the real ``ArchiveWriter`` on a realistic subset
  of real events, in events/s (goal >= 50,000);
* the month's showback time over the views (goal < 2 s), cold and warm;
* FOCUS export time, when ``reconcile.focus.export.export_focus`` is in the build;
* archive size per million events (the real writer's, and the synthetic month's);
* one UTC day reconciled against a provider usage export built from it (exact: 0 rows flagged; x0.97: every
  row flagged at about 3%).

Figures only: nothing here asserts a time. A problem is reported (exit 1)
only when the warehouse disagrees with itself (the month's daily_cost rows do
not add up to its requests), the day's reconciliation flags other than
the rows described above, or the generated archive is not the size asked.
The generated month is kept under var/bench/finance/ and reused by the next run
of the same size. ``--part archive`` (``make bench-finance-archive``) measures
only the archive throughput, without the month, and writes
var/bench/finance-archive.json.
"""
