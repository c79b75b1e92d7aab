"""`gymctl serve`: the API under gunicorn (the same app as `webhooks.app:create_app()`)."""

from __future__ import annotations

import os
import sys

import typer

from gymctl.cli.output import err_console


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    # Checked here, a usage error: gunicorn starts with no worker (every request hangs) and
    # answers a port out of range with its traceback.
    port: int = typer.Option(8000, min=1, max=65535, help="Port to bind."),
    workers: int = typer.Option(2, min=1, help="gunicorn worker processes."),
    timeout: int = typer.Option(
        30, min=0, help="Seconds before a silent worker is restarted (0: never)."
    ),
) -> None:
    """Serve the webhooks and the client API with gunicorn."""
    from gymctl import migrate
    from gymctl.config import get_settings

    get_settings().check()
    migrate.require_current()
    err_console.print(f"serving on http://{host}:{port} with {workers} worker(s)")
    argv = [
        sys.executable, "-m", "gunicorn",
        "--bind", f"{host}:{port}",
        "--workers", str(workers),
        "--timeout", str(timeout),
        "--worker-class", "webhooks.worker.JsonErrorWorker",
        "--access-logfile", "-",
        *_no_control_socket(),
        "webhooks.app:create_app()",
    ]  # fmt: skip
    os.execv(sys.executable, argv)  # noqa: S606 (replace this process with gunicorn)


def _no_control_socket() -> list[str]:
    """gunicorn 25+ opens a control socket at ~/.gunicorn/gunicorn.ctl: outside GYMCTL_HOME, one
    path for every server of the user (each new one unlinks the running one's), taking
    `shutdown` and `worker kill`. Nothing here uses it; 25.1 can turn it off."""
    from gunicorn.config import KNOWN_SETTINGS

    if any(setting.name == "control_socket_disable" for setting in KNOWN_SETTINGS):
        return ["--no-control-socket"]
    return []
