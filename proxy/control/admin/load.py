"""Admin API, this gateway process's load and its door (``proxy.overload``):

    GET /admin/v1/load                        admin, finance, auditor

What the process serving the call measured last: its CPU utilisation (a share
of one core) and its event loop's lag, the admission rate in force (null while not limiting), the requests
admitted per second, the refusals so far (at the measured rate, and at
``server.max_in_flight``), the requests in flight, and the settings. Under
``farebox serve --workers N`` each process sheds for itself: the answer names
the pod and process that gave it, and ``/metrics`` sums them.
"""

from __future__ import annotations

import os

from aiohttp import web

from proxy.control.admin.access import allowed
from proxy.runtime import RUNTIME


async def get_load(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    rt = request.app[RUNTIME]
    shedder = rt.pod.shedder
    reading = shedder.reading()
    settings = shedder.settings
    return web.json_response({
        "object": "gateway.load", "pod": rt.options.pod_id, "pid": os.getpid(),
        "cpu_utilisation": round(reading.utilisation, 4), "loop_lag_ms": round(reading.loop_lag_s * 1000, 3),
        "limited": reading.limit_rps is not None,
        "admission_limit_rps": None if reading.limit_rps is None else round(reading.limit_rps, 1),
        "admitted_rps": round(reading.admitted_rps, 1), "admitted_total": reading.admitted_total,
        "refused_total": reading.refused_total, "in_flight": rt.pod.in_flight,
        "max_in_flight": rt.options.max_in_flight, "draining": rt.pod.draining,
        "settings": {"enabled": settings.enabled, "target_utilisation": settings.target_utilisation,
                     "max_loop_lag_ms": settings.max_loop_lag_ms, "min_rate": settings.min_rate,
                     "release_s": settings.release_s},
    })


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/load", get_load)
