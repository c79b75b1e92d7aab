"""Chaos, fed by the platform's own writes: thousands of ops over many aggregates, random
faults (5xx, 429, timeouts before and after the write), two dispatcher processes of which one
is killed mid-run and replaced, and one gym disconnected mid-run. In the end every op succeeded
or is parked (or waits behind a parked op of its aggregate), the disconnected gym's are kept and
none was sent after its disconnect, each member's changes reached the fake in the platform's
order, nothing was sent twice where the fake could tell, and no organization ever got more than
2 requests in a second."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access.registrations import register_member
from gymctl.billing.plans import grant_plan
from gymctl.bookings import book, schedule
from gymctl.bridge import entity_map
from gymctl.bridge.connection import connect, disconnect
from gymctl.config import Settings
from gymctl.crypto import generate_key_setting
from gymctl.db import get_engine
from gymctl.models import Membership, Organization, Role, User
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.models.bridge import EntityType, OpStatus, Origin, SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing.factories import make_plan
from tests.bridge.conftest import desk_registrar
from tests.bridge.fake_gym import FakeGym

ORGANIZATIONS = 40
MEMBERS = 8  # per organization; 6 ops each, and 3 of a waitlist promotion: 2,040 ops
DEADLINE = 240  # seconds
UNSETTLED = [OpStatus.pending, OpStatus.in_flight, OpStatus.failed]


def _dispatcher(url: str, fake: FakeGym, key: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.bridge.chaos_dispatcher", url, fake.url, key],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _seed(
    url: str, fake: FakeGym, key: str
) -> tuple[dict[str, tuple[str, list[str]]], dict[str, tuple[str, list[str]]]]:
    """Organizations connected to their own fake accounts, fed by the platform's own writes
    (desk registration, desk sale, bookings and their cancels, each its own transaction, and in
    a one-seat class a cancel whose transaction promotes the waitlist). Per member (by email)
    its aggregate and the changes the fake must see, in the platform's order; per one-seat
    class (external id) its organization's slug and its bookings by member email, in order."""
    settings = Settings(GYMCTL_ENV="test").model_copy(
        update={
            "bridge_api_url": fake.url,
            "bridge_credentials_key": SecretStr(key),
            "bridge_rate": 1000.0,
        }
    )
    expected: dict[str, tuple[str, list[str]]] = {}
    one_seat: dict[str, tuple[str, list[str]]] = {}
    now = datetime.now(UTC)  # the dispatcher processes run on the system clock
    tomorrow = now + timedelta(days=1)
    with Session(get_engine(url), expire_on_commit=False) as session:
        for n in range(ORGANIZATIONS):
            org = Organization(name=f"Chaos {n}", slug=f"chaos-{n}")
            owner = User(email=f"owner@chaos{n}.example", created_at=now, updated_at=now)
            session.add_all([org, owner])
            session.flush()
            session.add(Membership(organization_id=org.id, user_id=owner.id, role=Role.owner,
                                   created_at=now, updated_at=now))  # fmt: skip
            account = fake.add_account(f"key-{n}", box_id=str(5000 + n))
            connect(session, org.id, f"key-{n}", settings=settings, now=now)
            kind = schedule.create_class_type(session, org.id, name="WOD", default_capacity=50,
                                              duration_minutes=60, now=now)  # fmt: skip
            plan = make_plan(session, org, PlanType.cash, now=now)
            single = schedule.create_class_type(session, org.id, name="PT", default_capacity=1,
                                                duration_minutes=60, now=now)  # fmt: skip
            classes = []
            for hour, class_type in ((1, kind), (3, kind), (5, single)):
                starts = tomorrow + timedelta(hours=hour)
                row = schedule.schedule_session(session, class_type, starts_at=starts, now=now)
                external = fake.add_class(account, row.starts_at.date().isoformat(),
                                          max_users=row.capacity)  # fmt: skip
                entity_map.link(session, org.id, EntityType.schedule, platform_id=row.id,
                                external_id=external, origin=Origin.manual, now=now,
                                data={"date": row.starts_at.date().isoformat()})  # fmt: skip
                classes.append((row.id, external))
            session.commit()
            promotion = classes.pop()  # the one-seat class
            registrar = desk_registrar(org, owner, path="/c")
            members = []
            for m in range(MEMBERS):
                email = f"m{m}@chaos{n}.example"
                user, _ = register_member(session, registrar, email=email, name="Chaos Member",
                                          origin="desk", now=now)  # fmt: skip
                session.commit()
                mine = (Membership.organization_id == org.id, Membership.user_id == user.id)
                member = session.scalar(select(Membership).where(*mine))
                members.append(member)
                grant_plan(session, plan, member, method=CollectionMethod.cash, now=now,
                           actor_user_id=owner.id, documents=LocalDocumentProvider())  # fmt: skip
                session.commit()
                effects = ["created", "membership"]
                for platform, external in classes:
                    booking = book.book(session, org.id, platform, member,
                                        actor_user_id=user.id, now=now)  # fmt: skip
                    session.commit()
                    book.cancel(session, org.id, booking.id, actor_user_id=user.id,
                                by_staff=False, now=now)  # fmt: skip
                    session.commit()
                    effects += [f"book:{external}", f"cancel:{external}"]
                expected[email] = (f"member:{member.id}", effects)
            # The first member takes the one seat, the second waits, the first cancels: the
            # cancel's transaction promotes the second.
            (platform, external), seated = promotion, []
            for m, member in enumerate(members[:2]):
                seated.append(book.book(session, org.id, platform, member,
                                        actor_user_id=member.user_id, now=now))  # fmt: skip
                session.commit()
                expected[f"m{m}@chaos{n}.example"][1].append(f"book:{external}")
            book.cancel(session, org.id, seated[0].id, actor_user_id=owner.id, by_staff=True,
                        now=now)  # fmt: skip
            session.commit()
            expected[f"m0@chaos{n}.example"][1].append(f"cancel:{external}")
            one_seat[external] = (org.slug, [f"book:m0@chaos{n}.example",
                                             f"cancel:m0@chaos{n}.example",
                                             f"book:m1@chaos{n}.example"])  # fmt: skip
    return expected, one_seat


