"""Config canaries in the config database: the rollouts, the figures every process adds, and the steps.

Every mode has the config database (SQLite beside an embedded pod or ``--workers``; PostgreSQL or SQLite for a
cluster), so it is where the processes meet: each adds its own figures per stage and arm
(``rollout_stats``), any of them may take the next step, and a step is a compare-and-set on the rollout's state
and stage, so exactly one process takes it and audits it. A rollback also publishes the baseline's routing
again as a new config version (``revert``), so pods starting later serve it too. Blocking calls: run them in a
thread.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proxy.control.db.models import AliasRow, DeploymentRow, PolicyRow, RolloutRow, RolloutStatRow
from proxy.control.db.store import ConfigDB
from proxy.control.errors import ConfigRejected, ControlConflict, ControlNotFound
from proxy.control.problems import Problems, Reader
from proxy.control.rollout import OPEN, ArmStats, Rollout, Thresholds

ARMS = ("candidate", "baseline")


def thresholds_record(t: Thresholds) -> dict[str, Any]:
    """A rollout's thresholds as the database keeps them (decimals as strings)."""
    return {"min_requests": t.min_requests, "max_error_pct_points": str(t.max_error_pct_points),
            "max_429_pct_points": str(t.max_429_pct_points), "max_p95_ratio": str(t.max_p95_ratio),
            "min_p95_delta_ms": t.min_p95_delta_ms, "max_cost_ratio": str(t.max_cost_ratio)}


def rollout_of(row: RolloutRow) -> Rollout:
    t = row.thresholds
    thresholds = Thresholds(int(t["min_requests"]), Decimal(t["max_error_pct_points"]),
                            Decimal(t["max_429_pct_points"]), Decimal(t["max_p95_ratio"]),
                            int(t.get("min_p95_delta_ms", Thresholds.min_p95_delta_ms)), Decimal(t["max_cost_ratio"]))
    since = row.stage_since
    if since is not None and since.tzinfo is None:  # SQLite hands back naive UTC
        since = since.replace(tzinfo=timezone.utc)
    return Rollout(row.id, row.baseline, tuple(row.stages), row.stage, row.window_s, thresholds, row.state, since,
                   tuple(row.pods), row.reason, row.candidate)


def read_start(body: Any) -> tuple[tuple[int, ...], float, Thresholds, tuple[str, ...]]:
    """A start request's stages, window, thresholds and pods; ``ConfigRejected`` names every problem."""
    problems = Problems()
    r = Reader(body if isinstance(body, dict) else {}, "", problems)
    if not isinstance(body, dict):
        problems.add("body", "must be a JSON object")
    stages = body.get("stages", [5, 25, 100]) if isinstance(body, dict) else []
    if (not isinstance(stages, list) or not stages or any(isinstance(s, bool) or not isinstance(s, int)
                                                         for s in stages)
            or any(not 0 < s <= 100 for s in stages) or stages != sorted(set(stages)) or stages[-1] != 100):
        problems.add("stages", "must be rising whole percentages in 1..100 ending at 100, like [5, 25, 100]")
    r.skip("stages")
    window = r.number("window_s", 300.0)
    if window is not None and window <= 0:
        problems.add("window_s", "must be > 0 (seconds each stage is watched)")
    pods = tuple(r.str_list("pods", []))
    d = Thresholds()
    t = r.child("thresholds")
    thresholds = Thresholds(t.int("min_requests", d.min_requests, 1),
                            t.decimal("max_error_pct_points", d.max_error_pct_points),
                            t.decimal("max_429_pct_points", d.max_429_pct_points),
                            t.decimal("max_p95_ratio", d.max_p95_ratio), t.int("min_p95_delta_ms", d.min_p95_delta_ms, 0),
                            t.decimal("max_cost_ratio", d.max_cost_ratio))
    t.reject_unknown()
    r.reject_unknown()
    if problems.items:
        raise ConfigRejected(problems.items, "rollout")
    return tuple(stages), float(window), thresholds, pods


