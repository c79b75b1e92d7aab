"""A gym on the card provider, and members' cards saved the real way: a token-only hosted page
opened on the provider, completed with a test card, read back (spec B 2.2, notes/billing.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session

from gymctl.billing import accounts, checkout
from gymctl.models import PaymentMethod, User
from gymctl.providers.card import CardProvider, PageRequest, PageResult, Terminal
from gymctl.providers.card_sandbox import SandboxCardProvider, sandbox_simulator
from gymctl.providers.card_simulator import CardSimulator
from tests.billing.factories import TEST_CIPHER, Gym
from tests.conftest import NOW

TERMINAL = Terminal(number="1000", api_name="test-api-name")
APPROVE = "4580000000000000"
DECLINE = "4580000000000002"
TIMEOUT = "4580000000000003"  # never reaches the provider: lookup says not_found
UNKNOWN = "4580000000000004"  # charged, but the answer is lost
INVALID = "4580000000000005"  # refused on every page, token-only too


class Sandbox:
    """The sandbox provider and its simulator, under a test's own home folder."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.provider: CardProvider = SandboxCardProvider(home)
        self.simulator: CardSimulator = sandbox_simulator(home)


def connect_card_provider(
    session: Session, gym: Gym, *, terminal: Terminal = TERMINAL, since: datetime = NOW
):
    """The gym's active card-provider terminal, live since `since`."""
    config = accounts.configure_provider(
        session,
        gym.organization.id,
        provider=accounts.CARD_PROVIDER,
        terminal=terminal.number,
        api_name=terminal.api_name,
        now=since,
        cipher=TEST_CIPHER,
    )
    return config


def connect_other_provider(session: Session, gym: Gym, provider: str):
    """The gym collects through `provider`, not the card provider: no terminal at all."""
    return accounts.configure_provider(
        session,
        gym.organization.id,
        provider=provider,
        terminal=None,
        api_name=None,
        now=NOW,
        cipher=TEST_CIPHER,
    )


def completed_token_page(
    provider: CardProvider,
    simulator: CardSimulator,
    card_number: str = APPROVE,
    *,
    terminal: Terminal = TERMINAL,
    return_value: str = "card-for-test",
) -> PageResult:
    """A token-only hosted page opened on the provider, completed by the member with
    `card_number`, and read back (its `page_id` and `token`)."""
    page = provider.create_page(
        terminal,
        PageRequest(
            operation="CreateTokenOnly",
            amount_in_cents=0,
            currency="ILS",
            return_value=return_value,
            success_url="https://gym.example/ok",
            failure_url="https://gym.example/failed",
            webhook_url="https://gym.example/webhook",
        ),
    )
    simulator.complete_page(page.page_id, card_number)
    return provider.get_page(terminal, page.page_id)


def save_test_card(
    session: Session,
    gym: Gym,
    provider: CardProvider,
    simulator: CardSimulator,
    card_number: str = APPROVE,
    *,
    user: User | None = None,
    saved_at: datetime = NOW,
    terminal: Terminal = TERMINAL,
) -> PaymentMethod:
    result = completed_token_page(provider, simulator, card_number, terminal=terminal)
    return accounts.save_card(
        session,
        organization_id=gym.organization.id,
        user_id=(user or gym.member).id,
        card=result.token,
        terminal=terminal.number,
        now=saved_at,
        cipher=TEST_CIPHER,
    )


BUY_URLS = checkout.Urls("https://x.example/ok", "https://x.example/no", "https://x.example/hook")


def buy_card_plan(session: Session, provider: CardProvider, gym: Gym, plan, *, now=NOW):
    """The gym's member buys `plan` (the domain call of the purchase route): a scheduled
    subscription and its open hosted page, flushed, not committed."""
    return checkout.purchase_card_plan(
        session,
        provider,
        organization_id=gym.organization.id,
        plan_id=plan.id,
        user_id=gym.member.id,
        urls=BUY_URLS,
        now=now,
        cipher=TEST_CIPHER,
    )
