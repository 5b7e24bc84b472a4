"""Alembic, driven from code: ``upgrade`` to head at start-up, ``downgrade`` by hand or in tests.

No ``alembic.ini``: the script location is this package's ``migrations``
folder and the URL is the caller's, so ``farebox db upgrade --config PATH``
and the gateway's start-up migrate the same database the same way.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: sa.Engine, revision: str = "base") -> None:
    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def current(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
