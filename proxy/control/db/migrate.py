"""Alembic, driven from code: ``upgrade`` to head at start-up, ``downgrade`` by hand or in tests.

No ``alembic.ini``: the script location is this package's ``migrations``
folder and the URL is the caller's, so ``farebox db upgrade --config PATH``
and the gateway's start-up migrate the same database the same way.

Start-up calls ``ensure_head``: a database already at ``HEAD_REVISION`` is
recognised with one plain query and alembic is not even imported (importing
it and reading the scripts was a third of a second of CPU on every pod and
CLI start); anything else goes through ``upgrade``. ``HEAD_REVISION`` must
name the newest script's revision: a test holds it equal to alembic's head,
so a new migration cannot be skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "0011"  # the newest script in migrations/versions (tests/proxy/control/test_migrations.py)
VERSION_TABLE = "alembic_version"  # alembic's default, which env.py keeps


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    from alembic import command

    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def at_head(engine: sa.Engine) -> bool:
    """Whether the database's one recorded revision is ``HEAD_REVISION`` (False: no version table, another
    revision, or several heads recorded)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(VERSION_TABLE):
            return False
        rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return rows == [HEAD_REVISION]


def ensure_head(engine: sa.Engine) -> None:
    """Upgrade to head unless the database is there already (the start-up path: see the module docstring)."""
    if not at_head(engine):
        upgrade(engine)


def downgrade(engine: sa.Engine, revision: str = "base") -> None:
    from alembic import command

    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def current(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
