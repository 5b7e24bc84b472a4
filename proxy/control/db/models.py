"""SQLAlchemy models of the config database (SQLite by default, PostgreSQL supported).

Small, slow-changing tables read only by the control plane; the hot path
reads the compiled snapshot, never these rows. What is never stored here:
a virtual key or admin token in plaintext (only SHA-256 hashes and a display
id), a provider key (deployments hold the *name* of the secret only).

Schema changes go through Alembic (``proxy/control/db/migrations``); this
module is the target the migrations are checked against.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict: sa.JSON, list: sa.JSON, datetime: sa.DateTime(timezone=True)}


class ConfigHead(Base):
    """One row: the version counter pods poll (cheap primary-key read)."""

    __tablename__ = "config_head"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int]
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    updated_at: Mapped[datetime]


class SnapshotRow(Base):
    """Every published snapshot document (no secrets), numbered, content-hashed."""

    __tablename__ = "snapshots"
    version: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    document: Mapped[dict]
    created_at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(sa.String(200))


class BusinessUnit(Base):
    __tablename__ = "business_units"
    name: Mapped[str] = mapped_column(sa.String(200), primary_key=True)


class TeamRow(Base):
    __tablename__ = "teams"
    name: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    business_unit: Mapped[str | None] = mapped_column(sa.String(200), sa.ForeignKey("business_units.name"))
    cost_centre: Mapped[str | None] = mapped_column(sa.String(200))
    body_log: Mapped[bool] = mapped_column(default=False, server_default=sa.false())  # encrypted body logging


class AppRow(Base):
    __tablename__ = "apps"
    team: Mapped[str] = mapped_column(sa.String(200), sa.ForeignKey("teams.name"), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    cost_centre: Mapped[str | None] = mapped_column(sa.String(200))  # None: the team's


class DeploymentRow(Base):
    """One place a model runs; ``spec`` is the declarative entry minus its price (prices are versioned rows)."""

    __tablename__ = "deployments"
    id: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    spec: Mapped[dict]


class AliasRow(Base):
    """Deployments, weights (on deployments), needs, fallback alias, timeouts."""

    __tablename__ = "aliases"
    name: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    spec: Mapped[dict]


class PriceVersionRow(Base):
    """A price version: inserted once with its ``valid_from``, never edited (a correction is a new version)."""

    __tablename__ = "price_versions"
    version: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    valid_from: Mapped[datetime]
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(sa.String(200))


class PriceRow(Base):
    """Per deployment and version: decimal strings per 1M tokens (never floats)."""

    __tablename__ = "prices"
    version: Mapped[int] = mapped_column(sa.ForeignKey("price_versions.version"), primary_key=True)
    deployment: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    currency: Mapped[str] = mapped_column(sa.String(3))
    input: Mapped[str] = mapped_column(sa.String(40))
    output: Mapped[str] = mapped_column(sa.String(40))
    cached_input: Mapped[str | None] = mapped_column(sa.String(40))
    cache_write: Mapped[str | None] = mapped_column(sa.String(40))
    reasoning: Mapped[str | None] = mapped_column(sa.String(40))
    cache_write_1h: Mapped[str | None] = mapped_column(sa.String(40))  # one-hour cache writes (0008)
    gpu_hour: Mapped[str | None] = mapped_column(sa.String(40))  # a fleet's price per GPU-hour (0009) ...
    gpus: Mapped[int | None] = mapped_column(sa.Integer)  # ... and how many GPUs it pays for
    reserved_hour: Mapped[str | None] = mapped_column(sa.String(40))  # provisioned capacity (0010): per hour ...
    reserved_month: Mapped[str | None] = mapped_column(sa.String(40))  # ... or per UTC month ...
    reserved_team: Mapped[str | None] = mapped_column(sa.String(200))  # ... charged flat to this team


class FxRateRow(Base):
    __tablename__ = "fx_rates"
    from_ccy: Mapped[str] = mapped_column(sa.String(3), primary_key=True)
    to_ccy: Mapped[str] = mapped_column(sa.String(3), primary_key=True)
    month: Mapped[str] = mapped_column(sa.String(7), primary_key=True)
    rate: Mapped[str] = mapped_column(sa.String(40))


class BudgetRow(Base):
    """A scope's monthly limit; ``env`` (any/prod/dev) says which keys may spend it."""

    __tablename__ = "budgets"
    scope: Mapped[str] = mapped_column(sa.String(300), primary_key=True)
    monthly_limit: Mapped[str | None] = mapped_column(sa.String(40))
    soft_pct: Mapped[int] = mapped_column(default=80)
    downgrade_alias: Mapped[str | None] = mapped_column(sa.String(200))
    max_calls: Mapped[int | None]
    env: Mapped[str] = mapped_column(sa.String(8), default="any")
    spend_per_hour: Mapped[str | None] = mapped_column(sa.String(40))  # decimal string: the fast spend bucket


