"""Whole numbers and anchored patterns read from text that another party wrote.

`str.isdigit()` is True for '²' (int() refuses it: a 500 on GET .../charge-schedule?days=²)
and for other scripts' digits, which int() reads as a number no one typed; and a pattern's `$`
also matches before a final newline, so "value\\n" passed each check that used re.match."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import Message

import pytest

from gymctl.branding.colour import is_hex
from gymctl.bridge import client as bridge_client
from gymctl.errors import DomainError
from gymctl.movements.clients import duration_seconds
from gymctl.numerals import MAX_DIGITS, is_decimal, whole_number
from gymctl.providers import card_http, card_simulator, identity_admin
from gymctl.providers.card import Terminal
from gymctl.releases import branded_apps, requests

# Past 4,300 digits int() raises ValueError rather than read them: a 500 on a query of nines.
HUGE = "9" * 4301
NOT_ASCII_DIGITS = ["\u00b2", "\u0967", "\u0663\u0660", "1\u00b2", ""]


@pytest.mark.parametrize("text", [*NOT_ASCII_DIGITS, "-1", "1 ", "0x1"])
def test_only_ascii_digits_are_a_decimal(text):
    assert not is_decimal(text)
    assert is_decimal("0")
    assert is_decimal("0042")


@pytest.mark.parametrize("echoed", NOT_ASCII_DIGITS)
def test_a_terminal_the_provider_echoes_in_another_script_is_not_ours(echoed):
    """The card provider's answer names the terminal it charged on; int('\u00b2') raised
    out of the answer's check, and '\u0967' was read as terminal 1."""
    terminal = Terminal(number="1", api_name="api")
    assert card_http._same_terminal(echoed, terminal) is False
    assert card_http._same_terminal("0001", terminal) is True
    assert card_http._terminal_number(Terminal(number="\u00b2", api_name="api")) == "\u00b2"


@pytest.mark.parametrize("number", NOT_ASCII_DIGITS)
def test_the_sandbox_provider_refuses_a_terminal_number_in_another_script(number):
    with pytest.raises(card_simulator._Refused):
        card_simulator._terminal({"TerminalNumber": number, "ApiName": "api"})
    assert card_simulator._terminal({"TerminalNumber": "0042", "ApiName": "api"}) == "42"


@pytest.mark.parametrize("value", NOT_ASCII_DIGITS[:-1])
def test_a_retry_after_in_another_script_is_unreadable_not_an_exception(value):
    now = datetime(2026, 11, 28, tzinfo=UTC)
    assert identity_admin._retry_after(value, now) is None
    assert identity_admin._retry_after("30", now) == 30


def test_checks_of_a_whole_value_refuse_one_that_ends_in_a_newline():
    assert not is_hex("#aabbcc\n")
    assert is_hex("#aabbcc")
    assert duration_seconds("PT1M\n") is None
    assert duration_seconds("PT1M") == 60
    with pytest.raises(DomainError) as team:
        branded_apps._checked_config({"appleTeamId": "ABCDE12345\n"})
    assert team.value.code == "branded_app_config_invalid"
    assert branded_apps._checked_config({"appleTeamId": "ABCDE12345"})
    with pytest.raises(DomainError) as contact:
        requests.validate_submission({"contactEmail": "owner@gym.example\n"})
    assert contact.value.code == "release_submission_invalid"
    assert requests.validate_submission({"contactEmail": "owner@gym.example"})


@pytest.mark.parametrize("text", [*NOT_ASCII_DIGITS, "-1", HUGE, "1" + "0" * MAX_DIGITS])
def test_a_whole_number_is_at_most_a_bigint_of_ascii_digits(text):
    assert whole_number(text) is None
    assert whole_number("0042") == 42
    assert whole_number("9" * MAX_DIGITS) == 10**MAX_DIGITS - 1


def test_numbers_too_long_to_read_from_a_peer_are_unreadable_not_an_exception():
    """A Retry-After, a view count, an echoed terminal and the sandbox's terminal number of
    4,301 digits each raised ValueError out of int()."""
    now = datetime(2026, 11, 28, tzinfo=UTC)
    assert identity_admin._retry_after(HUGE, now) is None
    assert card_http._same_terminal(HUGE, Terminal(number="1", api_name="api")) is False
    long_terminal = Terminal(number="0" * 18 + "12345", api_name="api")  # 23 digits, as configured
    assert card_http._same_terminal("12345", long_terminal) is True
    assert card_simulator._terminal({"TerminalNumber": long_terminal.number, "ApiName": "api"}) == (
        "12345"
    )
    with pytest.raises(card_simulator._Refused):
        card_simulator._terminal({"TerminalNumber": HUGE, "ApiName": "api"})


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("2.5", 2.5), ("1e400", 3600.0), ("inf", 3600.0), ("nan", None), ("-3", None), ("x", None)],
)
def test_the_external_systems_retry_after_is_a_bounded_pause(header, seconds):
    """A 429's Retry-After of "1e400" was infinity: every later call of the process waited for
    ever, and the dispatcher's timedelta of it raised OverflowError out of its pass."""
    headers = Message()
    headers["Retry-After"] = header
    assert bridge_client._retry_after(headers) == seconds
