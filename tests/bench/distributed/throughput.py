"""Part 1: events per second one ``farebox worker`` sustains (goal >= 5,000 request events/s).

N requests (3N request events, ``traffic.Traffic.batch``) are produced into
fresh topics by the pods' producer before the worker starts. Then the worker
starts, and the clock runs from its first output (the first scope entry it
writes; its start-up and group join are excluded) until the Redis projection
shows every team's request count and settled total equal to what was
produced, with nothing held. Then the worker group's committed offsets must
reach the end of the requests and scope-entries topics (nothing left behind).

Rates: request events/s (3N / elapsed) and all records/s the worker consumed
(request events + the scope-entry records it split off and folded, each a batch
of one scope's entries, + the rollup rows, added up per key and batch). With ``profile`` set, ``py-spy`` (in the venv) samples
the worker during the run; ``profile.summary`` says where the time went.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.distributed.env import WorkerEnv
from tests.bench.distributed.profile import summary as profile_summary
from tests.bench.distributed.traffic import Traffic

GOAL_EVENTS_PER_S = 5000


async def produce(env: WorkerEnv, events: list) -> float:
    """Append every event through the pods' producer and wait for Kafka's acks; returns seconds taken."""
    assert env.log is not None
    t0 = time.monotonic()
    for i, event in enumerate(events):
        env.log.append(event)
        if i % 2000 == 1999:
            await asyncio.sleep(0)  # let the producer's pump run
    await env.log.flush()
    return time.monotonic() - t0


def start_py_spy(pid: int, out: Path) -> subprocess.Popen:
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--threads",
                             "--format", "raw", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def run(env: WorkerEnv, traffic: Traffic, n: int, *, profile: Path | None = None,
              timeout: float = 300.0) -> dict:
    if env.worker is not None:
        raise RuntimeError("part 1 needs a worker that has not started yet")
    before = await env.ends()
    events = traffic.batch(n)
    produce_s = await produce(env, events)
    ends = await env.ends()
    produced = ends[env.requests_topic] - before[env.requests_topic]
    if produced != len(events):
        raise RuntimeError(f"produced {len(events)} events but the requests topic grew by {produced}")

    env.start_worker()
    spy = None
    t_first = None
    spawned = time.monotonic()
    deadline = spawned + timeout
    while t_first is None:  # the worker's first output: a scope entry split off the first request event
        env.check_worker()
        if spy is None and profile is not None and time.monotonic() > spawned + 1.0:  # once Python is up
            assert env.worker is not None
            spy = start_py_spy(env.worker.pid, profile)
        if (await env.ends())[env.scope_topic] > before[env.scope_topic]:
            t_first = time.monotonic()
        elif time.monotonic() > deadline:
            raise RuntimeError("the worker produced nothing")
        else:
            await asyncio.sleep(0.02)
    t_done = await env.wait_caught_up(timeout=max(deadline - time.monotonic(), 10))
    spy_report = None
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
        try:
            _, err = await asyncio.to_thread(spy.communicate, timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            err = b"py-spy did not stop"
        spy_report = profile_summary(profile) if profile is not None and profile.exists() else {
            "error": (err or b"").decode(errors="replace")[-500:]}
    _, ends_after, committed = await env.wait_committed(timeout=60)
    changelog = await env.records_in(env.changelogs)  # what the worker wrote besides the entries

    elapsed = t_done - t_first
    entries = ends_after[env.scope_topic] - before[env.scope_topic]  # records: batches of entries
    rows = ends_after[env.rollups_topic] - before[env.rollups_topic]
    records = len(events) + entries + rows
    projected = await env.projected()
    return {
        "requests": n, "request_events": len(events), "scope_records": entries, "rollup_rows": rows,
        "records": records, "changelog_records": changelog,
        "written_per_request": round((entries + rows + sum(changelog.values())) / n, 2) if n else None,
        "produce_s": round(produce_s, 3),
        "produce_events_per_s": round(len(events) / produce_s) if produce_s else None,
        "elapsed_s": round(elapsed, 3),
        "request_events_per_s": round(len(events) / elapsed) if elapsed else None,
        "records_per_s": round(records / elapsed) if elapsed else None,
        "goal_events_per_s": GOAL_EVENTS_PER_S,
        "settled_by_team": {t: projected[t].get("settled") for t in projected},
        "expected_settled_by_team": dict(env.expected.settled),
        "settled_equals_produced": all(projected[t].get("settled") == env.expected.settled[t] for t in projected),
        "requests_equal_produced": all(projected[t].get("requests") == env.expected.requests[t] for t in projected),
        "held_zero": all(projected[t].get("held") == 0 for t in projected),
        "committed_to_end": all(committed[t] >= ends_after[t] for t in ends_after),
        "profile": spy_report,
    }


def lines(rep: dict) -> list[str]:
    per = max(rep["requests"], 1)
    ok = rep["request_events_per_s"] is not None and rep["request_events_per_s"] >= rep["goal_events_per_s"]
    out = [
        "",
        f"== 1. one worker's throughput: {rep['requests']:,} requests pre-produced "
        f"({rep['request_events']:,} request events, produced in {rep['produce_s']:.2f} s = "
        f"{rep['produce_events_per_s']:,} events/s)",
        f"  processed in {rep['elapsed_s']:.2f} s (first output -> projection complete)",
        f"  request events/s          {rep['request_events_per_s']:>10,}   goal >= {rep['goal_events_per_s']:,}: "
        f"{'met' if ok else 'NOT met'}",
        f"  all records/s             {rep['records_per_s']:>10,}   ({rep['records']:,} = request events + "
        f"{rep['scope_records']:,} scope-entry records + {rep['rollup_rows']:,} rollup rows)",
        f"  the worker wrote {rep['written_per_request']} records per request: "
        f"{rep['scope_records'] / per:.2f} scope-entry records, {rep['rollup_rows'] / per:.2f} rollup rows, "
        "and table changelogs "
        + ", ".join(f"{k.rsplit('-changelog', 1)[0].split('worker-', 1)[-1]} {v / per:.1f}"
                    for k, v in rep["changelog_records"].items()),
        f"  projection settled == sum of produced costs: {rep['settled_equals_produced']}; requests counted: "
        f"{rep['requests_equal_produced']}; held 0: {rep['held_zero']}; committed to the end: "
        f"{rep['committed_to_end']}",
    ]
    prof = rep.get("profile")
    if prof:
        from tests.bench.distributed.profile import lines as profile_lines
        out += profile_lines(prof)
    return out
