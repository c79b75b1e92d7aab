"""The bridge fed by the platform's own writes (issue 18).

1. Mirror lag: 200 organizations connected to the fake external system on loopback, two
   dispatcher processes at the default 2 requests per second per organization, and the
   platform's own writes (the domain functions, each in its own committed transaction) at a
   steady total rate: per member journey a desk registration (user.create: search + create),
   a desk sale (membership.assign), a booking (booking.create) and its cancel (booking.cancel).
   Lag per op: from the domain transaction's `now` (the op's created_at) to its acknowledgement
   recorded (completed_at). Reported: median and p95, and ops sent.
2. Reconcile cost: one organization with 1 000, 10 000 and 100 000 historical booking links and
   the same poll window (30 classes, 300 registrations, all mirrored); `reconcile_bookings`
   on the stored schedule (no HTTP), median of 5 runs each. The goal: flat, under 100 ms.

    .venv/bin/python benchmarks/bridge_mirror.py [--organizations 200] [--rate 40]
        [--seconds 30] [--history 1000,10000,100000]

Prints one JSON object. Needs PostgreSQL at GYMCTL_BENCH_DATABASE_URL (default the local one).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge_common import bridge_settings, reports, start_dispatchers  # noqa: E402
from scratch import scratch_database  # noqa: E402

from gymctl.access.registrations import register_member  # noqa: E402
from gymctl.billing.plans import grant_plan  # noqa: E402
from gymctl.bookings import book, schedule  # noqa: E402
from gymctl.bridge import entity_map, polling  # noqa: E402
from gymctl.bridge.connection import connect, find_connection  # noqa: E402
from gymctl.crypto import generate_key_setting  # noqa: E402
from gymctl.db import get_engine  # noqa: E402
from gymctl.models import Membership, Organization, Role, User  # noqa: E402
from gymctl.models.billing import CollectionMethod, PlanType  # noqa: E402
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, Origin, SyncOp  # noqa: E402
from gymctl.providers.documents import LocalDocumentProvider  # noqa: E402
from tests.billing.factories import make_plan  # noqa: E402
from tests.bridge.conftest import desk_registrar  # noqa: E402
from tests.bridge.fake_gym import FakeGym  # noqa: E402

WARM_UP = 8.0  # seconds


def _seed_gyms(url: str, fake: FakeGym, key: str, organizations: int) -> list[dict]:
    """Each gym: an owner at the desk, a cash plan, a class tomorrow linked to its external
    class (the poll's work, done up front)."""
    now = datetime.now(UTC)
    gyms = []
    with Session(get_engine(url), expire_on_commit=False) as session:
        for n in range(organizations):
            org = Organization(name=f"Mirror {n}", slug=f"mirror-{n}")
            session.add(org)
            session.flush()
            owner = User(email=f"owner@mirror{n}.example", created_at=now, updated_at=now)
            session.add(owner)
            session.flush()
            session.add(Membership(organization_id=org.id, user_id=owner.id, role=Role.owner,
                                   created_at=now, updated_at=now))  # fmt: skip
            account = fake.add_account(f"mirror-key-{n}", box_id=str(20_000 + n))
            connect(
                session, org.id, f"mirror-key-{n}", settings=bridge_settings(fake.url, key), now=now
            )
            connection = find_connection(session, org.id)
            connection.schedule_poll_due_at = connection.reconcile_due_at = None
            kind = schedule.create_class_type(session, org.id, name="WOD",
                                              default_capacity=1000, duration_minutes=60,
                                              now=now)  # fmt: skip
            row = schedule.schedule_session(session, kind, starts_at=now + timedelta(days=1),
                                            now=now)  # fmt: skip
            external = fake.add_class(
                account, (now + timedelta(days=1)).date().isoformat(), max_users=10_000
            )
            entity_map.link(session, org.id, EntityType.schedule, platform_id=row.id,
                            external_id=external, origin=Origin.manual, now=now)  # fmt: skip
            plan = make_plan(session, org, PlanType.cash, now=now)
            gyms.append({"org": org, "owner": owner.id, "plan": plan.id, "session": row.id})
        session.commit()
    return gyms


def _journey_step(session: Session, gym: dict, journey: dict) -> None:
    """The platform's own write, as the desk and the member make it; one transaction."""
    now = datetime.now(UTC)
    org = session.get(Organization, gym["org"].id)
    step = journey["step"]
    if step == 0:
        registrar = desk_registrar(org, session.get(User, gym["owner"]), path="/b")
        user, _ = register_member(session, registrar, email=journey["email"], name="Bench Member",
                                  origin="desk", now=now)  # fmt: skip
        journey["member"] = session.scalar(
            select(Membership.id).where(
                Membership.organization_id == org.id, Membership.user_id == user.id
            )
        )
    elif step == 1:
        from gymctl.models.billing import Plan

        member = session.get(Membership, journey["member"])
        grant_plan(session, session.get(Plan, gym["plan"]), member,
                   method=CollectionMethod.cash, now=now, actor_user_id=gym["owner"],
                   documents=LocalDocumentProvider())  # fmt: skip
    elif step == 2:
        member = session.get(Membership, journey["member"])
        journey["booking"] = book.book(session, org.id, gym["session"], member,
                                       actor_user_id=member.user_id, now=now).id  # fmt: skip
    else:
        member = session.get(Membership, journey["member"])
        book.cancel(session, org.id, journey["booking"], actor_user_id=member.user_id,
                    by_staff=False, now=now)  # fmt: skip
    session.commit()
    journey["step"] += 1


def mirror_lag(url: str, fake: FakeGym, key: str, organizations: int, rate: float,
               seconds: float) -> dict:  # fmt: skip
    gyms = _seed_gyms(url, fake, key, organizations)
    processes = start_dispatchers(url, fake.url, key, {"rate": 2.0, "workers": 16})
    time.sleep(WARM_UP)  # the dispatchers import and start: not part of the lag
    engine = get_engine(url)
    rng = random.Random(18)
    journeys: list[tuple[dict, dict]] = []
    steps = 0
    started = time.monotonic()
    try:
        with Session(engine, expire_on_commit=False) as session:
            while time.monotonic() - started < seconds:
                due = started + steps / rate
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                open_journeys = [j for j in journeys if j[1]["step"] < 4]
                if not open_journeys or (len(open_journeys) < rate * 2 and rng.random() < 0.3):
                    gym = rng.choice(gyms)
                    email = f"j{len(journeys)}@bench.example"
                    journeys.append((gym, {"step": 0, "email": email}))
                    open_journeys = [journeys[-1]]
                gym, journey = rng.choice(open_journeys)
                _journey_step(session, gym, journey)
                steps += 1
        written = time.monotonic() - started
        total = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with Session(engine) as session:
                total = session.scalar(select(func.count()).select_from(SyncOp))
                done = session.scalar(
                    select(func.count()).where(SyncOp.status == OpStatus.succeeded)
                )
            if done >= total:
                break
            time.sleep(0.5)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        reports(processes)
    with Session(engine) as session:
        rows = session.execute(
            select(SyncOp.op_type, SyncOp.created_at, SyncOp.completed_at).where(
                SyncOp.status == OpStatus.succeeded
            )
        ).all()
    lags = sorted((done - made).total_seconds() for _, made, done in rows)
    by_type: dict[str, list[float]] = {}
    for op_type, made, done in rows:
        by_type.setdefault(op_type.value, []).append((done - made).total_seconds())
    return {
        "organizations": organizations,
        "writesPerSecond": round(steps / written, 1),
        "ops": total,
        "sent": len(rows),
        "lagSeconds": {
            "median": round(statistics.median(lags), 3),
            "p95": round(statistics.quantiles(lags, n=20)[-1], 3),
            "max": round(lags[-1], 3),
        },
        "medianLagByOp": {k: round(statistics.median(v), 3) for k, v in sorted(by_type.items())},
        "busiestSecondPerOrganization": max(
            fake.busiest_second(account.box_id) for account in fake.accounts.values()
        ),
    }


def reconcile_cost(url: str, fake: FakeGym, key: str, history: list[int]) -> dict:
    """reconcile_bookings with a fixed window and growing history."""
    now = datetime.now(UTC)
    engine = get_engine(url)
    with Session(engine, expire_on_commit=False) as session:
        org = Organization(name="History", slug="history")
        session.add(org)
        session.flush()
        fake.add_account("history-key", box_id="99999")
        connect(session, org.id, "history-key", settings=bridge_settings(fake.url, key), now=now)
        session.commit()
        connection = find_connection(session, org.id)
        today = now.date().isoformat()
        items, links = [], []
        for c in range(30):
            registrations = []
            for r in range(10):
                registration = f"w{c}-{r}"
                registrations.append({"id": registration, "user_id": f"u{c}-{r}"})
                links.append({"scheduleId": f"class-{c}", "external_id": registration})
            items.append({"id": f"class-{c}", "date": today, "registrations": registrations})
        _links(session, org.id, links, now)
        result: dict[str, float] = {}
        stored = 0
        for size in history:
            _links(session, org.id, [
                {"scheduleId": f"old-{n}", "external_id": f"h{n}"} for n in range(stored, size)
            ], now)  # fmt: skip
            stored = size
            session.execute(text("ANALYZE bridge_entity_map"))
            session.commit()
            runs = []
            for _ in range(5):
                started = time.perf_counter()
                polling.reconcile_bookings(session, connection, items, now)
                session.rollback()
                runs.append(time.perf_counter() - started)
            result[str(size)] = round(statistics.median(runs) * 1000, 1)
    return {"windowLinks": 300, "medianMsByHistoricalLinks": result}


def _links(session: Session, organization_id, rows: list[dict], now: datetime) -> None:
    for start in range(0, len(rows), 5000):
        session.execute(insert(EntityLink), [
            {"id": uuid.uuid4(), "organization_id": organization_id,
             "entity_type": EntityType.booking, "platform_id": None,
             "external_id": row["external_id"], "origin": Origin.mirror,
             "data": {"scheduleId": row["scheduleId"], "status": "booked", "memberId": "m"},
             "created_at": now, "updated_at": now}
            for row in rows[start : start + 5000]
        ])  # fmt: skip
    session.commit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--organizations", type=int, default=200)
    parser.add_argument("--rate", type=float, default=40.0, help="platform writes per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--history", default="1000,10000,100000")
    options = parser.parse_args()
    with closing(FakeGym()) as fake, scratch_database("gymctl_bench_bridge_mirror") as engine:
        url = engine.url.render_as_string(hide_password=False)
        key = generate_key_setting("bench")
        lag = mirror_lag(url, fake, key, options.organizations, options.rate, options.seconds)
        cost = reconcile_cost(url, fake, key, [int(n) for n in options.history.split(",")])
        print(json.dumps({"mirror": lag, "reconcile": cost}, indent=2))


if __name__ == "__main__":
    main()
