"""Overload protection at the door (``proxy.overload``): the shedder's control law on a scripted clock and CPU,
then a pod past its admission rate, in process: a fast 503 (529 on the Messages surface) with Retry-After before
authentication, holds or events, counted in the metrics."""

from __future__ import annotations

import dataclasses

import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from proxy.overload import LoadShedder, OverloadSettings
from tests.proxy.fakes import MemoryLog, ScriptedBudgets, example_tree, key, runtime, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")

TICK = 0.02


class Machine:
    """A scripted monotonic clock and loop-thread CPU clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 10.0

    def run(self, shedder: LoadShedder, *, ticks: int, busy: float | None = None, cost_s: float = 0.0,
            arrivals_per_tick: int = 0, lag_s: float = 0.0) -> tuple[int, int]:
        """``ticks`` ticks with arrivals spread evenly and the process ``busy`` (0-1), or busy ``cost_s`` per
        admitted request (a refusal a tenth of it), up to the whole core: (admitted, refused)."""
        admitted = refused = 0
        for _ in range(ticks):
            took = 0.0
            for _ in range(arrivals_per_tick):
                self.now += TICK / max(1, arrivals_per_tick)
                if shedder.admit():
                    admitted += 1
                    took += cost_s
                else:
                    refused += 1
                    took += cost_s / 10
            if not arrivals_per_tick:
                self.now += TICK
            self.cpu += (busy if busy is not None else min(1.0, took / TICK)) * TICK
            shedder.tick(lag_s)
        return admitted, refused


def shedder(machine: Machine, **settings: object) -> LoadShedder:
    return LoadShedder(OverloadSettings(**settings), clock=lambda: machine.now, cpu=lambda: machine.cpu,
                       loop_cpu=lambda: machine.cpu)  # one thread: the loop's CPU is the process's


def test_serve_sheds_by_default_a_pod_built_in_code_only_when_asked() -> None:
    from farebox.server_settings import overload_settings
    from proxy.control.problems import Problems, Reader
    from proxy.runtime import ProxyOptions

    assert overload_settings(Reader({}, "server.overload", Problems())).enabled
    assert not ProxyOptions(pod_id="p").overload.enabled


WINDOW = OverloadSettings().window_ticks


def per_tick(rate: float) -> int:
    return round(rate * TICK)


def test_under_its_target_nothing_is_limited() -> None:
    m = Machine()
    s = shedder(m)
    admitted, refused = m.run(s, ticks=40, busy=0.6, arrivals_per_tick=per_tick(400))
    assert (admitted, refused) == (40 * per_tick(400), 0) and s.limit is None
    reading = s.reading()
    assert reading.utilisation == pytest.approx(0.6) and reading.limit_rps is None
    assert reading.admitted_rps == pytest.approx(400)


def test_past_its_target_it_admits_at_the_rate_that_keeps_the_process_there() -> None:
    m = Machine()
    s = shedder(m)  # target 0.8
    cost = 1 / 800  # the process serves 800/s at most
    m.run(s, ticks=WINDOW, cost_s=cost, arrivals_per_tick=per_tick(400))
    assert s.limit is None
    admitted, refused = m.run(s, ticks=250, cost_s=cost, arrivals_per_tick=per_tick(1600))  # twice the knee, 5 s
    assert refused > 0 and s.limit is not None
    settled_rate = s.reading().admitted_rps
    assert 500 <= settled_rate <= 700  # about 0.8 / (1/800 + refusals' share), not the offered 1,600
    assert 0.7 <= s.reading().utilisation <= 0.9
    assert s.refused_total == refused and s.retry_after_s() == 1


def test_three_saturated_ticks_are_enough_to_start_limiting() -> None:
    m = Machine()
    s = shedder(m)
    m.run(s, ticks=WINDOW, busy=0.3, arrivals_per_tick=per_tick(300))
    m.run(s, ticks=2, busy=1.0, arrivals_per_tick=per_tick(800))
    assert s.limit is None  # two ticks: a slow callback, a collection
    m.run(s, ticks=1, busy=1.0, arrivals_per_tick=per_tick(800))  # the window's average is still under the target
    assert s.limit == pytest.approx(800 * 0.8, rel=0.02)


def test_an_overdue_tick_is_taken_by_the_next_request() -> None:
    m = Machine()
    s = shedder(m)
    m.run(s, ticks=WINDOW, busy=0.5, arrivals_per_tick=per_tick(300))
    before = len(s._window)
    m.now += 5 * TICK  # the loop was behind: the sampler's timer did not fire
    m.cpu += 5 * TICK
    s.admit()
    assert len(s._window) == before or s.reading().utilisation > 0.5  # sampled by the request that noticed


def test_the_limit_grows_back_and_is_lifted_after_a_quiet_spell() -> None:
    m = Machine()
    s = shedder(m, release_s=1.0)
    m.run(s, ticks=WINDOW, busy=1.0, arrivals_per_tick=per_tick(800))
    m.run(s, ticks=10, busy=1.0, arrivals_per_tick=per_tick(800))  # refusing
    limited = s.limit
    m.run(s, ticks=10, busy=0.4, arrivals_per_tick=per_tick(800))  # cooler: the rate grows, still limited
    assert s.limit is not None and s.limit > limited
    m.run(s, ticks=100, busy=0.3, arrivals_per_tick=per_tick(100))  # far below the limit: no refusal for 2 s
    assert s.limit is None


def test_one_stall_is_not_overload_but_a_standing_lag_is() -> None:
    m = Machine()
    s = shedder(m)
    for lag in (0.2,) + (0.0,) * WINDOW:  # a single 200 ms stall: the window's smallest lag is 0
        m.run(s, ticks=1, busy=0.5, arrivals_per_tick=per_tick(250), lag_s=lag)
    assert s.limit is None
    m.run(s, ticks=WINDOW, busy=0.3, arrivals_per_tick=per_tick(250), lag_s=0.02)  # late but mostly idle: starved
    assert s.limit is None
    m.run(s, ticks=WINDOW, busy=0.5, arrivals_per_tick=per_tick(250), lag_s=0.02)  # busy and late: a queue
    assert s.limit == pytest.approx(250 * 0.8, rel=0.05)


def test_disabled_it_never_limits_and_a_floor_is_always_admitted() -> None:
    m = Machine()
    off = shedder(m, enabled=False)
    assert m.run(off, ticks=WINDOW * 2, busy=1.0, arrivals_per_tick=per_tick(800))[1] == 0
    m2 = Machine()
    floor = shedder(m2, min_rate=60.0)
    m2.run(floor, ticks=WINDOW, busy=1.0, arrivals_per_tick=1)  # 50/s measured, saturated: 40/s -> floor 60
    assert floor.limit == 60.0


class Refusing(LoadShedder):
    def admit(self) -> bool:
        self.refused_total += 1
        return False


@pytest.mark.parametrize("path, body, status, shape", [
    ("/v1/chat/completions", {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}]}, 503,
     "openai"),
    ("/v1/messages", {"model": "chat-default", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
     529, "anthropic"),
])
async def test_past_the_rate_a_request_is_refused_at_once_with_retry_after(path, body, status, shape) -> None:
    plaintext, record = key()
    log, budgets = MemoryLog(), ScriptedBudgets()
    rt = runtime(snapshot(example_tree(), [record]), log=log, budgets=budgets)
    app = pod_app(rt)
    rt.pod.shedder = Refusing(OverloadSettings())
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        headers = {"Authorization": f"Bearer {plaintext}"} if shape == "openai" else {"x-api-key": plaintext}
        resp = await client.post(path, json=body, headers=headers)
        assert resp.status == status and resp.headers["Retry-After"] == "1"
        error = await resp.json()
        if shape == "openai":
            assert error["error"]["code"] == "server_overloaded"
        else:
            assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
        assert log.events == [] and budgets.asks == []  # no event, no hold: refused before any work
        no_key = await client.post(path, json=body)  # before authentication too
        assert no_key.status == status
        metrics = await (await client.get("/metrics")).text()
        assert 'farebox_overload_refusals_total{reason="capacity"} 2.0' in metrics
        assert "farebox_cpu_utilisation" in metrics and "farebox_admission_limited" in metrics
        assert (await client.get("/health")).status == 200  # only model requests are shed
    finally:
        await client.close()


def test_the_settings_are_read_and_checked(tmp_path) -> None:
    from farebox.server_settings import overload_settings
    from proxy.control.problems import Problems, Reader

    problems = Problems()
    got = overload_settings(Reader({"target_utilisation": 0.6, "max_loop_lag_ms": 8}, "server.overload", problems))
    assert dataclasses.astuple(got)[:3] == (True, 0.6, 8)
    overload_settings(Reader({"target_utilisation": 1.5, "typo": 1}, "server.overload", problems))
    with pytest.raises(Exception) as bad:
        problems.raise_if_any("farebox.yaml")
    assert "server.overload.target_utilisation: must be at most 1" in str(bad.value)
    assert "server.overload.typo" in str(bad.value)
