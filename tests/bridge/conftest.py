"""The bridge tests: a fake external gym system on loopback and an organization connected to
it. Dispatcher runs are in process on the test's session (their commits are savepoints), with
the rate lifted unless a test is about the rate."""

from __future__ import annotations

import tempfile
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from gymctl.access.invitations import Outreach
from gymctl.access.registrations import Registrar
from gymctl.bridge.connection import connect
from gymctl.bridge.dispatcher import Policy, RunSummary, drain
from gymctl.config import get_settings
from gymctl.crypto import generate_key_setting
from gymctl.models import Organization, User
from gymctl.providers.identity_admin import LocalIdentityAdmin
from gymctl.providers.mail import MailboxMailer
from tests import factories
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.bridge.fake_gym import FakeGym
from tests.conftest import NOW

API_KEY = "ak_live_iron_temple_0123456789"
FAST = Policy(rate=None, timeout=0.5, ladder=(timedelta(minutes=1),) * 5)


@pytest.fixture
def fake():
    server = FakeGym(timeout_delay=0.8)
    yield server
    server.close()


@pytest.fixture
def bridge_settings(settings, fake):
    return settings.model_copy(
        update={
            "bridge_api_url": fake.url,
            "bridge_credentials_key": SecretStr(generate_key_setting("b1")),
            "bridge_rate": 1000.0,
        }
    )


@pytest.fixture
def account(fake):
    return fake.add_account(API_KEY, box_id="777")


@pytest.fixture
def org(session):
    organization = factories.organization(session, name="Iron Temple")
    session.commit()
    return organization


@pytest.fixture
def connected(session, org, account, bridge_settings):
    connection = connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    return connection


def run(session, org_id, settings, clock, policy: Policy = FAST) -> RunSummary:
    """One dispatcher run for the organization, as a dispatcher process makes it."""
    return drain(session, org_id, settings=settings, policy=policy, runner="test", clock=clock)


def committed_gym(engine, settings, *, name: str, ops: int = 1) -> tuple[Organization, list]:
    """For tests with real commits: a gym connected to the fake's API_KEY account (the caller
    adds it) with `ops` user.create ops queued, committed."""
    from gymctl.bridge import enqueue

    with Session(engine, expire_on_commit=False) as session:
        org = Organization(name=name, slug=f"{name.lower()}-{uuid.uuid4().hex[:8]}")
        session.add(org)
        session.flush()
        connect(session, org.id, API_KEY, settings=settings, now=NOW)
        queued = [
            enqueue(
                session,
                organization_id=org.id,
                op_type="user.create",
                now=NOW,
                payload=member_payload(email=f"m{n}@example.test"),
            )
            for n in range(ops)
        ]
        session.commit()
    return org, queued


def member_payload(member_id=None, **fields) -> dict:
    return {
        "memberId": str(member_id or uuid.uuid4()),
        "firstName": "Dana",
        "lastName": "Levi",
        "email": "dana@example.test",
        **fields,
    }


def desk_registrar(organization: Organization, staff: User, path: str = "/desk") -> Registrar:
    """The desk registering into `organization` as `staff`, with the embedded default's outreach
    bound to the test's own connection (a folder for mail; a login's link request is stored)."""
    session = Session.object_session(staff)
    outreach = Outreach(
        get_settings(),
        MailboxMailer(tempfile.mkdtemp(prefix="bridge-mail-"), "gym@example.test"),
        LocalIdentityAdmin(sessionmaker(bind=session.connection()), ()),
    )
    return Registrar(
        organization=organization, staff_user_id=staff.id, ip=None, path=path, outreach=outreach
    )
