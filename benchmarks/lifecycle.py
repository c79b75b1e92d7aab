"""The hourly lifecycle pass on PostgreSQL against the floor of one hand-written UPDATE.

Figures of issues 7 and 19: subscriptions across 500 organizations (100,000 and 10,000 by
default), every state represented, the organizations spread over four time zones (UTC,
Pacific/Kiritimati, Pacific/Pago_Pago, Asia/Jerusalem) so that a debt's day N ends at each
one's own midnight; one lifecycle pass (`gymctl.billing.lifecycle.run_lifecycle`, every
transition, its events and notices): wall time (median of 5), SQL statements issued (counted by
a `before_cursor_execute` listener), and the ratio to the floor, a single hand-written
set-based UPDATE that touches the same rows (same conditions, status and updated_at only, no
events, no bound, no row locks, the same time-zone rule). Goals: the pass under 1.5x the floor
(issue 19), and a statement count that does not depend on the number of subscriptions.

Each run reloads the subscriptions (TRUNCATE, COPY, VACUUM ANALYZE) before the floor and again
before the pass, so both start from the same rows; the script checks that the floor touched as
many rows as the pass moved. The database (`gymctl_bench_lifecycle`) is created, migrated and
dropped by the script. This script measures and prints JSON; it asserts nothing about timing.

    python benchmarks/lifecycle.py [--sizes 10000,100000] [--organizations 500] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from scratch import DEFAULT_ADMIN_URL, copy, ident, scratch_database
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from gymctl.billing.lifecycle import MAX_ROWS_PER_TRANSITION, TRANSITIONS, run_lifecycle

BENCH_DB = "gymctl_bench_lifecycle"
NOW = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
PLAN_TYPES = ("card", "fixed_card", "free_card", "cash", "pack", "drop_in", "gift", "course")
TIMEZONES = ("UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Jerusalem")

# Every state a subscription can be in when the pass runs: (name, plan, columns). The first
# eleven move; the others must be left alone (the floor's WHERE reads the same conditions).
STATES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("term_ended", "card", {"current_period_end": NOW - DAY}),
    ("cash_card_lapsed", "card", {"method": "cash", "cash_prepaid_through": NOW - DAY}),
    ("cash_card_term_ended", "fixed_card", {"method": "cash", "current_period_end": NOW - DAY}),
    (
        "pay_later_card_paid",
        "card",
        {"pay_later_due": NOW - 15 * DAY, "paid": True, "current_period_end": NOW - DAY},
    ),
    ("rolled", "free_card", {"current_period_end": NOW - 40 * DAY}),
    ("expired_pack", "pack", {"current_period_end": NOW - DAY}),
    ("expired_drop_in", "drop_in", {"current_period_end": NOW - 2 * DAY}),
    ("gift_ended", "gift", {"current_period_end": NOW - DAY}),
    ("cash_lapsed", "cash", {"cash_prepaid_through": NOW - DAY}),
    ("payment_due", "pack", {"pay_later_due": NOW - DAY}),
    ("cancelled_non_payment", "card", {"debt_since": NOW - 9 * DAY}),
    ("card_with_card_due", "card", {"card": True, "current_period_end": NOW - DAY}),
    ("card_with_card", "card", {"card": True}),
    ("card_no_card_running", "card", {}),
    ("card_renewal_ahead", "card", {"current_period_end": NOW - DAY, "renewal_end": NOW + DAY}),
    ("card_other_provider", "card", {"current_period_end": NOW - DAY, "method": "provider_direct"}),
    ("pack_running", "pack", {}),
    ("gift_open", "gift", {"current_period_end": None}),
    ("cash_prepaid", "cash", {}),
    ("pay_later_not_due", "pack", {"pay_later_due": NOW + DAY}),
    ("debt_in_grace", "card", {"debt_since": NOW - 2 * DAY}),
    # day 7 is over at NOW in UTC and Pago Pago, not in Kiritimati or Jerusalem
    ("debt_at_day_boundary", "card", {"debt_since": NOW - 8 * DAY + 14 * HOUR}),
    ("cash_card_prepaid", "card", {"method": "cash"}),
    ("debt_attempt_pending", "card", {"debt_since": NOW - 30 * DAY, "pending_attempt": True}),
    ("past_due_legacy", "card", {"status": "past_due", "current_period_end": NOW - 30 * DAY}),
    ("presale", "card", {"status": "scheduled", "current_period_end": None}),
    ("deleted_pack", "pack", {"current_period_end": NOW - DAY, "deleted_at": NOW - DAY}),
    ("notice_given_pack", "pack", {"current_period_end": NOW - DAY, "notice": True}),
    ("course_running", "course", {}),
    ("expired_history", "pack", {"status": "expired", "current_period_end": NOW - 90 * DAY}),
    ("cancelled_history", "card", {"status": "cancelled", "current_period_end": NOW - 90 * DAY}),
    ("term_ended_history", "card", {"status": "term_ended", "current_period_end": NOW - 90 * DAY}),
)
MOVING = 11

# The floor: one UPDATE, the same conditions as the pass, written by hand.
RENEWS_IN_CASH = """(s.plan_type = 'cash' OR (s.plan_type = 'card' AND s.interval_months IS NOT NULL
    AND s.open_ended AND (s.renewal_end IS NULL OR s.renewal_end > s.cash_prepaid_through)))"""
ROLLS = """(s.price_in_cents = 0 AND s.open_ended AND s.renewal_end IS NULL
    AND s.interval_months IS NOT NULL)"""
FLOOR = f"""
UPDATE subscriptions AS s SET
    status = CASE
        WHEN s.status = 'active' AND s.payment_collection_method = 'cash'
            AND s.price_in_cents > 0 AND s.cash_prepaid_through <= :now AND {RENEWS_IN_CASH}
            THEN 'debt'
        WHEN s.status = 'active' AND s.payment_collection_method = 'pay_later'
            AND s.unpaid_amount_in_cents > 0 THEN 'debt'
        WHEN s.status = 'debt' THEN 'cancelled'
        WHEN s.plan_type IN ('pack', 'drop_in') THEN 'expired'
        WHEN s.plan_type = 'gift' THEN 'gift_ended'
        WHEN NOT {ROLLS} THEN 'term_ended'
        ELSE s.status END,
    updated_at = :now
