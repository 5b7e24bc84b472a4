"""The worker's consumer lag per topic (pure part): high-water mark minus the next offset to read, summed
per topic over the assigned partitions; unknown high-water marks left out, other topics ignored.
(The running worker's /metrics is read in tests/distributed/test_cluster.py.)"""

from __future__ import annotations

from streams.worker.lag import lag_by_topic


def test_lag_sums_partitions_per_topic() -> None:
    positions = [("fb.requests", 10, 15), ("fb.requests", None, 3), ("fb.requests", 7, None),
                 ("fb.scope-entries", 40, 40), ("fb.requests-changelog", 0, 99)]
    assert lag_by_topic(positions, ["fb.requests", "fb.scope-entries"]) == {"fb.requests": 8, "fb.scope-entries": 0}


def test_a_position_past_the_high_water_mark_is_no_lag_and_topics_without_partitions_show_zero() -> None:
    assert lag_by_topic([("a", 12, 10)], ["a", "b"]) == {"a": 0, "b": 0}
