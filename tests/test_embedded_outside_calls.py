"""The quick start's demo gym on the embedded default, each area walked with the outside-call
detector on (tests/embedded_outside_calls.py): no thread calls an outside system (card
provider, identity provider, mail, object store, push, the daemons' peers) while it holds
SQLite's one write lock. Decisions s41/s42: held across a call, the lock holds every writer of
every process for the call, and past the 30 s busy timeout they fail "database is locked".
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest
from PIL import Image
from sqlalchemy import select

from daemons.jobs import JOBS
from daemons.runner import run_job_once
from gymctl import clock
from gymctl.config import get_settings
from gymctl.crypto import generate_key_setting
from gymctl.db import session_factory
from gymctl.models.organizations import Tier
from tests import test_embedded_workflows as walks
from tests.embedded_outside_calls import watching
from tests.test_embedded_workflows import MEMBER, OWNER

demo, api = walks.demo, walks.api  # the quick start's demo gym over its API (fixtures)

ORG = "/organizations/ORG"


def _png() -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGBA", (512, 512), (0, 0, 0, 0))
    image.paste((28, 64, 160, 255), (128, 128, 384, 384))
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _answered(api, method: str, path: str, who: str | None, **kwargs):
    headers = api.token(who) if who else {}
    response = api.client.open(
        path.replace("ORG", api.org), method=method, headers=headers, **kwargs
    )
    assert response.status_code < 500, (path, response.status_code, response.json)
    return response


def _address(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}@demo-gym.example"


def test_an_invitation_and_its_email_hold_no_write_lock(api):
    with watching() as seen:
        api.call(
            "POST",
            f"{ORG}/invitations",
            OWNER,
            201,
            json={"email": _address("i"), "role": "member"},
        )
    assert {"local identity admin", "mailbox (SMTP stand-in)"} <= seen.doors()
    assert not seen.calls, seen.report()


def test_an_invitation_resent_holds_no_write_lock(api):
    invited = api.call(
        "POST", f"{ORG}/invitations", OWNER, 201, json={"email": _address("r"), "role": "member"}
    )
    with watching() as seen:
        api.call("POST", f"{ORG}/invitations/{invited['id']}/resend", OWNER, 200)
    assert "mailbox (SMTP stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_a_bulk_invite_worked_by_its_daemon_holds_no_write_lock(api):
    api.call(
        "POST",
        f"{ORG}/invitations/bulk",
        OWNER,
        202,
        json={"emails": [_address("b")], "role": "member"},
    )
    with watching() as seen:
        _run("invitation_batches")
    assert "mailbox (SMTP stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_members_added_revoked_and_imported_hold_no_write_lock(api):
    invited = api.call(
        "POST", f"{ORG}/invitations", OWNER, 201, json={"email": _address("v"), "role": "member"}
    )
    with watching() as seen:
        api.call("POST", f"{ORG}/invitations/{invited['id']}/revoke", OWNER, 200)
        _answered(api, "POST", f"{ORG}/members", OWNER, json={"email": _address("m"), "name": "Mo"})
        _answered(
            api,
            "POST",
            f"{ORG}/members/import",
            OWNER,
            data=f"email,name\n{_address('ro')},Ro Ster\n",
            content_type="text/csv",
        )
        _run("member_imports")
    assert not seen.calls, seen.report()


def _proven_login(prefix: str) -> str:
    """A proven login's address, a member of no demo gym."""
    from tests import factories

    address = _address(prefix)
    with session_factory()() as session:
        factories.user(
            session, identity_id=f"user_{prefix}", email=address, email_verified_at=clock.now()
        )
        session.commit()
    return address


