"""The distributed worker (``farebox worker``): one module per agent or job over one shared ``WorkerState``.

* ``state``: ``WorkerConfig``, the app's handles (``Worker``), ``WorkerState``;
* ``app``: ``create_app`` (version check, patches, topics, tables, registration);
* ``split``, ``ledger`` (with ``leases``), ``rollups``: the agents;
* ``sweeper``, ``projections``: the timers; ``rebalance``: partition moves;
* ``delivery``: batchers, sends, dead letters and flush completions they share.

Decisions are pure functions of ``ledger/``; these modules read records, call
them, and write what they decide.
"""