def start(db: ConfigDB, actor: str, body: Any) -> dict[str, Any]:
    """Arm a rollout: the next config version published is served to its slice first (one open at a time)."""
    stages, window, t, pods = read_start(body)
    now = db.now()
    head = db.head()
    if head is None:
        raise ControlConflict("Nothing is published yet: there is no version to keep as the baseline.")
    with Session(db.engine) as s, s.begin():
        open_one = s.scalars(sa.select(RolloutRow).where(RolloutRow.state.in_(OPEN))).first()
        if open_one is not None:
            raise ControlConflict(f"Rollout {open_one.id} is {open_one.state}; finish, roll back or wait for it "
                                  "before starting another.")
        row = RolloutRow(baseline=head[0], candidate=None, stages=list(stages), stage=0, window_s=window,
                         thresholds=thresholds_record(t),
                         pods=list(pods), state="armed", stage_since=None, reason=None, created_at=now,
                         created_by=actor, updated_at=now)
        s.add(row)
        s.flush()
        view = row_view(row)
    db.record(actor, "rollout.arm", f"rollout:{view['id']}", "ok", after=view)
    return view


def row_view(row: RolloutRow) -> dict[str, Any]:
    return {"id": row.id, "baseline": row.baseline, "candidate": row.candidate, "stages": list(row.stages),
            "stage": row.stage, "pct": row.stages[row.stage], "window_s": row.window_s, "thresholds": row.thresholds,
            "pods": list(row.pods), "state": row.state, "reason": row.reason, "reverted_to": row.reverted_to,
            "stage_since": row.stage_since.isoformat() if row.stage_since else None,
            "created_by": row.created_by, "created_at": row.created_at.isoformat()}


def latest(db: ConfigDB) -> tuple[Rollout, int | None] | None:
    """The newest rollout and, once rolled back, the version that reverted it (None: not yet published)."""
    with db.read() as s:
        row = s.scalars(sa.select(RolloutRow).order_by(RolloutRow.id.desc()).limit(1)).first()
        return (rollout_of(row), row.reverted_to) if row is not None else None


def listing(db: ConfigDB, limit: int = 20) -> list[dict[str, Any]]:
    """The newest rollouts, each with its current stage's figures per arm."""
    with db.read() as s:
        rows = list(s.scalars(sa.select(RolloutRow).order_by(RolloutRow.id.desc()).limit(limit)))
        out = []
        for row in rows:
            arms = _stage_stats(s, row.id, row.stage)
            out.append({**row_view(row), "figures": {arm: arms[arm].summary() for arm in ARMS}})
        return out


def add_stats(db: ConfigDB, rollout_id: int, stage: int, pod: str, deltas: dict[str, ArmStats]) -> None:
    """Add one process's new figures to its rows (one per arm) for the stage."""
    now = db.now()
    with Session(db.engine) as s, s.begin():
        for arm, delta in deltas.items():
            row = s.get(RolloutStatRow, (rollout_id, stage, pod, arm), with_for_update=True)
            if row is None:
                s.add(RolloutStatRow(rollout_id=rollout_id, stage=stage, pod=pod, arm=arm, stats=delta.to_dict(),
                                     updated_at=now))
                continue
            total = ArmStats.from_dict(row.stats)
            total.add(delta)
            row.stats, row.updated_at = total.to_dict(), now


def stage_stats(db: ConfigDB, rollout_id: int, stage: int) -> dict[str, ArmStats]:
    with db.read() as s:
        return _stage_stats(s, rollout_id, stage)


def _stage_stats(s: Session, rollout_id: int, stage: int) -> dict[str, ArmStats]:
    out = {arm: ArmStats() for arm in ARMS}
    for row in s.scalars(sa.select(RolloutStatRow).where(RolloutStatRow.rollout_id == rollout_id,
                                                         RolloutStatRow.stage == stage)):
        out[row.arm].add(ArmStats.from_dict(row.stats))
    return out


