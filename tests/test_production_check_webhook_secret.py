"""The production check reads IDENTITY_WEBHOOK_SECRET with the webhook's own parse
(`webhook_secret.decode_secret`, which the signature check uses): a malformed one passed the
check and then answered every delivery 503 webhook_not_configured (since s48)."""

from __future__ import annotations

import json

import pytest

from gymctl.identity.webhook_secret import decode_secret
from gymctl.production_check import production_problems
from tests.test_config import production
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)

PROBLEM = "IDENTITY_WEBHOOK_SECRET is not whsec_ followed by base64"


def test_config_check_names_a_malformed_webhook_secret_without_echoing_it(home_env):  # noqa: F811
    home_env["IDENTITY_WEBHOOK_SECRET"] = "whsec_not*base64!"
    result = gymctl(home_env, "config", "check", "--production", "--json", check=False)
    assert result.returncode == 2
    assert PROBLEM in json.loads(result.stdout)["problems"]
    assert "not*base64" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "secret",
    [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_",
        "whsec_a b",
        "whsec_é",
    ],
)
def test_the_check_refuses_exactly_what_the_webhook_cannot_use(secret):
    try:
        decode_secret(secret)
        usable = True
    except ValueError:
        usable = False
    problems = production_problems(production(IDENTITY_WEBHOOK_SECRET=secret))
    assert (PROBLEM in problems) == (not usable)
