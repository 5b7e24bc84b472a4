"""The config a finance or audit command reads: what the gateway serves, read without changing anything.

``read_snapshot`` is the one reader for showback, re-rating, reconciliation, what-if, the FOCUS export and
the finance shell. It never migrates, never seeds and never creates a database (a SQLite file that is not
there is not made), so a read-only report cannot change the config database under a running gateway.
Where it reads from, in order:

1. the config database's published head (what every pod follows);
2. where the database cannot be read (unreachable, never migrated) or nothing was ever published:
   the last good snapshot a gateway saved in ``state_dir`` (what a pod would start with);
3. where there is none either: ``farebox.yaml``'s own control sections (what a first start would
   publish), with a warning naming why.
"""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa

from farebox.settings import Settings
from proxy.control.db.store import ConfigDB
from proxy.control.document import compile_document, load_last_good
from proxy.control.errors import ControlUnavailable
from proxy.snapshot import Snapshot

log = logging.getLogger("farebox.config")


def _database_exists(url: str) -> bool:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True
    return bool(parsed.database) and parsed.database != ":memory:" and Path(parsed.database).exists()


def _published(settings: Settings) -> tuple[Snapshot | None, str]:
    """The database's head compiled, or None with the reason it could not be had."""
    if not _database_exists(settings.control_db_url):
        return None, f"no config database at {settings.safe_db_url}"
    db = ConfigDB(settings.control_db_url)
    try:
        head = db.head()
        if head is None:
            return None, "nothing was ever published to the config database"
        return compile_document(db.document(head[0]), head[0]), ""
    except (ControlUnavailable, sa.exc.DBAPIError):  # unreachable, or never migrated (no such table)
        return None, f"the config database ({settings.safe_db_url}) cannot be read"
    finally:
        db.close()


def read_snapshot(settings: Settings) -> Snapshot:
    """The snapshot the gateway serves now, else the one it would start with (module docstring)."""
    snapshot, why = _published(settings)
    if snapshot is not None:
        return snapshot
    saved = load_last_good(settings.state_dir)
    if saved is not None:
        log.warning("%s: using the last good snapshot (version %d) in %s", why, saved[0], settings.state_dir)
        return compile_document(saved[1], saved[0])
    log.warning("%s and there is no last good snapshot in %s: using %s as written", why, settings.state_dir,
                settings.config_path)
    return settings.snapshot
