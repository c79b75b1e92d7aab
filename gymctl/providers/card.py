"""The card provider (spec B; shape of its API in notes/billing.md): one interface, the HTTP
client of the real provider and the in-process `sandbox` of the embedded default.

Outcomes are three-valued on purpose: `approved`, `declined`, or `unknown` ("may or may not
have succeeded"). A transport failure, a timeout or a 5xx while charging is `unknown`, never a
decline: the caller keeps the attempt pending and asks again about the same unique id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Protocol

from gymctl.numerals import is_decimal

# The currencies the provider takes (its ISOCoinId list, notes/billing.md): anything else is
# refused before an attempt is stored.
CURRENCIES = frozenset({"ILS", "USD", "EUR", "GBP"})


class ProviderUnavailable(Exception):
    """The provider could not be reached or answered 5xx: nothing is known about the request."""


class Outcome(StrEnum):
    approved = "approved"
    declined = "declined"
    unknown = "unknown"  # sent, but the answer was lost: may or may not have charged
    not_found = "not_found"  # lookup only: the provider never received this unique id


class PageState(StrEnum):
    succeeded = "succeeded"  # ResponseCode 0 and, for charging operations, an approved deal
    failed = "failed"  # non-zero root code with our page id echoed
    pending = "pending"  # the page exists but has not settled (the member is still on it)
    unknown_page = "unknown_page"  # code 5096 with an all-zero id


TERMINAL_CHARS = 32  # the longest terminal number a gym's payment settings take


def same_terminal(one: str | None, other: str | None) -> bool:
    """One terminal, leading zeros aside: the payment settings take "01000", and the provider
    echoes TerminalNumber as the number 1000. Digits are compared as text: int() refuses 4,301
    of them. Every terminal comparison goes through here."""
    if one and other and is_decimal(one) and is_decimal(other):
        return one.lstrip("0") == other.lstrip("0")
    return one == other


@dataclass(frozen=True)
class Terminal:
    """The organization's merchant account at the provider."""

    number: str
    api_name: str = field(repr=False)  # a credential: never in a repr or a log


@dataclass(frozen=True)
class HostedPage:
    page_id: str
    url: str


@dataclass(frozen=True)
class CardToken:
    token: str = field(repr=False)  # a card token: never in a repr or a log
    expiry: date | None  # TokenExDate
    card_month: int | None = None
    card_year: int | None = None
    last4: str | None = None


@dataclass(frozen=True)
class PageResult:
    """`LowProfile/GetLpResult`, read back on a terminal."""

    state: PageState
    page_id: str
    response_code: int
    return_value: str | None = None
    operation: str | None = None
    transaction_id: str | None = None
    amount_in_cents: int | None = None
    currency: str | None = None
    approval_number: str | None = None
    token: CardToken | None = None
    description: str = ""
    token_missing: bool = False  # pending: the deal settled, the token it promised is not there


@dataclass(frozen=True)
class ChargeResult:
    """A token charge (`Transactions/Transaction`) or the lookup of one by our unique id."""

    outcome: Outcome
    unique_id: str
    transaction_id: str | None = None
    amount_in_cents: int | None = None
    currency: str | None = None
    terminal: str | None = None
    response_code: int | None = None
    description: str = ""
    replayed: bool = False  # the provider answered the original outcome of a reused unique id


@dataclass(frozen=True)
class RefundResult:
    outcome: Outcome
    transaction_id: str | None = None
    response_code: int | None = None
    description: str = ""


@dataclass(frozen=True)
class PageRequest:
    operation: str  # ChargeOnly, ChargeAndCreateToken, CreateTokenOnly
    amount_in_cents: int
    currency: str
    return_value: str  # echoed back on read-back and webhook: our checkout id
    success_url: str
    failure_url: str
    webhook_url: str
    language: str = "en"
    extra: dict[str, str] = field(default_factory=dict)


class CardProvider(Protocol):
    name: str

    def create_page(self, terminal: Terminal, request: PageRequest) -> HostedPage:
        """Open a hosted payment page. Raises ProviderUnavailable."""

    def get_page(self, terminal: Terminal, page_id: str) -> PageResult:
        """Read a page back on `terminal` (the webhook's only verification). Raises
        ProviderUnavailable."""

    def charge_token(
        self,
        terminal: Terminal,
        *,
        token: str,
        expiry: date | None,
        amount_in_cents: int,
        currency: str,
        unique_id: str,
    ) -> ChargeResult:
        """Charge a saved token under our unique transaction id. A reused id never charges
        again: the provider answers the original outcome (`replayed`). Transport failures and
        timeouts return Outcome.unknown; they do not raise."""

    def lookup_charge(self, terminal: Terminal, unique_id: str) -> ChargeResult:
        """The outcome of an earlier charge by our unique id, without charging: approved,
        declined, or not_found when the provider never received it. Raises
        ProviderUnavailable."""

    def refund(
        self, terminal: Terminal, *, transaction_id: str, amount_in_cents: int, unique_id: str
    ) -> RefundResult:
        """Refund (part of) a settled transaction. Raises ProviderUnavailable."""
