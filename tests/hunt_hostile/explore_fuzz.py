"""Exploration harness (not collected: no test_ prefix). Run with
GYMCTL_HUNT=1 .venv/bin/python -m pytest -n 0 tests/hunt_hostile/explore_fuzz.py -p no:cacheprovider
via `python -m pytest tests/hunt_hostile/explore_fuzz.py::test_explore` after renaming... we use a
conftest-free approach: this module is imported by test_zz_explore.py when GYMCTL_HUNT is set."""

from __future__ import annotations

import copy
import json
import os

from gymctl.models import Role
from tests.api import seed
from tests.api.suite import CALLS, ROUTES, path_of, rolled_back
from tests.conftest import NOW

HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    2**31,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
    1.5,
    1e300,
    "",
    " ",
    "x" * 5000,
    "\u0130" * 300,
    "ＡＢＣ",
    "2026-02-30",
    "0001-01-01",
    "9999-12-31",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2026-01-01T00:00:00",
    "Mars/Olympus",
    "00000000-0000-0000-0000-000000000000",
    "../../etc/passwd",
    [],
    {},
    ["a"],
    {"a": 1},
]


def leaves(value, path=()):
    if isinstance(value, dict):
        yield path
        for k, v in value.items():
            yield from leaves(v, path + (k,))
    elif isinstance(value, list):
        yield path
        for i, v in enumerate(value):
            yield from leaves(v, path + (i,))
    else:
        yield path


def replaced(value, path, new):
    if not path:
        return new
    value = copy.deepcopy(value)
    cur = value
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = new
    return value


def run(client, connection, tenant, clock, idp, role_filter=None, out=None):
    found = []
    for key in ROUTES:
        if key not in CALLS:
            continue
        method, rule = key
        for role in (Role.owner,):
            call = CALLS[key](tenant, role)
            if call.json is None or call.data is not None:
                bodies = [({"extra": 1}, "extra")]
            else:
                bodies = []
                for path in leaves(call.json):
                    for h in HOSTILE:
                        bodies.append((replaced(call.json, path, h), f"{path}={h!r:.40}"))
                if isinstance(call.json, dict):
                    for h in HOSTILE[:14]:
                        bodies.append(({**call.json, "unknownField": h}, "unknown"))
            url = path_of(tenant, rule, call)
            headers = tenant[role].headers
            for body, label in bodies:
                clock.set(call.at or NOW)
                with rolled_back(connection):
                    try:
                        r = client.open(url, method=method, json=body, headers=headers)
                    except Exception as e:  # noqa: BLE001
                        found.append((method, rule, label, "EXC", repr(e)[:200]))
                        continue
                    ok_json = r.is_json and r.get_json(silent=True) is not None
                    if r.status_code >= 500 or not ok_json:
                        found.append((method, rule, label, r.status_code, r.data[:200]))
    clock.set(NOW)
    if out:
        with open(out, "w") as f:
            for row in found:
                f.write(repr(row) + "\n")
    return found
