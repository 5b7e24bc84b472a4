"""``SqlBatches``: files, batches and their lines in their own database (a SQLite file by default, PostgreSQL by
URL: what distributed pods share), through SQLAlchemy Core, blocking calls on a thread.

Tables: ``fb_files`` (metadata and content), ``fb_batches`` (one row per batch; ``doc`` keeps metadata, errors
and times as JSON), ``fb_batch_lines`` (one row per input line: its request, its state, its output line).
A claim selects runnable lines and updates them in one transaction that holds them: on PostgreSQL the rows are
locked as they are read (``FOR UPDATE SKIP LOCKED``: a racing runner takes other lines), on SQLite the
transaction holds the write lock from its start (``BEGIN IMMEDIATE``): a line is never held by two runners. One
``UPDATE`` per batch claims all its lines taken at once. A batch ends in one transaction that moves its status (conditionally: the first to
end it wins) and writes its output and error files.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

import orjson
import sqlalchemy as sa

from proxy.batches.lines import Line
from proxy.batches.records import ACTIVE, Answer, BatchRecord, Claimed, Counts, FileRecord, round_robin
from proxy.batches.release_rows import ReservedRows
from proxy.batches.sql_end import end_batch, file_row
from proxy.batches.sql_provider import ProviderRows
from proxy.batches.tables import BATCHES, FILES, LINES, META, added_columns


class SqlBatches(ProviderRows, ReservedRows):
    def __init__(self, url: str) -> None:
        sqlite = url.startswith("sqlite")
        self.engine = sa.create_engine(url, future=True, connect_args={"timeout": 30} if sqlite else {})
        self.reader = self.engine  # reads: on SQLite an engine of their own, whose transactions take no lock
        if sqlite:
            sa.event.listen(self.engine, "connect", _wal)
            sa.event.listen(self.engine, "begin", _immediate)
            self.reader = sa.create_engine(url, future=True, connect_args={"timeout": 30})
        try:
            META.create_all(self.engine)
        except (sa.exc.OperationalError, sa.exc.IntegrityError, sa.exc.ProgrammingError):
            META.create_all(self.engine)  # another process created them between check and create
        added_columns(self.engine)

    # files

    def _put_file(self, r: FileRecord, content: bytes) -> None:
        with self.engine.begin() as conn:
            conn.execute(FILES.insert(), [file_row(r, content)])

    def _get_file(self, file_id: str) -> FileRecord | None:
        with self.reader.connect() as conn:
            row = conn.execute(sa.select(*_FILE_COLS).where(FILES.c.id == file_id)).first()
        return None if row is None else FileRecord(*row)

    def _content(self, file_id: str) -> bytes | None:
        with self.reader.connect() as conn:
            raw = conn.scalar(sa.select(FILES.c.content).where(FILES.c.id == file_id))
        return None if raw is None else bytes(raw)

    def _list_files(self, team: str, purpose: str | None, after: str | None, limit: int,
                    descending: bool) -> list[FileRecord]:
        order = (FILES.c.created_at.desc(), FILES.c.id.desc()) if descending else (FILES.c.created_at, FILES.c.id)
        q = sa.select(*_FILE_COLS).where(FILES.c.team == team).order_by(*order).limit(limit)
        if purpose is not None:
            q = q.where(FILES.c.purpose == purpose)
        with self.reader.connect() as conn:
            if after is not None:
                at = conn.execute(sa.select(FILES.c.created_at, FILES.c.id).where(FILES.c.id == after)).first()
                if at is not None:
                    key = sa.tuple_(FILES.c.created_at, FILES.c.id)
                    q = q.where(key < sa.tuple_(*at) if descending else key > sa.tuple_(*at))
            return [FileRecord(*row) for row in conn.execute(q)]

    def _delete_file(self, file_id: str) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(FILES.delete().where(FILES.c.id == file_id)).rowcount)

    # batches

    def _create(self, r: BatchRecord, lines: Sequence[Line]) -> None:
        with self.engine.begin() as conn:
            conn.execute(BATCHES.insert(), [{
                "id": r.id, "team": r.team, "key_id": r.key_id, "endpoint": r.endpoint,
                "input_file_id": r.input_file_id, "completion_window": r.completion_window, "status": r.status,
                "created_at": r.created_at, "expires_at": r.expires_at, "output_file_id": None,
                "error_file_id": None, "doc": orjson.dumps({"metadata": r.metadata, "errors": r.errors,
                                                            "times": r.times, "provider": r.provider,
                                                            "reserved": r.reserved})}])
            state = "provider" if r.provider is not None else "pending"  # a provider's lines are never claimed
            for start in range(0, len(lines), 1000):
                conn.execute(LINES.insert(), [
                    {"batch_id": r.id, "number": ln.number, "custom_id": ln.custom_id, "body": ln.body,
                     "state": state, "not_before": 0, "claims": 0, "generation": 0, "held_micro": ln.held}
                    for ln in lines[start:start + 1000]])

    def _get(self, batch_id: str) -> BatchRecord | None:
        with self.reader.connect() as conn:
            row = conn.execute(sa.select(BATCHES).where(BATCHES.c.id == batch_id)).first()
            return None if row is None else _batch(row, _counts(conn, [batch_id]).get(batch_id, Counts()))

    def _list(self, team: str | None, after: str | None, limit: int, status: str | None = None,
              endpoints: Sequence[str] | None = None) -> list[BatchRecord]:
        q = sa.select(BATCHES).order_by(BATCHES.c.created_at.desc(), BATCHES.c.id.desc()).limit(limit)
        if endpoints is not None:
            q = q.where(BATCHES.c.endpoint.in_(list(endpoints)))
        if team is not None:
            q = q.where(BATCHES.c.team == team)
        if status is not None:
            q = q.where(BATCHES.c.status == status)
        with self.reader.connect() as conn:
            if after is not None:
                at = conn.execute(sa.select(BATCHES.c.created_at, BATCHES.c.id).where(BATCHES.c.id == after)).first()
                if at is not None:
                    q = q.where(sa.tuple_(BATCHES.c.created_at, BATCHES.c.id) < sa.tuple_(*at))
            rows = list(conn.execute(q))
            counts = _counts(conn, [row.id for row in rows])
        return [_batch(row, counts.get(row.id, Counts())) for row in rows]

    def _cancel(self, batch_id: str, now: int) -> BatchRecord | None:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BATCHES.c.status, BATCHES.c.doc).where(BATCHES.c.id == batch_id)
                               .with_for_update()).first()
            if row is not None and row.status == "in_progress":
                doc = orjson.loads(row.doc)
                doc["times"]["cancelling_at"] = now
                conn.execute(BATCHES.update().where(BATCHES.c.id == batch_id)
                             .values(status="cancelling", doc=orjson.dumps(doc)))
        return self._get(batch_id)

    def _delete_batch(self, batch_id: str) -> bool:
        with self.engine.begin() as conn:
            conn.execute(LINES.delete().where(LINES.c.batch_id == batch_id))
            return bool(conn.execute(BATCHES.delete().where(BATCHES.c.id == batch_id)).rowcount)

    def _line_results(self, batch_id: str) -> list[tuple[str, bytes | None]]:
        with self.reader.connect() as conn:
            return [(custom_id, None if result is None else bytes(result)) for custom_id, result in conn.execute(
                sa.select(LINES.c.custom_id, LINES.c.result).where(LINES.c.batch_id == batch_id)
                .order_by(LINES.c.number))]

    # lines

    def _claim(self, runner: str, now: int, until: int, limit: int) -> list[Claimed]:
        runnable = sa.and_(
            sa.or_(LINES.c.state == "pending", sa.and_(LINES.c.state == "claimed", LINES.c.claimed_until < now)),
            LINES.c.not_before <= now)
        live_now = sa.select(BATCHES.c.id, BATCHES.c.team).where(
            BATCHES.c.status == "in_progress", BATCHES.c.expires_at > now).order_by(BATCHES.c.created_at)
        with self.reader.connect() as conn:  # the common case, nothing to run: no write lock taken
            if conn.execute(live_now.limit(1)).first() is None:
                return []
        with self.engine.begin() as conn:
            live = list(conn.execute(live_now))
            teams: dict[str, list[str]] = {}
            for batch_id, team in live:
                teams.setdefault(team, []).append(batch_id)
            offered: dict[str, list[Any]] = {}
            for team, batch_ids in teams.items():  # each team's runnable lines, its oldest batch first
                offered[team] = list(conn.execute(
                    sa.select(LINES.c.batch_id, LINES.c.number, LINES.c.custom_id, LINES.c.body, LINES.c.claims,
                              LINES.c.generation, BATCHES.c.key_id, BATCHES.c.endpoint, LINES.c.held_micro)
                    .join(BATCHES, BATCHES.c.id == LINES.c.batch_id)
                    .where(runnable, LINES.c.batch_id.in_(batch_ids))
                    .order_by(BATCHES.c.created_at, LINES.c.batch_id, LINES.c.number).limit(limit)
                    .with_for_update(of=LINES, skip_locked=True)))  # PostgreSQL: racing runners take other lines
            picked = round_robin(offered, limit)
            by_batch: dict[str, list[int]] = {}
            for row in picked:
                by_batch.setdefault(row.batch_id, []).append(row.number)
            for batch_id, numbers in by_batch.items():  # the rows are ours: locked (PostgreSQL) or the lock held
                conn.execute(LINES.update().where(LINES.c.batch_id == batch_id, LINES.c.number.in_(numbers))
                             .values(state="claimed", runner=runner, claimed_until=until, claims=LINES.c.claims + 1))
            got = [Claimed(row.batch_id, row.number, row.custom_id, bytes(row.body), row.claims + 1, row.key_id,
                           row.endpoint, row.generation, row.held_micro) for row in picked]
        return got

    def _done(self, line: Claimed, runner: str, ok: bool, result: bytes, request_id: str | None,
              cost_micro: int | None) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(LINES.update().where(
                LINES.c.batch_id == line.batch_id, LINES.c.number == line.number, LINES.c.state == "claimed",
                LINES.c.runner == runner).values(state="done", ok=ok, result=result, request_id=request_id,
                                                 claimed_until=None, cost_micro=cost_micro)).rowcount)

    def _done_many(self, answers: Sequence[Answer], runner: str) -> int:
        kept = 0
        with self.engine.begin() as conn:
            for a in answers:
                kept += conn.execute(LINES.update().where(
                    LINES.c.batch_id == a.line.batch_id, LINES.c.number == a.line.number, LINES.c.state == "claimed",
                    LINES.c.runner == runner).values(state="done", ok=a.ok, result=a.result, request_id=a.request_id,
                                                     claimed_until=None, cost_micro=a.cost_micro,
                                                     list_micro=a.list_micro)).rowcount
        return kept

    def _renew(self, lines: Sequence[Claimed], runner: str, until: int) -> None:
        with self.engine.begin() as conn:
            for line in lines:
                conn.execute(LINES.update().where(
                    LINES.c.batch_id == line.batch_id, LINES.c.number == line.number, LINES.c.state == "claimed",
                    LINES.c.runner == runner).values(claimed_until=until))

    def _release(self, line: Claimed, runner: str, not_before: int, used: bool) -> None:
        with self.engine.begin() as conn:
            conn.execute(LINES.update().where(
                LINES.c.batch_id == line.batch_id, LINES.c.number == line.number, LINES.c.state == "claimed",
                LINES.c.runner == runner).values(state="pending", runner=None, claimed_until=None,
                                                 not_before=not_before, claims=LINES.c.claims - 1,
                                                 generation=LINES.c.generation + (1 if used else 0)))

    # ending

    def _finish(self, now: int, new_file_id: Callable[[], str],
                unrun: Callable[[str, str], bytes]) -> list[BatchRecord]:
        ended: list[str] = []
        with self.reader.connect() as conn:
            candidates = [(batch_id, status, expires_at) for batch_id, status, expires_at in conn.execute(
                sa.select(BATCHES.c.id, BATCHES.c.status, BATCHES.c.expires_at).where(BATCHES.c.status.in_(ACTIVE)))
                if status != "in_progress" or expires_at <= now or conn.execute(  # running with lines to go: not yet
                    sa.select(LINES.c.number).where(LINES.c.batch_id == batch_id, LINES.c.state != "done")
                    .limit(1)).first() is None]
        for batch_id, status, expires_at in candidates:
            if self._end(batch_id, status, expires_at, now, new_file_id, unrun):
                ended.append(batch_id)
        return [b for b in (self._get(i) for i in ended) if b is not None]

    def _end(self, batch_id: str, status: str, expires_at: int, now: int, new_file_id: Callable[[], str],
             unrun: Callable[[str, str], bytes]) -> bool:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BATCHES).where(BATCHES.c.id == batch_id).with_for_update()).first()
            if row is None or row.status != status or orjson.loads(row.doc).get("provider") is not None:
                return False  # another runner ended it (or it was cancelled) meanwhile; a provider's ends by its run
            states = dict(conn.execute(sa.select(LINES.c.state, sa.func.count()).where(LINES.c.batch_id == batch_id)
                                       .group_by(LINES.c.state)).all())
            in_flight = conn.scalar(sa.select(sa.func.count()).where(
                LINES.c.batch_id == batch_id, LINES.c.state == "claimed", LINES.c.claimed_until >= now)) or 0
            if status == "cancelling" and not in_flight:
                final = "cancelled"
            elif not states.get("pending") and not states.get("claimed"):
                final = "completed"
            elif expires_at <= now and not in_flight:
                final = "expired"
            else:
                return False
            held = self._unrun(conn, batch_id)
            end_batch(conn, row, final, now, new_file_id, unrun)
            self._mark_release(conn, batch_id, held)
        return True

    def _queued(self) -> int:
        with self.reader.connect() as conn:
            return int(conn.scalar(sa.select(sa.func.count()).select_from(LINES).join(
                BATCHES, BATCHES.c.id == LINES.c.batch_id).where(
                LINES.c.state != "done", BATCHES.c.status == "in_progress")) or 0)

    def _running(self, batch_ids: set[str]) -> set[str]:
        with self.reader.connect() as conn:
            return set(conn.scalars(sa.select(BATCHES.c.id).where(BATCHES.c.id.in_(sorted(batch_ids)),
                                                                  BATCHES.c.status == "in_progress")))

    # async port

    async def running(self, batch_ids: set[str]) -> set[str]:
        return await asyncio.to_thread(self._running, batch_ids) if batch_ids else set()

    async def queued(self) -> int:
        return await asyncio.to_thread(self._queued)

    async def put_file(self, record: FileRecord, content: bytes) -> None:
        await asyncio.to_thread(self._put_file, record, content)

    async def get_file(self, file_id: str) -> FileRecord | None:
        return await asyncio.to_thread(self._get_file, file_id)

    async def file_content(self, file_id: str) -> bytes | None:
        return await asyncio.to_thread(self._content, file_id)

    async def list_files(self, team: str, purpose: str | None, after: str | None, limit: int,
                         descending: bool) -> list[FileRecord]:
        return await asyncio.to_thread(self._list_files, team, purpose, after, limit, descending)

    async def delete_file(self, file_id: str) -> bool:
        return await asyncio.to_thread(self._delete_file, file_id)

    async def create_batch(self, record: BatchRecord, lines: Sequence[Line]) -> None:
        await asyncio.to_thread(self._create, record, lines)

    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        return await asyncio.to_thread(self._get, batch_id)

    async def list_batches(self, team: str | None, after: str | None, limit: int, status: str | None = None,
                           endpoints: Sequence[str] | None = None) -> list[BatchRecord]:
        return await asyncio.to_thread(self._list, team, after, limit, status, endpoints)

    async def delete_batch(self, batch_id: str) -> bool:
        return await asyncio.to_thread(self._delete_batch, batch_id)

    async def line_results(self, batch_id: str) -> list[tuple[str, bytes | None]]:
        return await asyncio.to_thread(self._line_results, batch_id)

    async def cancel(self, batch_id: str, now: int) -> BatchRecord | None:
        return await asyncio.to_thread(self._cancel, batch_id, now)

    async def claim(self, runner: str, now: int, until: int, limit: int) -> list[Claimed]:
        return await asyncio.to_thread(self._claim, runner, now, until, limit)

    async def done(self, line: Claimed, runner: str, ok: bool, result: bytes, request_id: str | None,
                   cost_micro: int | None = None) -> bool:
        return await asyncio.to_thread(self._done, line, runner, ok, result, request_id, cost_micro)

    async def done_many(self, answers: Sequence[Answer], runner: str) -> int:
        return await asyncio.to_thread(self._done_many, answers, runner) if answers else 0

    async def renew(self, lines: Sequence[Claimed], runner: str, until: int) -> None:
        if lines:
            await asyncio.to_thread(self._renew, lines, runner, until)

    async def release(self, line: Claimed, runner: str, not_before: int, used: bool = True) -> None:
        await asyncio.to_thread(self._release, line, runner, not_before, used)

    async def finish(self, now: int, new_file_id: Callable[[], str],
                     unrun: Callable[[str, str], bytes]) -> list[BatchRecord]:
        return await asyncio.to_thread(self._finish, now, new_file_id, unrun)

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)
        if self.reader is not self.engine:
            await asyncio.to_thread(self.reader.dispose)


_FILE_COLS = (FILES.c.id, FILES.c.team, FILES.c.key_id, FILES.c.purpose, FILES.c.filename, FILES.c.bytes,
              FILES.c.created_at, FILES.c.expires_at)


def _counts(conn: sa.Connection, ids: list[str]) -> dict[str, Counts]:
    if not ids:
        return {}
    out: dict[str, list[int]] = {}
    for batch_id, ok, n, cost, listed in conn.execute(
            sa.select(LINES.c.batch_id, LINES.c.ok, sa.func.count(), sa.func.sum(LINES.c.cost_micro),
                      sa.func.sum(sa.func.coalesce(LINES.c.list_micro, LINES.c.cost_micro)))
            .where(LINES.c.batch_id.in_(ids)).group_by(LINES.c.batch_id, LINES.c.ok)):
        c = out.setdefault(batch_id, [0, 0, 0, 0, 0])
        c[0] += n
        c[3] += int(cost or 0)
        c[4] += int(listed or 0)
        if ok is True:
            c[1] += n
        elif ok is False:
            c[2] += n
    return {k: Counts(*v) for k, v in out.items()}


def _batch(row: Any, counts: Counts) -> BatchRecord:
    doc = orjson.loads(row.doc)
    return BatchRecord(row.id, row.team, row.key_id, row.endpoint, row.input_file_id, row.completion_window,
                       row.status, row.created_at, row.expires_at, doc["metadata"], doc["errors"], doc["times"],
                       row.output_file_id, row.error_file_id, counts, doc.get("provider"),
                       doc.get("reserved"))


def _wal(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    dbapi_connection.isolation_level = None  # transactions begun by _immediate, not by the driver
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _immediate(conn: sa.Connection) -> None:
    """SQLite: every transaction takes the write lock when it begins. A read-then-write transaction (a claim, an
    end) begun deferred fails with SQLITE_BUSY when another process wrote since its read; begun immediate it
    waits its turn (the ``timeout``)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")
