"""The quick start's demo gym, walked through the API on the embedded default as `gymctl serve`
runs it: a real SQLite file, a real engine with a connection per session (not the harness's one
shared connection, which hides SQLite's write lock).

STYLE 13, "one unit of work, one transaction": a second session opened while the request's own
session holds SQLite's write lock waits on it for the whole busy timeout (the desk charge and
pay-debt answered 500 after 30 s). The engine now refuses that at once (SecondWriterError), so a
door that hands work to a domain function with sessions of its own, without ending the request's
transaction first, fails here immediately instead of hanging.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gymctl import clock
from gymctl.billing.demo import APPROVE_CARD
from gymctl.config import get_settings
from gymctl.db import SecondWriterError, get_engine, session_factory
from gymctl.identity.dev_keys import mint_dev_token
from gymctl.models import User
from gymctl.providers.card_sandbox import complete_page


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`gymctl quickstart` in a fresh home, as a new operator runs it."""
    home = tmp_path_factory.mktemp("embedded-home")
    env = {"GYMCTL_HOME": str(home), "GYMCTL_ENV": "development"}
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith(("GYMCTL_", "IDENTITY_"))}
    result = subprocess.run(
        [sys.executable, "-m", "gymctl", "quickstart", "--json"],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return env, json.loads(result.stdout)


@pytest.fixture
def api(demo, monkeypatch):
    env, out = demo
    for name in [n for n in __import__("os").environ if n.startswith(("GYMCTL_", "IDENTITY_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    from webhooks.app import create_app

    app = create_app()
    assert app.extensions["gymctl"].session_factory is session_factory()
    assert get_engine().dialect.name == "sqlite"
    yield Walk(app.test_client(), out)
    get_settings.cache_clear()


class Walk:
    def __init__(self, client, out):
        self.client = client
        self.org = out["organization"]["id"]
        self.out = out

    def token(self, identity_id: str) -> dict:
        token = mint_dev_token(
            get_settings(), identity_id, now=clock.now(), lifetime=timedelta(hours=1)
        )
        return {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, who: str, expected: int, **kwargs):
        response = self.client.open(
            path.replace("ORG", self.org), method=method, headers=self.token(who), **kwargs
        )
        assert response.status_code == expected, (path, response.status_code, response.json)
        return response.json

    def user_id(self, identity_id: str) -> str:
        with session_factory()() as session:
            return str(session.scalar(select(User.id).where(User.identity_id == identity_id)))


OWNER, MEMBER = "user_demo_owner", "user_demo_member_1"


def test_second_writer_in_one_thread_is_refused_at_once_not_after_the_busy_timeout(api):
    """The guard itself: while one session holds the write lock, a second session of the same
    thread that would write is refused at once; a read-only one and another thread still may."""
    factory = session_factory()
    with factory() as first:
        first.execute(select(User.id).limit(1))  # BEGIN IMMEDIATE: holds the write lock
        with factory() as second, pytest.raises(SecondWriterError):
            second.execute(select(User.id).limit(1))
        seen = []
        other = threading.Thread(target=lambda: seen.append(_read_in_new_session(factory)))
        other.start()
        other.join(timeout=10)
        assert seen == [True]
    with factory() as after:  # the first one ended: writing is free again
        after.execute(select(User.id).limit(1))
        after.commit()


def _read_in_new_session(factory) -> bool:
    from gymctl.db import READ_ONLY

    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        return session.execute(select(User.id).limit(1)).first() is not None


def test_desk_charge_refund_and_replay_on_the_embedded_default(api):
    member = api.user_id(MEMBER)
    body = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": member,
        "amountInCents": 1500,
        "currency": "ILS",
        "description": "towel",
    }
    charged = api.call("POST", "/organizations/ORG/payments/desk-charges", OWNER, 201, json=body)
    assert charged["data"]["outcome"] == "charged"
    replay = api.call("POST", "/organizations/ORG/payments/desk-charges", OWNER, 200, json=body)
    assert replay["data"]["replayed"] is True
    sale = charged["data"]["transaction"]["id"]
    refunded = api.call(
        "POST",
        f"/organizations/ORG/payments/transactions/{sale}/refund",
        OWNER,
        201,
        json={"amountInCents": 500, "reason": "towel returned"},
    )
    assert refunded["data"]["amountInCents"] == 500


def test_member_pay_debt_and_desk_clear_debt_answer_on_the_embedded_default(api):
    """The member's own pay-debt (a money path with sessions of its own) answers at once."""
    subscription = api.out["billing"]["subscriptionId"]
    path = f"/organizations/ORG/subscriptions/{subscription}"
    paid = api.client.post(f"{path.replace('ORG', api.org)}/pay-debt", headers=api.token(MEMBER))
    cleared = api.client.post(
        f"{path.replace('ORG', api.org)}/clear-debt", headers=api.token(OWNER), json={}
    )
    for response in (paid, cleared):
        assert response.status_code < 500, response.json
        assert "code" in response.json or "data" in response.json


def test_classes_bookings_and_notice_on_the_embedded_default(api):
    kind = api.call(
        "POST",
        "/organizations/ORG/class-types",
        OWNER,
        201,
        json={"name": "Open gym", "defaultCapacity": 10, "durationMinutes": 60},
    )
    starts = (clock.now() + timedelta(days=2)).replace(microsecond=0).isoformat()
    session = api.call(
        "POST",
        "/organizations/ORG/sessions",
        OWNER,
        201,
        json={"classTypeId": kind["data"]["id"], "startsAt": starts},
    )
    booked = api.call(
        "POST", f"/organizations/ORG/sessions/{session['data']['id']}/book", MEMBER, 201, json={}
    )
    api.call(
        "POST", f"/organizations/ORG/bookings/{booked['data']['id']}/cancel", MEMBER, 200, json={}
    )
    subscription = api.out["billing"]["subscriptionId"]
    notice = f"/organizations/ORG/subscriptions/{subscription}/notice"
    api.call("POST", notice, MEMBER, 200, json={"reasonCode": "moving_away"})
    api.call("DELETE", notice, MEMBER, 200)


def test_brand_publish_on_the_embedded_default(api):
    publish = "/organizations/ORG/brand-workspace/publish"
    answer = api.call("POST", publish, OWNER, 200, json={"channels": ["brand"]})
    assert answer["results"][0]["result"] in {"verified", "unchanged"}


class _Watched:
    """The card provider, noting at each call whether another connection could write then."""

    def __init__(self, inner, path: str) -> None:
        self.inner, self.path, self.calls = inner, path, []

    def __getattr__(self, name: str):
        method = getattr(self.inner, name)

        def called(*args, **kwargs):
            self.calls.append((name, _could_write(self.path)))
            return method(*args, **kwargs)

        return called


def _could_write(path: str) -> bool:
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked": a writer would wait
        return False
    finally:
        probe.close()


def test_no_write_lock_is_held_while_the_card_provider_answers(api):
    """On the embedded default a transaction holds the one write lock: held across a provider
    call, it held every request, command and daemon job for the call (past 30 s, the jobs
    failed "database is locked"). The desk charge read its stored attempt again after
    committing it; the refund, the charge's replay and the page read-back of a webhook read
    before the call in a transaction of their own."""
    services = api.client.application.extensions["gymctl"]
    watched = _Watched(services.card_provider, get_engine().url.database)
    services.__dict__["card_provider"] = watched  # the cached property, replaced
    body = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": api.user_id(MEMBER),
        "amountInCents": 700,
        "currency": "ILS",
        "description": "water",
    }
    charged = api.call("POST", "/organizations/ORG/payments/desk-charges", OWNER, 201, json=body)
    sale = charged["data"]["transaction"]["id"]
    api.call(
        "POST",
        f"/organizations/ORG/payments/transactions/{sale}/refund",
        OWNER,
        201,
        json={"amountInCents": 700, "reason": "spilled"},
    )
    webhook = api.client.post(
        f"/webhooks/card-provider/{api.org}", json={"LowProfileId": "no-such-page"}
    )
    assert webhook.status_code < 500, webhook.json

    assert [name for name, _ in watched.calls] == ["charge_token", "refund", "get_page"]
    assert all(free for _, free in watched.calls), watched.calls


def test_no_write_lock_is_held_while_a_hosted_page_opens(api):
    """A purchase and a card replacement open the provider's hosted page before writing their
    rows (each check made again with them): a slow provider held every writer while the
    purchase's subscription and checkout, written first, kept the write lock for the call."""
    services = api.client.application.extensions["gymctl"]
    watched = _Watched(services.card_provider, get_engine().url.database)
    services.__dict__["card_provider"] = watched
    plan = {"name": "Watched monthly", "type": "card", "priceInCents": 9900, "currency": "ILS"}
    plan = api.call(
        "POST", "/organizations/ORG/plans", OWNER, 201, json={**plan, "intervalMonths": 1}
    )
    bought = api.call(
        "POST", f"/organizations/ORG/plans/{plan['data']['id']}/purchase", "user_demo_member_3", 201
    )
    subscription = bought["data"]["subscription"]["id"]
    # Paid on its page first: a purchase not paid yet takes no replacement card (s54).
    page = bought["data"]["checkout"]["pageId"]
    complete_page(Path(os.environ["GYMCTL_HOME"]), page, APPROVE_CARD)
    paid = api.client.post(f"/webhooks/card-provider/{api.org}", json={"LowProfileId": page})
    assert paid.status_code == 200, paid.json
    replacing = f"/organizations/ORG/subscriptions/{subscription}/card-replacement"
    replaced = api.call("POST", replacing, "user_demo_member_3", 201)

    opened = [free for name, free in watched.calls if name == "create_page"]
    assert opened == [True, True], watched.calls
    assert all(free for _, free in watched.calls), watched.calls
    assert bought["data"]["checkout"]["url"]
    assert replaced["data"]["checkout"]["url"]
    api.call("POST", replacing, "user_demo_member_3", 409)  # one replacement page at a time
