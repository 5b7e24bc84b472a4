"""The config database as the control plane's store: one unit of work per admin change.

Every change runs in one transaction that locks the head row (so writers
from several pods serialise), applies the mutation, rebuilds the snapshot
document from the rows, compiles and validates it (every problem at once),
and only then writes the audit row, the numbered snapshot and the new head.
A rejected change rolls back and leaves one audit row saying why. A change
that leaves the document's content hash as it was publishes nothing.

Pods learn about new snapshots by polling ``head()`` (a primary-key read).
Any database failure surfaces as ``ControlUnavailable`` (503).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proxy.control.db import migrate
from proxy.control.db.engine import READONLY, make_engine, migration_lock
from proxy.control.db.models import (
    AdminTokenRow,
    AliasRow,
    AppRow,
    AuditRow,
    BudgetRow,
    BusinessUnit,
    ConfigHead,
    DeploymentRow,
    FxRateRow,
    KeyRow,
    PolicyRow,
    PriceRow,
    PriceVersionRow,
    SnapshotRow,
    TeamRow,
)
from proxy.control.document import compile_document, content_hash
from proxy.control.errors import ConfigRejected, ControlUnavailable
from proxy.control.problems import ConfigError, Problems
from proxy.control.validate import check_snapshot

log = logging.getLogger("farebox.control")

Mutation = Callable[[Session], tuple[Any, Any]]  # returns (before, after) for the audit log


@dataclass(frozen=True)
class Published:
    version: int  # the snapshot version live after the change (unchanged if nothing changed)
    document: dict[str, Any]
    before: Any
    after: Any
    changed: bool


class ConfigDB:
    def __init__(self, url: str, *, clock: Callable[[], float] = time.time, connect_timeout_s: float = 2.0) -> None:
        self.url = url
        self.engine = make_engine(url, connect_timeout_s)
        self.clock = clock

    def close(self) -> None:
        self.engine.dispose()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), timezone.utc)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            log.warning("config database unreachable: %s", type(exc.orig or exc).__name__)
            raise ControlUnavailable(
                "The config database is unreachable; admin changes are refused until it is back. "
                "The gateway keeps serving its last good snapshot."
            ) from None
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise ControlUnavailable("The config database connection was lost; try again.") from None
            raise

    # -- schema -------------------------------------------------------------------------------

    def migrate(self) -> None:
        with self._guard(), migration_lock(self.engine):
            migrate.ensure_head(self.engine)

    def seed_once(self, seed: Mutation, actor: str) -> Published | None:
        """Run ``seed`` (e.g. apply farebox.yaml) only when nothing was ever published."""
        with self._guard(), migration_lock(self.engine):
            if self.head() is not None:
                return None
            return self.change(actor, "config.bootstrap", "config", seed)

    # -- reads --------------------------------------------------------------------------------

    def head(self) -> tuple[int, str] | None:
        """The published (version, content hash): the cheap poll every pod runs."""
        with self._guard(), self.engine.connect().execution_options(**{READONLY: True}) as conn:
            row = conn.execute(sa.select(ConfigHead.version, ConfigHead.content_hash).where(ConfigHead.id == 1)).first()
            return (row[0], row[1]) if row else None

    def document(self, version: int) -> dict[str, Any]:
        with self._guard(), self.read() as s:
            row = s.get(SnapshotRow, version)
            if row is None:
                raise LookupError(f"snapshot {version} is not in the database")
            return dict(row.document)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._guard(), Session(self.engine.execution_options(**{READONLY: True})) as s:
            yield s

    def audit(self, limit: int = 100, object_prefix: str | None = None) -> list[dict[str, Any]]:
        with self.read() as s:
            q = sa.select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
            if object_prefix:
                q = q.where(AuditRow.object.startswith(object_prefix))
            return [audit_view(r) for r in s.scalars(q)]

    # -- writes -------------------------------------------------------------------------------

    def change(self, actor: str, action: str, obj: str, mutate: Mutation,
               extra_checks: Callable[[Session, Any], None] | None = None, *, approved_by: str | None = None,
               dry_run: bool = False) -> Published:
        """Apply, validate, audit and publish one change atomically; ConfigRejected lists every problem.

        ``approved_by``: the second person of a two-person change, audited beside ``actor``. ``dry_run``:
        validate only (a proposal), then roll back; nothing is published or audited but a rejection."""
        try:
            with self._guard(), Session(self.engine) as s, s.begin():
                head = s.scalars(sa.select(ConfigHead).where(ConfigHead.id == 1).with_for_update()).first()
                before, after = mutate(s)
                s.flush()
                doc = build_document(s)
                problems = Problems()
                try:
                    snap = compile_document(doc, 0, problems)
                    check_snapshot(snap, self.now(), problems)
                except ConfigError:
                    pass
                if extra_checks is not None:
                    extra_checks(s, problems)
                if problems.items:
                    raise ConfigRejected(problems.items)
                if dry_run:
                    raise _Checked(Published(0, doc, before, after, False))
                digest = content_hash(doc)
                version = head.version if head else 0
                changed = head is None or head.content_hash != digest
                if changed:
                    version += 1
                    now = self.now()
                    s.add(SnapshotRow(version=version, content_hash=digest, document=doc, created_at=now, actor=actor))
                    if head is None:
                        s.add(ConfigHead(id=1, version=version, content_hash=digest, updated_at=now))
                    else:
                        head.version, head.content_hash, head.updated_at = version, digest, now
                if changed or before is not None or after is not None:  # (None, None): a no-op not worth a row
                    s.add(AuditRow(at=self.now(), actor=actor, action=action, object=obj, outcome="ok",
                                   before=_jsonable(before), after=_jsonable(after),
                                   snapshot_version=version if changed else None, approved_by=approved_by))
            return Published(version, doc, before, after, changed)
        except _Checked as checked:  # the dry run's transaction was rolled back
            return checked.published
        except ConfigRejected as exc:
            self.record(actor, action, obj, "rejected", after={"problems": exc.problems})
            raise

    def record(self, actor: str, action: str, obj: str, outcome: str, before: Any = None, after: Any = None) -> None:
        """An audit row on its own (a rejected or denied call); best effort if the database is down."""
        try:
            with self._guard(), Session(self.engine) as s, s.begin():
                s.add(AuditRow(at=self.now(), actor=actor, action=action, object=obj, outcome=outcome,
                               before=_jsonable(before), after=_jsonable(after), snapshot_version=None))
        except ControlUnavailable:
            log.warning("could not audit %s %s by %s (%s): database down", action, obj, actor, outcome)

    def record_access(self, actor: str, action: str, obj: str) -> None:
        """An audit row for a read that must not happen unaudited: raises ``ControlUnavailable`` if not written."""
        with self._guard(), Session(self.engine) as s, s.begin():
            s.add(AuditRow(at=self.now(), actor=actor, action=action, object=obj, outcome="ok", before=None,
                           after=None, snapshot_version=None))


def audit_view(r: AuditRow) -> dict[str, Any]:
    return {"id": r.id, "at": _iso(r.at), "actor": r.actor, "action": r.action, "object": r.object,
            "outcome": r.outcome, "before": r.before, "after": r.after, "snapshot_version": r.snapshot_version,
            "approved_by": r.approved_by}


class _Checked(Exception):
    """Raised inside a dry run's transaction to roll it back, carrying what the change would publish."""

    def __init__(self, published: Published) -> None:
        super().__init__("dry run")
        self.published = published


