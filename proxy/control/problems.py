"""Collecting every config problem at once, each with its path in the file.

A reader walks a parsed YAML/JSON tree with a ``Reader`` that knows its path
(``aliases[0].deployments``); every mistake is recorded, never raised on the
first one, so ``farebox config check`` shows them all together.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Iterable

_MISSING = object()


class ConfigError(ValueError):
    """One or more problems in a config file; ``problems`` lists them all."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{lines}")


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)

    def raise_if_any(self, source: str) -> None:
        if self.items:
            raise ConfigError(self.items, source)


class Reader:
    """A typed view of one mapping in the config tree, recording problems."""

    def __init__(self, data: Any, path: str, problems: Problems) -> None:
        self.path = path
        self.problems = problems
        if not isinstance(data, dict):
            if data is not None:
                problems.add(path, f"expected a mapping, got {type(data).__name__}")
            data = {}
        self.data: dict = data
        self._read: set[str] = set()

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def _get(self, name: str, required: bool) -> Any:
        self._read.add(name)
        if name not in self.data or self.data[name] is None:
            if required:
                self.problems.add(self.at(name), "is required")
            return _MISSING
        return self.data[name]

    def str(self, name: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> Any:
        value = self._get(name, default is _MISSING)
        if value is _MISSING:
            return None if default is _MISSING else default
        if not isinstance(value, str) or not value.strip():
            self.problems.add(self.at(name), "must be a non-empty string")
            return None if default is _MISSING else default
        if choices is not None and value not in choices:
            self.problems.add(self.at(name), f"must be one of {sorted(choices)}, got {value!r}")
        return value

    def int(self, name: str, default: Any = _MISSING, minimum: int | None = 0) -> Any:
        value = self._get(name, default is _MISSING)
        if value is _MISSING:
            return None if default is _MISSING else default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(self.at(name), f"must be an integer, got {value!r}")
            return None if default is _MISSING else default
        if minimum is not None and value < minimum:
            self.problems.add(self.at(name), f"must be >= {minimum}, got {value}")
        return value

    def number(self, name: str, default: Any = _MISSING, minimum: float = 0) -> Any:
        value = self._get(name, default is _MISSING)
        if value is _MISSING:
            return None if default is _MISSING else default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problems.add(self.at(name), f"must be a number, got {value!r}")
            return None if default is _MISSING else default
        if value < minimum:
            self.problems.add(self.at(name), f"must be >= {minimum}, got {value}")
        return float(value)

    def decimal(self, name: str, default: Any = _MISSING) -> Any:
        """Money and prices: quoted strings preferred; numbers are read via str()."""
        value = self._get(name, default is _MISSING)
        if value is _MISSING:
            return None if default is _MISSING else default
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.problems.add(self.at(name), f"must be a decimal number, got {value!r}")
            return None
        try:
            result = Decimal(str(value))
        except InvalidOperation:
            self.problems.add(self.at(name), f"must be a decimal number, got {value!r}")
            return None
        if not result.is_finite() or result < 0:
            self.problems.add(self.at(name), f"must be a finite number >= 0, got {value!r}")
            return None
        return result

    def bool(self, name: str, default: bool) -> bool:
        value = self._get(name, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.problems.add(self.at(name), f"must be true or false, got {value!r}")
            return default
        return value

    def str_list(self, name: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> list[str]:
        value = self._get(name, default is _MISSING)
        if value is _MISSING:
            return list(default) if default is not _MISSING else []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problems.add(self.at(name), "must be a list of strings")
            return []
        if choices is not None:
            allowed = set(choices)
            for i, v in enumerate(value):
                if v not in allowed:
                    self.problems.add(f"{self.at(name)}[{i}]", f"must be one of {sorted(allowed)}, got {v!r}")
        return value

    def child(self, name: str, required: bool = False) -> "Reader":
        value = self._get(name, required)
        return Reader(None if value is _MISSING else value, self.at(name), self.problems)

    def items(self, name: str, required: bool = False) -> list["Reader"]:
        value = self._get(name, required)
        if value is _MISSING:
            return []
        if not isinstance(value, list):
            self.problems.add(self.at(name), "must be a list")
            return []
        return [Reader(v, f"{self.at(name)}[{i}]", self.problems) for i, v in enumerate(value)]

    def skip(self, *names: str) -> None:
        """Fields another reader owns: not unknown here."""
        self._read.update(names)

    def reject_unknown(self) -> None:
        """Typos are errors, not silently ignored settings."""
        for name in self.data:
            if name not in self._read:
                self.problems.add(self.at(name), "unknown field")
