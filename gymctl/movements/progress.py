"""How long library work reports progress: the CLI draws bars, jobs and HTTP report nothing."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, label: str, total: int) -> None: ...

    def advance(self, count: int = 1) -> None: ...


class Silent:
    def start(self, label: str, total: int) -> None:
        return None

    def advance(self, count: int = 1) -> None:
        return None


SILENT = Silent()