def _iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    if at.tzinfo is None:  # SQLite hands back naive datetimes; we only ever store UTC
        at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).isoformat()


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


# -- rows -> snapshot document ------------------------------------------------------------------


def policy(s: Session, name: str) -> dict[str, Any]:
    row = s.get(PolicyRow, name)
    return dict(row.spec) if row else {}


def build_document(s: Session) -> dict[str, Any]:
    """The snapshot document for the rows as they are in this transaction."""
    control: dict[str, Any] = {}
    currency = policy(s, "currency").get("value")
    if currency:
        control["currency"] = currency
    control["fx"] = [{"from": r.from_ccy, "to": r.to_ccy, "month": r.month, "rate": r.rate}
                     for r in s.scalars(sa.select(FxRateRow).order_by(FxRateRow.from_ccy, FxRateRow.to_ccy, FxRateRow.month))]
    control["business_units"] = list(s.scalars(sa.select(BusinessUnit.name).order_by(BusinessUnit.name)))
    control["teams"] = [_drop_none({"name": t.name, "business_unit": t.business_unit, "cost_centre": t.cost_centre,
                                    "body_log": True if t.body_log else None})
                        for t in s.scalars(sa.select(TeamRow).order_by(TeamRow.name))]
    control["apps"] = [_drop_none({"name": a.name, "team": a.team, "cost_centre": a.cost_centre})
                       for a in s.scalars(sa.select(AppRow).order_by(AppRow.team, AppRow.name))]
    control["deployments"] = [{"id": d.id, **d.spec} for d in s.scalars(sa.select(DeploymentRow).order_by(DeploymentRow.id))]
    control["aliases"] = [{"name": a.name, **a.spec} for a in s.scalars(sa.select(AliasRow).order_by(AliasRow.name))]
    budgets = policy(s, "budgets")
    budgets["scopes"] = [budget_record(b) for b in s.scalars(sa.select(BudgetRow).order_by(BudgetRow.scope))]
    control["budgets"] = budgets
    control["rate_limits"] = policy(s, "rate_limits")
    privacy = policy(s, "privacy")
    if privacy:  # absent (a database seeded before the privacy section was kept): the default policy
        control["privacy"] = privacy
    prices = []
    rows = s.scalars(sa.select(PriceRow).order_by(PriceRow.version, PriceRow.deployment)).all()
    for v in s.scalars(sa.select(PriceVersionRow).order_by(PriceVersionRow.version)):
        table = {p.deployment: price_record(p) for p in rows if p.version == v.version}
        prices.append({"version": v.version, "valid_from": _iso(v.valid_from), "prices": table})
    keys = [key_record(k) for k in s.scalars(sa.select(KeyRow).order_by(KeyRow.id))]
    tokens = [{"name": t.name, "role": t.role, "hash": t.hash}
              for t in s.scalars(sa.select(AdminTokenRow).where(AdminTokenRow.revoked_at.is_(None)).order_by(AdminTokenRow.name))]
    return {"control": control, "prices": prices, "keys": keys, "admin_tokens": tokens}


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def budget_record(b: BudgetRow) -> dict[str, Any]:
    rec = _drop_none({"scope": b.scope, "monthly_limit": b.monthly_limit, "soft_pct": b.soft_pct,
                      "downgrade_alias": b.downgrade_alias, "max_calls": b.max_calls,
                      "spend_per_hour": b.spend_per_hour})
    if b.env != "any":
        rec["env"] = b.env
    return rec


def price_record(p: PriceRow) -> dict[str, Any]:
    return _drop_none({"currency": p.currency, "input": p.input, "output": p.output, "cached_input": p.cached_input,
                       "cache_write": p.cache_write, "reasoning": p.reasoning, "cache_write_1h": p.cache_write_1h,
                       "gpu_hour": p.gpu_hour, "gpus": p.gpus, "reserved_hour": p.reserved_hour,
                       "reserved_month": p.reserved_month, "reserved_team": p.reserved_team})


def key_record(k: KeyRow) -> dict[str, Any]:
    """What the snapshot holds of a key: its hash, never the key."""
    return _drop_none({
        "id": k.id, "hash": k.hash, "team": k.team, "app": k.app, "env": k.env, "aliases": list(k.aliases),
        "data_class_ceiling": k.data_class_ceiling, "default_data_class": k.default_data_class,
        "rpm": k.rpm, "input_tpm": k.input_tpm, "output_tpm": k.output_tpm, "expires_at": k.expires_at,
        "revoked": True if k.revoked_at is not None else None,
        "regions": list(k.regions) if k.regions else None, "deployments": list(k.deployments) if k.deployments else None,
    })