def test_a_login_asked_to_link_by_desk_lead_and_import_holds_no_write_lock(api):
    """The email asking a login to link the gym's profile went out inside the registration's
    transaction (decisions s43): the daemons' link_requests job now sends it, on its own."""
    desk, lead, roster = (_proven_login(p) for p in ("desk", "lead", "roster"))
    with watching() as seen:
        api.call("POST", f"{ORG}/members", OWNER, 201, json={"email": desk, "name": "Dee"})
        made = api.call("POST", f"{ORG}/leads", OWNER, 201, json={"name": "Lee", "email": lead})
        api.call("POST", f"{ORG}/leads/{made['id']}/convert", OWNER, 200)
        _answered(
            api,
            "POST",
            f"{ORG}/members/import",
            OWNER,
            data=f"email,name\n{roster},Ro Ster\n",
            content_type="text/csv",
        )
        _run("member_imports")
        _run("link_requests")
    assert "mailbox (SMTP stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_join_links_hold_no_write_lock(api):
    with watching() as seen:
        link = api.call("POST", f"{ORG}/join-links", OWNER, 201, json={"label": "Desk"})
        token = (link.get("data") or link)["token"]
        _answered(api, "GET", f"/join/{token}", None)
        _answered(
            api,
            "POST",
            f"/join/{token}/request-invite",
            None,
            json={"email": f"j-{uuid.uuid4().hex[:8]}@demo-gym.example"},
        )
        _answered(api, "POST", f"/join/{token}/checkout-failed", None, json={"reason": "x"})
        _answered(api, "POST", f"/join/{token}/join", "user_demo_new_coach", json={})
    assert "local identity admin" in seen.doors()
    assert not seen.calls, seen.report()


def test_brand_assets_uploaded_and_read_hold_no_write_lock(api):
    with watching() as seen:
        _answered(
            api,
            "POST",
            f"{ORG}/branding/assets/logo",
            OWNER,
            data={"file": (io.BytesIO(_png()), "logo.png")},
            content_type="multipart/form-data",
        )
        _answered(api, "GET", f"{ORG}/branding/assets", OWNER)
        _answered(api, "GET", f"{ORG}/brand-workspace", OWNER)
        _answered(api, "GET", f"/public/organizations/{api.org}/branding", None)
        _answered(api, "GET", "/sites/demo-gym", None)
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_brand_publish_holds_no_write_lock(api):
    with watching() as seen:
        _answered(
            api,
            "POST",
            f"{ORG}/brand-workspace/publish",
            OWNER,
            json={"channels": ["brand", "website", "app"]},
        )
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def _logo(api) -> dict:
    """The demo app draft's stored logo ({id, key, ...})."""
    return _answered(api, "GET", f"{ORG}/branding/assets", OWNER).json["assets"]["logo"]


def test_brand_and_app_drafts_saved_hold_no_write_lock(api):
    """Rule 10 re-checks each stored logo on save: the store answers before the draft's
    write, with the transaction that only read ended."""
    logo = _logo(api)
    palette = {"primaryColor": "#1C40A0"}
    with watching() as seen:
        api.call("PUT", f"{ORG}/brand-workspace/brand", OWNER, 200, json={"palette": palette})
        api.call(
            "PUT",
            f"{ORG}/brand-workspace/brand",
            OWNER,
            200,
            json={"palette": palette, "logos": {"logo": logo["id"]}},
        )
        api.call(
            "PUT", f"{ORG}/branding/assets", OWNER, 200, json={"assets": {"logo": logo["key"]}}
        )
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_brand_and_app_restored_hold_no_write_lock(api):
    _answered(api, "POST", f"{ORG}/brand-workspace/publish", OWNER, json={"channels": ["brand"]})
    _answered(api, "POST", f"{ORG}/brand-workspace/publish", OWNER, json={"channels": ["app"]})
    with watching() as seen:
        api.call("POST", f"{ORG}/brand-workspace/brand/restore", OWNER, 200, json={})
        api.call("POST", f"{ORG}/brand-workspace/app/restore", OWNER, 200, json={})
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_a_publish_replacing_the_release_candidate_holds_no_write_lock(api):
    """Spec A 3: a publish supersedes the current candidate and a new one replaces it, its
    snapshot digesting the live app's stored assets: read ahead of the publish's lock."""
    from gymctl.db import session_scope
    from gymctl.models import Organization
    from gymctl.models.releases import ReleaseCandidate
    from gymctl.releases import branded_apps, candidates, requests
    from tests.releases.conftest import APP_CONFIG, COMMIT
    from tests.releases.helpers import approve_intake_in

    org_id = uuid.UUID(api.org)
    store = api.client.application.extensions["gymctl"].store
    at = clock.now()
    with session_scope(session_factory()) as session:
        if requests.find_request(session, org_id) is None:
            gym = session.get(Organization, org_id)
            gym.tier = Tier.elite  # a dedicated app is the top tier's
            branded_apps.create_app(session, get_settings(), gym, now=at)
            branded_apps.configure(session, org_id, APP_CONFIG, now=at)
            branded_apps.set_enabled(session, org_id, True, now=at)
            requests.open_request(session, org_id, now=at)
            approve_intake_in(session, org_id)
    with session_scope(session_factory()) as session:
        cut = candidates.cut_candidate(
            session, store, get_settings(), org_id, source_commit=COMMIT, now=at
        )
        generation = cut.generation
    with watching() as seen:
        for channel in ("brand", "app"):
            published = api.call(
                "POST", f"{ORG}/brand-workspace/{channel}/publish", OWNER, 200, json={}
            )
            assert published["result"] == "verified", published
    with session_scope(session_factory()) as session:
        newest = max(session.scalars(select(ReleaseCandidate.generation)).all())
    assert newest == generation + 2  # each publish replaced the candidate (the store was read)
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


