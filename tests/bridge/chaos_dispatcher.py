"""A dispatcher process for the chaos test: the real run_dispatcher with the default rate of
2 requests per second, a short ladder and timeout so the test ends in time. Stops on SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
from datetime import timedelta

from pydantic import SecretStr

from gymctl.bridge.dispatcher import Policy, process_label, run_dispatcher
from gymctl.config import Settings
from gymctl.db import get_engine

POLICY = Policy(
    rate=2.0,
    batch=5,
    lease=timedelta(seconds=30),
    ladder=(timedelta(seconds=0.3),) * 5,
    timeout=0.4,
    workers=48,
    slice_seconds=5.0,
    idle_seconds=0.2,
    pause_on_429=0.3,
)


def main(database_url: str, api_url: str, credentials_key: str) -> None:
    settings = Settings(GYMCTL_ENV="test", GYMCTL_DATABASE_URL=database_url).model_copy(
        update={"bridge_api_url": api_url, "bridge_credentials_key": SecretStr(credentials_key)}
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    engine = get_engine(database_url)
    run_dispatcher(engine, settings, POLICY, runner=process_label(), stop=stop)


if __name__ == "__main__":
    main(*sys.argv[1:4])
