"""A red property-based run can be replayed: derandomized in CI, a printed seed elsewhere."""

from __future__ import annotations

import pytest
from hypothesis import core, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests import replay


@pytest.fixture
def restored():
    profile, seed = hypothesis_settings.get_current_profile_name(), core.global_force_seed
    yield
    hypothesis_settings.load_profile(profile)
    core.global_force_seed = seed


def draws() -> list[int]:
    drawn: list[int] = []

    @given(st.integers())
    def record(value: int) -> None:
        drawn.append(value)

    record()
    return drawn


@pytest.mark.parametrize(
    ("environ", "profile"),
    [({"CI": "true"}, "ci"), ({"CI": "1"}, "ci"), ({}, "explore"), ({"CI": "false"}, "explore")],
)
def test_the_ci_variable_selects_the_derandomized_profile(environ, profile):
    assert replay.profile_for(environ) == profile


def test_in_ci_every_run_draws_the_same_inputs(restored):
    header = replay.configure(None, {"CI": "true"})
    assert "derandomized" in header
    assert hypothesis_settings.default.derandomize
    assert draws() == draws()


def test_elsewhere_the_printed_seed_replays_the_run(restored):
    header = replay.configure(None, {})
    seed = int(header.rsplit("=", 1)[1].rstrip(")"))
    first = draws()
    assert replay.configure(seed, {}) == header  # --hypothesis-seed=<the printed seed>
    assert draws() == first
    replay.configure(seed + 1, {})
    assert draws() != first
