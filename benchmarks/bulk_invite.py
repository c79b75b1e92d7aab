"""A bulk invite of 500 addresses: what the request takes now that it queues them, and what the
daemons' `invitation_batches` job takes to invite them (the work the request used to do itself,
inside one transaction, before gunicorn's 30 s timeout).

On the embedded default (a SQLite file in a temporary folder): the stand-in identity provider
of the tests on loopback (tests/idp.py), answering each admin call after `--provider-ms`
(default 50 ms, a hosted provider's round trip), and a real SMTP server on loopback (aiosmtpd).
The provider's 100 invitations an hour are lifted for the run (500 fresh addresses would
otherwise be rate_limited after the first 100). Figures: the POST's wall time (median of
`--runs` requests of 500 addresses each, each batch invited before the next is asked), the
job's time to invite one batch (every pass until the batch is finished) and per address, and
how many emails the server received. This script measures and prints JSON; it asserts nothing
about timing.

    python benchmarks/bulk_invite.py [--addresses 500] [--runs 5] [--provider-ms 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--provider-ms", type=float, default=50.0)
    args = parser.parse_args()
    print(json.dumps(measure(args.addresses, args.runs, args.provider_ms / 1000), indent=2))


def measure(addresses: int, runs: int, provider_delay: float) -> dict:
    from sqlalchemy import select
    from staff_common import gym_database, machine

    from gymctl.access.bulk_invitations import work_batches
    from gymctl.access.invitations import Outreach
    from gymctl.clock import FixedClock
    from gymctl.models import InvitationBatch, Role
    from gymctl.providers.identity_admin import HttpIdentityAdmin
    from gymctl.providers.mail import SmtpMailer
    from tests.conftest import NOW, deployment_settings
    from tests.idp import IdentityProvider
    from tests.providers.test_mail import Recorder, start
    from webhooks.app import create_app

    idp = IdentityProvider()
    recorder = Recorder()
    smtp = start(recorder)
    with tempfile.TemporaryDirectory(prefix="gymctl-bench-bulk-") as folder:
        factory, gym = gym_database(f"sqlite:///{Path(folder) / 'bench.db'}", idp)
        settings = deployment_settings(idp)
        clock = FixedClock(NOW)
        mailer = SmtpMailer(f"smtp://127.0.0.1:{smtp.port}", settings.mail_from)
        client = create_app(
            settings, session_factory=factory, clock=clock, mailer=mailer
        ).test_client()
        outreach = Outreach(
            settings,
            mailer,
            HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=addresses * (runs + 1)),
        )
        idp.admin_delay = provider_delay
        request_seconds, work_seconds = [], []
        for run in range(runs):
            emails = [f"member{n}@run{run}.example" for n in range(addresses)]
            started = time.perf_counter()
            response = client.post(
                f"/organizations/{gym.id}/invitations/bulk",
                json={"emails": emails},
                headers=gym[Role.owner].headers,
            )
            request_seconds.append(time.perf_counter() - started)
            assert response.status_code == 202, response.json
            started = time.perf_counter()
            while work_batches(factory, outreach, now=NOW)["addresses"]:
                pass
            work_seconds.append(time.perf_counter() - started)
        with factory() as session:
            outcomes = [
                r["outcome"] for b in session.scalars(select(InvitationBatch)) for r in b.results
            ]
    smtp.stop()
    idp.close()
    median_work = statistics.median(work_seconds)
    return {
        "benchmark": "bulk invite",
        "engine": "sqlite (embedded default)",
        "addresses": addresses,
        "runs": runs,
        "provider_round_trip_ms": provider_delay * 1000,
        "request_ms_median": round(statistics.median(request_seconds) * 1000, 1),
        "request_ms_runs": [round(s * 1000, 1) for s in request_seconds],
        "job_seconds_per_batch_median": round(median_work, 2),
        "job_ms_per_address": round(median_work / addresses * 1000, 1),
        "job_seconds_runs": [round(s, 2) for s in work_seconds],
        "invited": outcomes.count("invited"),
        "other_outcomes": sorted({o for o in outcomes if o != "invited"}),
        "emails_received": len(recorder.envelopes),
        "machine": machine(),
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
