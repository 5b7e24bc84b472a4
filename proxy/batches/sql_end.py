"""How a batch ends in the store (``SqlBatches`` and its provider part): its final status and its files, written
inside the caller's transaction so a finished batch always has its files."""

from __future__ import annotations

from typing import Any, Callable

import orjson
import sqlalchemy as sa

from proxy.batches.lines import ENDPOINTS as FILE_ENDPOINTS
from proxy.batches.records import FileRecord
from proxy.batches.tables import BATCHES, FILES, LINES


def end_batch(conn: sa.Connection, row: Any, final: str, now: int, new_file_id: Callable[[], str],
              unrun: Callable[[str, str], bytes]) -> None:
    """Move the batch ``row`` to ``final`` and write its output and error files (inside the caller's
    transaction): lines with a result go to their file; an expired batch's lines that never ran are error lines
    (``unrun``) and are done."""
    ok_lines, error_lines = [], []
    for custom_id, ok, result in conn.execute(
            sa.select(LINES.c.custom_id, LINES.c.ok, LINES.c.result)
            .where(LINES.c.batch_id == row.id).order_by(LINES.c.number)):
        if result is not None:
            (ok_lines if ok else error_lines).append(bytes(result))
        elif final == "expired":
            error_lines.append(unrun(final, custom_id))
    if final == "expired" or orjson.loads(row.doc).get("provider") is not None:
        unfinished = LINES.c.state != "done" if final == "expired" else LINES.c.state == "provider"
        conn.execute(LINES.update().where(LINES.c.batch_id == row.id, unfinished)
                     .values(state="done", ok=False, claimed_until=None))
    doc = orjson.loads(row.doc)
    doc["times"][f"{final}_at"] = now
    values: dict[str, Any] = {"status": final, "doc": orjson.dumps(doc)}
    for column, lines, purpose in (("output_file_id", ok_lines, "batch_output"),
                                   ("error_file_id", error_lines, "batch_output")):
        if lines and row.endpoint in FILE_ENDPOINTS:  # (a message batch's results are read from its lines)
            content = b"\n".join(lines) + b"\n"
            file_id = new_file_id()
            name = f"{row.id}_{'output' if column == 'output_file_id' else 'error'}.jsonl"
            conn.execute(FILES.insert(), [file_row(FileRecord(file_id, row.team, row.key_id, purpose, name,
                                                               len(content), now), content)])
            values[column] = file_id
    conn.execute(BATCHES.update().where(BATCHES.c.id == row.id).values(**values))


def file_row(r: FileRecord, content: bytes) -> dict[str, Any]:
    return {"id": r.id, "team": r.team, "key_id": r.key_id, "purpose": r.purpose, "filename": r.filename,
            "bytes": r.bytes, "created_at": r.created_at, "expires_at": r.expires_at, "content": content}