FROM organizations AS o LEFT JOIN billing_settings AS b ON b.organization_id = o.id
WHERE o.id = s.organization_id AND s.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM payment_transactions AS t WHERE t.subscription_id = s.id
                  AND t.status = 'pending' AND t.attempt_kind IS NOT NULL)
  AND (
    (s.status = 'active' AND s.payment_collection_method = 'cash'
     AND s.price_in_cents > 0 AND s.cash_prepaid_through <= :now AND {RENEWS_IN_CASH})
    OR (s.status = 'active' AND s.payment_collection_method = 'pay_later'
        AND s.unpaid_amount_in_cents > 0 AND s.payment_due_at <= :now)
    OR (s.status = 'debt'
        AND ((date_trunc('day', s.debt_since AT TIME ZONE coalesce(b.timezone, 'UTC'))
              + make_interval(days => coalesce(b.billing_grace_days, 7) + 1))
             AT TIME ZONE coalesce(b.timezone, 'UTC')) <= :now)
    OR (s.status = 'active' AND NOT s.cancel_at_period_end
        AND ((s.plan_type IN ('pack', 'drop_in', 'gift') AND s.current_period_end <= :now)
             OR (s.plan_type = 'card' AND (
                 (s.payment_method_id IS NULL AND s.current_period_end <= :now AND {ROLLS})
                 OR NOT {ROLLS} AND (
                    (s.payment_collection_method = 'card_provider'
                     AND s.payment_method_id IS NULL AND s.current_period_end <= :now
                     AND (s.renewal_end IS NULL OR s.renewal_end <= :now))
                    OR (s.payment_collection_method = 'cash'
                        AND coalesce(s.cash_prepaid_through, s.current_period_end) <= :now
                        AND (s.price_in_cents = 0 OR NOT {RENEWS_IN_CASH}))
                    OR (s.payment_collection_method = 'pay_later'
                        AND s.unpaid_amount_in_cents = 0 AND s.current_period_end <= :now))))))
  )
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--organizations", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with scratch_database(BENCH_DB, args.admin_url) as engine:
        results = [measure(engine, size, args.organizations, args.runs) for size in sizes]
    statements = {r["subscriptions"]: r["pass"]["statements"] for r in results}
    print(
        json.dumps(
            {
                "benchmark": "billing lifecycle pass",
                "now": NOW.isoformat(),
                "organizations": args.organizations,
                "runs": args.runs,
                "limit_per_transition": MAX_ROWS_PER_TRANSITION,
                "transitions": [t.name for t in TRANSITIONS],
                "states": len(STATES),
                "results": results,
                "goals": {
                    "under_1_5x_floor": all(r["ratio_to_floor"] < 1.5 for r in results),
                    "statements_independent_of_size": len(set(statements.values())) == 1,
                },
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            },
            indent=2,
        )
    )


