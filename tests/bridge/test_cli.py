"""`gymctl bridge ...` end to end on the embedded default (SQLite), against the fake on
loopback: connect, dispatch, status, the parked op's retry, a refused dismiss."""

from __future__ import annotations

import json
import subprocess
import uuid

from sqlalchemy.orm import Session

from gymctl.bridge import enqueue
from gymctl.crypto import generate_key_setting
from gymctl.db import get_engine
from gymctl.models import Organization
from tests.bridge.conftest import API_KEY, member_payload
from tests.conftest import NOW
from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)


def test_an_operator_connects_dispatches_and_retries_a_parked_op(home_env, fake):  # noqa: F811
    fake.add_account(API_KEY)
    env = {
        **home_env,
        "GYMCTL_BRIDGE_API_URL": fake.url,
        "GYMCTL_BRIDGE_CREDENTIALS_KEY": generate_key_setting("cli"),
    }
    gymctl(env, "db", "upgrade")
    url = f"sqlite:///{env['GYMCTL_HOME']}/gymctl.db"
    with Session(get_engine(url)) as session:
        session.add(Organization(name="Iron Temple", slug="iron-temple"))
        session.commit()
    connected = subprocess.run(
        [*GYMCTL, "bridge", "connect", "iron-temple", "--json"],
        env=env, input=API_KEY + "\n", capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(connected.stdout)["status"] == "active"
    assert API_KEY not in connected.stdout + connected.stderr

    with Session(get_engine(url)) as session:
        organization_id = session.query(Organization.id).scalar()
        rejected = enqueue(session, organization_id=organization_id, op_type="user.create",
                           payload=member_payload(email="a@example.test"), now=NOW)  # fmt: skip
        enqueue(session, organization_id=organization_id, op_type="user.create",
                payload=member_payload(uuid.uuid4(), email="b@example.test"), now=NOW)  # fmt: skip
        session.commit()
        parked_id = rejected.id
    fake.fail("POST /v3/users", 422)
    runs = json.loads(gymctl(env, "bridge", "dispatch", "--once", "--json").stdout)
    assert [(r["succeeded"], r["parked"]) for r in runs] == [(1, 1)]

    status = json.loads(gymctl(env, "bridge", "status", "iron-temple", "--json").stdout)
    assert (status["parked"], status["byStatus"]["succeeded"]) == (1, 1)
    assert status["connection"]["lastRun"]["correlation_id"]
    parked = json.loads(
        gymctl(env, "bridge", "ops", "iron-temple", "--status", "parked", "--json").stdout
    )
    assert [(op["id"], op["issueCode"]) for op in parked] == [(parked_id, "rejected")]

    retried = json.loads(gymctl(env, "bridge", "retry", str(parked_id), "--json").stdout)
    assert retried["status"] == "pending"
    gymctl(env, "bridge", "dispatch", "--once", "--json")
    status = json.loads(gymctl(env, "bridge", "status", "iron-temple", "--json").stdout)
    assert (status["parked"], status["byStatus"]["succeeded"]) == (0, 2)

    refused = gymctl(env, "bridge", "dismiss", str(parked_id), check=False)
    assert refused.returncode == 1
    assert "bridge_op_not_parked" in refused.stderr
