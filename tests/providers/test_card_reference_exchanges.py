"""The card provider's rules pinned by reference exchanges written from its documentation
(tests/providers/data/card_provider_exchanges.json), not by the product's own simulator.

The fake provider the billing tests talk to serves the simulator, so on its own it only shows
that the client and the simulator agree with each other. Here both are held to the same literal
request/response pairs: the simulator answers each reference request with the reference answer
(every documented field, the same literal values, the same made-up ids where the documentation
ties them together), and the client sends exactly the reference request and reads the reference
answer to the documented outcome.
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from gymctl.providers.card import PageRequest, Terminal
from gymctl.providers.card_http import API_PREFIX, HttpCardProvider
from gymctl.providers.card_simulator import CardSimulator

DATA = json.loads(
    (Path(__file__).parent / "data" / "card_provider_exchanges.json").read_text(encoding="utf-8")
)
EXCHANGES = DATA["exchanges"]
TERMINAL = Terminal("1000", "test2025")
TEST_CARD = "4580000000000000"


def _placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("<") and value.endswith(">")


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float | Decimal):
        return Decimal(str(expected)) == Decimal(str(actual))
    return expected == actual


def conforms(reference: Any, actual: Any, bound: dict[str, Any], where: str = "") -> list[str]:
    """Where `actual` departs from `reference`: a documented field missing, a literal value
    different, a made-up value absent or unlike the one bound to its name before."""
    if isinstance(reference, dict):
        if not isinstance(actual, dict):
            return [f"{where or '.'}: {actual!r} is not an object"]
        problems = []
        for key, value in reference.items():
            if key not in actual:
                problems.append(f"{where}.{key}: missing")
            else:
                problems += conforms(value, actual[key], bound, f"{where}.{key}")
        return problems
    if _placeholder(reference):
        if actual in (None, "", 0):
            return [f"{where}: {reference} absent ({actual!r})"]
        if reference == "<text>":
            return []
        if reference in bound and str(bound[reference]) != str(actual):
            return [f"{where}: {reference} is {actual!r}, before {bound[reference]!r}"]
        bound.setdefault(reference, actual)
        return []
    return [] if _same(reference, actual) else [f"{where}: {actual!r}, documented {reference!r}"]


def filled(value: Any, bound: dict[str, Any]) -> Any:
    """The reference request with the made-up values of this run put in."""
    if isinstance(value, dict):
        return {key: filled(item, bound) for key, item in value.items()}
    if _placeholder(value):
        return bound[value]
    return value


def test_the_simulator_answers_every_reference_request_as_documented(tmp_path):
    simulator = CardSimulator(tmp_path / "card-provider.sqlite3", "https://pay.example.test/pay/")
    bound: dict[str, Any] = {}
    problems = []
    for exchange in EXCHANGES:
        request = filled(exchange["request"], bound)
        answer = simulator.answer(API_PREFIX + exchange["endpoint"], json.dumps(request).encode())
        assert answer.status == 200, (exchange["name"], answer)
        problems += [
            f"{exchange['name']}: {p}" for p in conforms(exchange["response"], answer.body, bound)
        ]
        if exchange["endpoint"] == "LowProfile/Create" and "<page id>" in bound:
            simulator.complete_page(bound["<page id>"], TEST_CARD, card_month=12)
        if "<YYYYMMDD>" in bound:
            expiry = str(bound["<YYYYMMDD>"])
            bound["<MMYY>"] = expiry[4:6] + expiry[2:4]
    assert problems == []
    # the replayed charge and the refused reuse charged nothing: one token charge in all
    assert len(simulator.charges("attempt-0001")) == 1


# -- the client ---------------------------------------------------------------------------------

SAMPLES = {  # made-up values a real answer could carry
    "<text>": "OK",
    "<page id>": "9c0e7a52-51f4-4d9b-a3b3-2f6d1c8e0b17",
    "<hosted page url>": "https://secure.cardcom.solutions/EA/LPC6/1000/9c0e7a52",
    "<page deal number>": 112233,
    "<charge deal number>": 445566,
    "<refund deal number>": 778899,
    "<token>": "6f1d2c3b-aaaa-4bbb-8ccc-0123456789ab",
    "<YYYYMMDD>": "20291231",
    "<MMYY>": "1229",
    "<year>": 2029,
}


class Wire:
    """An httpx transport that checks the client's request against the reference one and
    answers the reference response."""

    def __init__(self, exchange: dict) -> None:
        self.exchange = exchange
        self.sent: dict | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == API_PREFIX + self.exchange["endpoint"]
        self.sent = json.loads(request.content)
        body = json.dumps(filled(self.exchange["response"], SAMPLES))
        return httpx.Response(200, content=body, headers={"Content-Type": "application/json"})


def _call(exchange: dict):
    wire = Wire(exchange)
    client = HttpCardProvider(
        "https://card.example.test", client=httpx.Client(transport=httpx.MockTransport(wire))
    )
    request = filled(exchange["request"], SAMPLES)
    endpoint = exchange["endpoint"]
    if endpoint == "LowProfile/Create":
        result = client.create_page(
            TERMINAL,
            PageRequest(
                operation=request["Operation"],
                amount_in_cents=round(request["Amount"] * 100),
                currency="ILS",
                return_value=request["ReturnValue"],
                success_url=request["SuccessRedirectUrl"],
                failure_url=request["FailedRedirectUrl"],
                webhook_url=request["WebHookUrl"],
                language=request["Language"],
            ),
        )
    elif endpoint == "LowProfile/GetLpResult":
        result = client.get_page(TERMINAL, request["LowProfileId"])
    elif endpoint == "Transactions/Transaction":
        mmyy = request["CardExpirationMMYY"]
        result = client.charge_token(
            TERMINAL,
            token=request["Token"],
            expiry=date(2000 + int(mmyy[2:]), int(mmyy[:2]), 31),
            amount_in_cents=round(request["Amount"] * 100),
            currency="ILS",
            unique_id=request["ExternalUniqTranId"],
        )
    else:
        result = client.refund(
            TERMINAL,
            transaction_id=str(request["TransactionId"]),
            amount_in_cents=round(request["PartialSum"] * 100),
            unique_id=request["ExternalUniqTranId"],
        )
    return wire, request, result


# The client always asks for the original outcome of a reused id: the one exchange without
# ExternalUniqTranIdResponse is the simulator's to answer and the mapping's to read (below).
SENT_BY_THE_CLIENT = [
    e
    for e in EXCHANGES
    if e["endpoint"] != "Transactions/Transaction" or e["request"].get("ExternalUniqTranIdResponse")
]


@pytest.mark.parametrize(
    "exchange", SENT_BY_THE_CLIENT, ids=[e["name"] for e in SENT_BY_THE_CLIENT]
)
def test_the_client_sends_the_reference_request_and_reads_the_reference_answer(exchange):
    wire, request, result = _call(exchange)
    assert set(wire.sent) == set(request)
    assert [k for k in request if not _same(request[k], wire.sent[k])] == []
    for field, expected in exchange["client"].items():
        actual = getattr(result, field)
        if field == "token":
            assert (actual is not None) is expected
        elif _placeholder(expected):
            assert actual == SAMPLES[expected]
        else:
            assert str(getattr(actual, "value", actual)) == str(expected), field


def test_a_reused_id_answered_608_is_an_unknown_outcome_never_a_decline():
    """The documented 608 answer, read by the client's mapping directly (the client itself never
    sends a reused id without ExternalUniqTranIdResponse)."""
    from gymctl.providers.card_http import charge_result

    [refused] = [e for e in EXCHANGES if e not in SENT_BY_THE_CLIENT]
    assert refused["response"]["ResponseCode"] == 608
    result = charge_result("attempt-0001", filled(refused["response"], SAMPLES))
    assert result.outcome.value == refused["client"]["outcome"]