@pytest.fixture
def librarian(api, monkeypatch):
    """The demo gym's API with its owner a platform admin and the library's embedder a remote
    one (the loopback fake of tests/movements)."""
    from tests.movements.fakes import FakeServices
    from webhooks.app import create_app

    fake = FakeServices()
    monkeypatch.setenv("GYMCTL_EMBEDDINGS_URL", f"{fake.url}/v1")
    monkeypatch.setenv("GYMCTL_PLATFORM_ADMINS", OWNER)
    get_settings.cache_clear()
    api.client = create_app().test_client()
    yield api
    fake.close()


LIBRARY_KEY = "libraries/detector.json"
CANONICAL = "/admin/exercises/canonical"


def test_the_movement_library_seeded_merged_and_changed_holds_no_write_lock(librarian):
    from gymctl.models import Movement
    from gymctl.movements.library import FORMAT

    api = librarian
    names = ("Detector Squat", "Detector Press", "Detector Plank")
    library = {
        "format": FORMAT,
        "movements": [{"name": n, "equipment": "body only", "instructions": ["Go"]} for n in names],
    }
    store = api.client.application.extensions["gymctl"].store
    store.put(LIBRARY_KEY, json.dumps(library).encode(), content_type="application/json")
    with watching() as seen:
        api.call("POST", f"{CANONICAL}/seed", OWNER, 202, json={"r2Key": LIBRARY_KEY})
        _run("movement_jobs")
        with session_factory()() as session:
            ids = {
                m.name: str(m.id)
                for m in session.scalars(select(Movement).where(Movement.name.in_(names)))
            }
        pair = {"winnerId": ids["Detector Press"], "loserId": ids["Detector Plank"]}
        merged = api.call("POST", f"{CANONICAL}/merge", OWNER, 200, json={"pairs": [pair]})
        assert merged["pairs"][0]["outcome"] == "merged"
        body = {"sourceId": ids["Detector Press"], "alias": "Detector Plank"}
        api.call("POST", f"{CANONICAL}/alias-change", OWNER, 200, json=body)
    assert {"httpx", "folder store (S3 stand-in)"} <= seen.doors()
    assert not seen.calls, seen.report()


def test_card_flows_hold_no_write_lock(api):
    with watching() as seen:
        body = {
            "idempotencyKey": str(uuid.uuid4()),
            "userId": api.user_id(MEMBER),
            "amountInCents": 900,
            "currency": "ILS",
            "description": "shake",
        }
        charged = api.call("POST", f"{ORG}/payments/desk-charges", OWNER, 201, json=body)
        sale = charged["data"]["transaction"]["id"]
        _answered(api, "GET", f"{ORG}/payments/desk-charges/{sale}", OWNER)
        _answered(api, "POST", f"{ORG}/payments/desk-charges/{sale}/reconcile", OWNER, json={})
        _answered(
            api,
            "POST",
            f"{ORG}/payments/transactions/{sale}/refund",
            OWNER,
            json={"amountInCents": 900, "reason": "returned"},
        )
        plan = {"name": "Det monthly", "type": "card", "priceInCents": 5000, "currency": "ILS"}
        plan = api.call("POST", f"{ORG}/plans", OWNER, 201, json={**plan, "intervalMonths": 1})
        bought = api.call(
            "POST", f"{ORG}/plans/{plan['data']['id']}/purchase", "user_demo_member_2", 201
        )
        subscription = bought["data"]["subscription"]["id"]
        _answered(api, "POST", f"{ORG}/subscriptions/{subscription}/card-replacement", OWNER)
        _answered(
            api,
            "POST",
            f"{ORG}/payments/verify-return",
            "user_demo_member_2",
            json={"lowProfileId": "no-such-page"},
        )
        demo_subscription = api.out["billing"]["subscriptionId"]
        _answered(api, "POST", f"{ORG}/subscriptions/{demo_subscription}/pay-debt", MEMBER)
        _answered(
            api, "POST", f"{ORG}/subscriptions/{demo_subscription}/clear-debt", OWNER, json={}
        )
        api.client.post(f"/webhooks/card-provider/{api.org}", json={"LowProfileId": "none"})
    assert not seen.calls, seen.report()


