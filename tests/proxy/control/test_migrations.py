"""Alembic migrations upgrade an empty database to head and downgrade to empty, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from infra.postgres.server import PostgresServer
from proxy.control.db import migrate
from proxy.control.db.engine import make_engine
from proxy.control.db.models import Base
from tests.harness import ROOT


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        assert migrate.current(engine) is None
        migrate.upgrade(engine)
        assert migrate.current(engine) == migrate.head()
        tables = set(sa.inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        # the migrated schema is the models' schema: every column is there
        insp = sa.inspect(engine)
        for name, table in Base.metadata.tables.items():
            assert {c["name"] for c in insp.get_columns(name)} == set(table.columns.keys()), name
        migrate.downgrade(engine)
        assert migrate.current(engine) is None
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(engine)  # and up again from empty
        assert migrate.current(engine) == migrate.head()
    finally:
        engine.dispose()


def test_sqlite_upgrade_from_empty_and_downgrade(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'control.sqlite'}")


@pytest.mark.postgres
def test_postgres_upgrade_from_empty_and_downgrade(postgres: PostgresServer) -> None:
    _roundtrip(postgres.create_database("migrations"))


def _keys_0001_to_head_and_back(url: str) -> None:
    """0002 adds the keys' nullable ``regions`` / ``deployments``: existing keys survive, unpinned, both ways."""
    engine = make_engine(url)
    row = {"id": "fb-dev-abc123", "hash": "a" * 64, "team": "platform", "app": "playground", "env": "dev",
           "aliases": '["chat-default"]', "data_class_ceiling": "internal", "default_data_class": "internal",
           "created_at": "2026-01-01 00:00:00+00:00", "created_by": "test"}
    try:
        migrate.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(sa.text(f"INSERT INTO keys ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"),
                         row)
        migrate.upgrade(engine, "0002")
        cols = {c["name"]: c for c in sa.inspect(engine).get_columns("keys")}
        assert cols["regions"]["nullable"] and cols["deployments"]["nullable"]
        with engine.begin() as conn:
            got = conn.execute(sa.text("SELECT id, regions, deployments FROM keys")).one()
            assert tuple(got) == ("fb-dev-abc123", None, None)
            conn.execute(sa.text("UPDATE keys SET regions = :r"), {"r": '["ap-south-1"]'})
        migrate.downgrade(engine, "0001")
        assert migrate.current(engine) == "0001"
        assert {"regions", "deployments"}.isdisjoint(c["name"] for c in sa.inspect(engine).get_columns("keys"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT id FROM keys")).scalar_one() == "fb-dev-abc123"
        migrate.downgrade(engine)
    finally:
        engine.dispose()


def test_sqlite_key_pins_migration_keeps_existing_keys(tmp_path: Path) -> None:
    _keys_0001_to_head_and_back(f"sqlite:///{tmp_path / 'control.sqlite'}")


@pytest.mark.postgres
def test_postgres_key_pins_migration_keeps_existing_keys(postgres: PostgresServer) -> None:
    _keys_0001_to_head_and_back(postgres.create_database("migrations_0002"))


def _state_imports_dropped_and_restored(url: str) -> None:
    """0003 drops ``state_imports`` (offsets of the removed state-file inbox); downgrading brings it back, empty."""
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(sa.text('INSERT INTO state_imports (source, "offset") VALUES (:s, :o)'),
                         {"s": "keys.jsonl", "o": 120})
        migrate.upgrade(engine, "0003")
        assert migrate.current(engine) == "0003"
        assert "state_imports" not in sa.inspect(engine).get_table_names()
        migrate.downgrade(engine, "0002")
        assert "state_imports" in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM state_imports")).scalar_one() == 0
        migrate.downgrade(engine)
        assert migrate.current(engine) is None
    finally:
        engine.dispose()


def test_sqlite_state_imports_migration(tmp_path: Path) -> None:
    _state_imports_dropped_and_restored(f"sqlite:///{tmp_path / 'control.sqlite'}")


@pytest.mark.postgres
def test_postgres_state_imports_migration(postgres: PostgresServer) -> None:
    _state_imports_dropped_and_restored(postgres.create_database("migrations_0003"))


def _cost_centres_added_and_dropped(url: str) -> None:
    """0004 adds a nullable ``cost_centre`` to teams and apps: existing rows survive without one, both ways."""
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0003")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO teams (name) VALUES ('platform')"))
            conn.execute(sa.text("INSERT INTO apps (team, name) VALUES ('platform', 'playground')"))
        migrate.upgrade(engine, "0004")
        assert migrate.current(engine) == "0004"
        for table in ("teams", "apps"):
            cols = {c["name"]: c for c in sa.inspect(engine).get_columns(table)}
            assert cols["cost_centre"]["nullable"], table
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT cost_centre FROM apps")).scalar_one() is None
            conn.execute(sa.text("UPDATE teams SET cost_centre = 'CC-1001'"))
            assert conn.execute(sa.text("SELECT cost_centre FROM teams")).scalar_one() == "CC-1001"
        migrate.downgrade(engine, "0003")
        for table in ("teams", "apps"):
            assert "cost_centre" not in {c["name"] for c in sa.inspect(engine).get_columns(table)}
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT name FROM apps")).scalar_one() == "playground"
        migrate.downgrade(engine)
        assert migrate.current(engine) is None
    finally:
        engine.dispose()


