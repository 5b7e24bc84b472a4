"""Random request event streams, archived to Parquet, for the warehouse tests (a uniquely named module).

A stream is a few requests, each with its life (admission, attempts, then a
settlement, an expiry, both, or neither), delivered in a random order: a
request's own events may arrive out of order (a settlement before its
admission, an attempt after its close), any event may be delivered again
later, settlements may cost more than the hold (overruns), and a settled request may be re-rated once or
twice (``rating.corrected``, chained) days later, delivered after every life, as re-rating reads closed
requests from the archive. Admissions
straddle midnight of 1 December in Kolkata, so a stream spans two budget
months; a ``run:`` scope keeps one balance across both.

``archive_stream`` writes the delivery as the archiver would (records at
increasing offsets, one partition per team, in batches of random size) and
can also copy some hourly files into a compacted daily file, as compaction
does, so the same rows appear twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from ledger.codec import encode
from ledger.events import Event, HoldExpired, RatingCorrected, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from streams.archive.write import ArchiveWriter, Record
from tests.streams.relist import relist

IST = ZoneInfo("Asia/Kolkata")
START = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)  # 23:30 IST: December is 30 minutes away
TEAMS = ("payments", "search", "kyc")
SCOPE_SETS = (("key:{team}-a", "team:{team}", "bu:retail"), ("key:{team}-b", "team:{team}"),
              ("team:{team}", "run:agent-1"), ("key:{team}-a", "team:{team}", "bu:retail", "run:agent-2"))
DEPLOYMENTS = (("d-oai", "openai", "gpt-x"), ("d-ant", "anthropic", "claude-y"), ("d-self", "vllm", "llama-z"))


@dataclass(frozen=True)
class Life:
    """One request's events in the order its pod produced them."""

    events: tuple[Event, ...]
    corrections: tuple[Event, ...] = ()  # re-rating's, delivered after every life (it reads closed requests)


@st.composite
def request_life(draw: st.DrawFn, n: int) -> Life:
    team = draw(st.sampled_from(TEAMS))
    scopes = [s.format(team=team) for s in draw(st.sampled_from(SCOPE_SETS))]
    hold = draw(st.sampled_from([0, 500, 1_000]) | st.integers(0, 5_000))
    at = START + timedelta(seconds=draw(st.integers(0, 3_600)))
    rid = f"r{n}"
    key_id = scopes[0].removeprefix("key:") if scopes[0].startswith("key:") else f"{team}-run"
    alias = draw(st.sampled_from(["chat-default", "chat-fast"]))
    events: list[Event] = [RequestAdmitted(
        time=at, request_id=rid, team=team, key_id=key_id, business_unit="retail", app=f"app-{n % 2}",
        run_id=None, alias=alias, data_class="internal", est_input_tokens=100, max_output_tokens=200,
        holds={s: hold for s in scopes}, currency="INR", price_version=1, pod="pod-a", hold_ttl_s=900,
        stream=False)]
    tries = draw(st.integers(0, 3))
    usage = TokenUsage(input=draw(st.integers(0, 900)), cached_input=draw(st.integers(0, 50)),
                       output=draw(st.integers(0, 400)), reasoning=draw(st.integers(0, 30)))
    deployment = None
    for attempt in range(1, tries + 1):
        deployment, provider, model = draw(st.sampled_from(DEPLOYMENTS))
        ok = attempt == tries
        events.append(RequestAttempted(
            time=at + timedelta(seconds=attempt), request_id=rid, team=team, attempt=attempt, deployment=deployment,
            provider=provider, account="acct", model=model, region="ap-south-1",
            outcome="ok" if ok else "unavailable", status=200 if ok else 503,
            ttft_ms=draw(st.none() | st.integers(1, 900)), latency_ms=1_000, usage=usage if ok else TokenUsage(),
            cost_micro=0, currency="INR", price_version=1, error_code=None if ok else "upstream_unavailable"))
    close_at = at + timedelta(seconds=draw(st.integers(5, 1_200)))
    ending = draw(st.sampled_from(["settle", "settle", "expire", "both", "open"]))
    if ending in ("expire", "both"):
        events.append(HoldExpired(time=close_at, request_id=rid, team=team, charged={s: hold for s in scopes},
                                  currency="INR"))
    if ending in ("settle", "both"):
        cost = hold * draw(st.sampled_from([100, 50]) | st.integers(0, 200)) // 100  # above 100%: overrun
        costs = {s: cost for s in scopes}
        if draw(st.booleans()):  # some scopes charged differently, one charged without a hold
            costs[scopes[-1]] = cost // 2
            costs["bu:shared"] = cost // 3
        status = draw(st.sampled_from([200, 200, 200, 429, 502]))
        events.append(RequestSettled(
            time=close_at + timedelta(seconds=1), request_id=rid, team=team, final_status=status,
            attempts=max(tries, 1), deployment=deployment, usage=usage, cost_micro=cost, currency="INR",
            cost_by_scope=costs, hold_released={s: max(hold - costs.get(s, 0), 0) for s in scopes},
            overrun_micro=max(cost - hold, 0), cache_hit=False, latency_ms=1_500))
        old_cost, old_costs = cost, costs
        fixes: list[Event] = []
        for sequence in range(1, draw(st.integers(0, 2)) + 1):  # re-rated: each relative to the one before
            new_cost = draw(st.integers(0, 3_000))
            new_costs = {s: new_cost for s in scopes if draw(st.booleans())}
            fixes.append(RatingCorrected(
                time=close_at + timedelta(days=2, seconds=sequence), request_id=rid, team=team, sequence=sequence,
                admitted_at=at, currency="INR", old_price_version=sequence, price_version=sequence + 1,
                old_cost_micro=old_cost, cost_micro=new_cost, old_cost_by_scope=old_costs, cost_by_scope=new_costs,
                old_attempt_costs={"1": old_cost}, attempt_costs={"1": new_cost}, reason="price typo"))
            old_cost, old_costs = new_cost, new_costs
        return Life(tuple(events), tuple(fixes))
    return Life(tuple(events))


