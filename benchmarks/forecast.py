"""The billing forecast (issue 24): one organization with subscriptions of every kind, forecast
for 365 days (`gymctl.billing.forecast.simulate`, the path of `gymctl billing simulate`).

Figures: wall time and CPU time (the machine is shared: its load stretches the wall time, the
CPU time less so) of the forecast (copy, migrate the scratch database, every tick, the report)
and the peak memory (max RSS) of the process running it, at each size; each size runs in its own
process, so the peaks do not mix. Goal: 5,000 subscriptions in under 30 s. The source database is
an embedded SQLite file built by the script in a temporary folder (not measured). This script
measures and prints JSON; it asserts nothing about timing.

The machine is shared: each run records the load average (1 min) when it starts and ends,
and the medians are over `--runs` runs. `--horizon SIZE=DAYS` shortens the forecast for one size
when 365 days does not fit in the time at hand (the output says which horizon each size ran).

    python benchmarks/forecast.py [--sizes 1000,5000,20000] [--days 365] [--runs 1]
        [--horizon 20000=90]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

KINDS = (
    "card_renewing",
    "card_renewing_late",
    "card_in_debt",
    "presale",
    "cash",
    "pay_later_pack",
    "pack",
    "drop_in",
    "gift",
    "card_notice_given",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--horizon", action="append", default=[], metavar="SIZE=DAYS")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.days)))
        return
    horizons = {int(k): int(v) for k, v in (h.split("=") for h in args.horizon)}
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        days = horizons.get(size, args.days)
        runs = []
        for _ in range(args.runs):
            load_before = os.getloadavg()[0]
            run = _child(size, days)
            runs.append({**run, "load_1min": [load_before, os.getloadavg()[0]]})
        results.append(
            {
                "subscriptions": size,
                "days": days,
                "median_seconds": round(statistics.median(r["seconds"] for r in runs), 2),
                "runs_seconds": [r["seconds"] for r in runs],
                "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in runs), 2),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                "load_1min_start_end": [r["load_1min"] for r in runs],
                "setup_seconds": runs[0]["setup_seconds"],
                "ticks_run": runs[0]["ticks_run"],
                "totals": runs[0]["totals"],
            }
        )
    base = results[0]
    for row in results:
        # Growth per subscription-day, so a size run on a shorter horizon still compares.
        scale = (row["subscriptions"] * row["days"]) / (base["subscriptions"] * base["days"])
        row["time_vs_first"] = round(row["median_seconds"] / base["median_seconds"], 2)
        row["cpu_per_subscription_day_vs_first"] = round(
            row["median_cpu_seconds"] / base["median_cpu_seconds"] / scale, 2
        )
    print(
        json.dumps(
            {
                "benchmark": "billing forecast",
                "days": args.days,
                "horizons": horizons,
                "kinds": KINDS,
                "decline_rate": 0.1,
                "results": results,
                "goal_5000_under_30s": next(
                    (
                        r["median_seconds"] < 30
                        for r in results
                        if r["subscriptions"] == 5000 and r["days"] == 365
                    ),
                    None,
                ),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(),
                },
            },
            indent=2,
        )
    )


def _child(size: int, days: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(size), "--days", str(days)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(size: int, days: int) -> dict:
    from sqlalchemy.orm import Session

    from gymctl.billing.forecast import simulate
    from gymctl.db import get_engine
    from gymctl.migrate import upgrade
    from tests.billing.factories import TEST_CIPHER
    from tests.conftest import NOW

    with tempfile.TemporaryDirectory(prefix="gymctl-bench-forecast-") as folder:
        url = f"sqlite:///{Path(folder) / 'source.db'}"
        started = time.perf_counter()
        upgrade(url)
        engine = get_engine(url)
        with Session(engine) as session:
            organization_id = load(session, size)
            session.commit()
        setup = time.perf_counter() - started
        with Session(engine) as session:
            started, cpu = time.perf_counter(), time.process_time()
            result = simulate(
                session,
                organization_id,
                now=NOW,
                until=NOW + timedelta(days=days),
                cipher=TEST_CIPHER,
                by="month",
                decline_rate=0.1,
                seed=1,
                scratch_dir=Path(folder),
            )
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        engine.dispose()
    periods = result.periods()
    totals = {
        key: sum(p[key] for p in periods)
        for key in periods[0]
        if key not in ("periodStart", "activeAtEnd")
    }
    totals["activeAtEnd"] = periods[-1]["activeAtEnd"]
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "setup_seconds": round(setup, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ticks_run": result.ticks_run,
        "totals": totals,
    }


def load(session, size: int):
    """One gym on the card provider; `size` subscriptions, one member each, KINDS in turn, their
    start spread over the last month so renewals fall on every day."""
    from gymctl.models.billing import PlanType
    from tests import factories
    from tests.billing import factories as bf
    from tests.billing.cards import connect_card_provider
    from tests.conftest import NOW

    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    plans = {
        t: bf.make_plan(session, gym.organization, t) for t in PlanType if t in bf.PLAN_DEFAULTS
    }
    for n in range(size):
        kind = KINDS[n % len(KINDS)]
        user = factories.user(session)
        membership = factories.membership(session, user=user, organization=gym.organization)
        started = NOW - timedelta(hours=n % 720)
        common = {"membership": membership, "now": started}
        if kind.startswith("card") or kind == "presale":
            card = bf.make_card(session, gym, user=user, token=f"tok_{n:016d}")  # each its own
            common.update(plan=plans[PlanType.card], payment_method_id=card.id)
        if kind == "card_renewing":
            bf.make_subscription(session, gym, PlanType.card, **common)
        elif kind == "card_renewing_late":
            bf.make_subscription(
                session, gym, PlanType.card, **{**common, "now": started - timedelta(days=20)}
            )
        elif kind == "card_in_debt":
            bf.make_subscription(
                session,
                gym,
                PlanType.card,
                in_debt_since=NOW - timedelta(days=2),
                retry_at=NOW + timedelta(hours=n % 24),
                **common,
            )
        elif kind == "presale":
            bf.make_subscription(
                session,
                gym,
                PlanType.card,
                presale_opening=NOW + timedelta(hours=1 + n % 1440),
                **common,
            )
        elif kind == "card_notice_given":
            row = bf.make_subscription(session, gym, PlanType.card, **common)
            row.cancel_at_period_end = True
            row.cancellation_effective_at = row.current_period_end
        elif kind == "pay_later_pack":
            bf.make_subscription(
                session,
                gym,
                PlanType.pack,
                plan=plans[PlanType.pack],
                pay_later_due=NOW + timedelta(days=1 + n % 30),
                membership=membership,
            )
        else:
            plan_type = {
                "cash": PlanType.cash,
                "pack": PlanType.pack,
                "drop_in": PlanType.drop_in,
                "gift": PlanType.gift,
            }[kind]
            bf.make_subscription(session, gym, plan_type, plan=plans[plan_type], **common)
    return gym.organization.id


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
