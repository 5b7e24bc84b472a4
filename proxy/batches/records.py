"""What farebox keeps of files and batches, and the ``BatchStore`` port that keeps them.

A batch's life (OpenAI's statuses): ``in_progress`` from creation (its input is checked first: a bad file makes
it ``failed`` at once, with the problems in ``errors``), then ``completed`` when every line has an outcome,
``cancelling`` -> ``cancelled`` when asked (lines not yet started never run; lines in flight finish and are
kept), or ``expired`` when its completion window passes first (lines that never ran are written to the error
file as ``batch_expired``). A line is ``pending``, ``claimed`` by one runner until ``claimed_until`` (a claim
past it, its runner gone, is taken again), or ``done`` with its output line.

Invariants every adapter keeps (``tests/proxy/batches/test_store_contract.py``):

* a claimed line is held by one runner at a time: two runners claiming at once never get the same line;
* ``done`` by a runner whose claim was taken over changes nothing (the other runner's outcome stands);
* a batch reaches one final status, once, and its output and error files are written with that change, in one
  transaction: a finished batch always has its files, and a crash never leaves a half-written one;
* ``claim`` shares the runners between teams: lines are taken from each team with runnable lines in turn
  (``round_robin``), so one team's 50,000-line batch does not hold another team's ten lines back; within a
  team, its oldest batch first;
* files and batches are a team's: readers check ``team`` (another team's id is a 404, never a 403).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, TypeVar

from proxy.batches.lines import Line

T = TypeVar("T")
FINAL = ("completed", "failed", "expired", "cancelled")
ACTIVE = ("in_progress", "cancelling")
CANCELLABLE = ("in_progress", "cancelling", "cancelled")  # a cancel of these is answered (again) with the batch


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str  # file-<hex>
    team: str
    key_id: str
    purpose: str  # batch | batch_output
    filename: str
    bytes: int
    created_at: int  # unix seconds
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class Counts:
    total: int = 0
    completed: int = 0  # lines answered 2xx
    failed: int = 0  # lines answered with an error, or never run before the window passed
    cost_micro: int = 0  # what the lines that ran cost, as their answers said (the events are the record)
    list_micro: int = 0  # ... and what they would have cost at the standard price (list - cost: the savings)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str  # batch_<hex>
    team: str
    key_id: str  # the key whose budgets and limits its lines run under
    endpoint: str
    input_file_id: str
    completion_window: str  # "24h"
    status: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)  # why it failed validation
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, completed_at, cancelling_at, ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: Counts = Counts()
    # a batch sent whole to a provider's batch API (``proxy.batches.provider_run``): its deployment, hold and
    # progress (``phase``, the provider's id); None: its lines run through the gateway
    provider: dict[str, Any] | None = None
    # a batch the gateway runs, admitted whole (``proxy.batches.reserve``): who and what its lines' holds are on,
    # and once it ended, ``release``: [[line, hold], ...] of the lines that never ran; None: lines admitted one by one
    reserved: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A line a runner holds: run it, then ``done`` (or ``release`` to try again later)."""

    batch_id: str
    number: int
    custom_id: str
    body: bytes
    claims: int  # how many times it has been claimed (1: first run)
    key_id: str = ""  # the batch's key: the line runs under its budgets and limits
    endpoint: str = ""
    generation: int = 0  # how many times it was given back (``release``): part of its request id
    held: int | None = None  # its hold, taken with its batch (``proxy.batches.reserve``): its first run uses it


def round_robin(offered: dict[str, list[T]], limit: int) -> list[T]:
    """Up to ``limit`` items taking one from each list in turn (the lists in their order, each in its own)."""
    out: list[T] = []
    queues = [list(items) for items in offered.values() if items]
    at = 0
    while queues and len(out) < limit:
        queue = queues[at % len(queues)]
        out.append(queue.pop(0))
        if queue:
            at += 1
        else:
            queues.remove(queue)
    return out


@dataclass(frozen=True, slots=True)
class Answer:
    """A line's outcome, to keep: ``result`` is its output-file line, ``cost_micro`` what its answer said."""

    line: Claimed
    ok: bool
    result: bytes
    request_id: str | None
    cost_micro: int | None = None
    list_micro: int | None = None  # at the standard price, when the answer says it differs


@dataclass(frozen=True, slots=True)
class ProviderLine:
    """A line a provider's batch ran, to keep: its output-file line, request id and what it cost."""

    number: int
    ok: bool
    result: bytes
    request_id: str
    cost_micro: int
    list_micro: int  # at the standard price (the savings' measure)


