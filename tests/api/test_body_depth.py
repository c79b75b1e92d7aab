"""The nesting depth every JSON reader measures before parsing (gymctl.jsondepth): exact for
JSON, and linear on what is not, so a hostile body cannot make the measure itself the cost."""

from __future__ import annotations

import time

import pytest

from gymctl.jsondepth import depth
from tests.access.conftest import gym, snapshot  # noqa: F401 (fixtures)
from tests.access.test_join import make_link


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": "[[[[{{{{", "b": [1, {"c": "]\\"]"}]}', 3),
        (b'["\\\\", ["x"]]', 2),  # an escaped backslash ends before the quote
        (b"[" * 50 + b'"abc\\', 50),  # an unterminated string hides nothing before it
        (b"1", 0),
    ],
)
def test_depth_counts_brackets_outside_strings(raw, expected):
    assert depth(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [b'"' + b'\\"' * 500_000, b'"\\' * 500_000, b'"' * 1_000_001],
    ids=["escaped-quotes", "backslashes", "quotes"],
)
def test_an_unterminated_string_of_a_megabyte_is_measured_at_once(raw):
    """An unterminated string was rescanned from each of its quotes: 3 s for 32 000 escaped
    quotes, hours for a signed-in route's megabyte."""
    started = time.perf_counter()
    depth(raw)
    assert time.perf_counter() - started < 2


def test_a_public_route_answers_a_run_of_escaped_quotes_at_once(client, session, gym):  # noqa: F811
    link = make_link(session, gym.organization)
    session.commit()
    before = snapshot(session)
    started = time.perf_counter()
    response = client.post(
        f"/join/{link.token}/request-invite",
        data=b'"' + b'\\"' * 30_000,
        content_type="application/json",
    )
    assert time.perf_counter() - started < 2
    assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert snapshot(session) == before
