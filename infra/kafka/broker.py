"""A single-node Apache Kafka (KRaft, broker + controller in one JVM) from the Maven Central jars.

    fetch_jars()                      # mvn copy-dependencies once per version, cached
    with KafkaBroker() as broker:     # format storage, start java, wait for metadata
        create_topics(broker.bootstrap, farebox_topics(partitions=3))

Steps of ``start``: write ``server.properties`` (free ports, log dirs in a temp
dir, small segments), format the storage once (``kafka.tools.StorageTool``),
start ``java -cp 'lib/*' kafka.Kafka`` with start-up-friendly JVM flags, then
poll until a metadata request lists the broker (it is registered and unfenced).
``stop`` sends SIGTERM (controlled shutdown) and waits; ``start`` again reuses
the same ports and data, which is how tests take Kafka away and bring it back.

Tests use it through a session fixture and fail (never skip) when it cannot
start; ``infra/kafka/run.sh up|down|status`` runs one for a person.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from infra.process import die_with_parent, free_port

KAFKA_VERSION = "4.1.1"  # keep in step with <kafka.version> in pom.xml
POM = Path(__file__).with_name("pom.xml")
JVM_FLAGS = (
    "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC",  # one small heap, no GC threads to start
    "-XX:TieredStopAtLevel=1",  # C1 only: ~30% faster start, plenty for tests and dev
    "-Xss512k", "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8",
)


_LAUNCHER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafka-launcher")


def new_cluster_id() -> str:
    """A KRaft cluster id (22 chars of URL-safe base64) the storage tool's argument parser accepts.

    One in 64 random ids starts with '-', which the tool reads as an option: draw again.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBrokerError(RuntimeError):
    """Kafka could not be fetched, formatted, started or reached."""


# --- jars -------------------------------------------------------------------------------


def _CDS_ARCHIVE() -> Path:  # noqa: N802 (a constant that depends on the environment)
    return cache_dir() / "kafka.jsa"


def cache_dir() -> Path:
    """Where the jars live: $FAREBOX_KAFKA_CACHE, else ~/.cache/farebox/kafka (outside the repo,
    so every clone and every CI checkout on the machine shares one download)."""
    root = os.environ.get("FAREBOX_KAFKA_CACHE") or Path.home() / ".cache" / "farebox" / "kafka"
    return Path(root) / KAFKA_VERSION


def fetch_jars(quiet: bool = True) -> Path:
    """The folder of Kafka's runtime jars, fetched with Maven on first use (atomic: a half copy is never used)."""
    lib = cache_dir() / "lib"
    if (lib / ".complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaBrokerError("Maven (mvn) is needed to fetch Kafka's jars; apt-get install maven")
    staging = Path(tempfile.mkdtemp(prefix="lib-", dir=_mkdir(cache_dir())))
    cmd = [mvn, "-B", "-f", str(POM), "dependency:copy-dependencies",
           f"-Dkafka.lib={staging}", f"-Dkafka.version={KAFKA_VERSION}"]
    if quiet:
        cmd.insert(1, "-q")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise KafkaBrokerError(f"mvn could not fetch Kafka {KAFKA_VERSION}:\n{(done.stdout + done.stderr)[-3000:]}")
    (staging / ".complete").write_text(KAFKA_VERSION)
    try:
        staging.rename(lib)
    except OSError:  # another process won the race; its copy is as good as ours
        shutil.rmtree(staging, ignore_errors=True)
    return lib


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise KafkaBrokerError("java (17+) is needed to run Kafka; apt-get install openjdk-17-jre-headless")
    return found


# --- the broker -------------------------------------------------------------------------


_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


@dataclass(frozen=True)
class BrokerConfig:
    """What goes into server.properties; defaults favour a fast start over durability (dev/test only)."""

    port: int
    controller_port: int
    data_dir: Path
    segment_bytes: int = 1_048_576  # the minimum Kafka accepts: small files, quick recovery
    retention_ms: int = 7 * 24 * 3600 * 1000

    def properties(self) -> str:
        return "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.data_dir / 'data'}",
            f"metadata.log.dir={self.data_dir / 'meta'}",
            "num.partitions=1",
            "default.replication.factor=1",
            "min.insync.replicas=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",  # one partition to load: the group coordinator is up at once
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            f"log.segment.bytes={self.segment_bytes}",
            f"log.retention.ms={self.retention_ms}",
            "log.retention.check.interval.ms=60000",
            "num.network.threads=2",
            "num.io.threads=2",
            "num.recovery.threads.per.data.dir=1",
            "background.threads=2",
            "log.cleaner.threads=1",
            "log.cleaner.dedupe.buffer.size=8388608",
            "",
        ])


