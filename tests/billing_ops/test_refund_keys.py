"""A refund under the client's idempotency key (our choice; the spec keys desk charges and credit
notes): a retried request answers the first one's refund and gives no money back twice, the
same key for another request is refused with nothing changed, and a refund left pending by a
lost answer is completed by its replay under the stored id, never refunded a second time."""

from __future__ import annotations

import uuid

import pytest

from gymctl.billing.refunds import begin_refund_once
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card_http import REFUND
from gymctl.providers.documents import LocalDocumentProvider
from tests.access.conftest import snapshot
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import committed_sale, paid_charge, race, refund_rows, send_refund
from tests.conftest import NOW
from webhooks.bodies import MEMBER_BODY_BYTES

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def refund(client, gym, idp):
    """POST the refund route as the owner; the response."""
    token = idp.token(gym.owner.identity_id, now=NOW)

    def post(sale, **body):
        return client.post(
            f"/organizations/{gym.organization.id}/payments/transactions/{sale.id}/refund",
            json={"amountInCents": 2000, "reason": "one towel too many", **body},
            headers={"Authorization": f"Bearer {token}"},
        )

    return post


def _refunded_in_cents(card_server) -> list[int]:
    return [r.amount_in_cents for r in card_server.simulator.refunds()]


def test_a_retried_partial_refund_with_its_key_gives_the_money_back_once(
    session, gym, card_server, refund
):
    """Without a key the second of two identical partial refunds is a second refund; with one
    it is the first refund's answer (200, replayed true, the same row)."""
    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    key = str(uuid.uuid4())

    first = refund(sale, idempotencyKey=key)
    again = refund(sale, idempotencyKey=key)

    assert (first.status_code, first.json["data"]["replayed"]) == (201, False)
    assert (again.status_code, again.json["data"]["replayed"]) == (200, True)
    assert again.json["data"]["id"] == first.json["data"]["id"]
    assert again.json["data"]["status"] == "refunded"
    assert _refunded_in_cents(card_server) == [2000]
    assert refund_rows(session) == 1
    session.expire_all()
    assert session.get(PaymentTransaction, sale.id).metadata_["refundedInCents"] == 2000
    unkeyed = refund(sale)  # a new refund needs no key, or a new one
    assert (unkeyed.status_code, unkeyed.json["data"]["replayed"]) == (201, False)
    assert _refunded_in_cents(card_server) == [2000, 2000]


def test_the_same_key_for_another_refund_is_refused_and_changes_nothing(
    session, gym, card_server, refund
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    other_sale = paid_charge(session, gym, card_server, amount=5000)
    session.commit()
    key = str(uuid.uuid4())
    assert refund(sale, idempotencyKey=key).status_code == 201
    before = snapshot(session)

    for answer in (
        refund(sale, idempotencyKey=key, amountInCents=3000),
        refund(sale, idempotencyKey=key, reason="another reason"),
        refund(other_sale, idempotencyKey=key),
    ):
        assert (answer.status_code, answer.json["code"]) == (409, "idempotency_key_reused")
    assert snapshot(session) == before
    assert _refunded_in_cents(card_server) == [2000]


@pytest.mark.parametrize(
    ("key", "status", "code"),
    [
        # time-based: may collide (a stable id: parallel runs collect the same tests)
        pytest.param(str(uuid.uuid1()), 422, "idempotency_key_invalid", id="uuid1"),
        ("not-a-key", 400, "invalid_body"),
        (12345, 400, "invalid_body"),
    ],
)
def test_a_key_that_is_not_a_uuid4_is_refused_and_changes_nothing(
    session, gym, card_server, refund, key, status, code
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    before = snapshot(session)

    answer = refund(sale, idempotencyKey=key)

    assert (answer.status_code, answer.json["code"]) == (status, code)
    assert snapshot(session) == before
    assert _refunded_in_cents(card_server) == []


def test_a_refund_whose_answer_was_lost_is_completed_by_its_replay_never_twice(
    session, gym, card_server, refund
):
    """The first request stored the attempt and the provider refunded, but its answer was
    lost (503, refund_pending). The client retries with the same key: the stored attempt is
    sent again under its unique id, the provider answers the refund it made, and the ledger
    settles: one refund of the money, one refund row."""
    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    key = str(uuid.uuid4())
    card_server.inject(REFUND, Fault.answer_lost)

    lost = refund(sale, idempotencyKey=key)
    assert (lost.status_code, lost.json["code"]) == (503, "refund_provider_unavailable")
    replay = refund(sale, idempotencyKey=key)

    assert (replay.status_code, replay.json["data"]["replayed"]) == (200, True)
    assert replay.json["data"]["id"] == lost.json["refundTransactionId"]
    assert replay.json["data"]["status"] == "refunded"
    assert _refunded_in_cents(card_server) == [2000]
    session.expire_all()
    rows = session.query(PaymentTransaction).filter_by(type=TransactionType.refund).all()
    assert [(r.status, r.amount_in_cents) for r in rows] == [(TransactionStatus.refunded, 2000)]


def _keyed_refund(factory, card_server, sale_id, key) -> str:
    documents = LocalDocumentProvider()
    with factory() as session:
        sale = session.get(PaymentTransaction, sale_id)
        stored, replayed = begin_refund_once(
            session,
            transaction=sale,
            idempotency_key=key,
            amount_cents=2000,
            reason="one towel too many",
            actor_user_id=None,
            now=NOW,
            documents=documents,
        )
        session.commit()
        done = send_refund(session, card_server, stored.id, documents)
        return f"{done.status.value} replayed={replayed}"


def test_two_requests_of_one_key_at_once_refund_once(committed_pg, card_server):
    """PostgreSQL: the payment's row lock orders them; the second finds the first's stored
    refund by its key and answers it, while the first is still at the provider."""
    factory, sale = committed_sale(committed_pg, card_server)
    card_server.inject(REFUND, Fault.delay, seconds=0.3)  # the first is still refunding
    key = uuid.uuid4()

    answers = race(2, lambda: _keyed_refund(factory, card_server, sale.id, key))

    assert sorted(answers) == ["refunded replayed=False", "refunded replayed=True"]
    assert _refunded_in_cents(card_server) == [2000]
    with factory() as session:
        assert refund_rows(session) == 1


@pytest.mark.parametrize(
    ("name", "raw", "status"),
    [
        ("400 levels", b"[" * 400 + b"]" * 400, 400),
        ("over the member body limit", b'{"reason": "' + b"x" * MEMBER_BODY_BYTES + b'"}', 413),
        ("a list", b"[]", 400),
        ("amount as text", b'{"amountInCents": "2000", "reason": "x"}', 400),
        ("key as an object", b'{"amountInCents": 2000, "reason": "x", "idempotencyKey": {}}', 400),
    ],
)
def test_a_hostile_refund_body_is_a_4xx_json_answer_and_refunds_nothing(
    client, session, gym, card_server, idp, name, raw, status
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    before = snapshot(session)

    answer = client.post(
        f"/organizations/{gym.organization.id}/payments/transactions/{sale.id}/refund",
        data=raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=NOW)}"},
    )

    assert answer.status_code == status, (name, answer.json)
    assert answer.json["code"]
    assert snapshot(session) == before
    assert _refunded_in_cents(card_server) == []
