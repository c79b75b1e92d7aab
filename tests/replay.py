"""Replayable randomness for the property-based and schema-driven tests (hypothesis, schemathesis).

In CI (the CI environment variable is set) every test draws the same inputs on every run
(`derandomize`), so a red is a red again on the next run. Elsewhere the run explores: one seed
for the whole run, printed in the header, and `--hypothesis-seed=N` replays it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping

from hypothesis import core
from hypothesis import settings as hypothesis_settings

hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)


def profile_for(environ: Mapping[str, str]) -> str:
    """`ci` when the CI variable is set to anything but empty, "0" or "false"."""
    return "ci" if environ.get("CI", "").strip().lower() not in ("", "0", "false") else "explore"


def configure(given_seed: object | None, environ: Mapping[str, str] = os.environ) -> str:
    """Load the profile and, when exploring without `--hypothesis-seed`, pick and force one seed
    for the run. Answers the header line that says how to replay."""
    profile = profile_for(environ)
    hypothesis_settings.load_profile(profile)
    if profile == "ci":
        return "hypothesis: profile ci (derandomized: the same inputs on every run)"
    seed = given_seed if given_seed is not None else random.SystemRandom().randrange(2**32)
    core.global_force_seed = seed
    return f"hypothesis: profile explore, seed {seed} (replay with --hypothesis-seed={seed})"
