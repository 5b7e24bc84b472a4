"""The simulator's files and batches, kept in memory per account (``infra.simulator.batches`` serves them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType


@dataclass(slots=True)
class SimBatch:
    id: str
    account: str
    wire: ModuleType  # openai_wire | anthropic_wire
    lines: list[tuple[str, dict]]  # (custom_id, request body)
    created_at: int
    expires_at: int
    input_file_id: str | None = None
    status: str = "in_progress"  # OpenAI's names; Anthropic's processing_status is read from them
    results: list[tuple[str, bool, dict]] = field(default_factory=list)  # (custom_id, ok, body or error)
    times: dict[str, int] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict | None = None


class Batches:
    """The simulator's files and batches (in memory, per account)."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str, str, bytes]] = {}  # id -> (account, purpose, content)
        self.batches: dict[str, SimBatch] = {}

    def reset(self) -> None:
        self.files.clear()
        self.batches.clear()
