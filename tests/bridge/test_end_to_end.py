"""End to end on PostgreSQL, and on the embedded default with one daemon, over real HTTP: the
Flask app on loopback, real commits, the daemon's dispatch row at 2 requests per second, the
fake external system. A connected gym gets members four ways (desk registration, import, a join
link, an accepted invitation), sells them plans, books a class full, cancels, and the waitlist
is promoted; the fake sees, per member and per class, exactly the calls expected in order (the
promotion after the cancel that freed its seat), no organization gets more than 2 requests a
second, and a booking cancelled on the fake comes back cancelled here."""

from __future__ import annotations

import json
import threading
import urllib.request
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

from pydantic import SecretStr
from sqlalchemy import select
from werkzeug.serving import make_server

from gymctl.access.member_imports import work_imports
from gymctl.billing.plans import grant_plan
from gymctl.bridge import polling, sweeps
from gymctl.crypto import generate_key_setting
from gymctl.db import get_engine, session_factory
from gymctl.models import Booking, BookingStatus, Membership, Role, User
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import read_mailbox
from tests import factories
from tests.billing.factories import make_plan
from tests.bridge.conftest import API_KEY


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def signed_in_as(self, token: str) -> Api:
        return Api(self.base, token)

    def __call__(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(
            self.base + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": "text/csv" if raw is not None else "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")


def _dispatch(factory, settings) -> None:
    """One pass of the daemon's dispatch row (what `gymctl daemons` runs on one machine)."""
    sweeps.dispatch(factory, datetime.now(UTC), settings)


def test_a_gym_mirrors_its_members_plans_and_bookings_end_to_end(
    committed_database, idp, settings, fake, tmp_path
):
    from gymctl.providers.mail import MailboxMailer
    from webhooks.app import create_app

    engine = get_engine(committed_database)
    factory = session_factory(engine)
    account = fake.add_account(API_KEY)
    bridged = settings.model_copy(update={
        "bridge_api_url": fake.url, "bridge_credentials_key": SecretStr(generate_key_setting("e")),
        "bridge_rate": 2.0,
    })  # fmt: skip
    mailbox = tmp_path / "mail"
    app = create_app(bridged, session_factory=factory,
                     mailer=MailboxMailer(mailbox, bridged.mail_from))  # fmt: skip
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    now = datetime.now(UTC)
    try:
        with factory() as session:
            org = factories.organization(session, name="Iron Temple")
            owner = factories.user(session, identity_id="user_e2e_owner", email="o@iron.example",
                                   email_verified_at=now)  # fmt: skip
            factories.membership(session, user=owner, organization=org, role=Role.owner)
            session.commit()
            org_id = org.id
        api = Api(f"http://127.0.0.1:{server.server_port}", idp.token("user_e2e_owner", now=now))
        assert api("PUT", f"/organizations/{org_id}/bridge/connection",
                   {"apiKey": API_KEY})[0] == 200  # fmt: skip
        starts = (now + timedelta(days=1)).replace(hour=7, minute=0, second=0, microsecond=0)
        _, kind = api("POST", f"/organizations/{org_id}/class-types",
                      {"name": "WOD", "defaultCapacity": 2, "durationMinutes": 60})  # fmt: skip
        session_body = {"classTypeId": kind["data"]["id"], "startsAt": starts.isoformat()}
        _, row = api("POST", f"/organizations/{org_id}/sessions", session_body)
        external_class = fake.add_class(account, starts.date().isoformat(), time="07:00")
        _dispatch(factory, bridged)  # the first poll records the class and matches the session

        for email, name in (("ana@example.test", "Ana A"), ("ben@example.test", "Ben B")):
            assert api("POST", f"/organizations/{org_id}/members",
                       {"email": email, "name": name})[0] == 201  # fmt: skip
        assert api("POST", f"/organizations/{org_id}/members/import",
                   raw=b"email,name\ncy@example.test,Cy C\n")[0] == 202  # fmt: skip
        # The import is queued: the daemons' member_imports job registers Cy.
        work_imports(factory, app.extensions["gymctl"].outreach, now=now)
        # Dee joins through the gym's link, signed in with an account of her own.
        with factory() as session:
            factories.user(session, identity_id="user_e2e_dee", email="dee@example.test",
                           email_verified_at=now)  # fmt: skip
            session.commit()
        _, link = api("POST", f"/organizations/{org_id}/join-links", {"label": "site"})
        dee_api = api.signed_in_as(idp.token("user_e2e_dee", now=now))
        assert dee_api("POST", f"/join/{link['token']}/join")[0] == 201
        # Eve, who has an account, is invited and accepts.
        idp.add_account("user_e2e_eve", "eve@example.test", verified=True)
        invited = api("POST", f"/organizations/{org_id}/invitations",
                      {"email": "eve@example.test", "role": "member"})  # fmt: skip
        assert invited[0] == 201
        [letter] = read_mailbox(mailbox)
        url = next(w for w in letter.get_body(("plain",)).get_content().split()
                   if w.startswith("https://"))  # fmt: skip
        ticket = parse_qs(urlparse(url).query)["token"][0]
        eve_api = api.signed_in_as(idp.token("user_e2e_eve", now=now))
        assert eve_api("POST", "/invitations/accept", {"token": ticket})[1]["status"] == "accepted"
        with factory() as session:
            members = {
                user.email: membership
                for membership, user in session.execute(
                    select(Membership, User).join(User, User.id == Membership.user_id).where(
                        Membership.organization_id == org_id, Membership.role == Role.member)
                )
            }  # fmt: skip
            plan = make_plan(session, session.get(type(org), org_id), PlanType.cash, now=now)
            for member in members.values():
                grant_plan(session, plan, member, method=CollectionMethod.cash, now=now,
                           actor_user_id=owner.id, documents=LocalDocumentProvider())  # fmt: skip
            session.commit()
        assert set(members) == {f"{n}@example.test" for n in ("ana", "ben", "cy", "dee", "eve")}
        ana, ben, cy = (members[f"{n}@example.test"] for n in ("ana", "ben", "cy"))
        booked = {}
        for member in (ana, ben, cy):  # capacity 2: Cy waits
            _, made = api("POST", f"/organizations/{org_id}/sessions/{row['data']['id']}/book",
                          {"userId": str(member.user_id)})  # fmt: skip
            booked[member.id] = made["data"]
        assert booked[cy.id]["status"] == "waitlisted"
        api("POST", f"/organizations/{org_id}/bookings/{booked[ana.id]['id']}/cancel")

        for _ in range(6):
            _dispatch(factory, bridged)
            with factory() as session:
                unfinished = session.scalar(select(SyncOp.id).where(
                    SyncOp.status.not_in([OpStatus.succeeded, OpStatus.superseded])))  # fmt: skip
            if unfinished is None:
                break
        assert unfinished is None
        with factory() as session:
            users = {
                link.platform_id: link.external_id
                for link in session.scalars(select(EntityLink).where(
                    EntityLink.entity_type == EntityType.member))
            }  # fmt: skip
        book_there, cancel_there = f"book:{external_class}", f"cancel:{external_class}"
        assert fake.effects[users[str(ana.id)]] == ["created", "membership", book_there,
                                                   cancel_there]  # fmt: skip
        assert fake.effects[users[str(ben.id)]] == ["created", "membership", book_there]
        assert fake.effects[users[str(cy.id)]] == ["created", "membership", book_there]
        for joined in ("dee", "eve"):  # the join link's and the invitation's
            member = members[f"{joined}@example.test"]
            assert fake.effects[users[str(member.id)]] == ["created", "membership"]
        assert len(fake.effects) == len(members) == 5
        ana_there, ben_there, cy_there = (users[str(m.id)] for m in (ana, ben, cy))
        assert fake.class_effects == {external_class: [
            f"book:{ana_there}", f"book:{ben_there}", f"cancel:{ana_there}", f"book:{cy_there}",
        ]}  # fmt: skip
        assert (fake.duplicates, fake.welcome_emails) == ([], [])
        assert fake.busiest_second(account.box_id) <= 2

        # Ben cancels in the external system's app: it comes back, his seat is freed.
        gone = next(k for k, r in account.registrations.items()
                    if r["user_id"] == users[str(ben.id)])  # fmt: skip
        account.registrations.pop(gone)
        with factory() as session:
            polling.mark_due(session, "reconcile_due_at", now=datetime.now(UTC))
            session.commit()
        _dispatch(factory, bridged)
        with factory() as session:
            status = session.scalar(select(Booking.status).where(
                Booking.membership_id == ben.id))  # fmt: skip
        assert status is BookingStatus.cancelled
    finally:
        server.shutdown()
