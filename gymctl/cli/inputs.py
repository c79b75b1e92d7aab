"""Files an operator names as a command's input. Only a regular file is read, and never past
its limit: a FIFO named by mistake would wait for a writer for ever, and /dev/zero or a
multi-gigabyte export would fill the memory before the command could refuse it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import typer


def read_given(path: Path, param: str, *, limit: int) -> bytes:
    """The file's bytes, at most `limit + 1` of them: a file past `limit` comes back one byte
    over it, for the caller's own refusal (the asset pipeline's brand_asset_size, say).
    Anything but a regular file, or one that cannot be read, is a usage error."""
    try:
        # O_NONBLOCK: a FIFO put in the file's place after any check is opened, not waited on.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise typer.BadParameter(f"{path}: {error.strerror}", param_hint=param) from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise typer.BadParameter(f"{path} is not a regular file", param_hint=param)
        try:
            return file.read(limit + 1)
        except OSError as error:
            raise typer.BadParameter(f"{path}: {error.strerror}", param_hint=param) from None
