"""Evidence of the code's shape, from its source alone (``ast``; nothing is imported).

* No import cycle between two modules of the project's packages, nor between
  two parts of ``proxy/`` (a subpackage such as ``proxy/admission`` or a
  top-level module such as ``proxy/runtime.py``). Every import counts,
  including those inside functions: a late import hides a cycle, it does not
  remove it.
* Handlers, routing and admission never ask which mode the pod runs in: no
  ``.budgets is None`` / ``.wallets`` test outside the composition root
  (``farebox/``). The mode is chosen once, by wiring one adapter per port.
* No module over 400 lines outside ``tests/``.
* The request path moves forward. ``proxy/``'s stages, in the order a request meets them, are
  api -> idempotency -> privacy -> cache -> admission -> routing -> upstream -> metering -> observe
  (``bodylog`` sits with ``observe``, at the end; ``stored_responses``, the Responses API's store, with
  ``idempotency``): a stage imports only itself, later stages and the
  shared kernel (``snapshot``, ``errors``, ``body``, ``ports``, ``cancellation``, ``outcomes``, the ``limits``
  port), never an
  earlier stage. The kernel imports no stage. ``runtime`` (the pod's ports, built by ``farebox/``) is read
  by ``api`` and ``control`` only: a stage is handed what it needs. ``api`` never imports ``control``
  (the composition root mounts the admin routes).
* Packages, not prefixes: no folder holds more than three modules whose names share a prefix
  (``archive_*.py``), and no module registers another by ``__import__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("farebox", "proxy", "streams", "ledger", "pricing", "reconcile", "infra")
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(name: str, path: Path) -> set[str]:
    """The project modules that ``name`` imports."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from a import b``: the module ``a.b`` when there is one, else ``a`` (b is a name in it)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target in MODULES and target != name:
                found.add(target)
    return found


GRAPH = {name: _imported(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# The stages of the request path, in order; a stage may import itself and the stages after it.
STAGES = ("api", "idempotency", "privacy", "cache", "admission", "routing", "upstream", "metering", "observe")
RANK = {f"proxy.{name}": i for i, name in enumerate(STAGES)} | {"proxy.bodylog": len(STAGES) - 1,
                                                                 "proxy.stored_responses": 1, "proxy.batches": 1}
KERNEL = {"proxy.snapshot", "proxy.errors", "proxy.body", "proxy.ports", "proxy.cancellation", "proxy.limits",
          "proxy.outcomes", "proxy.overload", "proxy.hashing"}


def _proxy_part(module: str) -> str | None:
    """``proxy.admission.budgets`` -> ``proxy.admission``; ``proxy.runtime`` -> ``proxy.runtime``."""
    parts = module.split(".")
    if parts[0] != "proxy" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    assert "proxy.api.app" in GRAPH["farebox.pod"]


def test_no_import_cycle_between_modules():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_between_proxy_subpackages():
    parts: dict[str, set[str]] = {}
    for module, imports in GRAPH.items():
        part = _proxy_part(module)
        if part is None:
            continue
        edges = parts.setdefault(part, set())
        edges.update(p for p in map(_proxy_part, imports) if p is not None and p != part)
    cycles = _cycles(parts)
    assert not cycles, "cycles between parts of proxy/:\n" + "\n".join(" <-> ".join(c) for c in cycles)


MODE_TEST = re.compile(
    r"\.(budgets|wallets|ledger|limits)\s+is\s+(not\s+)?None"  # a port missing or present means a mode
    r"|\b(getattr|hasattr)\([^)]*[\"'](budgets|wallets|ledger|follower|publisher)[\"']"  # ... asked sideways
    r"|\bisinstance\([^)]*\b(Wallets|LedgerBudgets|LeaseBudgets|MemoryBuckets|RedisBuckets)\b"  # ... by adapter
    r"|\bmode\s*[!=]=\s*[\"'](embedded|distributed)[\"']"  # ... or by name
)


def test_no_mode_branch_outside_the_composition_root():
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("farebox"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MODE_TEST.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "mode tests outside farebox/:\n" + "\n".join(offenders)


def test_the_mode_test_pattern_matches_what_it_must():
    assert MODE_TEST.search("if rt.budgets is not None:")
    assert MODE_TEST.search("elif rt.wallets is not None:")
    assert MODE_TEST.search('if settings.mode == "distributed":')
    assert MODE_TEST.search('follower = getattr(rt.control, "follower", None)')
    assert MODE_TEST.search("if isinstance(rt.limits, RedisBuckets):")
    assert not MODE_TEST.search("limit = snap.budgets.limit_for(scope)")
    assert not MODE_TEST.search("funding = await rt.budgets.admit(snap, ask)")


def test_no_module_over_400_lines_outside_tests():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _stage_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, imports in sorted(graph.items()):
        part = _proxy_part(module)
        if part is None:
            continue
        for target in sorted(imports):
            other = _proxy_part(target)
            if other is None or other == part:
                continue
            if part in RANK and other in RANK and RANK[other] < RANK[part]:
                out.append(f"{module} -> {target}: back to an earlier stage")
            elif part in KERNEL and (other in RANK or other not in KERNEL):
                out.append(f"{module} -> {target}: the kernel imports no stage")
            elif other == "proxy.runtime" and part not in ("proxy.api", "proxy.control"):
                out.append(f"{module} -> {target}: a stage is handed its ports, it does not read the runtime")
            elif other == "proxy.control" and part != "proxy.control":
                out.append(f"{module} -> {target}: only the composition root mounts the control plane")
    return out


def test_the_stage_rule_catches_a_backward_import():
    assert _stage_violations({"proxy.metering.meter": {"proxy.admission.plan"}})
    assert _stage_violations({"proxy.snapshot": {"proxy.privacy.policy"}})
    assert _stage_violations({"proxy.routing.chain": {"proxy.runtime"}})
    assert _stage_violations({"proxy.api.app": {"proxy.control.admin"}})
    assert not _stage_violations({"proxy.admission.admit": {"proxy.metering.meter", "proxy.snapshot", "proxy.limits"}})


def test_every_proxy_part_is_a_stage_the_kernel_or_named():
    parts = {p for m in MODULES if (p := _proxy_part(m)) is not None}
    unknown = parts - set(RANK) - KERNEL - {"proxy.runtime", "proxy.control"}
    assert not unknown, f"place these in STAGES or KERNEL: {sorted(unknown)}"


def test_the_request_path_only_moves_forward():
    bad = _stage_violations(GRAPH)
    assert not bad, "imports against the stage order:\n" + "\n".join(bad)


def _prefix_piles() -> list[str]:
    piles = []
    folders = {path.parent for path in MODULES.values()}
    for folder in sorted(folders):
        names = [p.stem for p in folder.glob("*.py") if p.stem != "__init__" and "_" in p.stem]
        by_prefix: dict[str, list[str]] = {}
        for stem in names:
            by_prefix.setdefault(stem.split("_")[0], []).append(stem)
        for prefix, members in sorted(by_prefix.items()):
            if (folder / f"{prefix}.py").exists():
                members.append(prefix)
            if len(members) > 3:
                piles.append(f"{folder.relative_to(ROOT)}: {sorted(members)}")
    return piles


def test_packages_not_prefix_piles():
    piles = _prefix_piles()
    assert not piles, "more than three modules share a prefix (make a package):\n" + "\n".join(piles)


def test_no_module_is_imported_by_name_at_run_time():
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "__import__ hides an import from this test; import explicitly:\n" + "\n".join(found)
