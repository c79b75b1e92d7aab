"""Session-token verification (spec A 5.1 step 4) against keys made here and a JWKS on loopback."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from datetime import timedelta

import httpx
import pytest

from gymctl.clock import FixedClock
from gymctl.errors import DomainError
from gymctl.identity.tokens import FETCH_DEADLINE, KeySet, TokenVerifier
from tests.conftest import NOW
from tests.idp import SigningKey

# These tests are about caching, refetches and claims, not the fetch deadline (the outage tests
# own it): a loopback fetch on a CI machine whose two cores run the whole suite took more than
# FETCH_DEADLINE once (s56), so theirs is generous.
LOOPBACK_DEADLINE = 5 * FETCH_DEADLINE


def key_set_of(idp, clock, *, deadline=LOOPBACK_DEADLINE) -> KeySet:
    return KeySet(f"{idp.url}/v1/jwks", idp.SECRET_KEY, clock, httpx.Client(), deadline=deadline)


def jwks_verifier(idp, clock, *, pem=None, parties=(), key_set=None, **checks):
    return TokenVerifier(
        public_key_pem=pem,
        key_set=key_set or key_set_of(idp, clock),
        authorized_parties=parties,
        clock=clock,
        **checks,
    )


def refused(verifier, token) -> DomainError:
    with pytest.raises(DomainError) as caught:
        verifier.verify(token)
    assert caught.value.status == 401
    return caught.value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict, payload: dict, signature: bytes = b"") -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(payload).encode())
    return f"{head}.{body}.{_b64(signature)}"


def _claims(now=NOW, **extra):
    return {
        "sub": "user_alice",
        "sid": "sess_1",
        "iat": int(now.timestamp()),
        "exp": int(now.timestamp()) + 60,
        **extra,
    }


def test_valid_token_verifies_in_process_with_the_pem_key(idp, clock):
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    claims = verifier.verify(idp.token("user_alice", now=NOW))
    assert (claims.sub, claims.sid) == ("user_alice", "sess_1")
    assert idp.jwks_requests == 0


def test_valid_token_verifies_through_the_key_set_with_the_secret_key(idp, clock):
    claims = jwks_verifier(idp, clock).verify(idp.token("user_bob", now=NOW))
    assert claims.sub == "user_bob"
    assert idp.jwks_requests == 1


def test_expired_token_is_refused_after_the_five_second_leeway(idp, clock):
    token = idp.token(now=NOW, lifetime=timedelta(seconds=60))
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    clock.set(NOW + timedelta(seconds=64))
    assert verifier.verify(token).sub == "user_alice"
    clock.set(NOW + timedelta(seconds=65))
    assert refused(verifier, token).code == "token_expired"


def test_token_not_yet_valid_is_refused(idp, clock):
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    later = NOW + timedelta(seconds=30)
    assert refused(verifier, idp.token(now=later)).code == "token_not_yet_valid"
    assert verifier.verify(idp.token(now=NOW + timedelta(seconds=4))).sub == "user_alice"


def test_alg_none_is_refused_whatever_the_token_claims(idp, clock):
    verifier = jwks_verifier(idp, clock, pem=idp.key.public_pem)
    token = _unsigned({"alg": "none", "typ": "JWT"}, _claims())
    assert refused(verifier, token).code == "token_algorithm"


def test_hs256_signed_with_the_public_key_as_secret_is_refused(idp, clock):
    """The classic key-confusion attack: the algorithm is never taken from the token."""
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    header, payload = {"alg": "HS256", "typ": "JWT"}, _claims()
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
    mac = hmac.new(idp.key.public_pem.encode(), signing_input.encode(), hashlib.sha256).digest()
    assert refused(verifier, f"{signing_input}.{_b64(mac)}").code == "token_algorithm"


def test_unknown_kid_with_the_key_server_down_is_401_not_500(idp, clock):
    idp.down = True
    stranger = SigningKey("kid-stranger")
    error = refused(jwks_verifier(idp, clock), idp.token(now=NOW, key=stranger))
    assert error.code == "token_keys_unavailable"


def test_unknown_kid_after_a_good_fetch_is_refused_when_the_server_is_down(idp, clock):
    verifier = jwks_verifier(idp, clock)
    verifier.verify(idp.token(now=NOW))
    idp.down = True
    stranger = SigningKey("kid-stranger")
    assert refused(verifier, idp.token(now=NOW, key=stranger)).code == "token_unknown_key"


def test_rotated_key_is_picked_up_by_one_refetch_on_unknown_kid(idp, clock):
    verifier = jwks_verifier(idp, clock)
    verifier.verify(idp.token(now=NOW))
    new_key = idp.rotate()
    assert verifier.verify(idp.token("user_carol", now=NOW, key=new_key)).sub == "user_carol"
    assert idp.jwks_requests == 2


def test_unknown_kid_refetch_is_rate_limited(idp, clock):
    verifier = jwks_verifier(idp, clock)
    verifier.verify(idp.token(now=NOW))
    stranger = SigningKey("kid-stranger")
    for _ in range(5):
        refused(verifier, idp.token(now=NOW, key=stranger))
    assert idp.jwks_requests == 2  # the first fetch and one forced refetch, not six


def test_key_set_is_cached_five_minutes_then_refetched(idp, clock):
    keys = key_set_of(idp, clock)
    verifier = jwks_verifier(idp, clock, key_set=keys)
    verifier.verify(idp.token(now=NOW))
    clock.set(NOW + timedelta(minutes=4, seconds=59))
    verifier.verify(idp.token(now=clock.now()))
    assert idp.jwks_requests == 1
    clock.set(NOW + timedelta(minutes=5))
    verifier.verify(idp.token(now=clock.now()))  # served from the aged set while it refreshes
    assert keys.wait()
    assert idp.jwks_requests == 2


def test_a_failed_refetch_keeps_the_last_good_key_set(idp, clock):
    verifier = jwks_verifier(idp, clock)
    verifier.verify(idp.token(now=NOW))
    idp.down = True
    clock.set(NOW + timedelta(minutes=10))
    assert verifier.verify(idp.token(now=clock.now())).sub == "user_alice"


def test_wrong_authorized_party_is_refused(idp, clock):
    verifier = jwks_verifier(idp, clock, parties=["https://app.example.test"])
    assert verifier.verify(idp.token(now=NOW)).azp == "https://app.example.test"
    error = refused(verifier, idp.token(now=NOW, azp="https://evil.example"))
    assert error.code == "token_unauthorized_party"
    assert refused(verifier, idp.token(now=NOW, omit=("azp",))).code == "token_unauthorized_party"


@pytest.mark.parametrize("claim", ["exp", "iat", "sub", "sid"])
def test_required_claims_must_be_present(idp, clock, claim):
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    assert refused(verifier, idp.token(now=NOW, omit=(claim,))).code == "token_claims"


def test_tampered_payload_fails_the_signature(idp, clock):
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    head, _body, signature = idp.token(now=NOW).split(".")
    forged = _b64(json.dumps(_claims(sub="user_admin")).encode())
    assert refused(verifier, f"{head}.{forged}.{signature}").code == "token_signature"


@pytest.mark.parametrize("garbage", ["abc", "a.b.c", "", "Bearer"])
def test_garbage_is_a_malformed_token(idp, clock, garbage):
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    assert refused(verifier, garbage).code == "token_malformed"


def test_a_pem_key_that_cannot_verify_falls_back_to_the_key_set_reported_once(idp, clock, caplog):
    """Spec A 5.1: a key that cannot verify a signature falls back to the key-set path and is
    reported once per process."""
    stale_pem = SigningKey("kid-old").public_pem
    verifier = jwks_verifier(idp, clock, pem=stale_pem)
    with caplog.at_level(logging.ERROR, logger="gymctl.identity"):
        assert verifier.verify(idp.token(now=NOW)).sub == "user_alice"
        assert verifier.verify(idp.token("user_bob", now=NOW)).sub == "user_bob"
    reports = [r for r in caplog.records if "IDENTITY_JWT_KEY" in r.getMessage()]
    assert len(reports) == 1


def test_a_garbage_pem_key_also_falls_back(idp, clock):
    verifier = jwks_verifier(
        idp, clock, pem="-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----"
    )
    assert verifier.verify(idp.token(now=NOW)).sub == "user_alice"


def test_a_forged_token_fails_both_paths(idp, clock):
    stranger = SigningKey("kid-1", name="forger")  # same kid, different key
    verifier = jwks_verifier(idp, clock, pem=idp.key.public_pem)
    assert refused(verifier, idp.token(now=NOW, key=stranger)).code == "token_signature"


def test_fixed_clock_is_what_time_checks_use(idp):
    clock = FixedClock(NOW + timedelta(days=365))
    verifier = TokenVerifier(public_key_pem=idp.key.public_pem, key_set=None, clock=clock)
    assert refused(verifier, idp.token(now=NOW)).code == "token_expired"


def test_verify_session_token_is_one_function_other_services_import(idp, monkeypatch):
    """Spec A 5.1: the same helper serves other services (MCP auth, messaging gateway, ...)."""
    from datetime import UTC, datetime

    from gymctl.identity import tokens

    monkeypatch.setenv("IDENTITY_JWT_KEY", idp.key.public_pem)
    tokens._process_verifier.cache_clear()
    try:
        claims = tokens.verify_session_token(idp.token("user_service", now=datetime.now(UTC)))
        assert claims.sub == "user_service"
        with pytest.raises(DomainError) as caught:
            tokens.verify_session_token("not-a-token")
        assert caught.value.status == 401
    finally:
        tokens._process_verifier.cache_clear()


def test_the_configured_issuer_and_audience_are_required(idp, clock):
    verifier = jwks_verifier(
        idp, clock, issuer="https://clerk.example.test", audiences=["gymctl-api", "gymctl-mcp"]
    )
    ours = idp.token(now=NOW, iss="https://clerk.example.test", aud=["other", "gymctl-mcp"])
    assert verifier.verify(ours).sub == "user_alice"
    other_issuer = idp.token(now=NOW, iss="https://clerk.other.example", aud="gymctl-api")
    assert refused(verifier, other_issuer).code == "token_issuer"
    no_audience = idp.token(now=NOW, iss="https://clerk.example.test")
    assert refused(verifier, no_audience).code == "token_audience"


def test_without_a_configured_audience_a_token_naming_one_is_refused(idp, clock):
    """A token that names an audience was minted for that service, not for this API."""
    verifier = jwks_verifier(idp, clock)
    assert verifier.verify(idp.token(now=NOW)).sub == "user_alice"
    assert refused(verifier, idp.token(now=NOW, aud="another-api")).code == "token_audience"


def test_without_a_configured_issuer_iss_is_not_checked(idp, clock):
    """As the provider's SDKs do: iss is checked only when the deployment names one."""
    verifier = jwks_verifier(idp, clock)
    assert verifier.verify(idp.token(now=NOW, iss="https://clerk.any.example")).sub == "user_alice"


