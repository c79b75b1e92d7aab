"""How a command that did not succeed ends: one place, so every command behaves the same.

- a usage mistake (unknown command, missing or bad argument or option, missing file): one line on
  stderr, exit 2;
- a configuration problem: every problem found, exit 2;
- a refusal (DomainError): its code and message, exit 1;
- a crash: one line naming the log file that holds the traceback, exit 70 (EX_SOFTWARE);
- stdout's reader gone (`gymctl ... | head`): nothing said, no traceback, exit 1 (Python's
  recipe, stdout_closed).

With `--json` the same answer is one JSON object `{"code", "message", ...}` on stdout, so a
script reads one document whatever happened and tells success by the exit status.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymctl.errors import ConfigError, DomainError

USAGE, REFUSED, CRASHED = 2, 1, 70
CLOSED_PIPE = 1  # Python's own status on EPIPE (and Typer's): the reader left, nothing failed
# Typer 0.29 raises its own copy of click's exceptions; older versions raise click's. Only the
# modules already imported can have raised one.
_CLICK_MODULES = ("click.exceptions", "typer._click.exceptions", "typer.exceptions")


def _click_types(name: str) -> tuple[type, ...]:
    return tuple(
        getattr(sys.modules[module], name)
        for module in _CLICK_MODULES
        if module in sys.modules and hasattr(sys.modules[module], name)
    )


def not_text(args: list[str]) -> int | None:
    """The position of the first argument that is not UTF-8 text (the shell passed bytes that
    Python holds as lone surrogates: no database, file or header can take it), else None."""
    for position, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return position
    return None


def undecodable(position: int, args: list[str], *, as_json: bool) -> int:
    message = f"argument {position} is not UTF-8 text: {os.fsencode(args[position - 1])!r}"
    return _tell(
        as_json, USAGE, f"usage error: {message}", {"code": "usage_error", "message": message}
    )


def report(error: BaseException, argv: list[str], *, as_json: bool) -> int:
    """Tell the operator what went wrong and return the exit status."""
    if isinstance(error, DomainError):
        return _tell(as_json, REFUSED, f"error {error.code}: {error.message}", error.to_json())
    if isinstance(error, ConfigError):
        lines = "\n".join(f"  - {problem}" for problem in error.problems)
        return _tell(
            as_json,
            USAGE,
            f"configuration error: {len(error.problems)} problem(s):\n{lines}",
            {"code": "configuration_error", "message": str(error), "problems": error.problems},
        )
    if isinstance(error, _click_types("Abort")):
        return _tell(as_json, REFUSED, "aborted", {"code": "aborted", "message": "aborted"})
    if isinstance(error, _click_types("NoArgsIsHelpError")):
        # A group named without a command: its help (rich has printed it already, plain click
        # carries it in the message).
        if error.format_message().strip():
            print(error.format_message(), file=sys.stderr)  # noqa: T201
        return USAGE
    if isinstance(error, _click_types("ClickException")):
        message = " ".join(error.format_message().split())
        ctx = getattr(error, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return _tell(
            as_json, USAGE, f"usage error: {message}{hint}",
            {"code": "usage_error", "message": message},
        )  # fmt: skip
    unmigrated = _unmigrated(error)
    if unmigrated is not None:
        return report(ConfigError(unmigrated), argv, as_json=as_json)
    log = _write_crash_log(error, argv)
    summary = f"{type(error).__name__}: {error}".splitlines()[0]
    return _tell(
        as_json,
        CRASHED,
        f"gymctl crashed ({summary}); the traceback is in {log}",
        {"code": "internal_error", "message": summary, "log": str(log)},
    )


def _unmigrated(error: BaseException) -> str | None:
    """What to do when a command met a database gymctl has not migrated (yet, or to this
    version), else None (`migrate.behind`). Only a database error is looked into, and only the
    database's own revision decides (no message is parsed); a database that cannot be reached
    stays a crash."""
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is None or not isinstance(error, exc.DBAPIError):
        return None
    from gymctl import migrate

    return migrate.behind()


def stdout_closed() -> int:
    """The reader of stdout went away (`gymctl ... | head`): nothing more can be told, so no
    traceback and no message. Python's recipe (the note on SIGPIPE in the signal module's
    documentation): point stdout at /dev/null, so that the flush at shutdown cannot raise
    BrokenPipeError again, and exit 1. SIGPIPE keeps Python's disposition (ignored): its
    default would kill the process on any closed socket too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object with no descriptor
        fd = 1
    os.dup2(devnull, fd)
    os.close(devnull)
    return CLOSED_PIPE


def stdout_pacified() -> bool:
    """Whether click (Typer's copy) met a closed pipe and wrapped the streams to ignore it."""
    wrappers = tuple(
        sys.modules[module].PacifyFlushWrapper
        for module in ("click.utils", "typer._click.utils")
        if module in sys.modules and hasattr(sys.modules[module], "PacifyFlushWrapper")
    )
    return bool(wrappers) and isinstance(sys.stdout, wrappers)


def _tell(as_json: bool, status: int, line: str, body: dict[str, Any]) -> int:
    if as_json:
        print(json.dumps(body, default=str, indent=2))  # noqa: T201
    else:
        print(line, file=sys.stderr)  # noqa: T201
    return status


def _write_crash_log(error: BaseException, argv: list[str]) -> Path:
    """Append the traceback to GYMCTL_HOME/logs/gymctl-cli-crashes.log (the temporary folder if
    the home cannot be written: a crash must still say where its traceback went)."""
    entry = f"--- {datetime.now(UTC).isoformat()} gymctl {' '.join(argv)}\n" + "".join(
        traceback.format_exception(error)
    )
    try:
        from gymctl.config import get_settings

        home = get_settings().home
    except Exception:  # the settings themselves may be what is broken
        home = Path(os.environ.get("GYMCTL_HOME") or ".gymctl")
    for folder in (home / "logs", Path(tempfile.gettempdir())):
        path = folder / "gymctl-cli-crashes.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # backslashreplace: an argument that was not UTF-8 holds lone surrogates, which
            # made this write fail and the crash show as a raw traceback instead.
            with path.open("a", encoding="utf-8", errors="backslashreplace") as log:
                log.write(entry)
            return path.resolve()
        except OSError:
            continue
    print(entry, file=sys.stderr)  # noqa: T201 (nowhere to write it: show it)
    return Path("<stderr>")
