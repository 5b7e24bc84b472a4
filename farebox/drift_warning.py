"""At ``farebox serve`` start-up: say, once, when the YAML says something the config database does not.

After the first start the config database is the source of truth (the YAML
only seeds an empty one), so an edited ``farebox.yaml`` changes nothing until
``farebox config apply``. ``pending_changes`` computes exactly the diff that
command would print (``proxy.control.apply.apply_tree``, the same function)
in a transaction that is rolled back: nothing is written, no snapshot is
published. ``warn_if_drifted`` prints it; ``farebox serve`` calls it once,
before the gateway starts. A database that cannot be read here is left to the
gateway's own start-up, which reports it.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from typing import TextIO

from sqlalchemy.orm import Session

from farebox.settings import Settings
from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB

log = logging.getLogger("farebox.drift")


def pending_changes(settings: Settings) -> list[str] | None:
    """The ``config apply`` diff of the file against the database; None when there is nothing to compare
    (an empty database is seeded from the file at start-up) or the database cannot be read."""
    db = ConfigDB(settings.control_db_url)
    try:
        if db.head() is None:
            return None
        diff: list[str] = []
        mutation = apply_tree(settings.control_tree, datetime.now(timezone.utc), "drift-check", None, diff)
        with Session(db.engine) as s:
            try:
                mutation(s)
            finally:
                s.rollback()  # a dry run: the diff is all we wanted
        return diff
    except Exception as exc:  # the gateway's start-up reports an unreachable or unmigrated database itself
        log.debug("config drift check skipped: %s", exc)
        return None
    finally:
        db.close()


def drift_message(config_path: str, db_url: str, diff: list[str]) -> str:
    """The warning: what differs, why it is not live, and the command that makes it live."""
    lines = [
        f"WARNING: {config_path} differs from the config database ({db_url}).",
        "  The database is the source of truth after the first start, so these "
        f"{len(diff)} change(s) in the file are NOT live.",
        f"  `farebox config apply {config_path}` would make them:",
        *(f"    {line}" for line in diff),
    ]
    return "\n".join(lines)


def warn_if_drifted(settings: Settings, out: TextIO | None = None) -> list[str]:
    """Print the warning to ``out`` (stderr) when the file and the database differ; the diff (empty if none)."""
    diff = pending_changes(settings) or []
    if diff:
        print(drift_message(str(settings.config_path), settings.safe_db_url, diff), file=out or sys.stderr,
              flush=True)
    return diff
