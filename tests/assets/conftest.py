"""The gym with one person per role, shared with the access tests."""

from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