def test_a_repeated_token_is_still_refused_once_it_expires(idp, clock):
    verifier = jwks_verifier(idp, clock)
    token = idp.token(now=NOW, lifetime=timedelta(seconds=30))
    assert verifier.verify(token).sub == "user_alice"
    clock.set(NOW + timedelta(seconds=35))
    assert refused(verifier, token).code == "token_expired"


def test_a_withdrawn_key_stops_verifying_within_a_minute_of_the_last_full_check(idp, clock):
    """Verified tokens are remembered for a minute at most (VerifiedTokens): within it a repeat
    skips the key lookup, after it the key set decides again."""
    verifier = jwks_verifier(idp, clock)
    old = idp.token(now=NOW, lifetime=timedelta(minutes=10))
    assert verifier.verify(old).sub == "user_alice"
    new_key = idp.rotate()
    idp.keys.remove(idp.keys[1])  # the provider withdraws the old key
    clock.set(NOW + timedelta(seconds=20))
    verifier.verify(idp.token("user_bob", now=clock.now(), key=new_key))  # refetch: old key gone

    clock.set(NOW + timedelta(seconds=59))
    assert verifier.verify(old).sub == "user_alice"
    clock.set(NOW + timedelta(seconds=60))
    assert refused(verifier, old).code == "token_unknown_key"
