"""``MemoryResponses``: stored responses in this process, bounded by bytes (least recently written go first).

For tests and for a runtime built without a configured store; records are lost with the process. Expired
records are dropped when read and when the bound needs room.
"""

from __future__ import annotations

from collections import OrderedDict

from proxy.body import kept
from proxy.stored_responses.port import StoredResponse


class MemoryResponses:
    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.records: OrderedDict[str, tuple[bytes, int]] = OrderedDict()  # id -> (dumps, expires_at)
        self.bytes = 0

    async def put(self, record: StoredResponse) -> None:
        raw = kept(record.dumps())
        await self.delete(record.id)
        if len(raw) > self.max_bytes:
            return
        while self.records and self.bytes + len(raw) > self.max_bytes:
            _, (old, _) = self.records.popitem(last=False)
            self.bytes -= len(old)
        self.records[record.id] = (raw, record.expires_at)
        self.bytes += len(raw)

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        found = self.records.get(response_id)
        if found is None:
            return None
        if found[1] <= now:
            await self.delete(response_id)
            return None
        return StoredResponse.loads(found[0])

    async def delete(self, response_id: str) -> bool:
        found = self.records.pop(response_id, None)
        if found is not None:
            self.bytes -= len(found[0])
        return found is not None

    async def close(self) -> None:
        self.records.clear()
        self.bytes = 0