def step(db: ConfigDB, before: Rollout, after: Rollout, actor: str, action: str, *,
         candidate: int | None = None) -> bool:
    """Move ``before`` to ``after`` if nobody moved it first (state and stage unchanged); audited when taken."""
    with Session(db.engine) as s, s.begin():
        values: dict[str, Any] = {"state": after.state, "stage": after.stage, "stage_since": after.stage_since,
                                  "reason": after.reason, "updated_at": db.now()}
        if candidate is not None:
            values["candidate"] = candidate
        done = s.execute(sa.update(RolloutRow).where(
            RolloutRow.id == before.id, RolloutRow.state == before.state, RolloutRow.stage == before.stage)
            .values(**values))
        if done.rowcount != 1:
            return False
    db.record(actor, f"rollout.{action}", f"rollout:{before.id}", "ok",
              before={"state": before.state, "pct": before.pct},
              after={"state": after.state, "pct": after.pct, "reason": after.reason})
    return True


def by_hand(db: ConfigDB, actor: str, rollout_id: int, action: str, now: datetime) -> tuple[Rollout, Rollout]:
    """An operator's pause, resume, widen or rollback: (before, after); the caller publishes what follows."""
    with db.read() as s:
        row = s.get(RolloutRow, rollout_id)
        if row is None:
            raise ControlNotFound(f"No rollout {rollout_id}.")
        r = rollout_of(row)
    allowed = {"pause": ("running",), "resume": ("paused",), "widen": ("running", "paused"),
               "rollback": ("armed", "running", "paused")}
    if action not in allowed:
        raise ConfigRejected([f"action: must be one of {', '.join(allowed)}"], "rollout")
    if r.state not in allowed[action]:
        raise ControlConflict(f"Rollout {rollout_id} is {r.state}: it cannot {action}.")
    reason = f"{action} by {actor}"
    after = {"pause": replace(r, state="paused", reason=reason), "resume": replace(r, state="running", reason=reason),
             "rollback": replace(r, state="rolled_back", reason=reason)}.get(action)
    if action == "widen":
        last = r.stage + 2 >= len(r.stages)  # widening to everyone completes it
        after = replace(r, state="completed", reason=reason) if last else replace(
            r, stage=r.stage + 1, stage_since=now, reason=reason)
    assert after is not None
    if not step(db, r, after, actor, action):
        raise ControlConflict(f"Rollout {rollout_id} moved meanwhile; look again.")
    return r, after


def revert(db: ConfigDB, rollout: Rollout, actor: str) -> int:
    """Publish the baseline's routing (``CANARIED``) again over today's rows: the new config version."""
    base = db.document(rollout.baseline).get("control") or {}

    def mutate(s: Session) -> tuple[Any, Any]:
        want = {d["id"]: {k: v for k, v in d.items() if k != "id"} for d in base.get("deployments") or []}
        _replace_rows(s, DeploymentRow, "id", want)
        aliases = {a["name"]: {k: v for k, v in a.items() if k != "name"} for a in base.get("aliases") or []}
        _replace_rows(s, AliasRow, "name", aliases)
        for name in ("rate_limits", "privacy"):
            row = s.get(PolicyRow, name)
            if name in base:
                if row is None:
                    s.add(PolicyRow(name=name, spec=base[name]))
                else:
                    row.spec = base[name]
            elif row is not None:
                s.delete(row)
        return None, {"reverted_to": rollout.baseline}

    version = db.change(actor, "rollout.revert", f"rollout:{rollout.id}", mutate).version
    with Session(db.engine) as s, s.begin():
        s.execute(sa.update(RolloutRow).where(RolloutRow.id == rollout.id).values(reverted_to=version))
    return version


def _replace_rows(s: Session, model: Any, key: str, want: dict[str, dict]) -> None:
    have = {getattr(r, key): r for r in s.scalars(sa.select(model))}
    for name, row in have.items():
        if name not in want:
            s.delete(row)
        elif row.spec != want[name]:
            row.spec = want[name]
    for name, spec in want.items():
        if name not in have:
            s.add(model(**{key: name, "spec": spec}))
