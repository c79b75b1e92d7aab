"""`gymctl users dev-token --session`: a dev token can reuse a session, so the ownership trail
shows one session for a person's afternoon of curl, not one per minted token."""

from __future__ import annotations

import jwt
import pytest

from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.identity.dev_keys import ensure_signing_key, mint_dev_token
from tests.conftest import NOW


@pytest.fixture
def dev_settings(tmp_path):
    settings = Settings(GYMCTL_HOME=str(tmp_path), GYMCTL_ENV="development")
    ensure_signing_key(settings)
    return settings


def _sid(token: str) -> str:
    return jwt.decode(token, options={"verify_signature": False})["sid"]


def test_dev_tokens_reuse_a_given_session(dev_settings):
    first = mint_dev_token(dev_settings, "user_demo_coach", now=NOW, session_id="sess_desk_1")
    later = NOW.replace(hour=NOW.hour + 1)
    second = mint_dev_token(dev_settings, "user_demo_coach", now=later, session_id="sess_desk_1")
    assert _sid(first) == _sid(second) == "sess_desk_1"
    assert first != second


def test_without_a_session_each_dev_token_mints_its_own(dev_settings):
    assert _sid(mint_dev_token(dev_settings, "user_x", now=NOW)).startswith("sess_dev_")


@pytest.mark.parametrize("session_id", ["", "has space", "x" * 129, "sess/../x"])
def test_a_malformed_session_id_is_refused(dev_settings, session_id):
    with pytest.raises(DomainError) as refused:
        mint_dev_token(dev_settings, "user_x", now=NOW, session_id=session_id)
    assert refused.value.code == "session_id_invalid"


@pytest.mark.parametrize("identity_id", ["", " ", "user\nx", "u" * 129])
def test_a_subject_the_api_would_refuse_is_not_minted(dev_settings, identity_id):
    """`users dev-token ''` minted a token every request then refused (token_claims)."""
    with pytest.raises(DomainError) as refused:
        mint_dev_token(dev_settings, identity_id, now=NOW)
    assert refused.value.code == "identity_id_invalid"
