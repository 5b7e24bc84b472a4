"""The ``farebox`` command line: a table of command groups, one module each, and one exit-code map.

    farebox serve --config PATH [--host H] [--port N] [--workers N]     (farebox/cli/run.py)
    farebox worker | simulator                                           (farebox/cli/run.py)
    farebox keys|budgets|aliases|prices|teams|business-units|admin|audit|config|db   (farebox/cli/control.py)
    farebox events tail --config PATH [-n N] [--follow]                  (farebox/cli/events.py)
    farebox batches list|show|cancel --config PATH                       (farebox/cli/batches.py)
    farebox rollouts list|start|pause|resume|widen|rollback --config PATH  (farebox/cli/rollouts.py)
    farebox archiver | archive flush|verify|compact                     (farebox/cli/archive.py)
    farebox replay --from D --to D                                       (farebox/cli/replay.py)
    farebox export focus | whatif | reconcile | rerate                   (one module each)
    farebox finance sql|shell, farebox report showback                   (farebox/cli/finance.py)
    farebox dev cluster up|down|status                                   (farebox/cli/dev.py)

Each module's ``register(sub)`` adds its parsers and imports nothing heavy until a command runs.

Exit codes, the same for every command (``exit_code``): 0 done; 1 the command ran and found a problem it
reports (drift, a failed verification, a finance command that cannot answer with what is archived); 2 bad
input (options, config, a refused change, a malformed export); 3 a service it needs is unavailable.
"""

from __future__ import annotations

import argparse
import sys

from farebox.cli import (
    archive,
    batches,
    control,
    dev,
    events,
    export,
    finance,
    reconcile,
    replay,
    rerate,
    rollouts,
    run,
    whatif,
)
from proxy.control.problems import ConfigError
from proxy.errors import GatewayError
from reconcile.errors import ReconcileError

# Every command group, in the order ``farebox --help`` lists them.
COMMANDS = (run, archive, replay, control, events, batches, rollouts, export, whatif, reconcile, dev, finance,
            rerate)

EXIT_OK, EXIT_FOUND, EXIT_BAD_INPUT, EXIT_UNAVAILABLE = 0, 1, 2, 3
_BY_KIND = {"input": EXIT_BAD_INPUT, "unavailable": EXIT_UNAVAILABLE}  # reconcile's kinds; the rest: EXIT_FOUND


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="farebox", description="OpenAI-compatible LLM gateway with exact metering.")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return p


def exit_code(exc: BaseException) -> int:
    """The exit code of an error a command let through: bad input, an unavailable service, or what it found."""
    if isinstance(exc, ReconcileError):
        return _BY_KIND.get(exc.kind, EXIT_FOUND)
    if isinstance(exc, ConfigError):
        return EXIT_BAD_INPUT
    if isinstance(exc, GatewayError):
        return EXIT_BAD_INPUT if exc.status < 500 else EXIT_UNAVAILABLE
    raise exc


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except ReconcileError as exc:  # the finance side's: the message says what to fix
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except GatewayError as exc:  # ConfigRejected, ControlUnavailable, not found...
        print(f"error: {exc.message}", file=sys.stderr)
        for p in getattr(exc, "problems", []):
            print(f"  - {p}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
