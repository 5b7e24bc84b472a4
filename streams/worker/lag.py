"""The worker's consumer lag per source topic, for its ``/metrics`` (``farebox_consumer_lag_events``).

Lag of a partition = its high-water mark (the next offset Kafka will write)
minus the next offset this worker will read (the offset after the last one it
read, else the committed one, else 0). Summed per topic over the partitions
assigned to this worker; a partition whose high-water mark is not known yet
is left out. ``lag_by_topic`` is pure; ``ConsumerLag`` reads the Faust
consumer when scraped (``streams.kafka.internals.consumer_positions``, from
the metrics server's thread: offset maps and cached high-water marks only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streams.kafka.internals import consumer_positions

Position = tuple[str, int | None, int | None]  # (topic, next offset to read, high-water mark)


def lag_by_topic(positions: Iterable[Position], topics: Iterable[str]) -> dict[str, int]:
    out = dict.fromkeys(topics, 0)
    for topic, next_offset, high in positions:
        if topic in out and high is not None:
            out[topic] += max(high - (next_offset or 0), 0)
    return out


class ConsumerLag(Collector):
    def __init__(self, app: Callable[[], Any], topics: Iterable[str]) -> None:
        self.app, self.topics = app, tuple(topics)  # the Faust app, once built

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("farebox_consumer_lag_events",
                                   "Events in the worker's assigned partitions not yet read, per topic.",
                                   labels=["topic"])
        try:
            positions = consumer_positions(self.app())
        except Exception:  # noqa: BLE001 - the consumer is not up yet: no samples rather than a made-up 0
            yield family
            return
        for topic, lag in lag_by_topic(positions, self.topics).items():
            family.add_metric([topic], lag)
        yield family
