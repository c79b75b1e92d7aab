"""`python -m daemons [--job NAME ...] [--once] [--interval SECONDS]`: the same runner as
`gymctl daemons run`, without the rest of the CLI (a daemon host needs nothing else)."""

from __future__ import annotations

import argparse
import json
import sys

from daemons.jobs import JOBS
from daemons.runner import configure_logging, run_daemons
from gymctl.config import ConfigError, get_settings
from gymctl.errors import DomainError


def _interval(value: str) -> int:
    seconds = int(value)
    if seconds < 1:
        raise argparse.ArgumentTypeError("must be at least 1 second")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m daemons", description="Run the sweep daemons (as `gymctl daemons run`)."
    )
    parser.add_argument(
        "--job",
        action="append",
        dest="jobs",
        metavar="NAME",
        help=f"run only this job (repeatable); one of: {', '.join(job.name for job in JOBS)}",
    )
    parser.add_argument("--once", action="store_true", help="run each job once now and exit")
    parser.add_argument(
        "--interval",
        type=_interval,
        metavar="SECONDS",
        help="override the interval of every selected job",
    )
    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings)
    try:
        outcomes = run_daemons(args.jobs, args.once, settings, interval_seconds=args.interval)
    except DomainError as error:
        print(f"error {error.code}: {error.message}", file=sys.stderr)  # noqa: T201
        return 1
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)  # noqa: T201
        return 2
    for outcome in outcomes:
        print(json.dumps(outcome.as_row(), default=str))  # noqa: T201
    return 1 if any(outcome.status == "failed" for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
