"""A process's part in config canaries (``proxy.control.rollout``): which snapshot a request is served, its
figures, and the next step of the rollout when this process is the one to take it.

Every ``interval_s`` the runner reads the newest rollout from the config database (``rollout_store``), and:

* starts an armed one once a version newer than its baseline is live here (compare-and-set: one process);
* gives the pod what the middleware needs while one is open and a newer version is live: the rollout (the
  slice; an armed one has none yet: every request on the baseline) and the baseline's snapshot (the head's
  document with the baseline's routing, compiled once per head version; ``prepare`` does it before the follower
  swaps a new version in, so not one request outside the slice sees it early). A rolled-back rollout keeps
  every request on the baseline until its revert is published; then, like a completed one, nothing;
* adds the figures of the requests it served since the last tick to the database, per stage and arm;
* reads the stage's figures from every process and, when ``decide`` says so, widens, completes or rolls back
  (compare-and-set: one process), then audits it (``rollout_store.step``), emits ``config.rollout``, counts it
  in ``farebox_config_rollout_steps_total`` and, on a rollback, publishes the revert (an alert follows from the
  event where alerts are on); a step another process or the CLI took is emitted by every process that notices
  it, under the same event id (``notice``).

The database down or a bug in a tick is logged; the pod keeps serving what it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ledger.notices import ConfigRollout
from proxy.control import rollout_store as store
from proxy.control.db.store import ConfigDB
from proxy.control.document import compile_document
from proxy.control.rollout import ArmStats, Decision, Rollout, advanced, baseline_document, decide, step_name

log = logging.getLogger("farebox.rollout")
ACTOR = "farebox-rollout"  # who the audit log names for the steps taken by thresholds
QUIET_FAILURES = 5  # consecutive failed ticks before the runner says so


class RolloutRunner:
    def __init__(self, db: ConfigDB, pod: Any, process: str, emit: Callable[[Any], object], metrics: Any, *,
                 interval_s: float = 1.0, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.db = db
        self.pod = pod  # proxy.runtime.PodState: current, baseline, rollout
        self.process = process  # "{pod id}:{pid}": this process's rows of figures
        self.emit = emit
        self.metrics = metrics
        self.interval_s = interval_s
        self.now = now
        self.pending: dict[tuple[int, int], dict[str, ArmStats]] = {}  # (rollout, stage) -> arm -> new figures
        self._compiled: tuple[tuple[int, int], Any] | None = None  # ((baseline, head), baseline snapshot)
        self._seen: dict[int, Rollout] = {}  # each rollout as this process last saw it (``notice``)

    def record(self, rollout: Rollout, arm: str, status: int, latency_s: float, cost_micro: int) -> None:
        """One request's figures, for the next flush (on the event loop; no I/O)."""
        arms = self.pending.setdefault((rollout.id, rollout.stage), {})
        arms.setdefault(arm, ArmStats()).record(status, latency_s * 1000, cost_micro)

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await self.tick()
                if failures >= QUIET_FAILURES:
                    log.info("config rollouts followed again")
                failures = 0
            except Exception:  # the database down, or a bug: the pod keeps serving what it has
                failures += 1
                if failures == QUIET_FAILURES:  # said once, and only when it lasts (a busy SQLite file is not news)
                    log.exception("config rollout ticks failing for %d s; retrying every %g s",
                                  int(failures * self.interval_s), self.interval_s)
            await asyncio.sleep(self.interval_s)

    async def prepare(self, version: int, doc: dict[str, Any]) -> None:
        """Before the follower swaps ``version`` in: with a rollout open, the pod gets the baseline's snapshot over
        that document first, so no request outside the slice is served the new version (``SnapshotFollower``)."""
        got = await asyncio.to_thread(store.latest, self.db)
        if got is None or got[0].state not in ("armed", "running", "paused") or version <= got[0].baseline:
            return
        r = got[0]
        snap = await asyncio.to_thread(self._baseline_snapshot, r.baseline, doc)
        self._compiled = ((r.baseline, version), snap)
        self.pod.baseline, self.pod.rollout = snap, r

    async def tick(self) -> None:
        got = await asyncio.to_thread(store.latest, self.db)
        if got is None:
            return await self.install(None, None)
        r, reverted_to = got
        self.notice(r)
        head = self.pod.current.version
        if r.state == "armed" and head > r.baseline:
            started = replace(r, state="running", stage_since=self.now(), candidate=head,
                              reason=f"version {head} published: serving it to {_slice(r)}")
            if not await asyncio.to_thread(store.step, self.db, r, started, ACTOR, "start", candidate=head):
                return  # another process started it: the next tick reads it
            self.stepped(r, started)
            r = started
        await self.install(r, reverted_to)
        await self.flush()
        if r.state == "running":
            arms = await asyncio.to_thread(store.stage_stats, self.db, r.id, r.stage)
            decision = decide(r, arms["candidate"], arms["baseline"], self.now())
            if decision.action != "wait":
                await self.take(r, decision)

    async def take(self, r: Rollout, decision: Decision) -> None:
        after = advanced(r, decision, self.now())
        if not await asyncio.to_thread(store.step, self.db, r, after, ACTOR, decision.action):
            return  # another process took this step
        if decision.action == "rollback":
            log.error("config rollout %d rolled back at %d%%: %s", r.id, r.pct, decision.reason)
        else:
            log.info("config rollout %d: %s", r.id, decision.reason)
        self.stepped(r, after)
        if decision.action == "rollback":
            await asyncio.to_thread(store.revert, self.db, r, ACTOR)

    async def by_hand(self, actor: str, rollout_id: int, action: str) -> Rollout:
        """An operator's pause, resume, widen or rollback (the admin API): the step, then what follows it."""
        before, after = await asyncio.to_thread(store.by_hand, self.db, actor, rollout_id, action, self.now())
        self.stepped(before, after)
        if action == "rollback":
            await asyncio.to_thread(store.revert, self.db, after, actor)
        return after

    def stepped(self, before: Rollout, after: Rollout) -> None:
        """This process took the step: its event and its count."""
        action = self.notice(after, before)
        if action is not None:
            self.metrics.rollout_steps.labels(action).inc()

    def notice(self, r: Rollout, before: Rollout | None = None) -> str | None:
        """The step to ``r`` since this process last saw the rollout (``before``: the state it was taken from),
        emitted as ``config.rollout``: every process that sees a step emits the same event id, so a step taken
        by another process or by hand (``farebox rollouts``) is in the log once however many see it."""
        seen = before if before is not None else self._seen.get(r.id)
        self._seen[r.id] = r
        action = step_name(seen, r) if seen is not None else None
        if action is not None:
            pct = 0 if r.state == "rolled_back" else 100 if r.state == "completed" else r.pct
            self.emit(ConfigRollout(rollout_id=r.id, action=action, stage_pct=pct,
                                    version=r.candidate or r.baseline, reason=r.reason or action, time=self.now()))
        return action

    async def install(self, r: Rollout | None, reverted_to: int | None) -> None:
        """Give the pod the rollout and the baseline's snapshot while requests need them; else neither."""
        pod = self.pod
        head = pod.current.version
        needed = r is not None and head > r.baseline and (
            r.state in ("armed", "running", "paused") or (r.state == "rolled_back" and reverted_to is None))
        if not needed or r is None:
            pod.rollout, pod.baseline = None, None
            self.metrics.rollout_pct.set(0)
            return
        if self._compiled is None or self._compiled[0] != (r.baseline, head):
            snap = await asyncio.to_thread(lambda: self._baseline_snapshot(r.baseline, self.db.document(head)))
            self._compiled = ((r.baseline, head), snap)
        pod.baseline, pod.rollout = self._compiled[1], r
        self.metrics.rollout_pct.set(0 if r.state == "rolled_back" else r.pct)

    def _baseline_snapshot(self, baseline: int, head: dict[str, Any]) -> Any:
        """The snapshot the requests outside the slice are served: ``head`` with the baseline's routing."""
        return compile_document(baseline_document(head, self.db.document(baseline)), baseline)

    async def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for (rollout_id, stage), arms in pending.items():
            try:
                await asyncio.to_thread(store.add_stats, self.db, rollout_id, stage, self.process, arms)
            except Exception:
                for arm, stats in arms.items():  # kept for the next tick: never counted twice, never lost
                    self.pending.setdefault((rollout_id, stage), {}).setdefault(arm, ArmStats()).add(stats)
                raise


def _slice(r: Rollout) -> str:
    return f"pods {', '.join(r.pods)}" if r.pods else f"{r.pct}% of callers"
