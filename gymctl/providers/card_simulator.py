"""The card provider simulator: the provider's rules over a small sqlite file, answering its wire
format (card_wire.py; card_http.py speaks the other side).

One core, two doors: the `sandbox` provider calls it in-process (card_sandbox.py) and the tests'
fake provider serves it over loopback HTTP (tests/billing/fake_card_provider.py). State is a file,
not memory, so the CLI, the daemons and every `gymctl serve` worker see the same pages, tokens and
charges. Every call is one IMMEDIATE transaction: two processes charging the same unique id
serialize, and the second one finds the first one's answer.

Rules, as the real provider's (notes/billing.md): pages and tokens belong to the terminal that
made them (read back elsewhere: 5096 with an all-zero id); a reused ExternalUniqTranId charges
nothing and answers the original outcome when ExternalUniqTranIdResponse is true, else 608;
refunds are capped at what the deal took. ResponseCodes 0, 608 and 5096 are the provider's; the
9xxx codes are this simulator's own.
"""

from __future__ import annotations

import calendar
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

from gymctl.numerals import is_decimal
from gymctl.providers.card import TERMINAL_CHARS
from gymctl.providers.card_wire import (
    API_PREFIX,
    CHARGE,
    CHARGE_AND_CREATE_TOKEN,
    CHARGE_ONLY,
    CREATE_PAGE,
    CREATE_TOKEN_ONLY,
    GET_PAGE,
    LOOKUP_CHARGE,
    OK,
    REFUND,
    REUSED_UNIQUE_ID,
    UNKNOWN_PAGE,
    ZERO_PAGE_ID,
    cents,
    major_units,
)


class Card(StrEnum):
    approve = "approve"
    decline = "decline"  # every deal on it is refused; a token-only page still saves it
    timeout = "timeout"  # token charges never reach the provider: a lookup says not_found
    unknown_outcome = "unknown_outcome"  # token charges go through, their answer is lost
    invalid = "invalid"  # refused on every page, token-only too (a card that fails validation)
    token_lost = "token_lost"  # noqa: S105 (a card's behaviour, no secret): a page's deal settles; the token it promised never comes


TEST_CARDS = {
    "4580000000000000": Card.approve,  # the provider's own example card
    "4580000000000002": Card.decline,
    "4580000000000003": Card.timeout,
    "4580000000000004": Card.unknown_outcome,
    "4580000000000005": Card.invalid,
    "4580000000000006": Card.token_lost,
}
# Any other card number behaves like the approve card, as on a provider's test terminal.


class Code(IntEnum):
    ok = OK
    declined = 4  # refused by the card issuer
    reused_unique_id = REUSED_UNIQUE_ID
    unknown_page = UNKNOWN_PAGE
    invalid_request = 9001
    invalid_terminal = 9002
    token_not_found = 9003
    expiry_mismatch = 9004
    transaction_not_found = 9005
    refund_exceeds_amount = 9006


class Delivery(StrEnum):
    """What happens to an answer on its way back (the timeout and unknown-outcome cards)."""

    answered = "answered"
    never_arrived = "never_arrived"  # the request did not reach the provider: nothing done
    answer_lost = "answer_lost"  # the provider did the work; the caller never hears of it


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    delivery: Delivery = Delivery.answered


@dataclass(frozen=True)
class CompletedPage:
    """What the provider does when the member finishes a page: the webhook it posts (its body is
    the GetLpResult answer) and where it sends the member's browser."""

    page_id: str
    succeeded: bool
    webhook_url: str
    webhook_body: dict[str, Any]
    redirect_url: str


@dataclass(frozen=True)
class Charge:
    """One real token charge: money moved once under this unique id."""

    transaction_id: str
    terminal: str
    unique_id: str | None
    amount_in_cents: int


