"""The card provider's wire protocol, shaped like Cardcom API v11 (notes/billing.md): endpoint
paths, response codes, operations, coin ids and amounts in major units. Both sides speak it: the
HTTP client (card_http.py) and the simulator (card_simulator.py), which imports no client.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

API_PREFIX = "/api/v11/"
CREATE_PAGE = "LowProfile/Create"
GET_PAGE = "LowProfile/GetLpResult"
CHARGE = "Transactions/Transaction"
# Not published in our notes: our name for the read-only lookup of a charge by ExternalUniqTranId
# (docs/decisions.md, "Card provider"), kept in this one constant so the real name is one edit.
LOOKUP_CHARGE = "Transactions/GetTransactionByExternalUniqTranId"
REFUND = "Transactions/RefundByTransactionId"

OK = 0
REUSED_UNIQUE_ID = 608  # ExternalUniqTranId seen before, sent without ExternalUniqTranIdResponse
UNKNOWN_PAGE = 5096  # with an all-zero LowProfileId: no such page on this terminal (spec B 6)
ZERO_PAGE_ID = "00000000-0000-0000-0000-000000000000"
CHARGE_ONLY = "ChargeOnly"
CHARGE_AND_CREATE_TOKEN = "ChargeAndCreateToken"  # noqa: S105 (an operation, not a secret)
CREATE_TOKEN_ONLY = "CreateTokenOnly"  # noqa: S105

# ISOCoinId: the provider's own 1 and 2 for shekels and dollars, ISO 4217 numbers otherwise.
COIN_IDS = {"ILS": 1, "USD": 2, "EUR": 978, "GBP": 826}  # the keys are card.CURRENCIES
CURRENCIES = {coin: currency for currency, coin in COIN_IDS.items()}
# ISO 4217's "no currency": a deal in a coin not in COIN_IDS. It equals no currency a plan
# or a charge is in, so such a deal never settles one (a coin read as None counted as the
# plan's own, and 250.00 of another currency settled a checkout of 250.00 shekels).
UNKNOWN_CURRENCY = "XXX"


def major_units(amount_in_cents: int) -> float:
    """Integer cents as the JSON number the provider expects (19.99 for 1999).

    n / 100 is the double nearest to the decimal, and JSON writes the shortest repr that reads
    back to it, which is that decimal: checked here rather than trusted."""
    if isinstance(amount_in_cents, bool) or not isinstance(amount_in_cents, int):
        raise TypeError("amounts are integer cents")
    value = amount_in_cents / 100
    if Decimal(repr(value)) != Decimal(amount_in_cents).scaleb(-2):
        raise ValueError("the amount is too large to send exactly")
    return value


def cents(value: Any) -> int:
    """A provider amount in major units (best read from JSON as Decimal) as exact integer cents;
    ValueError when it is not a whole number of cents."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        raise ValueError("not an amount") from None
    scaled = amount * 100
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError("not a whole number of cents")
    return int(scaled)


def coin_id(currency: str) -> int:
    try:
        return COIN_IDS[currency.upper()]
    except KeyError:
        raise ValueError(f"the card provider does not take {currency!r}") from None
