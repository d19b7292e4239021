"""Steering tests share the Clef fixtures (the fake System One server, the tiny release)."""

from tests.clef.conftest import fake, tiny_release  # noqa: F401
