"""proxy/privacy stays pure: the stdlib, python-stdnum, phonenumbers and its own modules only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import proxy.privacy

ALLOWED = {"stdnum", "phonenumbers", "ledger", "pricing"}


def test_imports_point_nowhere_else():
    root = Path(proxy.privacy.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or top in ALLOWED or name.startswith("proxy.privacy")
                assert ok, f"{path.name} imports {name}"
