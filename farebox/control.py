"""Opening the config database for a pod or a CLI command: migrate, seed, import.

First start against an empty database: Alembic upgrades it, then
``farebox.yaml``'s control sections are applied (the YAML is how a new
installation is bootstrapped), then the legacy state files of earlier
releases (``keys.jsonl``, ``budgets.jsonl``, ``admin-tokens.jsonl``) are
imported. Later starts only migrate and import what was appended to the
files; the database is the source of truth and ``farebox config apply``
is how a changed YAML reaches it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from farebox.settings import Settings
from proxy.control import legacy
from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB, Published
from proxy.control.errors import ConfigRejected

log = logging.getLogger("farebox.control")


def open_config_db(settings: Settings) -> ConfigDB:
    """Migrated and seeded; raises ControlUnavailable when the database cannot be reached."""
    db = ConfigDB(settings.control_db_url)
    try:
        db.migrate()
        diff: list[str] = []
        now = datetime.now(timezone.utc)
        seeded = db.seed_once(apply_tree(settings.control_tree, now, "bootstrap", None, diff), "bootstrap")
        if seeded is not None:
            log.info("config database seeded from %s: snapshot %d (%d changes)",
                     settings.config_path, seeded.version, len(diff))
        try:
            import_state_files(db, settings.state_dir, {})
        except ConfigRejected as exc:  # a bad old file must not stop the pod; nothing of it is imported
            log.error("state files in %s not imported:\n%s", settings.state_dir, exc.message)
    except Exception:
        db.close()
        raise
    return db


def import_state_files(db: ConfigDB, folder: Path, offsets: dict[str, int]) -> Published | None:
    """Import what was appended to the legacy state files; ``offsets`` is the caller's cache."""
    if "" not in offsets:  # "" marks the cache as loaded from the database
        with db.read() as s:
            offsets.update(legacy.offsets(s))
        offsets[""] = 0
    if not legacy.pending(folder, offsets):
        return None
    now = datetime.now(timezone.utc)
    return db.change("state-files", "state.import", str(folder), legacy.import_files(folder, now, "state-files", offsets))