class KafkaBroker:
    """One KRaft node on 127.0.0.1; ``start``/``stop`` can be repeated on the same ports and data."""

    def __init__(self, port: int | None = None, controller_port: int | None = None,
                 data_dir: Path | str | None = None) -> None:
        self._own_dir = data_dir is None
        root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="farebox-kafka-"))
        self.config = BrokerConfig(port or free_port(), controller_port or free_port(), _mkdir(root))
        self._proc: subprocess.Popen[bytes] | None = None
        self._cds_dump: Path | None = None  # where this JVM writes its class archive at exit, if it does
        self.ready_after_s: float | None = None  # last start: from exec to first good metadata answer

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.config.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / "kafka.log"

    def start(self, timeout_s: float = 60.0, detach: bool = False) -> Self:
        """Format storage if new, start the JVM, wait until a metadata request lists the broker."""
        if self.running:
            return self
        lib = fetch_jars()
        root = self.config.data_dir
        (root / "server.properties").write_text(self.config.properties())
        (root / "log4j2.properties").write_text(_LOG4J.format(log=self.log_path))
        if not (root / "meta" / "meta.properties").exists():
            self._format(lib)
        cmd = [java_binary(), *JVM_FLAGS, *self._class_data_sharing(dump=not detach),
               f"-Dlog4j2.configurationFile={root / 'log4j2.properties'}",
               "-cp", f"{lib}/*", "kafka.Kafka", str(root / "server.properties")]
        started = time.monotonic()
        out = open(root / "stdout.log", "ab")  # noqa: SIM115 (the child owns it after the fork)
        spawn = functools.partial(
            subprocess.Popen, cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=None if detach else die_with_parent, start_new_session=detach,  # noqa: PLW1509
        )
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits, so fork from one thread that
        # lives as long as the process (a test may call start() from a short-lived worker thread)
        self._proc = spawn() if detach else _LAUNCHER.submit(spawn).result()
        out.close()
        try:
            run_sync(wait_ready(self.bootstrap, timeout_s, alive=lambda: self.running))
        except KafkaBrokerError as exc:
            self.stop()
            raise KafkaBrokerError(f"{exc}{self._tail()}") from None
        self.ready_after_s = time.monotonic() - started
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (controlled shutdown, flushes logs) and wait; SIGKILL after ``timeout_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        dumped, self._cds_dump = self._cds_dump, None
        if dumped is not None and dumped.exists():
            dumped.replace(_CDS_ARCHIVE())  # atomic: a reader never sees half an archive

    def _class_data_sharing(self, dump: bool) -> list[str]:
        """AppCDS: the first clean run dumps the classes it loaded, later JVMs map them (~1 s faster start).

        The archive sits beside the jars; a JVM that finds it stale (other jars, other JDK) ignores it.
        """
        archive = _CDS_ARCHIVE()
        if archive.exists():
            return ["-Xshare:auto", f"-XX:SharedArchiveFile={archive}"]
        if not dump:  # a detached broker is stopped by another process, which cannot install the dump
            return []
        self._cds_dump = archive.with_name(f".{archive.name}.{os.getpid()}.{id(self)}")
        return [f"-XX:ArchiveClassesAtExit={self._cds_dump}"]

    def kill(self) -> None:
        """SIGKILL: the machine lost power, as far as Kafka can tell."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.config.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _format(self, lib: Path) -> None:
        cluster_id = new_cluster_id()
        cmd = [java_binary(), *JVM_FLAGS, "-Dlog4j2.configurationFile=" + str(self.config.data_dir / "log4j2.properties"),
               "-cp", f"{lib}/*", "kafka.tools.StorageTool", "format", "--ignore-formatted",
               "-t", cluster_id, "-c", str(self.config.data_dir / "server.properties")]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KafkaBrokerError(f"kafka storage format failed:\n{(done.stdout + done.stderr)[-3000:]}")

    def _tail(self) -> str:
        parts = []
        for name in ("stdout.log", "kafka.log"):
            path = self.config.data_dir / name
            if path.exists():
                parts.append(f"\n--- {name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "".join(parts)


def run_sync(coro):
    """``asyncio.run`` that also works when called from inside a running loop (in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _accepts(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


async def wait_ready(bootstrap: str, timeout_s: float, alive=lambda: True) -> None:
    """Poll with metadata requests until the broker lists itself (registered with the controller)."""
    from aiokafka.admin import AIOKafkaAdminClient  # lazy: `run.sh status` should not need it
    from aiokafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if not alive():
            raise KafkaBrokerError("the Kafka process exited before it was ready")
        if not _accepts(bootstrap):  # plain connect first: aiokafka logs every refused connection
            await asyncio.sleep(0.05)
            continue
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await admin.start()
            cluster = await admin.describe_cluster()
            if cluster.get("brokers"):
                return
        except (KafkaError, OSError) as exc:
            last = exc
        finally:
            await admin.close()
        await asyncio.sleep(0.05)
    raise KafkaBrokerError(f"Kafka at {bootstrap} not ready after {timeout_s:.0f}s (last error: {last!r})")
