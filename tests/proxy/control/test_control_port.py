"""``ControlStore`` (what the admin API calls) and ``ControlService`` (what implements it) agree:
every method of the port exists on the service with the same parameters, defaults and kind."""

from __future__ import annotations

import inspect

from proxy.control.service import ControlService
from proxy.ports import ControlStore


def _methods(cls: type) -> dict[str, object]:
    return {n: m for n, m in vars(cls).items() if callable(m) and not n.startswith("_")}


def test_the_service_implements_every_method_of_the_port_with_the_same_signature() -> None:
    port = _methods(ControlStore)
    assert port, "the port lists no methods"
    for name, method in port.items():
        impl = getattr(ControlService, name, None)
        assert impl is not None, f"ControlService has no {name}"
        assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(method), name
        want = [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(impl).parameters.values()]
        assert got == want, f"{name}: port {want} != service {got}"


def test_snapshot_status_is_what_the_follower_says() -> None:
    service = ControlService(None, status=lambda: {"version": 7, "source": "database"})  # type: ignore[arg-type]
    assert service.snapshot_status() == {"version": 7, "source": "database"}
    assert ControlService(None).snapshot_status() == {}  # type: ignore[arg-type]
