"""Config canaries at the door: which snapshot a model request is served while a rollout runs, and its figures.

``choose_arm`` (after authentication): a request of a caller in the rollout's slice (``Rollout.in_slice`` of
``proxy.control.rollout``: named pods, or a stable hash of its session or key id under the stage's share) is served the head
(the candidate); any other is served the baseline's snapshot for the rest of its task (``proxy.runtime.SERVED``).
``served_arm`` (when it has been answered): its status, latency and cost to the process's rollout runner.
"""

from __future__ import annotations

from aiohttp import web

from proxy.runtime import RUNTIME, SERVED, Runtime


def choose_arm(request: web.Request, rt: Runtime) -> None:
    """A config canary runs: this model request is served the candidate (the head) or, outside the slice, the
    baseline's snapshot for the rest of its task (``proxy.runtime.SERVED``)."""
    pod, key = rt.pod, request.get("key")
    rollout, baseline = pod.rollout, pod.baseline
    if rollout is None or baseline is None or key is None or request.method != "POST":
        return
    caller = request.headers.get("x-fb-session") or key.key_id
    if rollout.in_slice(rt.options.pod_id, caller):
        request["rollout_arm"] = (rollout, "candidate", None)
    else:
        request["rollout_arm"] = (rollout, "baseline", SERVED.set(baseline))


def served_arm(request: web.Request, status: int, latency_s: float) -> None:
    rollout, arm, token = request["rollout_arm"]
    if token is not None:
        SERVED.reset(token)
    runner = request.app[RUNTIME].pod.rollout_runner
    meter = request.get("meter")
    if runner is not None:
        runner.record(rollout, arm, status, latency_s, meter.tab.total_cost if meter is not None else 0)
