"""``ledger`` and ``pricing`` are pure: stdlib, orjson and themselves only.

Allowed crossings: ``pricing`` uses the event vocabulary's value type ``ledger.usage``
(TokenUsage and the token types), which itself imports nothing; ``ledger`` imports
nothing of ours; ``pricing/tokenizer.py`` loads the
compiled tokenizer that ships inside the ``bpe-openai`` wheel once per process
(a file lookup and a lock at start-up, never I/O per request).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("package", ["ledger", "pricing"])
def test_pure_packages_import_no_io_and_no_other_farebox_package(package):
    allowed = set(sys.stdlib_module_names) | {"orjson", package}
    io_stdlib = {"sqlite3", "socket", "asyncio", "subprocess", "http", "urllib", "threading", "os", "shutil"}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if package == "pricing" and name == "ledger.usage":
                    continue
                if path.name == "tokenizer.py" and name.split(".")[0] in {"os", "threading", "bpe_openai"}:
                    continue
                top = name.split(".")[0]
                assert top in allowed and top not in io_stdlib, f"{path.relative_to(ROOT)} imports {name}"
