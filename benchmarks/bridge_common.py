"""What the two bridge benchmarks (bridge.py, bridge_mirror.py) share: the settings that point
the bridge at the fake external system, and the dispatcher processes they start (the real
`run_dispatcher` under a policy each; each prints its claim latencies and sends on SIGTERM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from gymctl.config import Settings

ROOT = Path(__file__).resolve().parent.parent

DISPATCHER = textwrap.dedent(
    """
    import json, signal, sys, threading
    from pydantic import SecretStr
    from gymctl.bridge.dispatcher import Policy, process_label, run_dispatcher
    from gymctl.config import Settings
    from gymctl.db import get_engine

    url, api_url, key, policy = sys.argv[1:5]
    settings = Settings(GYMCTL_ENV="test").model_copy(
        update={"bridge_api_url": api_url, "bridge_credentials_key": SecretStr(key)})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runs = run_dispatcher(get_engine(url), settings, Policy(**json.loads(policy)),
                          runner=process_label(), stop=stop)
    claims = [s for run in runs for s in run.claim_seconds]
    print(json.dumps({"claims": claims, "sent": sum(run.succeeded for run in runs)}))
    """
)


def bridge_settings(api_url: str, key: str) -> Settings:
    """The seeding side's settings: the fake's address, the credentials key, no rate limit
    (connecting many gyms must not wait on a token bucket)."""
    return Settings(GYMCTL_ENV="test").model_copy(
        update={
            "bridge_api_url": api_url,
            "bridge_credentials_key": SecretStr(key),
            "bridge_rate": 1e6,
        }
    )


def start_dispatchers(
    url: str, api_url: str, key: str, policy: dict[str, Any], *, count: int = 2
) -> list[subprocess.Popen]:
    """`count` dispatcher processes; read each one's report with `reports` after SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", DISPATCHER, url, api_url, key, json.dumps(policy)]
    return [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(count)
    ]


def reports(processes: list[subprocess.Popen], timeout: float = 120) -> list[dict[str, Any]]:
    """Each stopped dispatcher's report: its claim latencies (seconds) and ops sent."""
    return [json.loads(process.communicate(timeout=timeout)[0]) for process in processes]