def test_chaos_two_dispatchers_one_killed(committed_pg):
    fake = FakeGym(timeout_delay=0.6)
    key = generate_key_setting("c1")
    try:
        expected, one_seat = _seed(committed_pg, fake, key)
        fake.chaos_rate = 0.05
        # The fake stamps each call as its thread reads it, in this process. Late in a full
        # suite a collection of this process's heap pauses every thread for a while, and the
        # calls read after it get stamps closer together than they left the dispatchers. No
        # collection while the wire is measured: the stamps stay the arrival times.
        gc.collect()
        gc.disable()
        started = time.monotonic()
        dispatchers = [_dispatcher(committed_pg, fake, key) for _ in range(2)]
        time.sleep(8)
        dispatchers[0].send_signal(signal.SIGKILL)  # mid-run: ops in flight, calls unanswered
        dispatchers[0].wait()
        dispatchers.append(_dispatcher(committed_pg, fake, key))
        engine = get_engine(committed_pg)
        with Session(engine) as session:  # one gym leaves mid-run
            cut = session.scalar(select(Organization.id).where(Organization.slug == "chaos-0"))
            disconnect(session, cut, now=datetime.now(UTC))
            session.commit()
        cut_at = time.monotonic()
        while time.monotonic() - started < DEADLINE:
            with Session(engine) as session:
                open_ops = session.scalar(
                    select(SyncOp.id)
                    .where(SyncOp.status.in_(UNSETTLED), SyncOp.organization_id != cut)
                    .limit(1)
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
        assert len(ops) == ORGANIZATIONS * (MEMBERS * 6 + 3)  # none lost
        # Kept for a new connect, in whatever state the disconnect found it (one the killed
        # dispatcher held stays in flight until the lease sweep rescues it).
        delivered = [op for op in ops if op.organization_id != cut]
        assert [op.id for op in delivered if op.status is not OpStatus.succeeded] == []
        assert [c for c in fake.calls if c.account == "5000" and c.at > cut_at] == []
        cut_keys = {op.aggregate_key for op in ops if op.organization_id == cut}
        assert fake.duplicates == []
        assert fake.welcome_emails == []
        assert fake.full == []  # no promotion overtook the cancel that freed its seat
        emails = {
            user_id: user["email"]
            for account in fake.accounts.values()
            for user_id, user in account.users.items()
        }
        for email, (aggregate, wanted) in expected.items():  # the cut gym's: a prefix, in order
            [effects] = [e for u, e in fake.effects.items() if emails[u] == email] or [[]]
            got = wanted[: len(effects)] if aggregate in cut_keys else wanted
            assert effects == got, email
        for external, (slug, wanted) in one_seat.items():
            effects = [
                f"{what}:{emails[user_id]}"
                for what, user_id in (e.split(":") for e in fake.class_effects.get(external, []))
            ]
            assert effects == (wanted[: len(effects)] if slug == "chaos-0" else wanted), slug
        for account in fake.accounts.values():
            assert fake.busiest_second(account.box_id, since=started) <= 2, account.box_id
        faults = [c for c in fake.calls if c.status in (429, 500, 503, 504)]
        assert faults  # the chaos did happen
    finally:
        gc.enable()
        fake.close()
