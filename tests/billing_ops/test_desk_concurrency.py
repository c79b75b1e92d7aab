"""Concurrent identical desk charges under one key charge once (spec B 4.3), on PostgreSQL with
real commits seen across connections: the losers find the winner's row through the unique key
and answer its outcome or billing_reconciliation_required, never a second charge."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import sessionmaker

from gymctl.billing import desk
from gymctl.db import get_engine
from gymctl.providers.card_http import CHARGE
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import card_of, charge_at_desk, race

THREADS = 6


def test_concurrent_identical_desk_charges_charge_once(committed_pg, card_server, documents):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym)
        card_of(session, gym, card_server)
        session.commit()
    request = desk.DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "day pass")
    card_server.inject(CHARGE, Fault.delay, seconds=0.3)  # the winner is still charging

    def charge() -> str:
        answer = charge_at_desk(factory, gym, card_server.provider(timeout=5.0), documents, request)
        return f"{answer['outcome']}:{answer['replayed']}"

    answers = race(THREADS, charge)

    assert len(card_server.charges()) == 1
    assert card_server.requests(CHARGE) == 1
    assert answers.count("charged:False") == 1
    assert set(answers) <= {"charged:False", "charged:True", "billing_reconciliation_required"}
    replay = charge_at_desk(factory, gym, card_server.provider(), documents, request)
    assert (replay["outcome"], replay["replayed"]) == ("charged", True)
