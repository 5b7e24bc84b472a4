"""Noticing that a caller left (or the pod's drain deadline passed) while its request waits.

aiohttp only notices a departed caller on the next write; a request waiting
on a slow provider would keep the upstream open. ``ClientWatch`` cancels
the request's task instead, with the reason as the cancel message
(``client_closed`` / ``drain``), which the attempt and relay code read to
meter the cut attempt.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable

from aiohttp import web

from proxy.errors import GatewayError
from proxy.outcomes import CLIENT_CLOSED, DRAIN
from proxy.runtime import RUNTIME, PodState

POLL_S = 0.02  # how often a waiting request checks that its caller is still there


class ClientWatch:
    """Cancels the request's task when its caller disconnects or the pod's drain deadline passes.

    One poller per pod checks every open watch each ``POLL_S`` (``watch_all``):
    a poller task per request would be cancelled at every request's end, and
    each cancelled sleep leaves a reference cycle (task, exception, traceback,
    frame) holding the request until a full garbage collection — the
    gateway's longest pauses under load.
    """

    def __init__(self, request: web.Request, pod: PodState) -> None:
        self.request, self.pod = request, pod
        self.task = asyncio.current_task()
        self.fired: str | None = None

    def __enter__(self) -> "ClientWatch":
        self.pod.watches.add(self)
        if self.pod.watch_task is None or self.pod.watch_task.done():
            self.pod.watch_task = asyncio.get_running_loop().create_task(watch_all(self.pod))
        return self

    def __exit__(self, *exc: object) -> None:
        self.pod.watches.discard(self)

    def gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def check(self) -> bool:
        """Fire if the caller left or the drain deadline passed; True when it fired."""
        reason = CLIENT_CLOSED if self.gone() else DRAIN if self.pod.drain_expired else None
        if reason is None or self.task is None:
            return False
        self.fired = reason
        self.task.cancel(reason)
        return True

    def absorb(self) -> str:
        """Inside ``except CancelledError``: our own cancellation is handled, not propagated."""
        if self.fired is None or self.task is None:
            raise asyncio.CancelledError
        self.task.uncancel()
        return self.fired

    async def run(self, work: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """Await the handler's work; if the watch fired, the (already settled) response or a 499."""
        try:
            return await work
        except asyncio.CancelledError:
            reason = self.absorb()
            resp = self.request.get("stream_response")
            if resp is not None:
                return resp
            if reason == DRAIN:
                raise GatewayError("The gateway pod is shutting down; retry.", status=503, code="server_shutting_down",
                                   headers={"Retry-After": "1"}) from None
            return web.Response(status=499)  # never reaches the departed caller


async def watch_all(pod: PodState) -> None:
    """The pod's one watch poller; runs while requests are open, until the app's cleanup cancels it."""
    while True:
        await asyncio.sleep(POLL_S)
        for watch in [w for w in pod.watches if w.fired is None]:
            if watch.check():
                pod.watches.discard(watch)


async def stop_watching(app: web.Application) -> None:
    pod = app[RUNTIME].pod
    if pod.watch_task is not None:
        pod.watch_task.cancel()
        await asyncio.gather(pod.watch_task, return_exceptions=True)
