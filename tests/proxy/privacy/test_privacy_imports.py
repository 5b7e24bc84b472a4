"""proxy/privacy's logic stays pure: the stdlib, python-stdnum, phonenumbers, the snapshot's values, the
GIL-keeping hash (``proxy.hashing``, pure) and its own modules only. Its shell (``classify.py``: the request's classification, handed to the stages after it) may also
raise the gateway's errors, read the routing chain it gates and encode JSON."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import proxy.privacy

ALLOWED = {"stdnum", "phonenumbers", "ledger", "pricing"}
SHELL = "classify.py"
SHELL_ALLOWED = ("orjson", "proxy.errors", "proxy.routing.chain")


def test_imports_point_nowhere_else():
    root = Path(proxy.privacy.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                ok = (top in sys.stdlib_module_names or top in ALLOWED or name.startswith(("proxy.privacy", "proxy.snapshot", "proxy.hashing"))
                      or (path.name == SHELL and name.startswith(SHELL_ALLOWED)))
                assert ok, f"{path.name} imports {name}"