class _Refused(Exception):
    def __init__(self, code: Code, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


_SCHEMA = """
CREATE TABLE IF NOT EXISTS pages (
    page_id TEXT PRIMARY KEY, terminal TEXT NOT NULL, operation TEXT NOT NULL,
    amount_in_cents INTEGER NOT NULL, coin_id INTEGER NOT NULL, return_value TEXT,
    success_url TEXT NOT NULL, failure_url TEXT NOT NULL, webhook_url TEXT NOT NULL,
    answer TEXT  -- the GetLpResult answer once the member finished; NULL while open
);
CREATE TABLE IF NOT EXISTS tokens (
    terminal TEXT NOT NULL, token TEXT NOT NULL, card TEXT NOT NULL, last4 TEXT NOT NULL,
    expiry_mmyy TEXT NOT NULL, PRIMARY KEY (terminal, token)
);
CREATE TABLE IF NOT EXISTS deals (  -- every real money movement: page deals, charges, refunds
    transaction_id INTEGER PRIMARY KEY AUTOINCREMENT, terminal TEXT NOT NULL, kind TEXT NOT NULL,
    unique_id TEXT, amount_in_cents INTEGER NOT NULL,
    refunded_in_cents INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS answers (  -- by ExternalUniqTranId, replayed when the id comes again
    terminal TEXT NOT NULL, unique_id TEXT NOT NULL, answer TEXT NOT NULL,
    PRIMARY KEY (terminal, unique_id)
);
"""

# Calls that move money: one answer per ExternalUniqTranId and terminal, replayed on reuse.
_ONCE_PER_ID = frozenset({CHARGE, REFUND})

_Handler = Callable[[sqlite3.Connection, str, dict[str, Any]], tuple[dict[str, Any], Delivery]]


class CardSimulator:
    def __init__(self, path: Path, page_url: str) -> None:
        """`path`: the sqlite file; `page_url`: prefix of the hosted pages' URLs."""
        self.path = path
        self.page_url = page_url
        path.parent.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            db.executescript(_SCHEMA)
        finally:
            db.close()
        self._endpoints: dict[str, _Handler] = {
            CREATE_PAGE: self._create_page,
            GET_PAGE: self._get_page,
            CHARGE: self._charge,
            LOOKUP_CHARGE: self._lookup,
            REFUND: self._refund,
        }

    def answer(self, path: str, raw: bytes) -> Answer:
        """The provider's answer to a POST of `raw` JSON to `path` (/api/v11/...)."""
        endpoint = path.removeprefix(API_PREFIX)
        handler = self._endpoints.get(endpoint)
        if not path.startswith(API_PREFIX) or handler is None:
            return Answer(404, {"Message": "No such endpoint"})
        try:
            body = json.loads(raw, parse_float=Decimal)
        except ValueError:
            return Answer(400, {"Message": "The request body is not JSON"})
        if not isinstance(body, dict):
            return Answer(400, {"Message": "The request body is not a JSON object"})
        try:
            terminal = _terminal(body)
            with self._transaction() as db:
                replay = self._replay(db, terminal, body) if endpoint in _ONCE_PER_ID else None
                if replay is not None:
                    return Answer(200, replay)
                result, delivery = handler(db, terminal, body)
                unique_id = _unique_id(body)
                if (
                    endpoint in _ONCE_PER_ID
                    and unique_id
                    and delivery is not Delivery.never_arrived
                ):
                    db.execute(
                        "INSERT INTO answers VALUES (?, ?, ?)",
                        (terminal, unique_id, json.dumps(result)),
                    )
        except _Refused as refused:
            result, delivery = _refusal(refused.code, refused.description), Delivery.answered
        return Answer(200, result, delivery)

    def complete_page(
        self,
        page_id: str,
        card_number: str,
        *,
        card_month: int = 12,
        card_year: int | None = None,
    ) -> CompletedPage:
        """Finish an open hosted page as the member would, paying with `card_number`
        (TEST_CARDS). ValueError when the page does not exist or is already finished."""
        number = card_number.replace(" ", "")
        if not (is_decimal(number) and 12 <= len(number) <= 19):
            raise ValueError("a card number is 12 to 19 digits")
        year = card_year or datetime.now(UTC).year + 3
        card = TEST_CARDS.get(number, Card.approve)
        with self._transaction() as db:
            page = db.execute("SELECT * FROM pages WHERE page_id = ?", (page_id,)).fetchone()
            if page is None or page["answer"] is not None:
                raise ValueError(f"no open hosted page {page_id!r}")
            answer = self._settle_page(db, page, card, number[-4:], card_month, year)
            db.execute(
                "UPDATE pages SET answer = ? WHERE page_id = ?", (json.dumps(answer), page_id)
            )
        succeeded = answer["ResponseCode"] == OK
        return CompletedPage(
            page_id=page_id,
            succeeded=succeeded,
            webhook_url=page["webhook_url"],
            webhook_body=answer,
            redirect_url=page["success_url"] if succeeded else page["failure_url"],
        )

    def charges(self, unique_id: str | None = None) -> list[Charge]:
        """The real token charges, oldest first; those under `unique_id` when given."""
        return self._deals("charge", unique_id)

    def refunds(self) -> list[Charge]:
        """The real refunds, oldest first: money given back once per row."""
        return self._deals("refund", None)

    def _deals(self, kind: str, unique_id: str | None) -> list[Charge]:
        with self._transaction() as db:
            rows = db.execute(
                "SELECT * FROM deals WHERE kind = ? AND (? IS NULL OR unique_id = ?) "
                "ORDER BY transaction_id",
                (kind, unique_id, unique_id),
            ).fetchall()
        return [
            Charge(str(r["transaction_id"]), r["terminal"], r["unique_id"], r["amount_in_cents"])
            for r in rows
        ]

    def charge_count(self, unique_id: str) -> int:
        """How many times money really moved under `unique_id` (exactly-once: 0 or 1)."""
        return len(self.charges(unique_id))

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _create_page(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Delivery]:
        operation = body.get("Operation")
        if operation not in (CHARGE_ONLY, CHARGE_AND_CREATE_TOKEN, CREATE_TOKEN_ONLY):
            raise _Refused(Code.invalid_request, "Operation is not supported")
        amount = _amount(body.get("Amount"), positive=operation != CREATE_TOKEN_ONLY)
        urls = [body.get(f) for f in ("SuccessRedirectUrl", "FailedRedirectUrl", "WebHookUrl")]
        if not all(isinstance(url, str) and url for url in urls):
            raise _Refused(Code.invalid_request, "The redirect and webhook URLs are required")
        return_value = body.get("ReturnValue")
        if not isinstance(return_value, str | None):
            raise _Refused(Code.invalid_request, "ReturnValue is text")
        page_id = str(uuid.uuid4())
        db.execute(
            "INSERT INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            (page_id, terminal, operation, amount, _coin(body), return_value, *urls),
        )
        return {
            "ResponseCode": OK,
            "Description": "OK",
            "LowProfileId": page_id,
            "Url": self.page_url + page_id,
        }, Delivery.answered

    def _get_page(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Delivery]:
        page = db.execute(
            "SELECT * FROM pages WHERE page_id = ? AND terminal = ?",
            (str(body.get("LowProfileId")), terminal),
        ).fetchone()
        if page is None:
            unknown = _refusal(Code.unknown_page, "No such page on this terminal")
            return {**unknown, "LowProfileId": ZERO_PAGE_ID}, Delivery.answered
        if page["answer"] is not None:
            return json.loads(page["answer"]), Delivery.answered
        # Open: the member has not finished it. Root code 0 and no deal reads as pending.
        return {
            **_page_head(page),
            "ResponseCode": OK,
            "Description": "The page has not been completed yet",
            "TranzactionId": 0,
            "TokenInfo": None,
            "TranzactionInfo": None,
        }, Delivery.answered

    def _settle_page(
        self,
        db: sqlite3.Connection,
        page: sqlite3.Row,
        card: Card,
        last4: str,
        month: int,
        year: int,
    ) -> dict[str, Any]:
        charging = page["operation"] != CREATE_TOKEN_ONLY
        deal = {
            "TerminalNumber": int(page["terminal"]),
            "Amount": major_units(page["amount_in_cents"]),
            "CoinId": page["coin_id"],
            "Last4CardDigitsString": last4,
            "CardMonth": month,
            "CardYear": year,
        }
        if (charging and card is Card.decline) or card is Card.invalid:
            refused = _refusal(Code.declined, "Declined by the card issuer")
            return {
                **_page_head(page),
                **refused,
                "TranzactionId": 0,
                "TokenInfo": None,
                "TranzactionInfo": {**deal, **refused, "TranzactionId": 0},
            }
        transaction_id = 0  # a token-only page validates the card without a deal
        if charging:
            transaction_id = self._deal(db, page["terminal"], "page", None, page["amount_in_cents"])
        token_info = None
        if page["operation"] != CHARGE_ONLY and card is not Card.token_lost:
            token = str(uuid.uuid4())
            db.execute(
                "INSERT INTO tokens VALUES (?, ?, ?, ?, ?)",
                (page["terminal"], token, card, last4, f"{month:02d}{year % 100:02d}"),
            )
            last_day = calendar.monthrange(year, month)[1]
            token_info = {
                "Token": token,
                "TokenExDate": f"{year:04d}{month:02d}{last_day:02d}",
                "CardYear": year,
                "CardMonth": month,
                "TokenApprovalNumber": _approval(transaction_id),
            }
        approved = {"ResponseCode": OK, "Description": "Approved"}
        return {
            **_page_head(page),
            **approved,
            "TranzactionId": transaction_id,
            "TokenInfo": token_info,
            "TranzactionInfo": {
                **deal,
                **approved,
                "TranzactionId": transaction_id,
                "ApprovalNumber": _approval(transaction_id),
            },
        }

    def _charge(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Delivery]:
        amount, coin = _amount(body.get("Amount"), positive=True), _coin(body)
        token = db.execute(
            "SELECT * FROM tokens WHERE terminal = ? AND token = ?",
            (terminal, str(body.get("Token"))),
        ).fetchone()
        delivery = Delivery.answered
        if token is not None and token["card"] == Card.timeout:
            return {}, Delivery.never_arrived
        if token is None:
            result = _refusal(Code.token_not_found, "No such token on this terminal")
        elif body.get("CardExpirationMMYY") not in (None, token["expiry_mmyy"]):
            result = _refusal(Code.expiry_mismatch, "CardExpirationMMYY does not match the token")
        elif token["card"] == Card.decline:
            result = _refusal(Code.declined, "Declined by the card issuer")
        else:
            transaction_id = self._deal(db, terminal, "charge", _unique_id(body), amount)
            result = {
                "ResponseCode": OK,
                "Description": "Approved",
                "TranzactionId": transaction_id,
                "TerminalNumber": int(terminal),
                "Amount": major_units(amount),
                "CoinId": coin,
                "ApprovalNumber": _approval(transaction_id),
                "Last4CardDigitsString": token["last4"],
            }
            if token["card"] == Card.unknown_outcome:
                delivery = Delivery.answer_lost
        return result, delivery

    def _lookup(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Delivery]:
        unique_id = _unique_id(body)
        if unique_id is None:
            raise _Refused(Code.invalid_request, "ExternalUniqTranId is required")
        row = db.execute(
            "SELECT answer FROM answers WHERE terminal = ? AND unique_id = ?", (terminal, unique_id)
        ).fetchone()
        return {
            "ResponseCode": OK,
            "Description": "OK" if row else "No transaction with this ExternalUniqTranId",
            "TranzactionInfo": json.loads(row["answer"]) if row else None,
        }, Delivery.answered

    def _refund(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Delivery]:
        deal = db.execute(
            "SELECT * FROM deals WHERE transaction_id = ? AND terminal = ? AND kind != 'refund'",
            (str(body.get("TransactionId")), terminal),
        ).fetchone()
        if deal is None:
            raise _Refused(Code.transaction_not_found, "No such transaction on this terminal")
        left = deal["amount_in_cents"] - deal["refunded_in_cents"]
        partial = body.get("PartialSum")
        amount = left if partial is None else _amount(partial, positive=True)
        if amount > left or amount <= 0:
            result = _refusal(Code.refund_exceeds_amount, "The refund exceeds what is left")
        else:
            db.execute(
                "UPDATE deals SET refunded_in_cents = refunded_in_cents + ? "
                "WHERE transaction_id = ?",
                (amount, deal["transaction_id"]),
            )
            new_id = self._deal(db, terminal, "refund", _unique_id(body), amount)
            result = {
                "ResponseCode": OK,
                "Description": "Refunded",
                "NewTranzactionId": new_id,
                "Amount": major_units(amount),
            }
        return result, Delivery.answered

    def _replay(
        self, db: sqlite3.Connection, terminal: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The original answer of a reused unique id (with ExternalUniqTranIdResponse), or 608."""
        unique_id = _unique_id(body)
        if unique_id is None:
            return None
        row = db.execute(
            "SELECT answer FROM answers WHERE terminal = ? AND unique_id = ?", (terminal, unique_id)
        ).fetchone()
        if row is None:
            return None
        if body.get("ExternalUniqTranIdResponse") is True:
            return json.loads(row["answer"])
        return _refusal(Code.reused_unique_id, "ExternalUniqTranId was already used")

    def _deal(
        self, db: sqlite3.Connection, terminal: str, kind: str, unique_id: str | None, amount: int
    ) -> int:
        cursor = db.execute(
            "INSERT INTO deals (terminal, kind, unique_id, amount_in_cents) VALUES (?, ?, ?, ?)",
            (terminal, kind, unique_id, amount),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def _terminal(body: dict[str, Any]) -> str:
    """Any terminal number works; the ApiName must be present."""
    number, api_name = body.get("TerminalNumber"), body.get("ApiName")
    text = "" if isinstance(number, bool) else str(number)
    # A positive number of digits, as long as a gym's configured terminal may be, read as
    # digits: int() refuses 4,301 of them.
    if not (is_decimal(text) and len(text) <= TERMINAL_CHARS and text.lstrip("0")):
        raise _Refused(Code.invalid_terminal, "TerminalNumber is not a terminal")
    if not isinstance(api_name, str) or not api_name:
        raise _Refused(Code.invalid_terminal, "ApiName is required")
    return text.lstrip("0")


def _page_head(page: sqlite3.Row) -> dict[str, Any]:
    return {
        "TerminalNumber": int(page["terminal"]),
        "LowProfileId": page["page_id"],
        "ReturnValue": page["return_value"],
        "Operation": page["operation"],
    }


def _refusal(code: Code, description: str) -> dict[str, Any]:
    return {"ResponseCode": int(code), "Description": description}


def _amount(value: Any, *, positive: bool) -> int:
    try:
        amount = cents(value)
    except ValueError:
        raise _Refused(Code.invalid_request, "Amount is not a whole number of cents") from None
    if amount < 0 or (positive and amount == 0):
        raise _Refused(Code.invalid_request, "Amount must be positive")
    return amount


def _coin(body: dict[str, Any]) -> int:
    coin = body.get("ISOCoinId", 1)
    if isinstance(coin, bool) or not isinstance(coin, int):
        raise _Refused(Code.invalid_request, "ISOCoinId is not a coin")
    return coin


def _unique_id(body: dict[str, Any]) -> str | None:
    value = body.get("ExternalUniqTranId")
    return str(value) if value not in (None, "") else None


def _approval(transaction_id: int) -> str:
    return f"{transaction_id % 10_000_000:07d}"
