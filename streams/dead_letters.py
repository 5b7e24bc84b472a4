"""Dead letters: a record the worker cannot read goes to ``fb.dead-letter`` instead of stopping the ledger.

The worker's agents read each record in a step of its own (the codec, a
batch's rows) before they fold it. A worker that raises stops
(``streams.worker.delivery.stop_worker``) and gets the same record again when it is
restarted, so before this one malformed record (an event type from a newer
pod, a corrupted write, a bug) stopped the ledger for good. Now a record that
the read step refuses (``READ_ERRORS``) is produced unchanged, key and value,
to the dead-letter topic, with headers that say where it came from and why
(``headers``), and the agent goes on: the record counts as handled (its
offset is committed with its batch) and folds nothing. The worker waits for
Kafka's ack of the dead letter before it goes on, so a dead letter is never
lost either.

Nothing is silently dropped: every dead letter is logged at ERROR with its
topic, partition, offset and reason, counted in the worker's stats, and kept
(30 days by default: ``infra.kafka.topics``) for someone to fix and replay.
Only reading is guarded: an error while folding a record that was read is a
bug in farebox, and stops the worker as before.

``read_headers`` turns a dead letter's headers back into where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

TOPIC, PARTITION, OFFSET, REASON = "fb-dl-topic", "fb-dl-partition", "fb-dl-offset", "fb-dl-reason"
REASON_MAX = 500  # characters of the reason kept in the header (the record itself is kept whole)

# what a read step raises for a malformed record: the codec's CodecError and orjson's errors are ValueErrors,
# a missing field is a KeyError, a field of the wrong shape a TypeError
READ_ERRORS: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError)


def reason_of(exc: BaseException) -> str:
    """The error as one line: its type and message, cut at ``REASON_MAX`` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def headers(topic: str, partition: int, offset: int, exc: BaseException) -> list[tuple[str, bytes]]:
    """The headers of the dead letter of the record at ``topic``/``partition``/``offset``."""
    return [(TOPIC, topic.encode()), (PARTITION, str(partition).encode()), (OFFSET, str(offset).encode()),
            (REASON, reason_of(exc).encode())]


@dataclass(frozen=True)
class Origin:
    topic: str
    partition: int
    offset: int
    reason: str


def read_headers(pairs: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...]) -> Origin:
    """Where a dead letter came from and why (the inverse of ``headers``)."""
    values = {name: value.decode() for name, value in pairs}
    return Origin(values[TOPIC], int(values[PARTITION]), int(values[OFFSET]), values[REASON])
