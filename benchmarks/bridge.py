"""The bridge's sync queue against procrastinate's per-key lock, on the same PostgreSQL.

Ours: 20,000 ops over 200 organizations (per member, in order: user.create, membership.assign,
booking.create, booking.cancel), two dispatcher processes, the fake external system on loopback
with no delay and the rate limit lifted. Reported: ops per second (enqueue excluded), the claim
query's latency, and whether every member's changes reached the fake in enqueue order.

Procrastinate (a mature PostgreSQL job queue), installed only for this benchmark in its own
virtualenv: the same number of jobs, each `lock`ed by the same aggregate keys (its per-key
serial execution), each making one call to the same fake, two worker processes. Its claim
checks earlier jobs of the lock without an index led by the lock, so it slows down as the queue
deepens; with 20,000 jobs queued it would take hours, so it runs for a time budget and its rate
is the jobs finished in that budget (with the queue at its deepest: its worst case).
Reported: jobs per second, and how many finished.

    .venv/bin/python benchmarks/bridge.py [--ops 20000] [--organizations 200] [--budget 180]
        [--workers 2] [--batch 25]

Prints one JSON object. Needs PostgreSQL at GYMCTL_BENCH_DATABASE_URL (default the local one).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
import venv
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge_common import bridge_settings, reports, start_dispatchers  # noqa: E402
from scratch import scratch_database  # noqa: E402

from gymctl.bridge import enqueue, entity_map  # noqa: E402
from gymctl.bridge.connection import connect  # noqa: E402
from gymctl.crypto import generate_key_setting  # noqa: E402
from gymctl.db import get_engine  # noqa: E402
from gymctl.models import Organization  # noqa: E402
from gymctl.models.bridge import EntityType, OpStatus, Origin, SyncOp  # noqa: E402
from tests.bridge.fake_gym import FakeGym  # noqa: E402

PROCRASTINATE = "procrastinate==3.10.0"
PROCRASTINATE_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
    "gymctl-bench-procrastinate"
)
OPS_PER_MEMBER = 4
POLL = 0.25  # seconds between counts of finished work: each count scans the queue, on the
# same 2 cores as what it measures, so it must not be frequent (at most 1% of a 25 s run)

PROCRASTINATE_APP = textwrap.dedent(
    """
    import asyncio, sys, urllib.request
    import procrastinate

    conninfo, fake_url, api_key = sys.argv[2:5]
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    def call():
        request = urllib.request.Request(fake_url + "/v3/locations",
                                         headers={"api-key": api_key, "User-Agent": "bench/1"})
        urllib.request.urlopen(request, timeout=10).read()

    @app.task(name="send")
    async def send(n):
        # async, so the worker's concurrency is real (sync tasks share one thread)
        await asyncio.to_thread(call)

    if sys.argv[1] == "schema":
        with app.open():
            app.schema_manager.apply_schema()
    elif sys.argv[1] == "defer":
        keys, per_key = int(sys.argv[5]), int(sys.argv[6])
        with app.open():
            for k in range(keys):
                send.configure(lock=f"member:{k}").batch_defer(
                    *({"n": k * per_key + i} for i in range(per_key)))
    else:
        # Poll every 20 ms instead of 5 s: waiting on a notification must not hold it back.
        app.run_worker(concurrency=8, wait=True, install_signal_handlers=True,
                       fetch_job_polling_interval=0.02)
    """
)


def _analyze(url: str) -> None:
    """Both queues start timed with their tables vacuumed and analyzed, as a long-lived queue
    table is: otherwise autovacuum and autoanalyze fire during the timed run, at random, and
    the plans change under it."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def _seed(url: str, fake: FakeGym, key: str, organizations: int, members: int) -> dict:
    settings = bridge_settings(fake.url, key)
    now = datetime.now(UTC)
    expected = {}
    with Session(get_engine(url), expire_on_commit=False) as session:
        for n in range(organizations):
            org = Organization(name=f"Bench {n}", slug=f"bench-{n}")
            session.add(org)
            session.flush()
            account = fake.add_account(f"bench-key-{n}", box_id=str(10_000 + n))
            connect(session, org.id, f"bench-key-{n}", settings=settings, now=now)
            external = fake.add_class(account, now.date().isoformat(), max_users=10_000)
            platform = uuid.uuid4()
            entity_map.link(session, org.id, EntityType.schedule, platform_id=platform,
                            external_id=external, origin=Origin.manual, now=now)  # fmt: skip
            for m in range(members):
                member, email = str(uuid.uuid4()), f"m{m}@bench{n}.example"
                booking = {"memberId": member, "bookingId": str(uuid.uuid4()),
                           "sessionId": str(platform)}  # fmt: skip
                for op_type, payload in (
                    ("user.create", {"memberId": member, "firstName": "B", "email": email}),
                    ("membership.assign", {"memberId": member, "startDate": "2026-11-01",
                                           "subscriptionId": str(uuid.uuid4())}),
                    ("booking.create", booking),
                    ("booking.cancel", booking),
                ):  # fmt: skip
                    enqueue(session, organization_id=org.id, op_type=op_type, payload=payload,
                            now=now)  # fmt: skip
                expected[email] = ["created", "membership", f"book:{external}",
                                   f"cancel:{external}"]  # fmt: skip
            session.commit()
    return expected


