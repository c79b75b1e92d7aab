"""The card provider's HTTP client: JSON over HTTPS, shaped like Cardcom API v11 (notes/billing.md).

Every call is a POST under /api/v11/ whose body carries TerminalNumber and ApiName. Amounts travel
in major units, as the provider writes them, and are converted from and to integer cents exactly.
A token charge never raises on transport trouble: a timeout, a dropped connection or a 5xx is
Outcome.unknown, resolved later by looking the same unique id up. The other calls raise
ProviderUnavailable. Tokens and the ApiName travel only in request bodies: never in URLs, log
lines or exception messages.
"""

from __future__ import annotations

import logging
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx

from gymctl.numerals import is_decimal
from gymctl.providers import http_client
from gymctl.providers.card import (
    CardToken,
    ChargeResult,
    HostedPage,
    Outcome,
    PageRequest,
    PageResult,
    PageState,
    ProviderUnavailable,
    RefundResult,
    Terminal,
    same_terminal,
)
from gymctl.providers.card_wire import (
    API_PREFIX,
    CHARGE,
    CHARGE_AND_CREATE_TOKEN,
    CREATE_PAGE,
    CREATE_TOKEN_ONLY,
    CURRENCIES,
    GET_PAGE,
    LOOKUP_CHARGE,
    OK,
    REFUND,
    REUSED_UNIQUE_ID,
    UNKNOWN_CURRENCY,
    UNKNOWN_PAGE,
    cents,
    coin_id,
    major_units,
)

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0


class ProviderRefused(ProviderUnavailable):
    """The provider answered a non-zero ResponseCode to a call that has no outcome of its own
    (opening a page, reading back a page without ours echoed, a lookup): nothing was done."""

    def __init__(self, endpoint: str, response_code: int | None, description: str) -> None:
        # The provider's description stays off the message: it is not ours to vouch for.
        super().__init__(f"{endpoint}: the provider refused with ResponseCode {response_code}")
        self.response_code = response_code
        self.description = description


