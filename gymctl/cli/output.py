"""One way to show results: a rich table on a terminal, JSON with --json. Data goes to stdout,
messages to stderr."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any
from uuid import UUID

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gymctl.cli import codes
from gymctl.errors import invalid

console = Console()
err_console = Console(stderr=True)
JSON = typer.Option(False, "--json", help="Machine output; a refusal is JSON too.")
_ID_NAME = re.compile(r"(^|_)id$|[a-z]Id$|^ids?$")
_UUID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", re.IGNORECASE)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return str(value)


def choice(enum: type[StrEnum], value: str, param: str) -> Any:
    """`value` as a member of `enum`, or a usage error naming the choices: for the enums that
    live beside their tables, which a command imports only when it runs."""
    return enum(one_of(value, (member.value for member in enum), param))


def one_of(value: str, choices: Iterable[str], param: str, code: str | None = None) -> str:
    """`value` if it is one of `choices` (read from the domain when the command runs), else a
    usage error naming them; `code` keeps the domain's refusal code in the message."""
    named = list(choices)
    if value in named:
        return value
    prefix = f"{code}: " if code else ""
    raise typer.BadParameter(
        f"{prefix}{value!r} is not one of: {', '.join(named)}", param_hint=param
    )


def writable_file(value: Path | None) -> Path | None:
    """The callback of an option naming a file to write (`--out`, `--chart`): a folder that is
    missing or not writable is a usage error, found before the command does its work. The
    write itself may still fail (a full disk, a folder removed meanwhile): write_file."""
    if value is None:
        return None
    folder = value.parent
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a folder; name a file in it")
    if not folder.is_dir():
        raise typer.BadParameter(f"the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        value.exists() and not os.access(value, os.W_OK)
    ):
        raise typer.BadParameter(f"{value} cannot be written (permissions)")
    return value


def write_file(option: str, path: Path, write: Callable[[Path], object]) -> None:
    """`write` into a new file beside `path`, then put in its place: a write that fails part-way
    (a full disk, a kill) leaves the file a run before wrote whole, not truncated to a torn one.
    As a file written by name: through a symbolic link, with the mode an existing file had
    (a new one gets the umask's), and what is not a regular file (a pipe, /dev/stdout) written
    as named. A failure is told as a refusal (output_unwritable), not a crash: the command
    checked the folder up front (writable_file), and ran."""
    written: Path | None = None
    try:
        target = path.resolve() if path.is_symlink() else path
        if target.exists() and not target.is_file():
            write(target)
            return
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
        written = target.with_name(f".{target.name}.{secrets.token_hex(6)}{target.suffix}")
        os.close(os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        write(written)
        if mode is not None:
            os.chmod(written, mode)
        os.replace(written, target)
    except OSError as error:
        reason = error.strerror or str(error)
        raise invalid(codes.OUTPUT_UNWRITABLE, f"{option} {path}: {reason}") from None
    finally:
        if written is not None:
            written.unlink(missing_ok=True)


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
    # An id is pasted into the next command: a column showing ids is exactly as wide as the
    # longest (rich then narrows the other columns), so no id is split or cut with an
    # ellipsis. When the ids cannot fit side by side in the terminal, each row is printed as
    # `column: value` lines instead (as psql's expanded display does).
    widths = [_id_width(column, [line[i] for line in cells]) for i, column in enumerate(columns)]
    if sum((width or 4) + 3 for width in widths) + 1 > console.width:
        _render_records(cells, columns, title)
        return
    # Cells and title as plain text, never rich markup: "[dry run]" or "[truncated]" in a
    # title, or a member's "[Tue] morning" in a cell, vanished as unknown tags.
    table = Table(title=Text(title) if title else None)
    for column, width in zip(columns, widths, strict=True):
        table.add_column(column, overflow="fold", width=width or None)
    for line in cells:
        table.add_row(*(Text(cell) for cell in line))
    console.print(table)


def _render_records(cells: list[list[str]], columns: Sequence[str], title: str | None) -> None:
    if title:
        console.print(title, style="italic", markup=False, highlight=False)
    for line in cells:
        console.print()
        for column, value in zip(columns, line, strict=True):
            console.print(f"{column}: {value}", soft_wrap=True, markup=False, highlight=False)


def _id_width(column: str, values: Sequence[str]) -> int:
    """The width that shows the column's longest id whole (0: it shows none). Ids are every
    word of a column named like one, else the words that hold a UUID (`member:<uuid>`)."""
    named = _ID_NAME.search(column) is not None
    longest = max(
        (len(word) for value in values for word in value.split() if named or _UUID.search(word)),
        default=0,
    )
    return longest and max(longest, len(column))


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
