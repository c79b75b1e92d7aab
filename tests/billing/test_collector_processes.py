"""The collector across processes and through the daemon runner (spec B 1, 8; DESIGN 5): two
collectors started at once on the same due subscriptions charge each exactly once; heartbeats
are pinged only after a completed useful run."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sqlalchemy import func, select

from daemons.jobs import select_jobs
from daemons.runner import run_job_once
from gymctl import migrate
from gymctl.billing import collector
from gymctl.config import Settings
from gymctl.db import get_engine, session_factory
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType, TransactionStatus
from tests.billing import factories as bf
from tests.billing.cards import Sandbox, connect_card_provider, save_test_card
from tests.billing.factories import TEST_CIPHER, TEST_KEY
from tests.conftest import NOW

REPO = Path(__file__).resolve().parents[2]
DUE = NOW - timedelta(minutes=1)
COLLECTOR = """
import json, sys
from datetime import datetime
from gymctl.billing import collector
from gymctl.db import get_engine, session_factory
from gymctl.providers.card_sandbox import SandboxCardProvider
from pathlib import Path
from tests.billing.factories import TEST_CIPHER, TEST_KEY
url, home, go = sys.argv[1], Path(sys.argv[2]), sys.argv[4]
now = datetime.fromisoformat(sys.argv[3])
factory = session_factory(get_engine(url))
while not Path(go).exists():
    pass
summary = collector.daily_sweep(factory, SandboxCardProvider(home), now=now, cipher=TEST_CIPHER)
print(json.dumps(summary.as_dict()))
"""


def _due_gym(factory, sandbox, subscriptions: int) -> list:
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        ids = []
        for _ in range(subscriptions):
            card = save_test_card(session, gym, sandbox.provider, sandbox.simulator)
            row = bf.make_subscription(
                session,
                gym,
                PlanType.card,
                payment_method_id=card.id,
                next_charge_date=DUE,
                current_period_end=DUE,
            )
            ids.append(row.id)
        session.commit()
        return ids


def test_two_collector_processes_charge_each_due_subscription_once(committed_pg, tmp_path):
    factory = session_factory(get_engine(committed_pg))
    sandbox = Sandbox(tmp_path / "home")
    due = _due_gym(factory, sandbox, 12)
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                COLLECTOR,
                committed_pg,
                str(sandbox.home),
                NOW.isoformat(),
                str(go),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    go.touch()
    summaries = [json.loads(p.communicate(timeout=120)[0]) for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sum(s["errors"] for s in summaries) == 0
    # A subscription one collector holds is skipped by the other (busy), never charged twice;
    # what both skipped is due again on the next pass.
    charged = sum(s["charged"] for s in summaries)
    assert charged + sum(s["busy"] for s in summaries) >= 12
    rest = collector.daily_sweep(factory, sandbox.provider, now=NOW, cipher=TEST_CIPHER)
    assert charged + rest.charged == 12
    with factory() as session:
        for subscription_id in due:
            settled = session.scalar(
                select(func.count())
                .select_from(PaymentTransaction)
                .where(
                    PaymentTransaction.subscription_id == subscription_id,
                    PaymentTransaction.status == TransactionStatus.completed,
                )
            )
            assert settled == 1
        attempts = session.scalars(select(PaymentTransaction)).all()
    assert len(attempts) == 12
    assert len(sandbox.simulator.charges()) == 12


class _Pings:
    """A loopback heartbeat endpoint counting its pings."""

    def __init__(self) -> None:
        self.count = 0
        pings = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pings.count += 1
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ping"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_heartbeat_only_after_a_completed_useful_run():
    pings = _Pings()
    try:
        useful = collector.Summary(organizations=1)
        assert collector.ping_heartbeat(pings.url, useful, name="memberBillingCatchup")
        idle = collector.Summary()
        cut_short = collector.Summary(organizations=1, completed=False)
        failing = collector.Summary(organizations=1, errors=1)
        for summary in (idle, cut_short, failing):
            assert not collector.ping_heartbeat(pings.url, summary, name="memberBillingCatchup")
        assert pings.count == 1
    finally:
        pings.close()


def test_the_daemon_runs_the_catch_up_on_the_embedded_default(tmp_path):
    """The runner's own-transaction path on SQLite: the lock holder writes nothing, so the
    collector's own commits are not blocked by it; the ledger row closes ok."""
    sqlite_url = f"sqlite:///{tmp_path / 'gymctl.db'}"
    migrate.upgrade(sqlite_url)
    home = tmp_path / "home"
    settings = Settings(
        GYMCTL_ENV="test",
        GYMCTL_HOME=str(home),
        GYMCTL_DATABASE_URL=sqlite_url,
        GYMCTL_BILLING_ENCRYPTION_KEY=TEST_KEY,
    )
    factory = session_factory(get_engine(sqlite_url))
    sandbox = Sandbox(home)
    (subscription_id,) = _due_gym(factory, sandbox, 1)
    (job,) = select_jobs(["billing_catchup"])
    outcome = run_job_once(job, session_factory=factory, settings=settings, now=NOW, tick=1)
    assert outcome.status == "ok", outcome.reason
    assert outcome.result["charged"] == 1
    again = run_job_once(job, session_factory=factory, settings=settings, now=NOW, tick=1)
    assert again.status == "skipped"
    with factory() as session:
        subscription = session.get(Subscription, subscription_id)
        assert subscription.next_charge_date > NOW