def test_sqlite_cost_centre_migration(tmp_path: Path) -> None:
    _cost_centres_added_and_dropped(f"sqlite:///{tmp_path / 'control.sqlite'}")


@pytest.mark.postgres
def test_postgres_cost_centre_migration(postgres: PostgresServer) -> None:
    _cost_centres_added_and_dropped(postgres.create_database("migrations_0004"))


def test_sqlite_budget_spend_per_hour_migration(tmp_path: Path) -> None:
    """0005 adds ``budgets.spend_per_hour`` (nullable: existing budgets have no spend rate) and drops it back."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0004")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO budgets (scope, monthly_limit, soft_pct, env) VALUES ('team:a', '5', 80, 'any')"))
        migrate.upgrade(engine, "0005")
        assert migrate.current(engine) == "0005"
        with engine.connect() as conn:
            assert tuple(conn.execute(sa.text("SELECT scope, spend_per_hour FROM budgets")).one()) == ("team:a", None)
        migrate.downgrade(engine, "0004")
        assert "spend_per_hour" not in {c["name"] for c in sa.inspect(engine).get_columns("budgets")}
    finally:
        engine.dispose()


def test_sqlite_team_body_log_migration(tmp_path: Path) -> None:
    """0006 adds ``teams.body_log`` (not null, false for existing teams: body logging is opt-in) and drops it back."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0005")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO teams (name) VALUES ('payments')"))
        migrate.upgrade(engine, "0006")
        assert migrate.current(engine) == "0006"
        with engine.connect() as conn:
            assert tuple(conn.execute(sa.text("SELECT name, body_log FROM teams")).one()) == ("payments", False)
        migrate.downgrade(engine, "0005")
        assert "body_log" not in {c["name"] for c in sa.inspect(engine).get_columns("teams")}
    finally:
        engine.dispose()


def test_sqlite_pending_changes_migration(tmp_path: Path) -> None:
    """0007 adds ``pending_changes`` (two-person admin changes) and ``audit_log.approved_by``, and drops both back;
    audit rows written before keep a null approver."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0006")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO audit_log (at, actor, action, object, outcome) "
                                 "VALUES ('2026-12-01 00:00:00', 'ops', 'keys.create', 'key:k', 'ok')"))
        migrate.upgrade(engine, "0007")
        assert migrate.current(engine) == "0007"
        assert "pending_changes" in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert tuple(conn.execute(sa.text("SELECT actor, approved_by FROM audit_log")).one()) == ("ops", None)
        migrate.downgrade(engine, "0006")
        assert "pending_changes" not in sa.inspect(engine).get_table_names()
        assert "approved_by" not in {c["name"] for c in sa.inspect(engine).get_columns("audit_log")}
    finally:
        engine.dispose()


def test_sqlite_price_cache_write_1h_migration(tmp_path: Path) -> None:
    """0008 adds ``prices.cache_write_1h`` (null for the prices written before: they fall back to cache_write)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0007")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO price_versions (version, valid_from, created_at, created_by) "
                                 "VALUES (1, '2026-01-01 00:00:00', '2026-01-01 00:00:00', 'ops')"))
            conn.execute(sa.text("INSERT INTO prices (version, deployment, currency, input, output) "
                                 "VALUES (1, 'd', 'USD', '3', '15')"))
        migrate.upgrade(engine, "0008")
        assert migrate.current(engine) == "0008"
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT cache_write_1h FROM prices")).scalar_one() is None
        migrate.downgrade(engine, "0007")
        assert "cache_write_1h" not in {c["name"] for c in sa.inspect(engine).get_columns("prices")}
    finally:
        engine.dispose()