class HttpCardProvider:
    """The real provider over httpx (GYMCTL_CARD_PROVIDER_URL is its base URL)."""

    name = "http"

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
    ) -> None:
        self._api = base_url.rstrip("/") + API_PREFIX
        self._client = client or http_client.new_client()
        self._timeout = timeout

    def create_page(self, terminal: Terminal, request: PageRequest) -> HostedPage:
        fields = {
            **request.extra,
            "Operation": request.operation,
            "Amount": major_units(request.amount_in_cents),
            "ISOCoinId": coin_id(request.currency),
            "ReturnValue": request.return_value,
            "SuccessRedirectUrl": request.success_url,
            "FailedRedirectUrl": request.failure_url,
            "WebHookUrl": request.webhook_url,
            "Language": request.language,
        }
        data = self._post(CREATE_PAGE, terminal, fields)
        code = _int(data.get("ResponseCode"))
        page_id, url = data.get("LowProfileId"), data.get("Url")
        if code != OK or not isinstance(page_id, str) or not isinstance(url, str):
            raise ProviderRefused(CREATE_PAGE, code, _text(data.get("Description")))
        return HostedPage(page_id=page_id, url=url)

    def get_page(self, terminal: Terminal, page_id: str) -> PageResult:
        data = self._post(GET_PAGE, terminal, {"LowProfileId": page_id})
        try:
            return page_result(terminal, page_id, data)
        except (ValueError, TypeError, AttributeError):
            raise ProviderUnavailable(f"{GET_PAGE}: the answer is malformed") from None

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
        if amount_in_cents <= 0 or not unique_id:
            raise ValueError("a token charge needs a positive amount and a unique id")
        fields: dict[str, Any] = {
            "Amount": major_units(amount_in_cents),
            "ISOCoinId": coin_id(currency),
            "Token": token,
            "ExternalUniqTranId": unique_id,
            # A reused id then answers the original outcome instead of charging (or error 608).
            "ExternalUniqTranIdResponse": True,
            "NumOfPayments": 1,
        }
        if expiry is not None:
            fields["CardExpirationMMYY"] = f"{expiry.month:02d}{expiry.year % 100:02d}"
        try:
            result = charge_result(unique_id, self._post(CHARGE, terminal, fields))
        except ProviderUnavailable as error:
            result = ChargeResult(Outcome.unknown, unique_id, description=str(error))
        except (ValueError, TypeError, AttributeError):
            result = ChargeResult(Outcome.unknown, unique_id, description="malformed answer")
        level = logging.WARNING if result.outcome is Outcome.unknown else logging.INFO
        logger.log(
            level,
            "card charge %s on terminal %s: %s (ResponseCode %s)",
            unique_id,
            terminal.number,
            result.outcome,
            result.response_code,
        )
        return result

    def lookup_charge(self, terminal: Terminal, unique_id: str) -> ChargeResult:
        data = self._post(LOOKUP_CHARGE, terminal, {"ExternalUniqTranId": unique_id})
        code = _int(data.get("ResponseCode"))
        if code != OK:
            raise ProviderRefused(LOOKUP_CHARGE, code, _text(data.get("Description")))
        deal = data.get("TranzactionInfo")
        if not deal:
            return ChargeResult(Outcome.not_found, unique_id, response_code=code)
        try:
            return charge_result(unique_id, deal)
        except (ValueError, TypeError, AttributeError):
            raise ProviderUnavailable(f"{LOOKUP_CHARGE}: the answer is malformed") from None

    def refund(
        self, terminal: Terminal, *, transaction_id: str, amount_in_cents: int, unique_id: str
    ) -> RefundResult:
        fields = {
            "TransactionId": int(transaction_id),
            "PartialSum": major_units(amount_in_cents),
            "ExternalUniqTranId": unique_id,
            "ExternalUniqTranIdResponse": True,
        }
        return refund_result(self._post(REFUND, terminal, fields))

    def _post(self, endpoint: str, terminal: Terminal, fields: dict[str, Any]) -> dict[str, Any]:
        body = {
            "TerminalNumber": _terminal_number(terminal),
            "ApiName": terminal.api_name,
            **fields,
        }
        try:
            response = self._client.post(self._api + endpoint, json=body, timeout=self._timeout)
        except httpx.HTTPError as error:
            # Not chained: the request inside the error carries the body (token, ApiName).
            raise ProviderUnavailable(f"{endpoint}: {type(error).__name__}") from None
        if not response.is_success:
            raise ProviderUnavailable(f"{endpoint}: the provider answered {response.status_code}")
        try:
            data = response.json(parse_float=Decimal)
        except ValueError:
            raise ProviderUnavailable(f"{endpoint}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise ProviderUnavailable(f"{endpoint}: the answer is not a JSON object")
        return data

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._api!r})"


def page_result(terminal: Terminal, page_id: str, data: dict[str, Any]) -> PageResult:
    """Map a GetLpResult answer. Root code 0 with the deal approved (or, for a token-only page,
    the token issued) is success; root code 0 without it is still settling; a non-zero root code
    with our page and terminal echoed is a failed page; 5096 with an all-zero id is no such page.
    Anything else proves nothing about our page: ProviderRefused."""
    code = _int(data.get("ResponseCode"))
    echoed = _text(data.get("LowProfileId"))
    description = _text(data.get("Description"))
    if code == UNKNOWN_PAGE and _all_zero(echoed):
        return PageResult(PageState.unknown_page, page_id, code, description=description)
    ours = echoed.lower() == page_id.lower()
    if code is None or not ours or not _same_terminal(data.get("TerminalNumber"), terminal):
        raise ProviderRefused(GET_PAGE, code, description)
    deal = data.get("TranzactionInfo") or {}
    token = _card_token(data.get("TokenInfo"), deal)
    operation = _text(data.get("Operation")) or None
    deal_code = _int(deal.get("ResponseCode"))
    transaction_id = _transaction_id(data.get("TranzactionId") or deal.get("TranzactionId"))
    token_missing = False
    if code != OK or (deal_code is not None and deal_code != OK):
        state = PageState.failed
    elif operation == CREATE_TOKEN_ONLY:
        state = PageState.succeeded if token else PageState.pending
    elif transaction_id is None or deal_code is None:
        state = PageState.pending
    elif operation == CHARGE_AND_CREATE_TOKEN and token is None:
        state = PageState.pending  # the deal settled but the token it promised is not there yet
        token_missing = True
    else:
        state = PageState.succeeded
    amount_in_cents, currency = _money(deal)
    return PageResult(
        state=state,
        page_id=page_id,
        response_code=code,
        return_value=_text(data.get("ReturnValue")) or None,
        operation=operation,
        transaction_id=transaction_id,
        amount_in_cents=amount_in_cents,
        currency=currency,
        approval_number=_text(deal.get("ApprovalNumber")) or None,
        token=token,
        description=description,
        token_missing=token_missing,
    )


