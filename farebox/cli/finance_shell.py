"""``farebox finance shell``: an interactive SQL prompt over a locked warehouse.

Not the ``duckdb`` binary: its dot commands (``.shell``, ``.output``,
``.read``, ``.import``) reach the file system and the OS whatever DuckDB's own
settings say, and its safe mode cannot be combined with loading the views. This
prompt runs each statement through ``Warehouse.query`` on a locked warehouse
(``reconcile.warehouse``: file access off except the vouched-for archive files,
the configuration locked, read-only statements only), so a finance session
reads the ledger and nothing else. Results leave through ``.out FILE`` (the
next result is written there by this process, never by DuckDB).

Input: statements end with ``;`` and may span lines; dot commands are one line:
``.help``, ``.tables``, ``.format table|csv|json``, ``.out FILE``, ``.warnings``,
``.quit``. An error prints one line and the prompt goes on; end of input ends
the session (exit 0).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from reconcile.render import FORMATS, render
from reconcile.warehouse import VIEWS, Warehouse, WarehouseError

HELP = """statements end with ';' and may span lines. Dot commands:
  .tables              the warehouse views
  .format table|csv|json
  .out FILE            write the next result to FILE (csv/json/table by --format, .parquet as Parquet)
  .warnings            the archive files left out of every view
  .quit                leave (so does end of input)"""


def write_result(warehouse: Warehouse, sql: str, out: Path, fmt: str) -> int:
    """Run ``sql`` and write its result to ``out`` (Parquet when it ends in .parquet); the number of rows."""
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = warehouse.arrow(sql)
        pq.write_table(table, out)
        return table.num_rows
    result = warehouse.query(sql)
    out.write_text(render(result, fmt), encoding="utf-8")
    return len(result.rows)


def run_shell(warehouse: Warehouse, stdin: TextIO, stdout: TextIO, stderr: TextIO, *, fmt: str = "table") -> int:
    """The prompt loop over ``warehouse`` (see the module docstring)."""
    interactive = stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        print(f"farebox finance shell: {len(warehouse.files)} archive file(s), views: {', '.join(VIEWS)}. "
              f"End statements with ';'. .help for commands.", file=stdout)
    pending: list[str] = []
    out_file: Path | None = None
    while True:
        try:
            line = input("finance> " if not pending else "    ...> ") if interactive else stdin.readline()
        except EOFError:  # Ctrl-D at the prompt
            break
        except KeyboardInterrupt:  # Ctrl-C: drop the statement being typed, keep the session
            print(file=stdout)
            pending = []
            continue
        if not line and not interactive:
            break
        if interactive and line == "" and not pending:
            continue
        text = line.rstrip("\n")
        if not pending and text.strip().startswith("."):
            command, _, arg = text.strip().partition(" ")
            arg = arg.strip()
            if command in (".quit", ".exit"):
                break
            if command == ".help":
                print(HELP, file=stdout)
            elif command == ".tables":
                print("\n".join(VIEWS), file=stdout)
            elif command == ".format" and arg in FORMATS:
                fmt = arg
            elif command == ".out" and arg:
                out_file = Path(arg)
            elif command == ".warnings":
                print("\n".join(warehouse.warnings) or "every archive file is vouched for", file=stdout)
            else:
                print(f"error: unknown or incomplete command {text.strip()!r} (.help lists them)", file=stderr)
            continue
        pending.append(text)
        if not text.rstrip().endswith(";"):
            continue
        sql, pending = "\n".join(pending), []
        try:
            if out_file is not None:
                rows = write_result(warehouse, sql, out_file, fmt)
                print(f"{rows} row(s) written to {out_file}", file=stdout)
                out_file = None
            else:
                stdout.write(render(warehouse.query(sql), fmt))
        except (WarehouseError, OSError) as exc:
            print(f"error: {exc}", file=stderr)
        stdout.flush()
    if pending and "".join(pending).strip():
        print("error: the last statement has no ';' and was not run", file=stderr)
    return 0


def shell(archive: Path, tz: str) -> int:
    with Warehouse(archive, tz=tz, locked=True) as warehouse:
        for line in warehouse.warnings:
            print(f"warning: {line}", file=sys.stderr)
        return run_shell(warehouse, sys.stdin, sys.stdout, sys.stderr)
