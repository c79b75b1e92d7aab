"""Start-up time of the `gymctl` command: `--help`, each group's `--help` and `--version`.

The goal of issue 21: `gymctl --help` and any group's `--help` under 0.3 s. Each case runs in a
fresh process (`python -m gymctl ...`, what the console script runs) `--runs` times; the median
wall time is reported, with the interpreter's own start (`python -c pass`) for reference, and the
median CPU time (user + system), which other load on the machine disturbs less. It measures and
prints JSON; it asserts nothing. Run it on an idle machine.

    python benchmarks/cli_startup.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gymctl.cli import COMMANDS  # noqa: E402 (after the path is set)


def medians(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of the child, in seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        wall.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return round(statistics.median(wall), 3), round(statistics.median(cpu), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    gymctl = [sys.executable, "-m", "gymctl"]
    groups = [name for name, (target, _) in COMMANDS.items() if target.endswith(":app")]
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "gymctl --help": [*gymctl, "--help"],
        "gymctl --version": [*gymctl, "--version"],
        **{f"gymctl {group} --help": [*gymctl, group, "--help"] for group in groups},
    }
    measured = {name: medians(argv, runs) for name, argv in cases.items()}
    wall = {name: pair[0] for name, pair in measured.items()}
    slowest = max((n for n in wall if n.endswith("--help")), key=wall.__getitem__)
    print(
        json.dumps(
            {
                "runs": runs,
                "median_wall_seconds": wall,
                "median_cpu_seconds": {name: pair[1] for name, pair in measured.items()},
                "slowest_help": {"case": slowest, "wall_seconds": wall[slowest]},
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
