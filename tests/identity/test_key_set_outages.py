"""The provider's key set down, slow or trickling must not take the API down (issue 20).

Required: one fetch at a time per process, a negative cache with backoff, a total deadline (not
per read), stale keys kept and used while the provider is down, /health never blocked by identity
work. A real key-set server on loopback (tests/idp.py) plays each fault.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest

from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.identity.tokens import KeySet, TokenVerifier
from tests.conftest import NOW, WEBHOOK_SECRET
from webhooks.app import create_app


def key_set_of(idp, clock, *, deadline=5.0) -> KeySet:
    return KeySet(f"{idp.url}/v1/jwks", idp.SECRET_KEY, clock, httpx.Client(), deadline=deadline)


def verifier_of(keys, clock) -> TokenVerifier:
    return TokenVerifier(public_key_pem=None, key_set=keys, clock=clock)


def outcome(verifier, token) -> str:
    """The subject, or the refusal's code (with its status when that is not 401)."""
    try:
        return verifier.verify(token).sub
    except DomainError as error:
        return error.code if error.status == 401 else f"{error.status} {error.code}"


def at_once(n, call):
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: call(), range(n)))


def test_a_cold_start_with_the_provider_down_asks_it_once_not_once_per_request(idp, clock):
    idp.down = True
    verifier = verifier_of(key_set_of(idp, clock), clock)
    token = idp.token(now=NOW)

    answers = at_once(30, lambda: outcome(verifier, token))

    assert set(answers) == {"token_keys_unavailable"}
    assert idp.jwks_requests == 1


def test_failed_fetches_back_off_one_second_doubling(idp, clock):
    idp.down = True
    verifier = verifier_of(key_set_of(idp, clock), clock)
    token = idp.token(now=NOW)
    asked = []
    for offset in (0, 0.5, 1, 1.5, 2.5, 3, 6.9, 7):  # failures at 0, 1, 3 and 7 s
        clock.set(NOW + timedelta(seconds=offset))
        for _ in range(5):
            assert outcome(verifier, token) == "token_keys_unavailable"
        asked.append(idp.jwks_requests)

    assert asked == [1, 1, 2, 2, 2, 3, 3, 4]


@pytest.mark.parametrize("body", [[], {"keys": ["not a key"]}, {"keys": "x"}, "x"])
def test_a_malformed_key_set_is_a_failed_fetch_and_backs_off(idp, clock, body):
    idp.jwks_body = body
    verifier = verifier_of(key_set_of(idp, clock), clock)
    token = idp.token(now=NOW)

    answers = [outcome(verifier, token) for _ in range(10)]

    assert set(answers) == {"token_keys_unavailable"}
    assert idp.jwks_requests == 1


def test_concurrent_requests_on_a_cold_start_share_one_fetch_of_a_slow_provider(idp, clock):
    idp.jwks_gate.clear()
    verifier = verifier_of(key_set_of(idp, clock), clock)
    token = idp.token(now=NOW)
    with ThreadPoolExecutor(20) as pool:
        pending = [pool.submit(outcome, verifier, token) for _ in range(20)]
        assert idp.jwks_asked.wait(5)
        idp.jwks_gate.set()
        answers = [future.result() for future in pending]

    assert set(answers) == {"user_alice"}
    assert idp.jwks_requests == 1


def test_after_the_cache_aged_a_down_provider_is_asked_once_and_the_stale_keys_serve(idp, clock):
    keys = key_set_of(idp, clock)
    verifier = verifier_of(keys, clock)
    verifier.verify(idp.token(now=NOW))
    idp.down = True
    clock.set(NOW + timedelta(minutes=10))
    token = idp.token(now=clock.now())

    answers = [outcome(verifier, token) for _ in range(20)]
    assert keys.wait()
    answers += [outcome(verifier, token) for _ in range(20)]

    assert set(answers) == {"user_alice"}
    assert idp.jwks_requests == 2


def test_a_known_key_is_served_at_once_while_a_slow_refresh_is_under_way(idp, clock):
    keys = key_set_of(idp, clock, deadline=30)
    verifier = verifier_of(keys, clock)
    verifier.verify(idp.token(now=NOW))
    idp.jwks_gate.clear()
    idp.jwks_asked.clear()
    clock.set(NOW + timedelta(minutes=6))

    assert outcome(verifier, idp.token(now=clock.now())) == "user_alice"

    assert idp.jwks_asked.wait(5)
    assert keys.wait(timeout=0) is False  # the refresh is still held: the request did not wait
    idp.jwks_gate.set()
    assert keys.wait()


@pytest.mark.parametrize("fault", ["slow", "trickling"])
def test_a_fetch_ends_at_its_total_deadline_and_the_request_is_a_401(idp, clock, fault):
    """A trickling server answers every read in time; only a deadline over the whole fetch
    frees the worker (it held one 30 s until gunicorn killed it and answered an HTML 500)."""
    if fault == "slow":
        idp.jwks_gate.clear()
    else:
        idp.jwks_trickle = 0.02  # the whole set would take about 20 s, a byte well within a read
    verifier = verifier_of(key_set_of(idp, clock, deadline=0.5), clock)

    assert outcome(verifier, idp.token(now=NOW)) == "token_keys_unavailable"


def test_health_answers_while_a_bearer_request_waits_for_the_key_set(
    idp, clock, session_factory, mailbox
):
    settings = Settings(
        GYMCTL_ENV="test",
        IDENTITY_API_URL=idp.url,
        IDENTITY_SECRET_KEY=idp.SECRET_KEY,
        IDENTITY_WEBHOOK_SECRET=WEBHOOK_SECRET,
    )
    keys = key_set_of(idp, clock, deadline=30)
    app = create_app(
        settings, session_factory=session_factory, clock=clock, verifier=verifier_of(keys, clock)
    )
    idp.jwks_gate.clear()
    bearer = {"Authorization": f"Bearer {idp.token('user_waiting', now=NOW)}"}
    waiting: dict[str, int] = {}
    request = threading.Thread(
        target=lambda: waiting.update(
            status=app.test_client().get("/users/me", headers=bearer).status_code
        )
    )
    request.start()
    assert idp.jwks_asked.wait(5)

    health = app.test_client().get("/health")

    assert health.status_code == 200
    assert waiting == {}  # the bearer request is still waiting for the key set
    idp.jwks_gate.set()
    request.join(10)
    assert waiting == {"status": 200}
