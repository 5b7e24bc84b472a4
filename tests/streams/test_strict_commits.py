"""``streams.kafka.internals.strict_commits``: Faust's consumer commits only what the agents acknowledged.

Faust's own ``_new_offset`` (what ``commit`` writes) lets one unacknowledged
offset through at the head, and counts a gap in the delivered offsets as
acknowledged. Both would commit past records a killed worker never handled.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace

from faust.transport.drivers import aiokafka as driver
from intervaltree import IntervalTree

from streams.kafka.internals import strict_commits

TP = ("fb.requests", 0)


def consumer(committed: int | None, acked: list[int]) -> SimpleNamespace:
    """The state ``_new_offset`` and ``_add_gap`` read: committed = the next offset to read."""
    state = SimpleNamespace(_committed_offset=defaultdict(lambda: None), _acked=defaultdict(list),
                            _acked_index=defaultdict(set), _gap=defaultdict(IntervalTree))
    state._committed_offset[TP] = committed
    state._acked[TP] = list(acked)
    state._acked_index[TP] = set(acked)
    return state


def new_offset(state: SimpleNamespace) -> int | None:
    strict_commits()
    return driver.Consumer._new_offset(state, TP)


def test_nothing_is_committed_past_an_unacknowledged_head():
    assert new_offset(consumer(100, [101, 102, 103])) is None  # Faust's own lets 100 through: 104
    state = consumer(100, [101, 102, 103])
    state._acked[TP].append(100)  # the agent acknowledges 100 (delivered again after a seek)
    state._acked_index[TP].add(100)
    assert new_offset(state) == 104


def test_acknowledged_runs_commit_as_before():
    assert new_offset(consumer(100, [100, 101, 102, 105])) == 103  # up to the first hole
    assert new_offset(consumer(None, [7, 8])) == 9  # nothing committed yet: as Faust does


def commit_rounds(state: SimpleNamespace, rounds: int = 4) -> list[int | None]:
    """What successive commits write (each records its offset as committed, as ``_commit_offsets`` does)."""
    out = []
    for _ in range(rounds):
        offset = new_offset(state)
        out.append(offset)
        if offset is not None:
            state._committed_offset[TP] = offset
    return out


def test_a_jump_in_delivered_offsets_is_not_acknowledged():
    """Faust's delivery loop sees offset 416 right after 176 (a record fetched before a rebalance and
    delivered after its seek) and records 178..416 as a gap; the agent handles 177..179 only. With Faust's own
    bookkeeping the commits go 179, 180, then 417: past 180..416, which no agent handled."""
    state = consumer(177, [])
    strict_commits()
    asyncio.run(driver.Consumer._add_gap(state, TP, 177, 416))
    assert not state._gap[TP]
    state._acked[TP], state._acked_index[TP] = [177, 178, 179], {177, 178, 179}
    assert commit_rounds(state) == [180, None, None, None]