class BatchStore(Protocol):
    async def put_file(self, record: FileRecord, content: bytes) -> None: ...

    async def get_file(self, file_id: str) -> FileRecord | None: ...

    async def file_content(self, file_id: str) -> bytes | None: ...

    async def list_files(self, team: str, purpose: str | None, after: str | None, limit: int,
                         descending: bool) -> list[FileRecord]: ...

    async def delete_file(self, file_id: str) -> bool: ...

    async def create_batch(self, record: BatchRecord, lines: Sequence[Line]) -> None:
        """Keep the batch and its lines (none for a batch that failed validation)."""
        ...

    async def get_batch(self, batch_id: str) -> BatchRecord | None: ...

    async def list_batches(self, team: str | None, after: str | None, limit: int, status: str | None = None,
                           endpoints: Sequence[str] | None = None) -> list[BatchRecord]:
        """Newest first; ``team`` None: every team's (the admin API); ``endpoints``: only batches of those."""
        ...

    async def delete_batch(self, batch_id: str) -> bool: ...

    async def line_results(self, batch_id: str) -> list[tuple[str, bytes | None]]:
        """Each line's (custom_id, stored output line or None if it never ran), in line order."""
        ...

    async def cancel(self, batch_id: str, now: int) -> BatchRecord | None:
        """``in_progress`` -> ``cancelling`` (any other status is left as it is); the batch as it now is."""
        ...

    async def claim(self, runner: str, now: int, until: int, limit: int) -> list[Claimed]:
        """Up to ``limit`` runnable lines (oldest batch first, in line order) for ``runner`` until ``until``."""
        ...

    async def done(self, line: Claimed, runner: str, ok: bool, result: bytes, request_id: str | None,
                   cost_micro: int | None = None) -> bool:
        """The line's outcome (``result``: its output-file line; ``cost_micro``: what its answer said it cost);
        False if ``runner`` no longer holds it."""
        ...

    async def done_many(self, answers: Sequence[Answer], runner: str) -> int:
        """``done`` for many lines in one transaction; how many were kept (a line whose claim passed to another
        runner is not)."""
        ...

    async def renew(self, lines: Sequence[Claimed], runner: str, until: int) -> None:
        """Hold ``runner``'s claims on ``lines`` until ``until`` (its heartbeat: a live runner keeps its lines,
        a dead one's are taken again within ``claim_s``)."""
        ...

    async def release(self, line: Claimed, runner: str, not_before: int, used: bool = True) -> None:
        """Give the line back to be run again from ``not_before`` (the gateway said "not now"; nothing was served).
        ``used``: the refused run was admitted (and settled at nothing): its ``generation`` goes up, so the next
        run has a request id of its own and is charged, not taken for a repeat of it. A run turned away before
        admission (or never sent) keeps its id, and the hold its batch took for it."""
        ...

    async def finish(self, now: int, new_file_id: Callable[[], str],
                     unrun: Callable[[str, str], bytes]) -> list[BatchRecord]:
        """Every batch that can end now ends, its files written (``new_file_id()`` names them): all lines done
        (``completed``), ``cancelling`` with no line in flight (``cancelled``), past its window with no line in
        flight (``expired``; ``unrun(final, custom_id)`` is the error line of a line that never ran). The batches
        ended."""
        ...

    async def releasing(self) -> list[BatchRecord]:
        """Ended batches admitted whole whose unrun lines' holds are not yet released (``reserved["release"]``)."""
        ...

    async def released(self, batch_id: str) -> None:
        """The batch's unrun lines' holds are released (their events durable): no longer ``releasing``."""
        ...

    async def running(self, batch_ids: set[str]) -> set[str]:
        """Those of ``batch_ids`` still ``in_progress``."""
        ...

    async def queued(self) -> int:
        """Lines of batches in progress not yet done (waiting or in flight)."""
        ...

    async def close(self) -> None: ...


class ProviderBatchStore(Protocol):
    """What ``proxy.batches.provider_run`` asks of the store for batches a provider runs (their lines are
    ``provider``: never claimed by a runner, done only when the provider's results are kept)."""

    async def provider_batches(self) -> list[BatchRecord]:
        """Active batches with a ``provider`` block, oldest first."""
        ...

    async def set_provider(self, batch_id: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Replace the batch's ``provider`` block if it is still ``old`` (compare and set): False when another
        process moved it first."""
        ...

    async def batch_lines(self, batch_id: str) -> list[tuple[int, str, bytes]]:
        """(number, custom_id, body) of every line, in order."""
        ...

    async def end_provider(self, batch_id: str, final: str, answers: Sequence[ProviderLine], now: int,
                           new_file_id: Callable[[], str], unrun: Callable[[str, str], bytes]) -> BatchRecord | None:
        """In one transaction: keep each answered line, end the batch at ``final`` and write its files; None
        (nothing changed) when it had ended already."""
        ...