def _ours(url: str, fake: FakeGym, key: str, total: int, workers: int, batch: int) -> dict:
    engine = get_engine(url)
    started = time.perf_counter()
    policy = {"rate": None, "batch": batch, "workers": workers, "slice_seconds": 3600,
              "idle_seconds": 0.05}  # fmt: skip
    processes = start_dispatchers(url, fake.url, key, policy)
    while True:
        with Session(engine) as session:
            done = session.scalar(select(func.count()).where(SyncOp.status == OpStatus.succeeded))
        if done >= total:
            break
        time.sleep(POLL)
    elapsed = time.perf_counter() - started
    for process in processes:
        process.send_signal(signal.SIGTERM)
    sent = reports(processes)
    claims = sorted(c for report in sent for c in report["claims"])
    return {
        "seconds": round(elapsed, 2),
        "opsPerSecond": round(total / elapsed, 1),
        "claimLatencyMs": {
            "median": round(statistics.median(claims) * 1000, 2),
            "p95": round(claims[int(len(claims) * 0.95)] * 1000, 2),
            "claims": len(claims),
        },
        "sentPerProcess": [report["sent"] for report in sent],
    }


def _procrastinate_python() -> str:
    python = PROCRASTINATE_VENV / "bin" / "python"
    if not python.exists():
        venv.create(PROCRASTINATE_VENV, with_pip=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", PROCRASTINATE, "psycopg[binary]"],
            check=True,
        )
    return str(python)


def _procrastinate(fake: FakeGym, total: int, budget: float) -> dict:
    python = _procrastinate_python()
    with scratch_database("gymctl_bench_procrastinate", migrated=False) as engine:
        url = engine.url.render_as_string(hide_password=False)
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        fake.add_account("bench-procrastinate", box_id="99999")
        args = [conninfo, fake.url, "bench-procrastinate"]
        keys = total // OPS_PER_MEMBER
        subprocess.run([python, "-c", PROCRASTINATE_APP, "schema", *args], check=True)
        subprocess.run(
            [python, "-c", PROCRASTINATE_APP, "defer", *args, str(keys), str(OPS_PER_MEMBER)],
            check=True,
        )
        _analyze(url)
        started = time.perf_counter()
        workers = [
            subprocess.Popen(
                [python, "-c", PROCRASTINATE_APP, "worker", *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        try:
            while True:
                with engine.connect() as connection:
                    done = connection.execute(
                        text("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
                    ).scalar_one()
                elapsed = time.perf_counter() - started
                if done >= total or elapsed >= budget:
                    break
                time.sleep(POLL)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=60)
    return {
        "seconds": round(elapsed, 2),
        "finished": done,
        "jobsPerSecond": round(done / elapsed, 1),
        "version": PROCRASTINATE.split("==")[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--organizations", type=int, default=200)
    parser.add_argument("--budget", type=float, default=180.0, help="procrastinate's seconds")
    parser.add_argument("--workers", type=int, default=2, help="threads per dispatcher process")
    parser.add_argument("--batch", type=int, default=25, help="ops per claim")
    options = parser.parse_args()
    members = options.ops // OPS_PER_MEMBER // options.organizations
    total = members * options.organizations * OPS_PER_MEMBER
    with closing(FakeGym()) as fake, scratch_database("gymctl_bench_bridge") as engine:
        url = engine.url.render_as_string(hide_password=False)
        key = generate_key_setting("bench")
        expected = _seed(url, fake, key, options.organizations, members)
        _analyze(url)
        fake.calls.clear()
        ours = _ours(url, fake, key, total, options.workers, options.batch)
        emails = {
            user_id: user["email"]
            for account in fake.accounts.values()
            for user_id, user in account.users.items()
        }
        in_order = all(fake.effects[u] == expected[emails[u]] for u in fake.effects)
        ours["perAggregateOrderKept"] = in_order and len(fake.effects) == len(expected)
        ours["duplicates"] = len(fake.duplicates)
        get_engine(url).dispose()
        theirs = _procrastinate(fake, total, options.budget)
    print(
        json.dumps(
            {
                "ops": total,
                "organizations": options.organizations,
                "dispatcherProcesses": 2,
                "workersPerProcess": options.workers,
                "batch": options.batch,
                "gymctl": ours,
                "procrastinate": theirs,
                "ratio": round(ours["opsPerSecond"] / theirs["jobsPerSecond"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
