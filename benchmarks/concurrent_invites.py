"""Invitations in many gyms at once, on PostgreSQL: how many the platform sends a second when
every gym's staff invite at the same time, and how long each request takes.

Every invitation of an address without an account spends a slot of the identity provider's
budget (100 an hour for the whole deployment, serialized per key: gymctl.ratelimit.take_apart,
which on PostgreSQL commits the slot before the call; before s37 `take` held the key's lock
until the request's commit), then calls the provider to create its invitation, then emails the
invitee. `--gyms` threads, each
the owner of its own gym, each POST `--invites` invitations one after the other to
/organizations/:orgId/invitations through the app (one test client per thread), with the
stand-in identity provider of the tests on loopback answering each admin call after
`--provider-ms` (default 50 ms) and a real SMTP server on loopback (aiosmtpd). The budget is
lifted for the run. Figures: the wall time of all of it, invitations a second, and the
requests' median and 95th percentile; this script measures and prints JSON and asserts
nothing about timing. It creates and drops the database `gymctl_bench_invites`.

    python benchmarks/concurrent_invites.py [--gyms 8] [--invites 10] [--provider-ms 50]
        [--postgres ADMIN_URL]   (default GYMCTL_BENCH_DATABASE_URL, else the local server)
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from pathlib import Path

DATABASE = "gymctl_bench_invites"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gyms", type=int, default=8)
    parser.add_argument("--invites", type=int, default=10)
    parser.add_argument("--provider-ms", type=float, default=50.0)
    parser.add_argument("--postgres", help="an admin URL of a PostgreSQL server")
    args = parser.parse_args()
    from scratch import DEFAULT_ADMIN_URL

    result = measure(
        args.postgres or DEFAULT_ADMIN_URL, args.gyms, args.invites, args.provider_ms / 1000
    )
    print(json.dumps(result, indent=2))


def measure(admin_url: str, gyms: int, invites: int, provider_delay: float) -> dict:
    from scratch import scratch_database
    from staff_common import gym_database, machine

    from gymctl.clock import FixedClock
    from gymctl.models import Role
    from gymctl.providers.identity_admin import HttpIdentityAdmin
    from gymctl.providers.mail import SmtpMailer
    from tests import factories
    from tests.conftest import NOW, deployment_settings
    from tests.idp import IdentityProvider
    from tests.providers.test_mail import Recorder, start
    from webhooks.app import create_app

    idp = IdentityProvider()
    recorder = Recorder()
    smtp = start(recorder)
    try:
        with scratch_database(DATABASE, admin_url, migrated=False) as engine:
            url = engine.url.render_as_string(hide_password=False)
            factory, gym = gym_database(url, idp)
            owner = gym[Role.owner]
            organizations = [gym.organization.id]
            with factory() as session:
                for n in range(1, gyms):
                    other = factories.organization(session, name=f"Bench {n}")
                    factories.membership(
                        session, user=owner.user, organization=other, role=Role.owner
                    )
                    organizations.append(other.id)
                session.commit()
            settings = deployment_settings(idp)
            clock = FixedClock(NOW)
            app = create_app(
                settings,
                session_factory=factory,
                clock=clock,
                mailer=SmtpMailer(f"smtp://127.0.0.1:{smtp.port}", settings.mail_from),
                identity_admin=HttpIdentityAdmin(
                    idp.url, idp.SECRET_KEY, clock=clock, limit=gyms * invites + 1
                ),
            )
            logging.disable(logging.INFO)  # the app's request and mail logs: only JSON is printed
            idp.admin_delay = provider_delay
            wall, latencies, statuses = _invite_together(app, owner, organizations, invites)
            factory.kw["bind"].dispose()
    finally:
        smtp.stop()
        idp.close()
    ordered = sorted(latencies)
    return {
        "benchmark": "concurrent invitations",
        "engine": "postgresql",
        "gyms": gyms,
        "invites_per_gym": invites,
        "provider_round_trip_ms": provider_delay * 1000,
        "wall_seconds": round(wall, 2),
        "invitations_per_second": round(len(latencies) / wall, 1),
        "request_ms_median": round(statistics.median(ordered) * 1000, 1),
        "request_ms_p95": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
        "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
        "emails_received": len(recorder.envelopes),
        "machine": machine(),
    }


def _invite_together(app, owner, organizations: list, invites: int):
    """Each gym's owner in a thread of its own, all starting at once: the wall time, each
    request's seconds and each status."""
    latencies: list[float] = []
    statuses: list[int] = []
    start_together = threading.Barrier(len(organizations))

    def staff(n: int, organization_id) -> None:
        client = app.test_client()
        start_together.wait()
        for m in range(invites):
            started = time.perf_counter()
            response = client.post(
                f"/organizations/{organization_id}/invitations",
                json={"email": f"member{m}@gym{n}.example", "role": "member"},
                headers=owner.headers,
            )
            latencies.append(time.perf_counter() - started)
            statuses.append(response.status_code)

    threads = [
        threading.Thread(target=staff, args=(n, organization_id))
        for n, organization_id in enumerate(organizations)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, statuses


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
