"""Chaos: thousands of ops over many aggregates, random faults (5xx, 429, timeouts before and
after the write), two dispatcher processes of which one is killed mid-run and replaced. In the
end every op succeeded or is parked (or waits behind a parked op of its aggregate), each
member's changes reached the fake in enqueue order, nothing was sent twice where the fake could
tell, and no organization ever got more than 2 requests in a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import enqueue, entity_map
from gymctl.bridge.connection import connect
from gymctl.config import Settings
from gymctl.crypto import generate_key_setting
from gymctl.db import get_engine
from gymctl.models import Organization
from gymctl.models.bridge import EntityType, OpStatus, Origin, SyncOp
from tests.bridge.fake_gym import FakeGym

ORGANIZATIONS = 40
MEMBERS = 8  # per organization; 6 ops each: 1,920 ops
DEADLINE = 240  # seconds
UNSETTLED = [OpStatus.pending, OpStatus.in_flight, OpStatus.failed]


def _dispatcher(url: str, fake: FakeGym, key: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.bridge.chaos_dispatcher", url, fake.url, key],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _seed(url: str, fake: FakeGym, key: str) -> dict[str, tuple[str, list[str]]]:
    """Organizations connected to their own fake accounts; per member (by email) its aggregate
    and the changes the fake must see, in enqueue order."""
    settings = Settings(GYMCTL_ENV="test").model_copy(
        update={
            "bridge_api_url": fake.url,
            "bridge_credentials_key": SecretStr(key),
            "bridge_rate": 1000.0,
        }
    )
    expected: dict[str, tuple[str, list[str]]] = {}
    now = datetime.now(UTC)  # the dispatcher processes run on the system clock
    day = now.date().isoformat()
    with Session(get_engine(url), expire_on_commit=False) as session:
        for n in range(ORGANIZATIONS):
            org = Organization(name=f"Chaos {n}", slug=f"chaos-{n}")
            session.add(org)
            session.flush()
            account = fake.add_account(f"key-{n}", box_id=str(5000 + n))
            connect(session, org.id, f"key-{n}", settings=settings, now=now)
            classes = []
            for _ in range(2):
                external = fake.add_class(account, day)
                platform = uuid.uuid4()
                entity_map.link(session, org.id, EntityType.schedule, platform_id=platform,
                                external_id=external, origin=Origin.manual, now=now,
                                data={"date": day})  # fmt: skip
                classes.append((platform, external))
            for m in range(MEMBERS):
                member = str(uuid.uuid4())
                email = f"m{m}@chaos{n}.example"
                ops = [("user.create", {"memberId": member, "firstName": "M", "email": email})]
                ops.append(("membership.assign", {"memberId": member, "startDate": "2026-11-01",
                            "subscriptionId": str(uuid.uuid4())}))  # fmt: skip
                effects = ["created", "membership"]
                for platform, external in classes:
                    booking = {"memberId": member, "bookingId": str(uuid.uuid4()),
                               "sessionId": str(platform)}  # fmt: skip
                    ops += [("booking.create", booking), ("booking.cancel", booking)]
                    effects += [f"book:{external}", f"cancel:{external}"]
                for op_type, payload in ops:
                    enqueue(session, organization_id=org.id, op_type=op_type, payload=payload,
                            now=now)  # fmt: skip
                expected[email] = (f"member:{member}", effects)
        session.commit()
    return expected


def test_chaos_two_dispatchers_one_killed(committed_pg):
    fake = FakeGym(timeout_delay=0.6)
    key = generate_key_setting("c1")
    try:
        expected = _seed(committed_pg, fake, key)
        fake.chaos_rate = 0.05
        started = time.monotonic()
        dispatchers = [_dispatcher(committed_pg, fake, key) for _ in range(2)]
        time.sleep(8)
        dispatchers[0].send_signal(signal.SIGKILL)  # mid-run: ops in flight, calls unanswered
        dispatchers[0].wait()
        dispatchers.append(_dispatcher(committed_pg, fake, key))
        engine = get_engine(committed_pg)
        while time.monotonic() - started < DEADLINE:
            with Session(engine) as session:
                open_ops = session.scalar(
                    select(SyncOp.id).where(SyncOp.status.in_(UNSETTLED)).limit(1)
                )
            if open_ops is None:
                break
            assert all(p.poll() is None for p in dispatchers[1:]), "a dispatcher died"
            time.sleep(1)
        for process in dispatchers[1:]:
            process.send_signal(signal.SIGTERM)
        for process in dispatchers[1:]:
            process.wait(timeout=60)
        fake.chaos_rate = 0.0

        with Session(engine) as session:
            ops = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
        assert len(ops) == ORGANIZATIONS * MEMBERS * 6  # none lost
        parked_keys = {op.aggregate_key for op in ops if op.status is OpStatus.parked}
        for op in ops:
            assert op.status is OpStatus.succeeded or op.aggregate_key in parked_keys, op.id
        assert fake.duplicates == []
        assert fake.welcome_emails == []
        emails = {
            user_id: user["email"]
            for account in fake.accounts.values()
            for user_id, user in account.users.items()
        }
        for user_id, effects in fake.effects.items():
            aggregate, wanted = expected[emails[user_id]]
            if aggregate not in parked_keys:
                assert effects == wanted, emails[user_id]
        unparked = [email for email, (key, _) in expected.items() if key not in parked_keys]
        assert len({emails[u] for u in fake.effects} & set(unparked)) == len(unparked)
        for account in fake.accounts.values():
            assert fake.busiest_second(account.box_id, since=started) <= 2, account.box_id
        faults = [c for c in fake.calls if c.status in (429, 500, 503, 504)]
        assert faults  # the chaos did happen
    finally:
        fake.close()
