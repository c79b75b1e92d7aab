"""The quick start's billing: the demo gym on the sandbox card provider, a monthly card plan, and
one member whose card was saved through a real hosted page and whose renewal is due now, so the
first catch-up pass charges it (and a second finds nothing to do)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import accounts, plans
from gymctl.crypto import FieldCipher
from gymctl.models import Membership, Plan
from gymctl.models.billing import CollectionMethod, PlanType, SubscriptionStatus
from gymctl.providers.card import CardProvider, PageRequest, Terminal
from gymctl.providers.card_sandbox import complete_page

DEMO_TERMINAL = Terminal(number="1000", api_name="demo-sandbox")
DEMO_PLAN = "Unlimited monthly"
APPROVE_CARD = "4580000000000000"


def seed_demo_billing(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    home,
    organization_id: uuid.UUID,
    member: Membership,
    now: datetime,
) -> dict[str, str] | None:
    """Idempotent: nothing is added when the demo plan exists. Returns what was seeded."""
    found = session.scalar(
        select(Plan).where(Plan.organization_id == organization_id, Plan.name == DEMO_PLAN)
    )
    if found is not None:
        return None
    accounts.configure_provider(
        session,
        organization_id,
        provider=accounts.CARD_PROVIDER,
        terminal=DEMO_TERMINAL.number,
        api_name=DEMO_TERMINAL.api_name,
        now=now - timedelta(days=60),
        cipher=cipher,
    )
    plan = plans.create_plan(
        session,
        organization_id,
        plans.PlanSpec(
            name=DEMO_PLAN,
            type=PlanType.card,
            price_in_cents=24900,
            currency="ILS",
            interval_months=1,
        ),
        now=now - timedelta(days=31),
    )
    page = provider.create_page(
        DEMO_TERMINAL,
        PageRequest(
            operation="CreateTokenOnly",
            amount_in_cents=0,
            currency="ILS",
            return_value="demo-card",
            success_url="http://127.0.0.1:8000/billing/return?status=success",
            failure_url="http://127.0.0.1:8000/billing/return?status=failure",
            webhook_url=f"http://127.0.0.1:8000/webhooks/card-provider/{organization_id}",
        ),
    )
    complete_page(home, page.page_id, APPROVE_CARD)
    card = provider.get_page(DEMO_TERMINAL, page.page_id).token
    method = accounts.save_card(
        session,
        organization_id=organization_id,
        user_id=member.user_id,
        card=card,
        terminal=DEMO_TERMINAL.number,
        now=now - timedelta(days=31),
        cipher=cipher,
    )
    plans.take_purchase_slot(session, plan)
    subscription = plans.new_subscription(
        session,
        plan,
        member,
        status=SubscriptionStatus.active,
        method=CollectionMethod.card_provider,
        now=now - timedelta(days=31),
    )
    subscription.payment_method_id = method.id
    subscription.started_at = subscription.current_period_start = now - timedelta(days=31)
    subscription.current_period_end = subscription.next_charge_date = now - timedelta(minutes=1)
    session.flush()
    return {"planId": str(plan.id), "subscriptionId": str(subscription.id)}