def measure(engine: Engine, size: int, organizations: int, runs: int) -> dict[str, Any]:
    people = load_people(engine, size, organizations)
    passes: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    for _ in range(runs):
        load_subscriptions(engine, people)
        floors.append(run_floor(engine))
        load_subscriptions(engine, people)
        passes.append(run_pass(engine))
    moved = {p["moved"] for p in passes}
    touched = {f["rows"] for f in floors}
    if moved != touched or len(moved) != 1:
        raise SystemExit(f"the floor touched {touched} rows, the pass moved {moved}")
    pass_ms = statistics.median(p["ms"] for p in passes)
    floor_ms = statistics.median(f["ms"] for f in floors)
    return {
        "subscriptions": size,
        "rows_moved": moved.pop(),
        "pass": {
            "median_ms": round(pass_ms, 1),
            "runs_ms": [round(p["ms"], 1) for p in passes],
            "statements": passes[0]["statements"],
            "events_written": passes[0]["summary"]["events"],
            "summary": passes[0]["summary"],
        },
        "floor": {
            "median_ms": round(floor_ms, 1),
            "runs_ms": [round(f["ms"], 1) for f in floors],
            "statements": 1,
        },
        "ratio_to_floor": round(pass_ms / floor_ms, 2),
    }


def run_pass(engine: Engine) -> dict[str, Any]:
    statements = 0

    def count(*_args: Any) -> None:
        nonlocal statements
        statements += 1

    event.listen(engine, "before_cursor_execute", count)
    try:
        started = time.perf_counter()
        with Session(engine) as session:
            summary = run_lifecycle(session, now=NOW)
            session.commit()
        elapsed = time.perf_counter() - started
    finally:
        event.remove(engine, "before_cursor_execute", count)
    moved = sum(summary[t.name] for t in TRANSITIONS)
    return {"ms": elapsed * 1000, "statements": statements, "summary": summary, "moved": moved}


def run_floor(engine: Engine) -> dict[str, Any]:
    started = time.perf_counter()
    with engine.begin() as connection:
        rows = connection.execute(text(FLOOR), {"now": NOW}).rowcount
    return {"ms": (time.perf_counter() - started) * 1000, "rows": rows}


# --- data -----------------------------------------------------------------------------------


