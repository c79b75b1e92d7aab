"""The `sandbox` card provider of the embedded default: the HTTP client, with the network swapped
for the simulator in this process (card_simulator.py), its state in a sqlite file under
GYMCTL_HOME. No card is ever charged.

Because the sandbox is the real client minus the wire, it maps answers exactly as production
does. Test cards (card_simulator.TEST_CARDS):

    4580000000000000  approve (the provider's own example card; any unlisted number too)
    4580000000000002  decline: deals on it are refused; a token-only page still saves it
    4580000000000003  timeout: token charges never reach the provider (unknown; lookup not_found)
    4580000000000004  unknown outcome: token charges go through, the answer is lost (unknown;
                      lookup approved)
    4580000000000005  invalid: refused on every page, token-only too
    4580000000000006  token lost: a page's deal settles, the token it promised never comes

A hosted page is finished with `complete_page(home, page_id, card_number)`, as the member would.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from gymctl.providers.card_http import HttpCardProvider
from gymctl.providers.card_simulator import CardSimulator, CompletedPage, Delivery

SANDBOX_URL = "https://card-sandbox.invalid"
STATE_FILE = "card-sandbox.sqlite3"


def sandbox_simulator(home: Path) -> CardSimulator:
    """The simulator whose state lives under this GYMCTL_HOME, shared by every process."""
    return CardSimulator((home / STATE_FILE).resolve(), page_url=f"{SANDBOX_URL}/pay/")


def complete_page(
    home: Path,
    page_id: str,
    card_number: str,
    *,
    card_month: int = 12,
    card_year: int | None = None,
) -> CompletedPage:
    """Finish a sandbox hosted page as the member would; returns the webhook the provider posts.
    ValueError when there is no such open page."""
    return sandbox_simulator(home).complete_page(
        page_id, card_number, card_month=card_month, card_year=card_year
    )


class _InProcess(httpx.BaseTransport):
    """Hands each request to the simulator; the timeout and unknown-outcome cards become the
    transport errors a real network would raise."""

    def __init__(self, simulator: CardSimulator) -> None:
        self._simulator = simulator

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self._simulator.answer(request.url.path, request.read())
        if answer.delivery is Delivery.never_arrived:
            raise httpx.ConnectTimeout("sandbox: the request never arrived", request=request)
        if answer.delivery is Delivery.answer_lost:
            raise httpx.ReadTimeout("sandbox: the answer was lost", request=request)
        return httpx.Response(answer.status, json=answer.body)


class SandboxCardProvider(HttpCardProvider):
    name = "sandbox"

    def __init__(self, home: Path) -> None:
        self.simulator = sandbox_simulator(home)
        super().__init__(SANDBOX_URL, client=httpx.Client(transport=_InProcess(self.simulator)))
