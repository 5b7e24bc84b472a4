"""The suite's order: the files that run real services (Kafka, clusters, gateways) first.

On several processes (``make test TEST_WORKERS=3``: pytest-xdist, ``--dist loadfile``, one file per process at a
time, ``--no-loadscope-reorder`` so this order is kept) a process takes the next file as it finishes one; with
the longest files last, one process ran them alone for minutes at the end while the others sat idle. Longest
first keeps the processes busy to the end. On one process the order changes nothing but the order.
"""

from __future__ import annotations

import pytest

SLOW_FIRST = ("tests/distributed/", "tests/infra/", "tests/e2e/", "tests/bench/", "tests/reconcile/", "tests/streams/")


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: within a rank, files and tests keep their collected order
