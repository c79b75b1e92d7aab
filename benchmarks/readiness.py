"""Billing readiness on PostgreSQL: one organization with 100,000 subscriptions.

Figures of issue 8: milliseconds per page and SQL statements per page (counted by a
`before_cursor_execute` listener) for the first page, a middle page and the last page of
`gymctl.billing.readiness.readiness`, medians of `--runs` calls each. Goals: the statement count
is the same on every page (no per-row queries) and a page takes under 100 ms.

The organization mixes what the report looks at: card renewals with saved cards (encrypted
payloads, decrypted for the account check), presales with token-only checkouts (some with a
first charge set too early), cash plans, debts, cards missing, technical non-charges and more
pending transactions than the lists' cap of 100. The database (`gymctl_bench_readiness`) is
created, migrated and dropped by the script, which measures and prints JSON and asserts nothing.

    python benchmarks/readiness.py [--subscriptions 100000] [--runs 7]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
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

from gymctl.billing.readiness import PAGE_SIZE, readiness
from gymctl.crypto import BILLING_SETTING, FieldCipher, Keyring

BENCH_DB = "gymctl_bench_readiness"
NOW = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)
KEY = "bench:" + base64.b64encode(hashlib.sha256(b"gymctl readiness bench").digest()).decode()
CIPHER = FieldCipher(Keyring.parse(KEY, setting=BILLING_SETTING))
TERMINAL = "1000"
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
    "opening_day",
    "started_at",
    "current_period_start",
    "current_period_end",
    "next_charge_date",
    "sessions_remaining",
    "debt_amount_in_cents",
    "debt_since",
    "cash_pauses",
    "created_at",
    "updated_at",
)
TRANSACTION_COLUMNS = (
    "id",
    "organization_id",
    "subscription_id",
    "user_id",
    "type",
    "status",
    "provider",
    "amount_in_cents",
    "currency",
    "attempt_kind",
    "metadata",
    "billing_attempt",
    "billing_resolution",
    "created_at",
    "updated_at",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL)
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with scratch_database(BENCH_DB, args.admin_url) as engine:
        started = time.perf_counter()
        organization, ids = load(engine, args.subscriptions)
        load_seconds = time.perf_counter() - started
        cursors = {
            "first": None,
            "middle": ids[len(ids) // 2 - 1],
            "last": ids[-PAGE_SIZE - 1] if len(ids) > PAGE_SIZE else None,
        }
        pages = {
            name: measure(engine, organization, cursor, args.runs)
            for name, cursor in cursors.items()
        }
    statements = {page["statements"] for page in pages.values()}
    print(
        json.dumps(
            {
                "benchmark": "billing readiness page",
                "subscriptions": args.subscriptions,
                "pageSize": PAGE_SIZE,
                "runs": args.runs,
                "loadSeconds": round(load_seconds, 1),
                "pages": pages,
                "goals": {
                    "statements_constant": len(statements) == 1,
                    "page_under_100_ms": all(p["msMedian"] < 100 for p in pages.values()),
                },
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            },
            indent=2,
        )
    )


def measure(
    engine: Engine, organization: uuid.UUID, cursor: uuid.UUID | None, runs: int
) -> dict[str, Any]:
    timings: list[float] = []
    counts: list[int] = []
    items = 0
    for _ in range(runs):
        counted: list[str] = []
        count = _counter(counted)
        with Session(engine) as session:
            event.listen(engine, "before_cursor_execute", count)
            try:
                started = time.perf_counter()
                report = readiness(session, organization, now=NOW, cipher=CIPHER, cursor=cursor)
                timings.append((time.perf_counter() - started) * 1000)
            finally:
                event.remove(engine, "before_cursor_execute", count)
        counts.append(len(counted))
        items = len(report["items"])
    return {
        "cursor": str(cursor) if cursor else None,
        "items": items,
        "msMedian": round(statistics.median(timings), 1),
        "msMin": round(min(timings), 1),
        "statements": statistics.median(counts),
        "checkState": report["checkState"],
        "unresolvedTruncated": report["unresolvedProviderTransactions"]["truncated"],
        "legacyTruncated": report["legacyPendingTransactions"]["truncated"],
    }


def _counter(counted: list[str]):
    def count(_conn, _cursor, statement, *_rest) -> None:
        counted.append(statement)

    return count


# --- data -----------------------------------------------------------------------------------


def card_payload(card_id: uuid.UUID, n: int) -> str:
    payload = {"token": f"tok-{n}", "expiry": "2029-12-31", "terminalNumber": TERMINAL}
    return CIPHER.encrypt(
        json.dumps(payload),
        table="payment_methods",
        column="payload_ciphertext",
        row_id=str(card_id),
    )


def load(engine: Engine, size: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """One organization, one member per subscription; returns (organization, subscription ids
    in id order)."""
    organization = ident("org")
    card_plan, cash_plan = ident("plan", "card"), ident("plan", "cash")
    opening = NOW + 20 * DAY
    with engine.begin() as connection:
        copy(
            connection,
            "organizations",
            ("id", "name", "slug", "status", "created_at"),
            [(organization, "Bench Gym", "bench-gym", "active", NOW)],
        )
        copy(
            connection,
            "payment_provider_configs",
            (
                "id",
                "organization_id",
                "provider",
                "terminal",
                "terminal_since",
                "active",
                "created_at",
            ),
            [(ident("config"), organization, "card_provider", TERMINAL, NOW - 60 * DAY, True, NOW)],
        )
        copy(
            connection,
            "plans",
            (
                "id",
                "organization_id",
                "name",
                "type",
                "price_in_cents",
                "currency",
                "interval_months",
                "created_at",
            ),
            [
                (card_plan, organization, "Monthly", "card", 9900, "ILS", 1, NOW),
                (cash_plan, organization, "Cash", "cash", 8000, "ILS", 1, NOW),
            ],
        )
        people = [(ident("user", n), ident("m", n), ident("sub", n)) for n in range(size)]
        copy(
            connection,
            "users",
            ("id", "email", "name", "created_at", "updated_at"),
            (
                (user, f"member{n}@example.test", f"Member {n}", NOW, NOW)
                for n, (user, _, _) in enumerate(people)
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
            ((m, organization, user, "member", "active", False, NOW, NOW) for user, m, _ in people),
        )
        subscriptions, cards, checkouts, transactions = [], [], [], []
        for n, (user, membership, sub) in enumerate(people):
            kind = n % 20
            card = ident("pm", n) if kind not in (18, 19) else None
            if card is not None and kind < 16:
                cards.append(
                    (
                        card,
                        organization,
                        user,
                        card_payload(card, n),
                        "0000",
                        "2029-12",
                        NOW - 30 * DAY,
                    )
                )
            else:
                card = None
            if kind < 12 or kind == 19:  # card renewals due next month (19: with no card)
                row = (
                    "card",
                    "active",
                    "card_provider",
                    card,
                    9900,
                    None,
                    NOW - 10 * DAY,
                    NOW - 10 * DAY,
                    NOW + 20 * DAY,
                    NOW + 20 * DAY,
                    None,
                    0,
                    None,
                )
            elif kind < 16:  # presales, one in four with a first charge too early
                next_charge = NOW - DAY if kind == 15 else opening
                row = (
                    "card",
                    "scheduled",
                    "card_provider",
                    card,
                    9900,
                    opening,
                    None,
                    None,
                    None,
                    next_charge,
                    None,
                    0,
                    None,
                )
                checkouts.append(
                    (
                        ident("co", n),
                        organization,
                        sub,
                        user,
                        "CreateTokenOnly",
                        TERMINAL,
                        f"page-{n}",
                        0,
                        "ILS",
                        "completed",
                        json.dumps({"lowProfileId": f"page-{n}"}),
                        NOW + DAY,
                        NOW - 30 * DAY,
                    )
                )
            elif kind < 18:  # cash plans
                row = (
                    "cash",
                    "active",
                    "cash",
                    None,
                    8000,
                    None,
                    NOW - 10 * DAY,
                    NOW - 10 * DAY,
                    NOW + 20 * DAY,
                    None,
                    None,
                    0,
                    None,
                )
            else:  # card debt
                row = (
                    "card",
                    "debt",
                    "card_provider",
                    None,
                    9900,
                    None,
                    NOW - 40 * DAY,
                    NOW - 40 * DAY,
                    NOW - 10 * DAY,
                    NOW - 10 * DAY,
                    None,
                    9900,
                    NOW - 2 * DAY,
                )
            # the rest: opening day, started, period start and end, next charge, quota, debt
            # and debt since, in the table's column order
            plan_type, status, method, card_id, price, *schedule = row
            subscriptions.append(
                (
                    sub,
                    organization,
                    membership,
                    user,
                    card_plan if plan_type == "card" else cash_plan,
                    plan_type,
                    status,
                    method,
                    card_id,
                    price,
                    "ILS",
                    1,
                    *schedule,
                    "[]",
                    NOW - 30 * DAY,
                    NOW,
                )
            )
            if kind == 12 and n % 7 == 0:  # a technical non-charge on the record
                transactions.append(
                    attempt_row(n, organization, sub, user, "failed", {"decision": "not_charged"})
                )
            if n < 150 * 20 and kind == 1:  # pending attempts beyond the cap of 100
                transactions.append(attempt_row(n, organization, sub, user, "pending", None))
            if n < 150 * 20 and kind == 17:  # legacy pending rows beyond the cap
                transactions.append(
                    (
                        ident("legacy", n),
                        organization,
                        sub,
                        user,
                        "charge",
                        "pending",
                        "card_provider",
                        8000,
                        "ILS",
                        None,
                        "{}",
                        None,
                        None,
                        NOW - DAY,
                        NOW - DAY,
                    )
                )
        copy(
            connection,
            "payment_methods",
            (
                "id",
                "organization_id",
                "user_id",
                "payload_ciphertext",
                "last4",
                "expires_month",
                "saved_at",
            ),
            cards,
        )
        copy(connection, "subscriptions", SUBSCRIPTION_COLUMNS, subscriptions)
        copy(
            connection,
            "checkouts",
            (
                "id",
                "organization_id",
                "subscription_id",
                "user_id",
                "operation",
                "terminal",
                "page_id",
                "amount_in_cents",
                "currency",
                "status",
                "metadata",
                "expires_at",
                "created_at",
            ),
            checkouts,
        )
        copy(connection, "payment_transactions", TRANSACTION_COLUMNS, transactions)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))
    return organization, sorted(sub for _, _, sub in people)


def attempt_row(n: int, organization, sub, user, status: str, resolution: dict | None) -> tuple:
    attempt = {
        "protocol": 1,
        "externalAttemptId": str(ident("ext", n, status)),
        "terminal": TERMINAL,
        "amountInCents": 9900,
        "currency": "ILS",
        "startedAt": (NOW - DAY).isoformat(),
    }
    return (
        ident("tx", n, status), organization, sub, user, "recurring", status, "card_provider",
        9900, "ILS", "recurring", "{}", json.dumps(attempt),
        json.dumps(resolution) if resolution else None, NOW - DAY, NOW - DAY,
    )  # fmt: skip


if __name__ == "__main__":
    main()
