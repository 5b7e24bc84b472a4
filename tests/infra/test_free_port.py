"""``infra.process.free_port``: a port below the ephemeral range, bindable, never one it handed out lately."""

from __future__ import annotations

import socket
from pathlib import Path

from infra.process import LISTEN_PORTS, ephemeral_low, free_port


def test_ports_come_from_below_the_ephemeral_range_and_are_not_repeated() -> None:
    low = ephemeral_low()
    ports = [free_port() for _ in range(300)]
    assert all(low - LISTEN_PORTS <= p < low for p in ports)
    assert len(set(ports)) == len(ports)  # a stack asks for several before it starts any
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when handed out


def test_a_port_in_use_is_skipped() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        assert taken not in {free_port() for _ in range(2000)}


def test_the_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "range"
    path.write_text("40000\t60999\n")
    assert ephemeral_low(str(path)) == 40000
    path.write_text("garbage")
    assert ephemeral_low(str(path)) == 32768
    assert ephemeral_low(str(tmp_path / "missing")) == 32768