def load_people(engine: Engine, size: int, organizations: int) -> list[tuple]:
    """Organizations (every other one with a 3-day grace, spread over TIMEZONES), their
    plans, one member per subscription with a saved card; returns (organization, user,
    membership, card) per slot."""
    with engine.begin() as connection:
        tables = "organizations, users, plans, billing_settings, outbox_events"
        connection.execute(text(f"TRUNCATE {tables} CASCADE"))
        orgs = [ident("org", size, n) for n in range(organizations)]
        copy(
            connection,
            "organizations",
            ("id", "name", "slug", "status", "created_at"),
            ((org, f"Gym {n}", f"gym-{size}-{n}", "active", NOW) for n, org in enumerate(orgs)),
        )
        copy(
            connection,
            "billing_settings",
            ("organization_id", "billing_grace_days", "timezone"),
            (
                (org, 3 if n % 2 == 0 else 7, TIMEZONES[n // 2 % len(TIMEZONES)])
                for n, org in enumerate(orgs)
            ),
        )
        copy(
            connection,
            "plans",
            PLAN_COLUMNS,
            (plan_row(org, kind) for org in orgs for kind in PLAN_TYPES),
        )
        people = [
            (
                orgs[n % organizations],
                ident("user", size, n),
                ident("m", size, n),
                ident("pm", size, n),
            )
            for n in range(size)
        ]
        copy(
            connection,
            "users",
            ("id", "email", "created_at", "updated_at"),
            (
                (user, f"member{n}@example.test", NOW, NOW)
                for n, (_, user, _, _) in enumerate(people)
            ),
        )
        copy(
            connection,
            "memberships",
            (
                "id",
                "organization_id",
                "user_id",
                "role",
                "status",
                "invitation_held",
                "created_at",
                "updated_at",
            ),
            ((m, org, user, "member", "active", False, NOW, NOW) for org, user, m, _ in people),
        )
        copy(
            connection,
            "payment_methods",
            ("id", "organization_id", "user_id", "payload_ciphertext", "last4", "saved_at"),
            ((card, org, user, "v1.bench.x", "4242", NOW) for org, user, _, card in people),
        )
    vacuum(engine)
    return people


PLAN_COLUMNS = (
    "id",
    "organization_id",
    "name",
    "type",
    "price_in_cents",
    "currency",
    "interval_months",
    "open_ended",
    "validity_days",
    "created_at",
)
PLANS: dict[str, tuple[str, int, int | None, bool, int | None]] = {
    # kind: (type, price, interval_months, open_ended, validity_days)
    "card": ("card", 9900, 1, True, None),
    "fixed_card": ("card", 9900, 1, False, None),
    "free_card": ("card", 0, 1, True, None),
    "cash": ("cash", 8000, 1, True, None),
    "pack": ("pack", 12000, None, True, 90),
    "drop_in": ("drop_in", 2500, None, True, 1),
    "gift": ("gift", 0, None, False, 30),
    "course": ("course", 30000, None, False, 56),
}


def plan_row(org: uuid.UUID, kind: str) -> tuple:
    type_, price, months, open_ended, validity = PLANS[kind]
    return (
        ident("plan", org, kind),
        org,
        kind,
        type_,
        price,
        "ILS",
        months,
        open_ended,
        validity,
        NOW,
    )


SUBSCRIPTION_COLUMNS = (
    "id",
    "organization_id",
    "membership_id",
    "user_id",
    "plan_id",
    "plan_type",
    "status",
    "payment_collection_method",
    "payment_method_id",
    "price_in_cents",
    "currency",
    "interval_months",
    "open_ended",
    "started_at",
    "current_period_start",
    "current_period_end",
    "next_charge_date",
    "renewal_end",
    "cash_prepaid_through",
    "payment_due_at",
    "payment_last_day",
    "unpaid_amount_in_cents",
    "debt_amount_in_cents",
    "debt_since",
    "debt_reason",
    "debt_notice_stage",
    "cancel_at_period_end",
    "cancellation_effective_at",
    "cash_pauses",
    "created_at",
    "updated_at",
    "deleted_at",
)


def subscription_row(n: int, person: tuple) -> tuple[tuple, bool]:
    """The n-th subscription, in state STATES[n % len(STATES)]; True when it has a pending
    billing attempt."""
    org, user, membership, card = person
    _, kind, state = STATES[n % len(STATES)]
    type_, price, months, open_ended, validity = PLANS[kind]
    start = NOW - 20 * DAY
    end = state.get(
        "current_period_end", start + (timedelta(days=validity) if validity else 30 * DAY)
    )
    status = state.get("status", "active")
    method = state.get("method", "card_provider" if type_ == "card" else "cash")
    due = state.get("pay_later_due")
    if due is not None:
        method = "pay_later"
    debt_since = state.get("debt_since")
    if debt_since is not None:
        status = "debt"
    prepaid = state.get("cash_prepaid_through", end) if method == "cash" else None
    row = (
        ident("sub", n, org),
        org,
        membership,
        user,
        ident("plan", org, kind),
        type_,
        status,
        method,
        card if state.get("card") else None,
        price,
        "ILS",
        months,
        open_ended,
        None if status == "scheduled" else start,
        None if status == "scheduled" else start,
        end,
        end if type_ == "card" and status != "scheduled" else None,
        state.get("renewal_end"),
        prepaid,
        due,
        due,
        price if due is not None and not state.get("paid") else 0,
        price if debt_since is not None else 0,
        debt_since,
        "charge_failed" if debt_since is not None else None,
        "opened" if debt_since is not None else None,
        bool(state.get("notice")),
        end if state.get("notice") else None,
        "[]",
        start,
        start,
        state.get("deleted_at"),
    )
    return row, bool(state.get("pending_attempt"))


def load_subscriptions(engine: Engine, people: list[tuple]) -> None:
    rows = [subscription_row(n, person) for n, person in enumerate(people)]
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE subscriptions, outbox_events CASCADE"))
        copy(connection, "subscriptions", SUBSCRIPTION_COLUMNS, (row for row, _ in rows))
        copy(
            connection,
            "payment_transactions",
            (
                "id",
                "organization_id",
                "subscription_id",
                "type",
                "status",
                "provider",
                "amount_in_cents",
                "currency",
                "attempt_kind",
                "metadata",
                "created_at",
                "updated_at",
            ),
            (
                (
                    ident("tx", row[0]),
                    row[1],
                    row[0],
                    "recurring",
                    "pending",
                    "card_provider",
                    row[9],
                    "ILS",
                    "debt",
                    "{}",
                    NOW,
                    NOW,
                )
                for row, pending in rows
                if pending
            ),
        )
    vacuum(engine)


def vacuum(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))


if __name__ == "__main__":
    main()
