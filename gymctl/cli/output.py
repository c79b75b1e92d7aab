"""One way to show results: a rich table on a terminal, JSON with --json. Data goes to stdout,
messages to stderr."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

import typer
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)
JSON = typer.Option(False, "--json", help="Machine output; a refusal is JSON too.")
_ID_NAME = re.compile(r"(^|_)id$|[a-z]Id$|^ids?$")
_UUID_TEXT = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return str(value)


def choice(enum: type[StrEnum], value: str, param: str) -> Any:
    """`value` as a member of `enum`, or a usage error naming the choices: for the enums that
    live beside their tables, which a command imports only when it runs."""
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(member.value for member in enum)
        raise typer.BadParameter(f"{value!r} is not one of: {choices}", param_hint=param) from None


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
    cells = [
        ["" if row.get(c) is None else str(_default(row.get(c))) for c in columns] for row in rows
    ]
    table = Table(title=title)
    for index, column in enumerate(columns):
        values = [line[index] for line in cells]
        if _is_id_column(column, values):
            # An id is pasted into the next command: never cut it with an ellipsis; other
            # columns wrap first, and only a terminal too narrow for it folds it.
            width = max((len(value) for value in values), default=0)
            table.add_column(column, no_wrap=True, overflow="fold", min_width=width)
        else:
            table.add_column(column)
    for line in cells:
        table.add_row(*line)
    console.print(table)


def _is_id_column(column: str, values: Sequence[str]) -> bool:
    return bool(_ID_NAME.search(column)) or any(_UUID_TEXT.match(value) for value in values)


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
