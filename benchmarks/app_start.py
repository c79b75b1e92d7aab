"""How long create_app takes: what every gunicorn worker and every test's app pays at start.

Three medians over `--runs` (default 30): the whole create_app with a deployment's identity
settings (a key set and an admin client, so two outside clients); the app's route table built
with werkzeug's own Rule, which compiles two URL builders per route as it is added, and with
webhooks.app.LazyRule, which compiles them on first use; and one TLS context loaded the way
httpx loads one per client (what gymctl.providers.http_client now does once per process). It
measures and prints JSON; it asserts nothing. Run it on an idle machine.

    python benchmarks/app_start.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy.orm import sessionmaker  # noqa: E402
from werkzeug.routing import Map, Rule  # noqa: E402

from gymctl.config import Settings  # noqa: E402
from webhooks.app import LazyRule, create_app  # noqa: E402


def median_ms(call, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    settings = Settings(
        GYMCTL_ENV="test",
        IDENTITY_API_URL="http://127.0.0.1:9",  # nothing is called at start
        IDENTITY_SECRET_KEY="sk_test_benchmark",
        IDENTITY_WEBHOOK_SECRET="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )

    def app():
        return create_app(settings, session_factory=sessionmaker())

    routes = [(rule.rule, rule.endpoint, rule.methods) for rule in app().url_map.iter_rules()]

    def table(rule_class):
        def build():
            Map([rule_class(path, endpoint=endpoint, methods=methods) for path, endpoint, methods
                 in routes])  # fmt: skip

        return build

    print(
        json.dumps(
            {
                "runs": runs,
                "routes": len(routes),
                "create_app_ms": median_ms(app, runs),
                "route_table_werkzeug_rule_ms": median_ms(table(Rule), runs),
                "route_table_lazy_rule_ms": median_ms(table(LazyRule), runs),
                "tls_context_per_client_ms": median_ms(httpx.create_ssl_context, runs),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
