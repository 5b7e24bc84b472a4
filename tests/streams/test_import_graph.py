"""``streams`` imports point one way: no module import cycle, never ``proxy``, ``reconcile`` or ``farebox``, and
only ``streams.kafka_internals`` reaches into a private attribute of faust, mode or aiokafka.

Imports inside functions count too: a cycle broken only by a deferred import is still a cycle a reader
has to untangle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
STREAMS = ROOT / "streams"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The ``streams`` modules ``path`` imports (``from streams.x import y`` counts ``streams.x.y`` if it is one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in STREAMS.rglob("*.py")}
    known = set(paths)
    return {name: _imports(path, known) - {name} for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_module_import_cycle_in_streams():
    graph = _graph()
    assert "streams.worker.app" in graph and graph["streams.worker.app"] >= {"streams.worker.split"}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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
            if path == STREAMS / "kafka_internals.py":
                continue
            found = PRIVATE_REACH.search(path.read_text())
            assert found is None, f"{path.relative_to(ROOT)} uses {found[0]}: go through streams.kafka_internals"


def test_the_private_reach_pattern_tells_library_internals_from_our_own():
    assert PRIVATE_REACH.search("await consumer._client.fetch_all_metadata()")
    assert PRIVATE_REACH.search("aio = app.consumer._thread._consumer")
    assert not PRIVATE_REACH.search("self._thread.start(); self._closed = True")
