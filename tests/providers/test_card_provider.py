"""The card provider: one contract run against the HTTP client over the fake provider on loopback
and against the in-process sandbox; then the faults only a network has, and secrecy."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from gymctl.config import ConfigError, Settings
from gymctl.providers.card import (
    ChargeResult,
    Outcome,
    PageRequest,
    PageState,
    ProviderUnavailable,
    Terminal,
)
from gymctl.providers.card_factory import card_provider_from_settings
from gymctl.providers.card_http import (
    API_PREFIX,
    CHARGE,
    CREATE_PAGE,
    GET_PAGE,
    LOOKUP_CHARGE,
    REFUND,
    REUSED_UNIQUE_ID,
    UNKNOWN_PAGE,
    HttpCardProvider,
    ProviderRefused,
    cents,
    charge_result,
    major_units,
    refund_result,
)
from gymctl.providers.card_sandbox import SandboxCardProvider, complete_page
from gymctl.providers.card_simulator import CardSimulator, Code
from tests.billing import conftest as billing
from tests.billing.fake_card_provider import FakeCardProvider, Fault

card_server = billing.card_server  # the billing tests' fixture: the fake provider on loopback

TERMINAL = Terminal("1000", "test2025")
OTHER_TERMINAL = Terminal("2000", "other2025")
APPROVE, DECLINE, TIMEOUT, UNKNOWN = (f"458000000000000{n}" for n in (0, 2, 3, 4))


@dataclass
class Backend:
    provider: HttpCardProvider
    simulator: CardSimulator


@pytest.fixture(params=["http", "sandbox"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "http":
        server: FakeCardProvider = request.getfixturevalue("card_server")
        yield Backend(server.provider(), server.simulator)
        return
    sandbox = SandboxCardProvider(tmp_path / "home")
    yield Backend(sandbox, sandbox.simulator)
    sandbox.close()


def page_request(operation: str = "ChargeAndCreateToken", amount: int = 1999) -> PageRequest:
    return PageRequest(
        operation=operation,
        amount_in_cents=amount,
        currency="ILS",
        return_value="checkout-42",
        success_url="https://app.example.test/paid",
        failure_url="https://app.example.test/failed",
        webhook_url="https://api.example.test/webhooks/card-provider",
    )


def saved_token(backend: Backend, card: str = APPROVE, terminal: Terminal = TERMINAL) -> str:
    """A card saved through a token-only page, as verify-account does."""
    page = backend.provider.create_page(terminal, page_request("CreateTokenOnly", 100))
    backend.simulator.complete_page(page.page_id, card, card_month=12, card_year=2030)
    token = backend.provider.get_page(terminal, page.page_id).token
    assert token is not None
    return token.token


def charge(
    provider: HttpCardProvider,
    token: str,
    unique_id: str,
    amount: int = 1999,
    terminal: Terminal = TERMINAL,
) -> ChargeResult:
    return provider.charge_token(
        terminal,
        token=token,
        expiry=date(2030, 12, 31),
        amount_in_cents=amount,
        currency="ILS",
        unique_id=unique_id,
    )


# The contract, on both implementations.


def test_a_page_reads_back_pending_until_the_member_finishes_it(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request())
    assert page.page_id in page.url
    result = backend.provider.get_page(TERMINAL, page.page_id)
    assert (result.state, result.response_code) == (PageState.pending, 0)
    assert result.return_value == "checkout-42"
    assert result.transaction_id is None
    assert result.token is None


def test_a_paid_page_reads_back_its_deal_and_token(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request())
    done = backend.simulator.complete_page(page.page_id, APPROVE, card_month=2, card_year=2028)
    result = backend.provider.get_page(TERMINAL, page.page_id)
    assert done.succeeded
    assert done.redirect_url == "https://app.example.test/paid"
    assert done.webhook_body["LowProfileId"] == page.page_id
    assert result.state is PageState.succeeded
    assert (result.amount_in_cents, result.currency) == (1999, "ILS")
    assert result.transaction_id
    assert result.approval_number
    assert (result.operation, result.return_value) == ("ChargeAndCreateToken", "checkout-42")
    assert result.token is not None
    assert result.token.expiry == date(2028, 2, 29)  # TokenExDate: the month's last day
    assert (result.token.card_month, result.token.card_year, result.token.last4) == (
        2,
        2028,
        "0000",
    )


def test_a_declined_page_fails_with_a_non_zero_code_and_our_page_echoed(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request("ChargeOnly"))
    done = backend.simulator.complete_page(page.page_id, DECLINE)
    result = backend.provider.get_page(TERMINAL, page.page_id)
    assert not done.succeeded
    assert done.redirect_url == "https://app.example.test/failed"
    assert (result.state, result.page_id) == (PageState.failed, page.page_id)
    assert result.response_code == Code.declined
    assert result.transaction_id is None


def test_a_token_only_page_saves_the_card_without_a_deal(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request("CreateTokenOnly", 100))
    backend.simulator.complete_page(page.page_id, DECLINE)  # the decline card saves, too
    result = backend.provider.get_page(TERMINAL, page.page_id)
    assert result.state is PageState.succeeded
    assert result.token is not None
    assert result.transaction_id is None


def test_an_unknown_page_is_5096_with_an_all_zero_id(backend: Backend) -> None:
    result = backend.provider.get_page(TERMINAL, str(uuid.uuid4()))
    assert (result.state, result.response_code) == (PageState.unknown_page, UNKNOWN_PAGE)


def test_a_page_reads_back_only_on_the_terminal_that_made_it(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request())
    backend.simulator.complete_page(page.page_id, APPROVE)
    result = backend.provider.get_page(OTHER_TERMINAL, page.page_id)
    assert result.state is PageState.unknown_page


def test_a_finished_page_cannot_be_finished_again(backend: Backend) -> None:
    page = backend.provider.create_page(TERMINAL, page_request())
    backend.simulator.complete_page(page.page_id, APPROVE)
    with pytest.raises(ValueError, match="no open hosted page"):
        backend.simulator.complete_page(page.page_id, APPROVE)


def test_a_token_charge_is_approved_and_found_again_by_its_unique_id(backend: Backend) -> None:
    token = saved_token(backend)
    result = charge(backend.provider, token, "attempt-1")
    assert result.outcome is Outcome.approved
    assert (result.amount_in_cents, result.currency, result.terminal) == (1999, "ILS", "1000")
    found = backend.provider.lookup_charge(TERMINAL, "attempt-1")
    assert (found.outcome, found.transaction_id) == (Outcome.approved, result.transaction_id)
    assert backend.simulator.charge_count("attempt-1") == 1


def test_a_reused_unique_id_answers_the_original_outcome_and_charges_nothing(
    backend: Backend,
) -> None:
    """ExternalUniqTranIdResponse: the same id, even with another amount, replays the first."""
    token = saved_token(backend)
    first = charge(backend.provider, token, "attempt-1")
    again = charge(backend.provider, token, "attempt-1", amount=5000)
    assert (again.outcome, again.transaction_id) == (Outcome.approved, first.transaction_id)
    assert again.amount_in_cents == 1999
    assert backend.simulator.charge_count("attempt-1") == 1


def test_a_declined_charge_stays_declined_on_replay_and_lookup(backend: Backend) -> None:
    token = saved_token(backend, DECLINE)
    result = charge(backend.provider, token, "attempt-1")
    assert (result.outcome, result.response_code) == (Outcome.declined, Code.declined)
    assert charge(backend.provider, token, "attempt-1").outcome is Outcome.declined
    assert backend.provider.lookup_charge(TERMINAL, "attempt-1").outcome is Outcome.declined
    assert backend.simulator.charge_count("attempt-1") == 0


def test_the_timeout_card_is_unknown_and_never_reached_the_provider(backend: Backend) -> None:
    token = saved_token(backend, TIMEOUT)
    assert charge(backend.provider, token, "attempt-1").outcome is Outcome.unknown
    assert backend.provider.lookup_charge(TERMINAL, "attempt-1").outcome is Outcome.not_found
    assert backend.simulator.charge_count("attempt-1") == 0


def test_the_unknown_outcome_card_is_unknown_but_charged_once(backend: Backend) -> None:
    """Pending means unresolved, not uncharged: the lookup finds the charge, and asking again
    under the same id replays it instead of charging twice."""
    token = saved_token(backend, UNKNOWN)
    assert charge(backend.provider, token, "attempt-1").outcome is Outcome.unknown
    found = backend.provider.lookup_charge(TERMINAL, "attempt-1")
    assert found.outcome is Outcome.approved
    again = charge(backend.provider, token, "attempt-1")
    assert (again.outcome, again.transaction_id) == (Outcome.approved, found.transaction_id)
    assert backend.simulator.charge_count("attempt-1") == 1


def test_a_unique_id_never_sent_is_not_found(backend: Backend) -> None:
    assert backend.provider.lookup_charge(TERMINAL, "never-sent").outcome is Outcome.not_found


def test_tokens_and_unique_ids_belong_to_their_terminal(backend: Backend) -> None:
    token = saved_token(backend)
    elsewhere = charge(backend.provider, token, "attempt-1", terminal=OTHER_TERMINAL)
    assert (elsewhere.outcome, elsewhere.response_code) == (Outcome.declined, Code.token_not_found)
    charge(backend.provider, token, "attempt-2")
    assert backend.provider.lookup_charge(OTHER_TERMINAL, "attempt-2").outcome is Outcome.not_found


def test_refunds_are_capped_at_what_the_deal_took(backend: Backend) -> None:
    token = saved_token(backend)
    deal = charge(backend.provider, token, "attempt-1").transaction_id
    assert deal is not None
    refund = backend.provider.refund
    first = refund(TERMINAL, transaction_id=deal, amount_in_cents=500, unique_id="refund-1")
    assert first.outcome is Outcome.approved
    assert first.transaction_id
    rest = refund(TERMINAL, transaction_id=deal, amount_in_cents=1499, unique_id="refund-2")
    assert rest.outcome is Outcome.approved
    over = refund(TERMINAL, transaction_id=deal, amount_in_cents=1, unique_id="refund-3")
    assert (over.outcome, over.response_code) == (Outcome.declined, Code.refund_exceeds_amount)
    replay = refund(TERMINAL, transaction_id=deal, amount_in_cents=500, unique_id="refund-1")
    assert (replay.outcome, replay.transaction_id) == (Outcome.approved, first.transaction_id)


def test_a_refund_of_an_unknown_transaction_is_declined(backend: Backend) -> None:
    result = backend.provider.refund(
        TERMINAL, transaction_id="999999", amount_in_cents=100, unique_id="refund-1"
    )
    assert (result.outcome, result.response_code) == (Outcome.declined, Code.transaction_not_found)


@pytest.mark.parametrize("amount", [1, 10, 1999, 100_001, 123_456_789, 2**40 + 7])
def test_amounts_travel_in_major_units_and_come_back_as_the_same_cents(
    backend: Backend, amount: int
) -> None:
    token = saved_token(backend)
    assert charge(backend.provider, token, f"attempt-{amount}", amount).amount_in_cents == amount


def test_the_sandbox_state_is_shared_by_every_process_under_one_home(tmp_path: Path) -> None:
    """The CLI, the daemons and each `gymctl serve` worker are separate processes: a page made
    by one is finished and read back by others, and a charge made in another process is found."""
    home = tmp_path / "home"
    web_worker, other_worker = SandboxCardProvider(home), SandboxCardProvider(home)
    page = web_worker.create_page(TERMINAL, page_request("CreateTokenOnly", 100))
    complete_page(home, page.page_id, APPROVE, card_month=12, card_year=2030)
    token = other_worker.get_page(TERMINAL, page.page_id).token
    assert token is not None
    daemon = (
        "import sys, datetime; from pathlib import Path\n"
        "from gymctl.providers.card import Terminal\n"
        "from gymctl.providers.card_sandbox import SandboxCardProvider\n"
        "result = SandboxCardProvider(Path(sys.argv[1])).charge_token(\n"
        "    Terminal('1000', 'test2025'), token=sys.argv[2], expiry=datetime.date(2030, 12, 31),\n"
        "    amount_in_cents=1999, currency='ILS', unique_id='attempt-1')\n"
        "print(result.outcome)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", daemon, str(home), token.token],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.strip() == "approved"
    assert web_worker.lookup_charge(TERMINAL, "attempt-1").outcome is Outcome.approved
    web_worker.close()
    other_worker.close()


def test_the_sandbox_is_the_embedded_default_and_production_needs_the_url(
    tmp_path: Path, card_server: FakeCardProvider
) -> None:
    sandbox = card_provider_from_settings(Settings(GYMCTL_HOME=str(tmp_path)))
    assert isinstance(sandbox, SandboxCardProvider)
    assert sandbox.name == "sandbox"
    sandbox.create_page(TERMINAL, page_request())
    assert (tmp_path / "card-sandbox.sqlite3").exists()
    configured = Settings(GYMCTL_CARD_PROVIDER_URL=card_server.url)
    http = card_provider_from_settings(configured)
    assert type(http) is HttpCardProvider
    assert http.get_page(TERMINAL, str(uuid.uuid4())).state is PageState.unknown_page
    production = {"GYMCTL_ENV": "production", "GYMCTL_HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match="GYMCTL_CARD_PROVIDER_URL"):
        card_provider_from_settings(Settings(**production))
    live = Settings(**production, GYMCTL_CARD_PROVIDER_URL="https://secure.example.test")
    assert type(card_provider_from_settings(live)) is HttpCardProvider


# The wire, on the HTTP client only.


def test_a_charge_sends_major_units_the_terminal_and_the_replay_flag(
    card_server: FakeCardProvider,
) -> None:
    backend = Backend(card_server.provider(), card_server.simulator)
    charge(backend.provider, saved_token(backend), "attempt-1")
    sent = card_server.received(CHARGE)[-1]
    assert (sent["TerminalNumber"], sent["ApiName"]) == (1000, "test2025")
    assert sent["Amount"] == Decimal("19.99")
    assert sent["ISOCoinId"] == 1
    assert (sent["ExternalUniqTranId"], sent["ExternalUniqTranIdResponse"]) == ("attempt-1", True)
    assert sent["CardExpirationMMYY"] == "1230"


def test_a_reused_unique_id_without_the_replay_flag_is_refused_with_608(
    card_server: FakeCardProvider,
) -> None:
    token = saved_token(Backend(card_server.provider(), card_server.simulator))
    body = {"TerminalNumber": 1000, "ApiName": "test2025", "Amount": 19.99, "Token": token}
    body["ExternalUniqTranId"] = "attempt-1"
    url = card_server.url + API_PREFIX + CHARGE
    assert httpx.post(url, json=body).json()["ResponseCode"] == 0
    assert httpx.post(url, json=body).json()["ResponseCode"] == REUSED_UNIQUE_ID
    assert card_server.charge_count("attempt-1") == 1


def test_608_reads_as_unknown_never_as_a_decline() -> None:
    """608 says the id was used before, not how that charge ended."""
    answer = {"ResponseCode": 608, "Description": "ExternalUniqTranId was already used"}
    assert charge_result("attempt-1", answer).outcome is Outcome.unknown


def test_a_refund_answer_is_a_refund_a_refusal_or_unknown() -> None:
    """Success is a refund, with or without its new deal id (its reference only: a sent-again
    refund answered without one stayed pending for ever); 608 or no code tell nothing
    (unknown: sent again under the same id, never a refusal); any other code a refusal."""
    approved = refund_result({"ResponseCode": 0, "NewTranzactionId": 77})
    assert (approved.outcome, approved.transaction_id) == (Outcome.approved, "77")
    bare = refund_result({"ResponseCode": 0})
    assert (bare.outcome, bare.transaction_id) == (Outcome.approved, None)
    for unknown in ({"ResponseCode": 608}, {"Description": "?"}):
        assert refund_result(unknown).outcome is Outcome.unknown
    assert refund_result({"ResponseCode": 9006}).outcome is Outcome.declined


def test_cents_and_major_units_convert_exactly() -> None:
    assert [major_units(n) for n in (1, 10, 1999, 2**40 + 7)] == [
        0.01,
        0.1,
        19.99,
        10995116277.83,
    ]
    assert cents(Decimal("19.99")) == 1999
    assert cents(19.9) == 1990
    assert cents(20) == 2000
    with pytest.raises(ValueError):
        cents(Decimal("0.001"))
    with pytest.raises(ValueError):
        major_units(2**60)


def test_a_refused_page_creation_is_provider_refused(card_server: FakeCardProvider) -> None:
    with pytest.raises(ProviderRefused) as refused:
        card_server.provider().create_page(Terminal("1000", ""), page_request())
    assert refused.value.response_code == Code.invalid_terminal


def test_two_collectors_charging_one_unique_id_at_once_charge_once(
    card_server: FakeCardProvider,
) -> None:
    backend = Backend(card_server.provider(timeout=10), card_server.simulator)
    token = saved_token(backend)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: charge(backend.provider, token, "attempt-1"), range(8)))
    assert {(r.outcome, r.transaction_id) for r in results} == {
        (Outcome.approved, results[0].transaction_id)
    }
    assert card_server.charge_count("attempt-1") == 1


# Faults of the network, scripted on the fake provider.


@pytest.mark.parametrize("fault", [Fault.hang, Fault.error, Fault.drop])
def test_a_charge_lost_before_the_provider_is_unknown_then_charged_once(
    card_server: FakeCardProvider, fault: Fault
) -> None:
    """A timeout, a 5xx or a dropped connection is unknown, never a decline; the retry under the
    same id is the first real charge."""
    # The usual timeout for the calls that must be answered, 0.5 s for the one the fault hangs.
    usual, hasty = card_server.provider(), card_server.provider(timeout=0.5)
    token = saved_token(Backend(usual, card_server.simulator))
    card_server.inject(CHARGE, fault)
    assert charge(hasty, token, "attempt-1").outcome is Outcome.unknown
    assert usual.lookup_charge(TERMINAL, "attempt-1").outcome is Outcome.not_found
    assert charge(usual, token, "attempt-1").outcome is Outcome.approved
    assert card_server.charge_count("attempt-1") == 1


def test_a_charge_whose_answer_is_lost_is_unknown_then_found_approved(
    card_server: FakeCardProvider,
) -> None:
    provider = card_server.provider()
    token = saved_token(Backend(provider, card_server.simulator))
    card_server.inject(CHARGE, Fault.answer_lost)
    assert charge(provider, token, "attempt-1").outcome is Outcome.unknown
    assert provider.lookup_charge(TERMINAL, "attempt-1").outcome is Outcome.approved
    assert charge(provider, token, "attempt-1").outcome is Outcome.approved
    assert card_server.charge_count("attempt-1") == 1
    assert card_server.requests(CHARGE) == 2


def test_a_slow_answer_within_the_timeout_is_an_answer(card_server: FakeCardProvider) -> None:
    provider = card_server.provider(timeout=5)
    token = saved_token(Backend(provider, card_server.simulator))
    card_server.inject(CHARGE, Fault.delay, seconds=0.1)
    assert charge(provider, token, "attempt-1").outcome is Outcome.approved


@pytest.mark.parametrize(
    ("endpoint", "fault"),
    [
        (GET_PAGE, Fault.error),
        (GET_PAGE, Fault.hang),
        (GET_PAGE, Fault.drop),
        (LOOKUP_CHARGE, Fault.error),
        (LOOKUP_CHARGE, Fault.hang),
        (CREATE_PAGE, Fault.drop),
        (REFUND, Fault.error),
    ],
)
def test_other_calls_raise_provider_unavailable_on_transport_failure(
    card_server: FakeCardProvider, endpoint: str, fault: Fault
) -> None:
    """A read-back the provider did not answer verifies nothing: the webhook answers 503."""
    # The usual timeout for the calls that must be answered (a loaded machine ran a 0.5 s one
    # out on a setup call); 0.5 s only for the one the fault hangs.
    usual, hasty = card_server.provider(), card_server.provider(timeout=0.5)
    page = usual.create_page(TERMINAL, page_request())
    card_server.complete_page(page.page_id, APPROVE)
    deal = usual.get_page(TERMINAL, page.page_id).transaction_id
    assert deal is not None
    calls = {
        GET_PAGE: lambda provider: provider.get_page(TERMINAL, page.page_id),
        LOOKUP_CHARGE: lambda provider: provider.lookup_charge(TERMINAL, "attempt-1"),
        CREATE_PAGE: lambda provider: provider.create_page(TERMINAL, page_request()),
        REFUND: lambda provider: provider.refund(
            TERMINAL, transaction_id=deal, amount_in_cents=100, unique_id="refund-1"
        ),
    }
    card_server.inject(endpoint, fault, status=502)
    with pytest.raises(ProviderUnavailable):
        calls[endpoint](hasty)
    assert calls[endpoint](usual) is not None  # one fault only: the next call is answered


def test_no_card_token_or_api_name_reaches_logs_or_errors(
    card_server: FakeCardProvider, caplog: pytest.LogCaptureFixture
) -> None:
    api_name = "api-name-c4f9e2d1"
    terminal = Terminal("3000", api_name)
    provider = card_server.provider(timeout=0.5)
    said: list[str] = []
    with caplog.at_level(logging.DEBUG):
        page = provider.create_page(terminal, page_request())
        card_server.complete_page(page.page_id, APPROVE, card_month=12, card_year=2030)
        saved = provider.get_page(terminal, page.page_id).token
        assert saved is not None
        said.append(charge(provider, saved.token, "attempt-1", terminal=terminal).description)
        for fault in (Fault.hang, Fault.error, Fault.drop, Fault.answer_lost):
            card_server.inject(CHARGE, fault)
            result = charge(provider, saved.token, f"attempt-{fault}", terminal=terminal)
            said.append(result.description)
        for endpoint, call in [
            (GET_PAGE, lambda: provider.get_page(terminal, page.page_id)),
            (LOOKUP_CHARGE, lambda: provider.lookup_charge(terminal, "attempt-1")),
        ]:
            card_server.inject(endpoint, Fault.drop)
            with pytest.raises(ProviderUnavailable) as error:
                call()
            said.append(str(error.value))
        with pytest.raises(ProviderRefused) as refused:
            provider.create_page(Terminal("0", api_name), page_request())
        said.append(str(refused.value))
    logged = "\n".join(
        caplog.handler.format(record) + json.dumps(vars(record), default=str)
        for record in caplog.records
    )
    assert any("attempt-1" in record.getMessage() for record in caplog.records)
    for secret in (saved.token, api_name):
        assert secret not in logged
        assert not any(secret in text for text in said)
        assert secret not in repr(provider)
