"""Background loops that stop when cancelled, even when a library swallowed the cancellation.

redis-py's asyncio client (8.1.0, the version installed) sometimes absorbs a
task's cancellation: a command or pipeline cancelled mid-flight returns
normally, with no ``CancelledError``, about one cancel in three in
``tests/proxy/test_cancellation.py``. A ``while True`` loop around Redis
calls then never ends, and whatever waits for it at shutdown (a pod's
cleanup steps, aiohttp's final task cancellation) waits too. The request is still recorded on the task (``Task.cancelling()``
stays above zero: nothing called ``uncancel``), so a loop asks for it after
each call into such a library and in its error handlers.

``streams.kafka.clients.stop_if_cancelled`` is its twin for the aiokafka loops (``streams`` does not
import ``proxy``).

Invariant: a loop that calls ``stop_if_cancelled`` after each awaited library
call ends within one iteration of ``Task.cancel()``.
"""

from __future__ import annotations

import asyncio


def cancel_requested() -> bool:
    """True when someone asked the current task to stop (also if a library ate the ``CancelledError``)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` when the current task was asked to stop."""
    if cancel_requested():
        raise asyncio.CancelledError