@st.composite
def delivery(draw: st.DrawFn) -> list[Event]:
    """Several request lives interleaved; some events swapped, some delivered again later."""
    lives = [draw(request_life(n)) for n in range(draw(st.integers(1, 14)))]
    queues = [list(life.events) for life in lives]
    for queue in queues:  # out of order within a request: swap two of its events now and then
        if len(queue) > 1 and draw(st.booleans()):
            i, j = draw(st.integers(0, len(queue) - 1)), draw(st.integers(0, len(queue) - 1))
            queue[i], queue[j] = queue[j], queue[i]
    out: list[Event] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        out.append(queue.pop(0))
        if draw(st.integers(0, 5)) == 0:  # a re-delivery of anything seen so far
            out.append(out[draw(st.integers(0, len(out) - 1))])
    for fix in (fix for life in lives for fix in life.corrections):  # re-rating runs over the closed requests
        out.append(fix)
        if draw(st.integers(0, 3)) == 0:
            out.append(fix)  # a re-rate applied twice
    return out


def archive_stream(root: Path, events: list[Event], *, batch_sizes: list[int], compact: bool = False,
                   between: tuple[int, Callable[[], object]] | None = None) -> None:
    """Archive ``events`` in delivery order: partition = the team's index, offsets increasing per partition;
    ``between`` = (n, call): call it once n batches are written (e.g. build the per-request table)."""
    writer = ArchiveWriter(root, "test")
    offsets = dict.fromkeys(range(len(TEAMS)), 0)
    records = []
    for event in events:
        partition = TEAMS.index(event.team)  # type: ignore[attr-defined]
        offsets[partition] += 1
        records.append(Record(partition, offsets[partition], encode(event)))
    start = 0
    sizes = iter(batch_sizes)
    written = 0
    while start < len(records):
        if between is not None and written == between[0]:
            between[1]()
        size = max(next(sizes, len(records)), 1)
        writer.write(records[start:start + size])
        start += size
        written += 1
    if between is not None and written <= between[0]:
        between[1]()
    if compact:  # compaction's daily file: the same rows again, beside the hourly files it replaces
        for day in sorted(root.glob("date=*")):
            hourly = sorted(day.glob("hour=*/*.parquet"))
            if hourly:
                table = pa.concat_tables(pq.ParquetFile(f).read() for f in hourly)
                pq.write_table(table.replace_schema_metadata(pq.read_schema(hourly[0]).metadata),
                               day / "compacted-0.parquet")
                relist(root, day / "compacted-0.parquet")  # listed, as compaction lists its output
