"""The archive commands and embedded replay as an auditor runs them: exit codes, messages, nothing rewritten."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import yaml
from prometheus_client import CollectorRegistry

from farebox.archiver import RequestTable, embedded_archiver
from farebox.cli import main
from farebox.settings import load_settings
from ledger.events import RequestAdmitted, RequestSettled
from ledger.usage import TokenUsage
from proxy.control.problems import ConfigError
from reconcile.request_table import usable_table
from streams.archive.manifest import Manifest, verify
from streams.archive.read import archive_files, read_archive
from streams.archive.schema import SCHEMA_METADATA_KEY
from streams.archive.service import Housekeeper, archive_log_once
from streams.sqlite_log import SqliteEventLog
from tests.farebox.test_settings import write
from tests.streams.relist import relist

DAY = date(2026, 11, 20)


def requests(n: int, start: int = 0) -> list:
    out = []
    for i in range(start, start + n):
        at = datetime(2026, 11, 20, 9, i % 60, tzinfo=timezone.utc)
        team = ("platform", "payments")[i % 2]
        scopes = {f"team:{team}": 5_000, "bu:retail": 5_000}
        out.append(RequestAdmitted(
            time=at, request_id=f"r{i}", team=team, key_id="fb-k", business_unit="retail", app="bot", run_id=None,
            alias="chat-default", data_class="internal", est_input_tokens=10, max_output_tokens=64, holds=scopes,
            currency="INR", price_version=1, pod="p", hold_ttl_s=600, stream=False))
        if i % 5:  # every fifth request stays open: a hold
            out.append(RequestSettled(
                time=at, request_id=f"r{i}", team=team, final_status=200, attempts=1, deployment="d",
                usage=TokenUsage(input=10, output=20), cost_micro=1_000 + i, currency="INR",
                cost_by_scope={s: 1_000 + i for s in scopes}, hold_released=scopes, overrun_micro=0,
                cache_hit=False, latency_ms=5))
    return out


def append(path: Path, events: list) -> None:
    async def run() -> None:
        log = SqliteEventLog.open(path)
        for e in events:
            log.append(e)
        await log.close()

    asyncio.run(run())


@pytest.fixture
def config(tmp_path) -> Path:
    return write(tmp_path, lambda t: t.update(event_log={"path": str(tmp_path / "events.sqlite")},
                                              archive={"flush_events": 7}))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def replay(capsys, config: Path, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "replay", "--config", str(config), "--from", str(DAY), "--to", str(DAY), *extra)


def test_replay_equals_live_then_reports_lag_then_archive_first(config, capsys) -> None:
    settings = load_settings(config)
    append(settings.event_log_path, requests(40))
    next_day = [dataclasses.replace(e, time=e.time + timedelta(days=1)) for e in requests(10, start=100)]
    append(settings.event_log_path, next_day)  # outside the window: read from neither side
    assert run(capsys, "archive", "flush", "--config", str(config))[0] == 0
    code, out, _ = replay(capsys, config)
    assert code == 0 and "read 72 archived event(s), skipped 0 unreadable" in out and "0 difference(s)" in out
    assert "the log holds 72 event(s) in the window" in out
    append(settings.event_log_path, requests(3, start=40))
    code, out, _ = replay(capsys, config)
    assert code == 1
    assert "team:platform 2026-11 requests: archive 20 != live 22" in out  # r40 and r42 (r41 is payments)
    assert "bu:retail 2026-11 settled: archive " in out
    assert "the archive is 5 event(s) behind the log" in out
    code, out, _ = replay(capsys, config, "--archive-first")
    assert code == 0 and out.startswith("archived 5 pending event(s) first") and "behind" not in out


def test_a_tampered_archive_is_a_difference_and_verify_names_it(config, capsys) -> None:
    settings = load_settings(config)
    append(settings.event_log_path, requests(20))
    main(["archive", "flush", "--config", str(config)])
    capsys.readouterr()
    victim = archive_files(settings.archive_root, DAY, DAY)[0]
    victim.unlink()
    code, out, _ = replay(capsys, config)
    assert code == 1 and "difference(s)" in out and "archive" in out.splitlines()[0]
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config))
    assert code == 1 and f"missing: {victim.relative_to(settings.archive_root).as_posix()}" in out
    assert "NOT intact" in out


def test_cutting_the_chain_with_its_files_passes_alone_and_fails_against_the_published_head(config, capsys) -> None:
    """Truncating the archive (the last batches' files and their manifest entries) leaves a chain that verifies;
    the head the archiver published (farebox_archive_head) and a second system kept catches it."""
    settings = load_settings(config)
    append(settings.event_log_path, requests(20))
    main(["archive", "flush", "--config", str(config)])
    registry = CollectorRegistry()
    embedded_archiver(settings, lambda: 40, registry)  # publishes the head it finds
    assert all(orjson.loads(line)["action"] == "add"
               for line in (settings.archive_root / "_manifest.jsonl").read_bytes().splitlines())
    seq = registry.get_sample_value("farebox_archive_head", {"head": Manifest(settings.archive_root).head()[1]})
    [published] = [s.labels["head"] for m in registry.collect() if m.name == "farebox_archive_head" for s in m.samples]
    assert seq == Manifest(settings.archive_root).head()[0] >= 3
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config), "--expect-head", published)
    assert code == 0 and "the expected head is in the chain" in out
    manifest = settings.archive_root / "_manifest.jsonl"
    lines = manifest.read_bytes().splitlines(keepends=True)
    for line in lines[-2:]:  # the last two batches go, files and entries together
        for f in orjson.loads(line)["files"]:
            (settings.archive_root / f["path"]).unlink()
    manifest.write_bytes(b"".join(lines[:-2]))
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config))
    assert code == 0 and "intact" in out, out  # alone, the cut is invisible
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config), "--expect-head", published)
    assert code == 1 and "is in no manifest entry: entries were cut off" in out
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config), "--expect-head",
                       orjson.loads(lines[-3])["hash"])
    assert code == 0


def test_bad_archives_are_clear_errors_and_nothing_is_rewritten(config, capsys) -> None:
    settings = load_settings(config)
    code, _, err = replay(capsys, config)
    assert code == 2 and "no event log" in err
    append(settings.event_log_path, requests(10))
    code, _, err = replay(capsys, config)
    assert code == 2 and "is empty: nothing has been archived yet" in err
    code, _, err = run(capsys, "archive", "verify", "--config", str(config))
    assert code == 2 and "is empty" in err
    main(["archive", "flush", "--config", str(config)])
    capsys.readouterr()
    path = archive_files(settings.archive_root, DAY, DAY)[0]
    newer = pq.read_table(path).replace_schema_metadata({SCHEMA_METADATA_KEY: b"99"})
    pq.write_table(newer, path)
    code, _, err = replay(capsys, config)  # rewritten in place: the manifest does not vouch for it
    assert code == 1 and f"warning: changed: {path.relative_to(settings.archive_root).as_posix()}" in err
    relist(settings.archive_root, path)  # as a newer farebox would list it
    written = path.read_bytes()
    code, _, err = replay(capsys, config)
    assert code == 2 and "archive schema 99 is newer" in err and str(path) in err
    path.write_bytes(written[: len(written) // 3])  # truncated, and listed so (a writer that listed a bad file)
    relist(settings.archive_root, path)
    for argv in (["replay", "--config", str(config), "--from", str(DAY), "--to", str(DAY)],
                 ["archive", "compact", "--config", str(config), "--before", "2026-11-30"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and str(path) in err, err
    assert path.read_bytes() == written[: len(written) // 3]
    manifest = settings.archive_root / "_manifest.jsonl"
    lines = manifest.read_bytes().splitlines()
    manifest.write_bytes(b"\n".join(lines[1:]) + b"\n")  # the first entry dropped
    code, _, err = replay(capsys, config)
    assert code == 2 and "the manifest does not chain (manifest entry 1 has seq 2" in err
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config))
    assert code == 1 and "chain broken" in out
    code, _, err = replay(capsys, config, "--source", "kafka")
    assert code == 2 and "distributed" in err
    code, _, err = run(capsys, "replay", "--config", str(config), "--from", "2026-13-01", "--to", str(DAY))
    assert code == 2 and "month must be in 1..12" in err


def test_compact_command_merges_closed_days(config, capsys) -> None:
    settings = load_settings(config)
    append(settings.event_log_path, requests(30))
    main(["archive", "flush", "--config", str(config)])
    assert len(archive_files(settings.archive_root, DAY, DAY)) > 1
    code, out, _ = run(capsys, "archive", "compact", "--config", str(config))
    assert code == 0 and "2026-11-20" in out
    assert [p.name[:4] for p in archive_files(settings.archive_root, DAY, DAY)] == ["day-"]
    assert run(capsys, "archive", "verify", "--config", str(config))[0] == 0
    assert replay(capsys, config)[0] == 0


def test_embedded_archiver_passes_and_lag(config) -> None:
    settings = load_settings(config)
    append(settings.event_log_path, requests(10))
    head = [18]
    archiver = embedded_archiver(settings, lambda: head[0])
    assert archiver.lag_events() == 18 and archiver.due()  # flush_events: 7
    assert archiver.flush_sync() == 18
    assert archiver.lag_events() == 0 and archiver.lag_seconds() == 0 and not archiver.due()
    head[0] = 20
    assert archiver.lag_events() == 2 and archiver.lag_seconds() > 0


def test_a_backlog_is_decoded_by_the_childs_pool_and_archives_the_same_rows(tmp_path) -> None:
    """More than ``flush_events`` pending: the archiver's child decodes the batches in its own decode processes
    (reading and decoding the next while it writes one), then stops them at close; the archive holds each event
    once, the same rows as a pass without a pool, and verifies intact."""
    config = write(tmp_path, lambda t: t.update(event_log={"path": str(tmp_path / "events.sqlite")},
                                                archive={"flush_events": 1100, "decode_processes": 2}))
    settings = load_settings(config)
    events = requests(1500)
    append(settings.event_log_path, events)
    archiver = embedded_archiver(settings, lambda: len(events))
    try:
        assert archiver.lag_events() > settings.archive.flush_events
        assert archiver.flush_sync() == len(events)
        assert archiver.lag_events() == 0
    finally:
        archiver.close()
    alone = tmp_path / "alone"
    assert archive_log_once(settings.event_log_path, alone, 1100) == len(events)

    def rows(root: Path) -> list[dict]:
        return sorted(read_archive(root, DAY, DAY).drop_columns(["stored_at"]).to_pylist(), key=lambda r: r["id"])

    assert len(rows(settings.archive_root)) == len(events)
    assert rows(settings.archive_root) == rows(alone)
    assert verify(settings.archive_root).intact


def test_catch_up_archives_the_lag_at_once_and_then_nothing(config) -> None:
    """What the admin usage API awaits before each query: a pass only when the log is ahead of the archive."""
    settings = load_settings(config)
    append(settings.event_log_path, requests(4))
    head = [7]
    archiver = embedded_archiver(settings, lambda: head[0])

    async def twice() -> tuple[int, int]:
        return await archiver.catch_up(), await archiver.catch_up()

    assert asyncio.run(twice()) == (7, 0)
    assert archiver.lag_events() == 0


def test_archive_settings_are_parsed_and_every_problem_reported(tmp_path) -> None:
    settings = load_settings(write(tmp_path))
    assert settings.archive_root == tmp_path / "archive" and settings.archive.compact
    path = write(tmp_path, lambda t: t.update(archive={"path": "arch", "retention_days": 400, "compact": False}))
    loaded = load_settings(path)
    assert loaded.archive_root == tmp_path / "arch" and loaded.archive.retention_days == 400
    assert settings.archive.decoders() == ((os.cpu_count() or 1) if (os.cpu_count() or 1) > 1 else 0)
    assert load_settings(write(tmp_path, lambda t: t.update(archive={"decode_processes": 0}))).archive.decoders() == 0
    assert load_settings(write(tmp_path, lambda t: t.update(archive={"decode_processes": 3}))).archive.decoders() == 3
    bad = write(tmp_path, lambda t: t.update(archive={"flush_interval_s": 0, "compact_hour_utc": 24,
                                                      "retention_days": 0, "decode_processes": -1,
                                                      "colour": "red"}))
    with pytest.raises(ConfigError) as err:
        load_settings(bad)
    for fragment in ("archive.flush_interval_s: must be >= 0.05", "archive.compact_hour_utc: must be an hour",
                     "archive.retention_days: must be >= 1", "archive.decode_processes: must be >= 0",
                     "archive.colour: unknown field"):
        assert fragment in str(err.value)
    assert yaml.safe_load(bad.read_text())["archive"]["colour"] == "red"


def test_housekeeper_merges_an_hour_after_its_grace_and_a_day_from_compact_hour(config) -> None:
    settings = load_settings(config)  # compact_hour_utc: 1
    append(settings.event_log_path, requests(40))  # all in 2026-11-20 09:xx, 7 events a file
    main(["archive", "flush", "--config", str(config)])
    root, keeper = settings.archive_root, Housekeeper(settings.archive_root, settings.archive, RequestTable("Asia/Kolkata"))
    names = lambda: sorted(p.name[:5] for p in archive_files(root, DAY, DAY))  # noqa: E731
    assert len(names()) > 5

    def at(day: int, hour: int, minute: int) -> datetime:
        return datetime(2026, 11, day, hour, minute, tzinfo=timezone.utc)

    keeper.run(at(20, 10, 5))  # 09:00-10:00 ended 5 minutes ago: inside the grace
    assert len(names()) > 5
    assert keeper.due(at(20, 10, 15)) and not keeper.due(at(20, 10, 5))
    keeper.run(at(20, 10, 15))
    assert names() == ["hour-"]
    later = [dataclasses.replace(e, time=at(20, 11, 30)) for e in requests(1, start=50)]  # another hour
    append(settings.event_log_path, later)
    main(["archive", "flush", "--config", str(config)])
    keeper.run(at(21, 0, 30))  # before compact_hour_utc: the day stays as it is
    assert names() == ["hour-", "part-"] and not keeper.due(at(21, 0, 40))
    keeper.run(at(21, 1, 0))
    assert len(names()) == 1 and names()[0].startswith("day-")
    table = usable_table(root, "Asia/Kolkata")  # the per-request table of the closed days, listed in the manifest
    assert table is not None and not table.fresh
    assert main(["archive", "verify", "--config", str(config)]) == 0


def test_verify_publish_appends_the_head_once_as_an_event(config, capsys) -> None:
    """`verify --publish` on an intact archive: an archive.head event in the log with the head verify printed; an
    unchanged head published again appends nothing (same id); an archive that is not intact publishes nothing."""
    from ledger.events import ArchiveHead
    from tests.harness import read_events

    settings = load_settings(config)
    append(settings.event_log_path, requests(10))
    main(["archive", "flush", "--config", str(config)])
    for _ in range(2):
        code, out, _ = run(capsys, "archive", "verify", "--config", str(config), "--publish")
        assert code == 0 and "published archive/head/" in out
    heads = [e for e in read_events(settings.event_log_path) if isinstance(e, ArchiveHead)]
    entry, head = Manifest(settings.archive_root).head()
    assert [(e.entry, e.head) for e in heads] == [(entry, head)] and heads[0].files >= 1
    victim = archive_files(settings.archive_root, DAY, DAY)[0]
    victim.unlink()
    code, out, _ = run(capsys, "archive", "verify", "--config", str(config), "--publish")
    assert code == 1 and "published" not in out
