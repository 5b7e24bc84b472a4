"""Opening the config database for a pod or a CLI command: migrate, then seed a new installation.

First start against an empty database: Alembic upgrades it, then
``farebox.yaml``'s control sections are applied (the YAML is how a new
installation is bootstrapped). Later starts only migrate: the database is the
source of truth, changed through the admin API, the CLI, or
``farebox config apply`` for a changed YAML.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from farebox.settings import Settings
from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB

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
    except Exception:
        db.close()
        raise
    return db
