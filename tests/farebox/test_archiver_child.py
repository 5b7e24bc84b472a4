"""The embedded archiver's child process leaves with the gateway, also when the gateway is killed with -9."""

from __future__ import annotations

import subprocess
import sys
import time

from infra.cluster import _zombie

# a stand-in gateway: starts the archiver's child as EmbeddedArchiver does, prints its pid, dies by SIGKILL
GATEWAY = """
import os, signal
from streams.archive.service import archive_child
child = archive_child()
print(child.submit(os.getpid).result(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_archiver_child_exits_when_its_gateway_is_killed() -> None:
    gateway = subprocess.run([sys.executable, "-c", GATEWAY], capture_output=True, text=True, timeout=60)
    assert gateway.returncode == -9, gateway.stderr
    child = int(gateway.stdout.split()[0])
    deadline = time.monotonic() + 15
    while not _zombie(child) and time.monotonic() < deadline:  # gone (or a zombie nobody reaps) counts as exited
        time.sleep(0.05)
    assert _zombie(child), f"archiver child {child} still running after its gateway was killed"


# a stand-in gateway that, like `farebox serve` on Ctrl-C, gets SIGINT and SIGTERM sent to its whole process
# group, survives them (it handles them), then asks its archiver child for one more pass
GROUP_SIGNALLED = """
import os, signal, time
from streams.archive.service import archive_child
signal.signal(signal.SIGINT, lambda *a: None)
signal.signal(signal.SIGTERM, lambda *a: None)
child = archive_child()
child.submit(os.getpid).result()
os.killpg(os.getpgid(0), signal.SIGINT)
os.killpg(os.getpgid(0), signal.SIGTERM)
time.sleep(0.5)
print(child.submit(sum, [1, 2]).result(), flush=True)  # the final pass: the child is still there
child.shutdown()
"""


def test_the_archiver_child_outlives_signals_sent_to_its_gateways_process_group() -> None:
    gateway = subprocess.run([sys.executable, "-c", GROUP_SIGNALLED], capture_output=True, text=True, timeout=60,
                             start_new_session=True)
    assert gateway.returncode == 0 and gateway.stdout.split() == ["3"], gateway.stderr[-2000:]
