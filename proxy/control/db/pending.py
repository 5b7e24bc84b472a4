"""Pending changes in the config database (names, roles, limits and specs: never a secret's value): proposed by one admin, approved (or rejected) by another.

Each operation is one transaction and writes its audit row in it. ``claim`` moves a pending row to
``approving`` under a row lock before the change runs, so two approvers racing run it once; ``settle`` then
records ``approved`` (with the change's after-view) or ``failed`` (with the problems). Statuses:
``pending`` -> ``approving`` -> ``approved`` | ``failed``; ``pending`` -> ``rejected``; a pending row past its
``expires_at`` is ``expired`` when next touched.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proxy.control.db.models import AuditRow, PendingChangeRow
from proxy.control.db.store import ConfigDB, _iso, _jsonable
from proxy.control.errors import ControlConflict, ControlNotFound
from proxy.errors import PermissionDenied


class SamePerson(PermissionDenied):
    code = "two_people_required"


def view(r: PendingChangeRow) -> dict[str, Any]:
    return {"object": "change", "id": r.id, "action": r.action, "target": r.object, "params": dict(r.params),
            "reason": r.reason, "status": r.status, "proposed_by": r.proposed_by, "proposed_at": _iso(r.proposed_at),
            "expires_at": _iso(r.expires_at), "decided_by": r.decided_by, "decided_at": _iso(r.decided_at),
            "outcome": r.outcome}


def propose(db: ConfigDB, actor: str, action: str, obj: str, params: Mapping[str, Any], reason: str,
            ttl_s: int) -> dict[str, Any]:
    now = db.now()
    with db._guard(), Session(db.engine) as s, s.begin():
        row = PendingChangeRow(action=action, object=obj, params=_jsonable(dict(params)), reason=reason[:300],
                               proposed_by=actor, proposed_at=now, expires_at=now + timedelta(seconds=ttl_s),
                               status="pending")
        s.add(row)
        s.flush()
        s.add(AuditRow(at=now, actor=actor, action=action, object=obj, outcome="pending", before=None,
                       after={"change": row.id, "reason": row.reason}, snapshot_version=None))
        return view(row)


def _locked(s: Session, change_id: int) -> PendingChangeRow:
    row = s.scalars(sa.select(PendingChangeRow).where(PendingChangeRow.id == change_id).with_for_update()).first()
    if row is None:
        raise ControlNotFound(f"No pending change {change_id}.")
    return row


def _expired(row: PendingChangeRow, now: datetime) -> bool:
    at = row.expires_at if row.expires_at.tzinfo else row.expires_at.replace(tzinfo=timezone.utc)
    return row.status == "pending" and at <= now


def claim(db: ConfigDB, actor: str, change_id: int) -> dict[str, Any]:
    """The pending change, now ``approving`` by ``actor``; refused for its proposer or a decided change."""
    now = db.now()
    with db._guard(), Session(db.engine) as s, s.begin():
        row = _locked(s, change_id)
        if _expired(row, now):
            row.status = "expired"
        if row.status != "pending":
            raise ControlConflict(f"Change {change_id} is {row.status}, not pending.")
        if row.proposed_by == actor:
            raise SamePerson(f"Change {change_id} was proposed by {actor}; a different person must approve it.")
        row.status, row.decided_by, row.decided_at = "approving", actor, now
        return view(row)


def settle(db: ConfigDB, change_id: int, ok: bool, outcome: Mapping[str, Any]) -> dict[str, Any]:
    with db._guard(), Session(db.engine) as s, s.begin():
        row = _locked(s, change_id)
        row.status, row.outcome = ("approved" if ok else "failed"), _jsonable(dict(outcome))
        if not ok:
            s.add(AuditRow(at=db.now(), actor=row.proposed_by, action=row.action, object=row.object,
                           outcome="rejected", before=None, after=row.outcome, snapshot_version=None,
                           approved_by=row.decided_by))
        return view(row)


def reject(db: ConfigDB, actor: str, change_id: int) -> dict[str, Any]:
    now = db.now()
    with db._guard(), Session(db.engine) as s, s.begin():
        row = _locked(s, change_id)
        if _expired(row, now):
            row.status = "expired"
        if row.status != "pending":
            raise ControlConflict(f"Change {change_id} is {row.status}, not pending.")
        row.status, row.decided_by, row.decided_at = "rejected", actor, now
        s.add(AuditRow(at=now, actor=actor, action="changes.reject", object=row.object, outcome="ok",
                       before={"change": row.id, "status": "pending"}, after={"change": row.id, "status": "rejected"},
                       snapshot_version=None))
        return view(row)


def found(db: ConfigDB, change_id: int) -> dict[str, Any]:
    with db.read() as s:
        row = s.get(PendingChangeRow, change_id)
        if row is None:
            raise ControlNotFound(f"No pending change {change_id}.")
        return view(row)


def listed(db: ConfigDB, status: str | None, limit: int = 100) -> list[dict[str, Any]]:
    now = db.now()
    with db.read() as s:
        q = sa.select(PendingChangeRow).order_by(PendingChangeRow.id.desc()).limit(limit)
        rows = [view(r) for r in s.scalars(q)]
    for r in rows:  # shown as expired before anyone touches them
        if r["status"] == "pending" and r["expires_at"] and datetime.fromisoformat(r["expires_at"]) <= now:
            r["status"] = "expired"
    return [r for r in rows if status is None or r["status"] == status]
