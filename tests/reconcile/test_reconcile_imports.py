"""``reconcile`` is the finance side: it may import ``ledger``, ``pricing`` and ``streams`` (to read the archive),
never ``proxy`` nor the composition root ``farebox``, and it reads no environment variable."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
FORBIDDEN = {"proxy", "farebox"}


def test_reconcile_imports_point_inward() -> None:
    for path in sorted((ROOT / "reconcile").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.relative_to(ROOT)} imports {name}"
        assert "environ" not in path.read_text(), f"{path.relative_to(ROOT)} reads the environment"