class PolicyRow(Base):
    """Named policy documents: ``currency``, ``budgets`` (zone, caps, runs), ``rate_limits``."""

    __tablename__ = "policies"
    name: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    spec: Mapped[dict]


class KeyRow(Base):
    """A virtual key: hash and display id only; the plaintext was shown once."""

    __tablename__ = "keys"
    id: Mapped[str] = mapped_column(sa.String(100), primary_key=True)  # display prefix, e.g. fb-dev-1a2b3c
    hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    team: Mapped[str] = mapped_column(sa.String(200))
    app: Mapped[str] = mapped_column(sa.String(200))
    env: Mapped[str] = mapped_column(sa.String(8))  # dev | prod
    aliases: Mapped[list]
    data_class_ceiling: Mapped[str] = mapped_column(sa.String(20))
    default_data_class: Mapped[str] = mapped_column(sa.String(20))
    rpm: Mapped[int | None]
    input_tpm: Mapped[int | None]
    output_tpm: Mapped[int | None]
    regions: Mapped[list | None]  # residency pin: region names (NULL / empty: any region)
    deployments: Mapped[list | None]  # allow-listed deployment ids (NULL / empty: any of its aliases')
    expires_at: Mapped[float | None] = mapped_column(sa.Float)  # unix seconds UTC
    revoked_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(sa.String(200))
    rotated_from: Mapped[str | None] = mapped_column(sa.String(100))


class AdminTokenRow(Base):
    __tablename__ = "admin_tokens"
    name: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    role: Mapped[str] = mapped_column(sa.String(20))  # admin | finance | auditor
    hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class AuditRow(Base):
    """Who did what, the object before and after, when; rejected and denied calls too."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(sa.String(200))
    action: Mapped[str] = mapped_column(sa.String(100))
    object: Mapped[str] = mapped_column(sa.String(300))
    outcome: Mapped[str] = mapped_column(sa.String(20))  # ok | rejected | denied | pending
    before: Mapped[dict | None]
    after: Mapped[dict | None]
    snapshot_version: Mapped[int | None]
    approved_by: Mapped[str | None] = mapped_column(sa.String(200), default=None)  # a two-person change's second


class PendingChangeRow(Base):
    """An admin change waiting for a second person (``proxy.control.approvals``); never holds a secret."""

    __tablename__ = "pending_changes"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(sa.String(100))
    object: Mapped[str] = mapped_column(sa.String(300))
    params: Mapped[dict]
    reason: Mapped[str] = mapped_column(sa.String(300))
    proposed_by: Mapped[str] = mapped_column(sa.String(200))
    proposed_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(sa.String(20))  # pending | approving | approved | failed | rejected | expired
    decided_by: Mapped[str | None] = mapped_column(sa.String(200))
    decided_at: Mapped[datetime | None]
    outcome: Mapped[dict | None]


class RolloutRow(Base):
    """A config canary (``proxy.control.rollout``): the version the rest keeps, its stages and where it stands."""

    __tablename__ = "rollouts"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    baseline: Mapped[int]  # the config version the rest is served
    candidate: Mapped[int | None]  # the head version when it started running (later versions are the candidate too)
    stages: Mapped[list]  # percentages, rising, the last 100
    stage: Mapped[int]
    window_s: Mapped[float] = mapped_column(sa.Float)
    thresholds: Mapped[dict]
    pods: Mapped[list]  # a slice of named pods ([]: a share of requests)
    state: Mapped[str] = mapped_column(sa.String(20))  # armed | running | paused | completed | rolled_back
    stage_since: Mapped[datetime | None]
    reason: Mapped[str | None] = mapped_column(sa.String(500))
    reverted_to: Mapped[int | None]  # a rollback's revert: the version that publishes the baseline's routing again
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(sa.String(200))
    updated_at: Mapped[datetime]


class RolloutStatRow(Base):
    """One process's figures for one arm of one stage of a rollout (added to as it serves)."""

    __tablename__ = "rollout_stats"
    rollout_id: Mapped[int] = mapped_column(sa.ForeignKey("rollouts.id"), primary_key=True)
    stage: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    pod: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    arm: Mapped[str] = mapped_column(sa.String(20), primary_key=True)  # candidate | baseline
    stats: Mapped[dict]  # ``ArmStats.to_dict``
    updated_at: Mapped[datetime]
