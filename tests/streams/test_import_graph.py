"""``streams`` imports point one way: never ``proxy``, ``reconcile`` or ``farebox``, and only
``streams.kafka.internals`` reaches into a private attribute of faust, mode or aiokafka.

(No module import cycle anywhere, ``streams`` included: ``tests/test_structure.py``.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
STREAMS = ROOT / "streams"


def test_streams_imports_no_outer_package():
    for path in STREAMS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                assert name.split(".")[0] not in {"proxy", "reconcile", "farebox"}, f"{path} imports {name}"


# private attributes of faust, mode and aiokafka objects the code has needed; ``self._x`` of our own classes is fine
PRIVATE_REACH = re.compile(r"(?<!\bself)\.(_client|_fetcher|_sender|_closed|_ensure_producer|_thread|_subscription|"
                           r"_active_partitions|_paused_partitions|_read_offset|_new_offset|_add_gap|"
                           r"_create_worker_consumer|_fetch_records|_acked|_committed_offset|_fetch_max_wait_ms)\b")


def test_only_the_adapter_reaches_into_library_internals():
    for root in ("streams", "farebox"):
        for path in (ROOT / root).rglob("*.py"):
            if path == STREAMS / "kafka" / "internals.py":
                continue
            found = PRIVATE_REACH.search(path.read_text())
            assert found is None, f"{path.relative_to(ROOT)} uses {found[0]}: go through streams.kafka.internals"


def test_the_private_reach_pattern_tells_library_internals_from_our_own():
    assert PRIVATE_REACH.search("await consumer._client.fetch_all_metadata()")
    assert PRIVATE_REACH.search("aio = app.consumer._thread._consumer")
    assert not PRIVATE_REACH.search("self._thread.start(); self._closed = True")
