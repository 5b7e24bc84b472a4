"""Logging for a farebox process: level and format from the ``logging`` settings, once at start.

``json`` writes one object per line (``time``, ``level``, ``logger``,
``message``; an access line's fields at the top level, see
``proxy.observe.access_log``); ``text`` writes a readable line. Records go to
stderr. The access logger is silenced when ``access_log`` is off, so the
request path skips building its line.

Records logged on an event loop are written once per loop turn (one write
and one flush for the turn's lines, in order); a record from any other thread,
or with no loop running, is written at once. ``flush`` (called by
``logging.shutdown`` at exit) writes whatever is still waiting.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import datetime, timezone
from typing import IO

import orjson

from farebox.settings_observe import LoggingSettings

_HANDLER_NAME = "farebox"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        access = getattr(record, "access", None)
        if access is not None:
            out["event"] = "access"
            out.update(access)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        access = getattr(record, "access", None)
        if access is not None:
            text += " " + " ".join(f"{k}={v}" for k, v in access.items() if v is not None and k not in ("method", "path"))
        return text


class TurnBatchedStreamHandler(logging.StreamHandler):
    """A ``StreamHandler`` that writes an event-loop thread's records once per loop turn."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._waiting: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush()  # keep the order: earlier loop lines first
            super().emit(record)
            return
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        if not self._waiting:
            loop.call_soon(self.flush)
        self._waiting.append(line)

    def flush(self) -> None:
        self.acquire()
        try:
            if self._waiting:
                text = "".join(self._waiting)
                self._waiting.clear()
                self.stream.write(text)
            super().flush()
        finally:
            self.release()


def configure_logging(settings: LoggingSettings, stream: IO[str] | None = None) -> logging.Handler:
    """Install the one handler on the ``farebox`` logger (replacing an earlier one); returns it."""
    # The logging HOWTO's "Optimization" switches: the formatters print none of these, and an access line
    # per request should not pay for a stack walk (findCaller) and thread/process lookups per record.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    handler = TurnBatchedStreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else TextFormatter())
    root = logging.getLogger("farebox")
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        old.flush()
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    root.propagate = False
    access = logging.getLogger("farebox.access")
    access.disabled = not settings.access_log
    return handler
