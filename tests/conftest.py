"""How the suite is spread over processes (``make test TEST_WORKERS=3``: pytest-xdist, ``--dist loadfile``).

* The files that run a whole cluster (Kafka broker, worker, Redis, pods: ``CLUSTER_FILES``) form one unit of
  work, run by one process, one file after another. Three clusters at once on a 2-core machine starved each
  other (a worker minutes behind, lease asks unanswered) and failed on time bounds that one cluster at a time
  meets; the other processes take the rest of the suite meanwhile. The chaos file (failover timed against a
  0.5 s first-token timeout) joins them, so it never runs beside a cluster either.
* The files that run real services come first (``SLOW_FIRST``; ``--no-loadscope-reorder`` keeps this order),
  so no process is left running a minutes-long file alone at the end.

On one process (``TEST_WORKERS=0``) only the order changes.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# The archive readers' per-user hash cache (streams.archive.vouch) of the suite's thousands of temporary archives
# goes to a folder of this run (subprocesses inherit it), never into ~/.cache.
os.environ.setdefault("FAREBOX_CACHE_DIR", tempfile.mkdtemp(prefix="farebox-test-cache-"))

# plus the chaos file, whose failover is timed against a 0.5 s first-token timeout, and the kill -9 file that
# loads a gateway with 8 clients: never beside a cluster
CLUSTER_FILES = ("tests/distributed/", "tests/bench/test_distributed_smoke.py", "tests/infra/test_cluster_cmd.py",
                 "tests/e2e/test_chaos.py", "tests/e2e/test_settle_before_end.py")
SLOW_FIRST = (*CLUSTER_FILES, "tests/infra/", "tests/e2e/", "tests/bench/", "tests/reconcile/", "tests/streams/")


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: within a rank, files and tests keep their collected order


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ClustersOnOneProcess(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(CLUSTER_FILES):
                return "clusters"
            return super()._split_scope(nodeid)

    return ClustersOnOneProcess(config, log)