def test_a_waitlist_seat_pushed_to_its_member_holds_no_write_lock(api):
    waiting = "user_demo_member_2"
    with watching() as seen:
        api.call(
            "POST",
            f"{ORG}/push-registrations",
            waiting,
            201,
            json={"appId": get_settings().multi_org_app_id, "platform": "ios", "token": "dev-2"},
        )
        book = f"{ORG}/sessions/{_class_session(api, 'Tiny', capacity=1, days=3)}/book"
        first = api.call("POST", book, MEMBER, 201, json={})
        api.call("POST", book, waiting, 201, json={})  # the waitlist
        api.call("POST", f"{ORG}/bookings/{first['data']['id']}/cancel", MEMBER, 200, json={})
        assert _run("member_pushes").result["pushed"] == 1
    assert "push outbox (push stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def _class_session(api, name: str, *, capacity: int, days: int) -> str:
    """A class of `capacity` seats `days` from now, made by the owner: its session's id."""
    kind = api.call(
        "POST",
        f"{ORG}/class-types",
        OWNER,
        201,
        json={"name": name, "defaultCapacity": capacity, "durationMinutes": 60},
    )
    starts = (clock.now() + timedelta(days=days)).replace(microsecond=0).isoformat()
    session = api.call(
        "POST",
        f"{ORG}/sessions",
        OWNER,
        201,
        json={"classTypeId": kind["data"]["id"], "startsAt": starts},
    )
    return session["data"]["id"]


def _run(name: str):
    job = next(job for job in JOBS if job.name == name)
    return run_job_once(
        job, session_factory=session_factory(), settings=get_settings(), now=clock.now(), tick=None
    )


@pytest.fixture
def bridged(api, monkeypatch):
    """The demo gym's API with the bridge configured against the fake external system."""
    from tests.bridge.conftest import API_KEY
    from tests.bridge.fake_gym import FakeGym
    from webhooks.app import create_app

    fake = FakeGym(timeout_delay=0.8)
    fake.add_account(API_KEY)
    monkeypatch.setenv("GYMCTL_BRIDGE_API_URL", fake.url)
    monkeypatch.setenv("GYMCTL_BRIDGE_CREDENTIALS_KEY", generate_key_setting("det"))
    monkeypatch.setenv("GYMCTL_BRIDGE_RATE", "1000")
    get_settings.cache_clear()
    api.client = create_app().test_client()
    yield api, API_KEY
    fake.close()


def test_the_bridge_holds_no_write_lock(bridged):
    api, key = bridged
    with watching() as seen:
        connected = _answered(api, "PUT", f"{ORG}/bridge/connection", OWNER, json={"apiKey": key})
        assert connected.status_code in {200, 202}, connected.json
        session = _class_session(api, "Bridged", capacity=5, days=4)
        api.call("POST", f"{ORG}/sessions/{session}/book", MEMBER, 201, json={})
        for name in ("bridge_schedule_poll", "bridge_booking_reconcile", "bridge_dispatch"):
            _run(name)
        _cli("bridge", "dispatch", "--once")
        _cli("bridge", "drift", "demo-gym", "--json")
        _cli("bridge", "import", "demo-gym", "--operator", OWNER, "--json")  # s54: it held it
    assert "http.client" in seen.doors()
    assert not seen.calls, seen.report()


def _cli(*args: str) -> None:
    from gymctl.cli import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    assert ended.value.code == 0, args


@pytest.mark.parametrize("job", [job.name for job in JOBS])
def test_each_daemon_job_run_once_holds_no_write_lock(api, job):
    """Last in the module: each job finds the work the walks above left (most find none on
    the demo gym, so this sweep is the floor; the areas above reach their doors)."""
    with watching() as seen:
        outcome = _run(job)
    assert outcome.status in {"ok", "skipped"}, outcome
    assert not seen.calls, seen.report()
