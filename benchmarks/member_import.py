"""A roster import over HTTP: what the request takes now that it checks and queues the rows,
and what the daemons' `member_imports` job takes to register them (the work the request used
to do itself, inside one transaction, before gunicorn's 30 s timeout).

One gym on the elite tier (no cap), rows of new addresses, through the Flask test client:
`POST /organizations/:orgId/members/import` (wall time), then `work_imports` until the import is
finished (wall time, and per row). On the embedded default (a SQLite file in a temporary folder)
and, with `--postgres URL` (a server where the script may create and drop a database), on
PostgreSQL too. This script measures and prints JSON; it asserts nothing about timing.

    python benchmarks/member_import.py [--rows 2000,10000] [--postgres postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

BENCH_DB = "gymctl_bench_member_import"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2000,10000")
    parser.add_argument("--postgres", help="an admin URL of a PostgreSQL server (optional)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="gymctl-bench-import-") as folder:
        for rows in sizes:
            url = f"sqlite:///{Path(folder) / f'bench-{rows}.db'}"
            results.append({"engine": "sqlite", **measure(url, rows)})
    if args.postgres:
        from scratch import scratch_database

        for rows in sizes:
            with scratch_database(BENCH_DB, args.postgres) as engine:
                url = engine.url.render_as_string(hide_password=False)
                results.append({"engine": "postgresql", **measure(url, rows)})
    from staff_common import machine

    print(
        json.dumps(
            {
                "benchmark": "member import",
                "results": results,
                "machine": machine(),
            },
            indent=2,
        )
    )


def measure(url: str, rows: int) -> dict:
    from staff_common import gym_database

    from gymctl.access.member_imports import work_imports
    from gymctl.clock import FixedClock
    from gymctl.db import release_engine
    from gymctl.models import Role
    from gymctl.models.organizations import Tier
    from gymctl.providers.mail import MailboxMailer
    from tests.conftest import NOW, deployment_settings
    from tests.idp import IdentityProvider
    from webhooks.app import create_app

    idp = IdentityProvider()
    settings = deployment_settings(idp)
    factory, gym = gym_database(url, idp, tier=Tier.elite)
    with tempfile.TemporaryDirectory() as mail:
        clock = FixedClock(NOW)
        app = create_app(
            settings,
            session_factory=factory,
            clock=clock,
            mailer=MailboxMailer(Path(mail), settings.mail_from, clock=clock),
        )
        csv = "email,name\n" + "".join(f"m{n}@roster.example,Member {n}\n" for n in range(rows))
        started = time.perf_counter()
        response = app.test_client().post(
            f"/organizations/{gym.id}/members/import",
            data=csv,
            headers={**gym[Role.owner].headers, "Content-Type": "text/csv"},
        )
        request_seconds = time.perf_counter() - started
        assert response.status_code == 202, response.json
        outreach = app.extensions["gymctl"].outreach
        started, passes, created = time.perf_counter(), 0, 0
        while True:
            done = work_imports(factory, outreach, now=NOW)
            if not done["imports"]:
                break
            passes += 1
            created += done.get("created", 0)
        work_seconds = time.perf_counter() - started
    idp.close()
    release_engine(url)
    return {
        "rows": rows,
        "csv_bytes": len(csv),
        "request_seconds": round(request_seconds, 3),
        "job_seconds": round(work_seconds, 2),
        "job_ms_per_row": round(work_seconds / rows * 1000, 2),
        "job_passes": passes,
        "created": created,
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
