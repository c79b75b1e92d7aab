"""One way to show results: a rich table on a terminal, JSON with --json. Data goes to stdout,
messages to stderr."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return str(value)


def print_json(data: Any) -> None:
    print(json.dumps(data, default=_default, indent=2, sort_keys=False))  # noqa: T201


def render_rows(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    title: str | None = None,
    as_json: bool = False,
) -> None:
    rows = list(rows)
    if as_json:
        print_json(rows)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(_default(row.get(c))) for c in columns))
    console.print(table)


def render_mapping(
    data: Mapping[str, Any], *, title: str | None = None, as_json: bool = False
) -> None:
    if as_json:
        print_json(dict(data))
        return
    render_rows(
        ({"setting": key, "value": value} for key, value in data.items()),
        ["setting", "value"],
        title=title,
    )