def test_sqlite_price_gpu_hour_migration(tmp_path: Path) -> None:
    """0009 adds ``prices.gpu_hour`` and ``prices.gpus`` (null for the prices written before: paid by tokens)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0008")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO price_versions (version, valid_from, created_at, created_by) "
                                 "VALUES (1, '2026-01-01 00:00:00', '2026-01-01 00:00:00', 'ops')"))
            conn.execute(sa.text("INSERT INTO prices (version, deployment, currency, input, output) "
                                 "VALUES (1, 'd', 'USD', '3', '15')"))
        migrate.upgrade(engine, "0009")
        assert migrate.current(engine) == "0009"
        with engine.connect() as conn:
            assert tuple(conn.execute(sa.text("SELECT gpu_hour, gpus FROM prices")).one()) == (None, None)
        migrate.downgrade(engine, "0008")
        assert not {"gpu_hour", "gpus"} & {c["name"] for c in sa.inspect(engine).get_columns("prices")}
    finally:
        engine.dispose()


def test_sqlite_price_reserved_migration(tmp_path: Path) -> None:
    """0010 adds ``prices.reserved_hour``, ``reserved_month`` and ``reserved_team`` (null for the prices written
    before: no reservation)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine, "0009")
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO price_versions (version, valid_from, created_at, created_by) "
                                 "VALUES (1, '2026-01-01 00:00:00', '2026-01-01 00:00:00', 'ops')"))
            conn.execute(sa.text("INSERT INTO prices (version, deployment, currency, input, output) "
                                 "VALUES (1, 'd', 'USD', '0', '0')"))
        migrate.upgrade(engine, "0010")
        assert migrate.current(engine) == "0010"
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT reserved_hour, reserved_month, reserved_team FROM prices")).one()
            assert tuple(row) == (None, None, None)
        migrate.downgrade(engine, "0009")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("prices")}
        assert not {"reserved_hour", "reserved_month", "reserved_team"} & columns
    finally:
        engine.dispose()


def test_sqlite_rollouts_migration(tmp_path: Path) -> None:
    """0011 adds the ``rollouts`` and ``rollout_stats`` tables (config canaries); downgrade drops them."""
    engine = make_engine(f"sqlite:///{tmp_path / 'control.sqlite'}")
    try:
        migrate.upgrade(engine)
        assert migrate.current(engine) == migrate.head() == "0011"
        assert {"rollouts", "rollout_stats"} <= set(sa.inspect(engine).get_table_names())
        migrate.downgrade(engine, "0010")
        assert not {"rollouts", "rollout_stats"} & set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_head_revision_constant_is_the_newest_script() -> None:
    assert migrate.HEAD_REVISION == migrate.head()


def test_ensure_head_upgrades_what_is_behind_and_skips_alembic_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.sqlite'}"
    engine = make_engine(url)
    try:
        assert not migrate.at_head(engine)  # empty: no version table
        migrate.upgrade(engine, "0003")
        assert not migrate.at_head(engine)
        migrate.ensure_head(engine)
        assert migrate.current(engine) == migrate.head() and migrate.at_head(engine)
    finally:
        engine.dispose()
    # a fresh process at head never imports alembic
    probe = ("import sys; from proxy.control.db import migrate; from proxy.control.db.engine import make_engine; "
             f"migrate.ensure_head(make_engine({url!r})); print('alembic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
