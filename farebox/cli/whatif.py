"""``farebox whatif --config PATH --budgets proposed.yaml --from D --to D [--format table|json]``: budget what-if.

The composition root's part: it loads the settings and the live snapshot (as
``farebox serve`` starts), parses the proposed budgets with the config's own
reader (``proxy.control.policies.read_budgets``: the same checks as ``farebox
config check``, every problem listed together, nothing run), turns them into a
``reconcile.whatif.Proposal`` of plain values, reads the archive and prints
``reconcile.whatif_report``. The proposal replaces the whole ``budgets``
section: a scope it does not list is unlimited.

Exit 0 with the report on stdout; 1 when the what-if cannot run (bad dates, no
archive for the range, an unreadable archive file); 2 for a configuration or
proposal problem.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from farebox.cli.archive import warn_left_out

if TYPE_CHECKING:  # imported when the command runs: the archive reader pulls in pyarrow
    from reconcile.whatif import Proposal


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``whatif`` to the ``farebox`` command line."""
    s = sub.add_parser("whatif", help="replay archived traffic under proposed budgets: who would have been "
                                      "refused, from when, and the spend difference")
    s.add_argument("--config", required=True)
    s.add_argument("--budgets", required=True, help="YAML file shaped like the config's budgets section")
    s.add_argument("--from", dest="start", required=True, help="first day, YYYY-MM-DD (UTC)")
    s.add_argument("--to", dest="end", required=True, help="last day, YYYY-MM-DD (UTC), inclusive")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--archive", help="the archive root (default: <state_dir>/archive)")
    s.set_defaults(func=whatif_command)


def load_proposal(path: str | Path, snapshot: Any) -> Proposal:
    """The proposed budgets as values; ``ConfigError`` listing every problem (unknown team, bad money...).

    The file is the ``budgets`` section itself, or a mapping with only a ``budgets`` key. Scope names are
    checked against the live snapshot's teams, business units and aliases (``snapshot`` is ``Any``: only
    those three are read)."""
    from farebox.settings import read_yaml
    from ledger.admission import ScopeLimit
    from proxy.control.policies import read_budgets
    from proxy.control.problems import Problems, Reader
    from reconcile.whatif import Proposal

    tree: Any = read_yaml(Path(path))
    where = ""
    if set(tree) == {"budgets"}:
        tree, where = tree["budgets"], "budgets"
    problems = Problems()
    policy = read_budgets(Reader(tree, where, problems), (), snapshot.teams, set(snapshot.business_units),
                          snapshot.aliases)
    problems.raise_if_any(str(path))

    def limit(value: Any) -> ScopeLimit:
        return ScopeLimit(value.limit_micro, value.soft_pct, value.max_calls)

    return Proposal(timezone=policy.timezone, per_request_cap_micro=policy.per_request_cap_micro,
                    run_default=limit(policy.run_default),
                    scopes={scope: limit(value) for scope, value in policy.scopes.items()})


def _day(text: str, flag: str) -> datetime:
    from reconcile.whatif import WhatIfError

    try:
        return datetime.combine(date.fromisoformat(text), datetime.min.time(), timezone.utc)
    except ValueError:
        raise WhatIfError(f"{flag} must be a date like 2026-11-01, got {text!r}") from None


def whatif_command(args: argparse.Namespace) -> int:
    from farebox.config_reader import read_snapshot
    from farebox.settings import load_settings
    from reconcile.whatif import read_traffic, replay, window
    from reconcile.whatif_report import to_json, to_table

    start, end = window(_day(args.start, "--from"), _day(args.end, "--to"))
    settings = load_settings(args.config)
    snapshot = read_snapshot(settings)
    proposal = load_proposal(args.budgets, snapshot)  # every problem at once, before anything runs
    archive = Path(args.archive) if args.archive else settings.archive_root
    warn_left_out(archive)  # files the manifest does not vouch for are not replayed: named here
    events = read_traffic(archive, start, end, ZoneInfo(proposal.timezone))
    result = replay(events, proposal, start=start, end=end)
    if args.format == "json":
        sys.stdout.write(to_json(result, snapshot.currency).decode() + "\n")
    else:
        print(to_table(result, snapshot.currency))
    return 0