def charge_result(unique_id: str, data: dict[str, Any]) -> ChargeResult:
    """Map a Transactions/Transaction answer (or the deal a lookup returns). 608 means the id was
    used before and says nothing of that outcome: unknown, never a decline."""
    code = _int(data.get("ResponseCode"))
    transaction_id = _transaction_id(data.get("TranzactionId"))
    if code == OK and transaction_id is not None:
        outcome = Outcome.approved
    elif code is None or code in (OK, REUSED_UNIQUE_ID):
        outcome = Outcome.unknown
    else:
        outcome = Outcome.declined
    amount_in_cents, currency = _money(data)
    return ChargeResult(
        outcome=outcome,
        unique_id=unique_id,
        transaction_id=transaction_id,
        amount_in_cents=amount_in_cents,
        currency=currency,
        terminal=_text(data.get("TerminalNumber")) or None,
        response_code=code,
        description=_text(data.get("Description")),
    )


def refund_result(data: dict[str, Any]) -> RefundResult:
    """Map a refund's answer. Success (0) is a refund, with its new deal id when the answer
    gives one (unlike a charge's, which later refunds need, a refund's id is only its
    reference). No ResponseCode, or 608 (the id used before: say the first request, still on
    its way when recovery sent it again) tells nothing of the refund: unknown, kept pending
    and sent again under the same id. Any other code is a refusal."""
    code = _int(data.get("ResponseCode"))
    if code == OK:
        outcome = Outcome.approved
    elif code is None or code == REUSED_UNIQUE_ID:
        outcome = Outcome.unknown
    else:
        outcome = Outcome.declined
    return RefundResult(
        outcome=outcome,
        transaction_id=_transaction_id(data.get("NewTranzactionId")),
        response_code=code,
        description=_text(data.get("Description")),
    )


def _card_token(info: Any, deal: dict[str, Any]) -> CardToken | None:
    if not isinstance(info, dict) or not info.get("Token"):
        return None
    expiry = _text(info.get("TokenExDate"))
    last4 = _text(deal.get("Last4CardDigitsString")) or None
    return CardToken(
        token=str(info["Token"]),
        expiry=date(int(expiry[:4]), int(expiry[4:6]), int(expiry[6:8])) if expiry else None,
        card_month=_int(info.get("CardMonth")),
        card_year=_int(info.get("CardYear")),
        last4=last4,
    )


def _money(deal: dict[str, Any]) -> tuple[int | None, str | None]:
    """The deal's amount and currency; None for one the answer leaves out."""
    amount, coin = deal.get("Amount"), deal.get("CoinId")
    currency = None if coin is None else CURRENCIES.get(_int(coin), UNKNOWN_CURRENCY)
    return (None if amount is None else cents(amount)), currency


def _terminal_number(terminal: Terminal) -> int | str:
    return int(terminal.number) if is_decimal(terminal.number) else terminal.number


def _transaction_id(value: Any) -> str | None:
    """The provider's deal number; 0 or absent means no deal."""
    text = _text(value)
    return None if text in ("", "0") else text


def _all_zero(page_id: str) -> bool:
    digits = page_id.replace("-", "")
    return bool(digits) and set(digits) == {"0"}


def _int(value: Any) -> int | None:
    """A number from the answer; None when absent or not a whole number."""
    if isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return int(number) if number.is_finite() and number == number.to_integral_value() else None


def _same_terminal(value: Any, terminal: Terminal) -> bool:
    return same_terminal(_text(value), terminal.number)


def _text(value: Any) -> str:
    return "" if value is None else str(value)
