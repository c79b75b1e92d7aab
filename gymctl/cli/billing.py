"""`gymctl billing ...`: the billing sweeps by hand (the daemons run the same functions), and the
operator tools: readiness, verify-account, repair-schedule, transaction resolution."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from gymctl import clock
from gymctl.cli import codes
from gymctl.cli.billing_common import (
    DRY_RUN,
    JSON_OPTION,
    OPERATOR,
    ORG,
    SUBSCRIPTION,
    TRANSACTION,
    as_written,
    day_or_instant,
)
from gymctl.cli.billing_common import instant as _instant
from gymctl.cli.billing_common import unit as _unit
from gymctl.cli.operators import operator_id
from gymctl.cli.output import (
    JSON,
    console,
    err_console,
    one_of,
    print_json,
    render_mapping,
    render_rows,
    writable_file,
    write_file,
)
from gymctl.errors import invalid

app = typer.Typer(no_args_is_help=True)


@app.command("sweep")
def sweep_command(
    name: str = typer.Argument(
        ...,
        help="lifecycle, catch-up, daily, recovery, side-effects, abandoned-checkouts or "
        "abandoned-read-back.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Report what it would touch (its caps); send and keep nothing."
    ),
    as_json: bool = JSON,
) -> None:
    """Run one billing sweep now and print its summary."""
    from gymctl.billing.codes import UNKNOWN_SWEEP
    from gymctl.billing.sweeps import SWEEPS, run_sweep
    from gymctl.config import get_settings
    from gymctl.db import get_engine, session_factory

    one_of(name, SWEEPS, "NAME", UNKNOWN_SWEEP)
    settings = get_settings()
    factory = session_factory(get_engine(settings.resolved_database_url))
    result = run_sweep(name, factory, clock.now(), settings, dry_run=dry_run)
    if as_json:
        print_json(result)
    else:
        render_mapping(result, title=f"billing sweep {name}{' (dry run)' if dry_run else ''}")


# --- Operator tools (spec B 4.1, 4.2): readiness, the two repairs, transaction resolution ----

transaction_app = typer.Typer(no_args_is_help=True, help="Protected transaction resolution.")
app.add_typer(transaction_app, name="transaction")
desk_app = typer.Typer(no_args_is_help=True, help="Desk charges left pending.")
app.add_typer(desk_app, name="desk-charge")


def _services() -> tuple[Any, Any]:
    from gymctl.config import get_settings
    from gymctl.crypto import billing_cipher
    from gymctl.providers.card_factory import card_provider_from_settings

    settings = get_settings()
    return card_provider_from_settings(settings), billing_cipher(settings)


def _cursor(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        raise invalid(codes.CURSOR_INVALID, "the cursor is a subscription id") from None


@app.command("readiness")
def readiness_command(
    organization: str = ORG,
    cursor: str | None = typer.Option(None, "--cursor", help="Last subscription id of a page."),
    every_page: bool = typer.Option(False, "--all", help="Walk every page."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Billing readiness of an organization (read-only, no provider call)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import readiness

    _, cipher = _services()
    pages = []
    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        slug = gym.slug
        after = _cursor(cursor)
        while True:
            page = readiness.readiness(
                session, gym.id, now=clock.now(), cipher=cipher, cursor=after
            )
            pages.append(page)
            if not every_page or page["nextCursor"] is None:
                break
            after = uuid.UUID(page["nextCursor"])
    report = pages[0] if len(pages) == 1 else readiness.merge_pages(pages)
    if as_json:
        print_json(report)
        return
    _render_readiness(slug, report)


def _render_readiness(slug: str, report: dict[str, Any]) -> None:
    color = {"blocked": "red", "review": "yellow"}.get(report["checkState"], "green")
    console.print(f"[bold]{slug}[/bold]: [{color}]{report['checkState']}[/{color}]")
    for issue in report["organizationIssues"]:
        console.print(
            f"  organization: {issue['code']} ({issue['severity']}, {issue['nextAction']})"
        )
    for currency, total in report["pageTotals"].items():
        console.print(
            f"  {currency}: {total['subscriptions']} subscriptions, "
            f"{total['priceInCents'] / 100:.2f} per cycle, {total['debtInCents'] / 100:.2f} in debt"
        )
    for key in ("unresolvedProviderTransactions", "legacyPendingTransactions"):
        listed = report[key]
        more = " (truncated at 100)" if listed["truncated"] else ""
        console.print(f"  {key}: {len(listed['items'])}{more}")
    render_rows(
        (
            {
                "subscription": item["subscriptionId"],
                "member": item["memberName"],
                "status": item["status"],
                "next charge": item["nextChargeAt"],
                "card": f"{item['card']['expiryCheck']}/{item['card']['accountCheck']}",
                "retries": item["retries"]["technical"],
                "issues": ", ".join(f"{i['code']} ({i['severity']})" for i in item["issues"]),
            }
            for item in report["items"]
        ),
        ["subscription", "member", "status", "next charge", "card", "retries", "issues"],
        title="subscriptions",
    )
    if report["nextCursor"]:
        err_console.print(f"next page: --cursor {report['nextCursor']}")


@app.command("verify-account")
def verify_account_command(
    organization: str = ORG,
    subscription: uuid.UUID = SUBSCRIPTION,
    low_profile_id: str | None = typer.Option(
        None, "--low-profile-id", help="The deal's page id, for checkouts that kept none."
    ),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Prove a presale's saved card lives on the current terminal (moves no money)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import verification

    provider, cipher = _services()
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        answer = verification.verify_account(
            session,
            provider,
            organization_id=gym.id,
            subscription_id=subscription,
            low_profile_id=low_profile_id,
            operator_user_id=operator_id(session, operator),
            now=clock.now(),
            cipher=cipher,
        )
    if as_json:
        print_json(answer)
        return
    reason = f" ({answer['reason']})" if answer.get("reason") else ""
    console.print(
        f"{subscription}: {answer['outcome']}{reason}" + (" [dry run]" if dry_run else ""),
        markup=False,
    )


@app.command("repair-schedule")
def repair_schedule_command(
    organization: str = ORG,
    subscription: uuid.UUID = SUBSCRIPTION,
    expected: str = typer.Option(
        ...,
        "--expected-next-charge-at",
        help="The next charge the report showed: an ISO UTC time, or none (empty is refused).",
    ),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Move a missing or too-early first charge to its floor (moves no money)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import repair

    _, cipher = _services()
    stated = None if expected.strip().lower() in ("none", "null") else _instant(expected)
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        answer = repair.repair_schedule(
            session,
            organization_id=gym.id,
            subscription_id=subscription,
            expected_next_charge_at=stated,
            operator_user_id=operator_id(session, operator),
            now=clock.now(),
            cipher=cipher,
        )
    if as_json:
        print_json(answer)
        return
    item = answer["data"]["item"]
    console.print(
        f"{subscription}: first charge at {item['nextChargeAt']}"
        + (" [dry run]" if dry_run else ""),
        markup=False,
    )


@transaction_app.command("show")
def transaction_show(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Inspect a protected attempt: typed state and action hints (no provider call)."""
    from gymctl.billing import resolution

    _inspect(resolution.inspect, organization, transaction, as_json)


@transaction_app.command("reconcile")
def transaction_reconcile(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Look the attempt up on its original merchant account; apply a verified answer."""
    from gymctl.billing import resolution

    _resolve(resolution.reconcile, organization, transaction, operator, dry_run, as_json, ask=True)


@transaction_app.command("confirm-no-debit")
def transaction_confirm_no_debit(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    request_id: uuid.UUID = typer.Option(..., "--request-id", help="A UUIDv4 for this request."),
    provider_case_id: str = typer.Option(..., "--provider-case-id"),
    confirmed_at: str = typer.Option(..., "--confirmed-at", help="Explicit UTC, e.g. ...Z."),
    external_attempt_id: str = typer.Option(..., "--external-attempt-id"),
    terminal: str = typer.Option(..., "--terminal"),
    amount_in_cents: int = typer.Option(..., "--amount-in-cents"),
    currency: str = typer.Option(..., "--currency"),
    attest_no_debit: bool = typer.Option(False, "--attest-no-debit", help="No debit occurred."),
    attest_cannot_settle: bool = typer.Option(
        False, "--attest-cannot-settle-later", help="The old request cannot settle later."
    ),
    authorize_retry: bool = typer.Option(False, "--authorize-retry"),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """The owner records the provider's confirmation that nothing was charged."""
    from gymctl.billing import no_debit

    confirmation = no_debit.NoDebitConfirmation(
        request_id=request_id,
        provider_case_id=provider_case_id,
        confirmed_at=no_debit.utc_instant(as_written(confirmed_at)),
        external_attempt_id=external_attempt_id,
        terminal=terminal,
        amount_in_cents=amount_in_cents,
        currency=currency,
        no_debit_occurred=attest_no_debit,
        cannot_settle_later=attest_cannot_settle,
        authorize_retry=authorize_retry,
    )
    _resolve(
        no_debit.confirm_no_debit,
        organization,
        transaction,
        operator,
        dry_run,
        as_json,
        ask=True,
        confirmation=confirmation,
    )


@transaction_app.command("authorize-retry")
def transaction_authorize_retry(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """The owner resumes a confirmed non-debit obligation left paused (one retry)."""
    from gymctl.billing import no_debit

    _resolve(no_debit.authorize_retry, organization, transaction, operator, dry_run, as_json)


@transaction_app.command("settle-contradiction")
def transaction_settle_contradiction(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    decision: str = typer.Option(
        ..., "--decision", help="accept (the provider's amount is the payment) or refund (all)."
    ),
    amount_in_cents: int = typer.Option(
        ..., "--amount-in-cents", help="What the provider took, as the alert or show reported."
    ),
    currency: str = typer.Option(..., "--currency"),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Settle a page, desk charge or collector attempt the provider approved at other terms
    (asks the provider again by the stored ids; a dry run asks too, then keeps and sends
    nothing)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import contradictions
    from gymctl.billing.codes import CONTRADICTION_DECISION_INVALID
    from gymctl.providers.documents import default_document_provider

    one_of(decision, contradictions.DECISIONS, "--decision", CONTRADICTION_DECISION_INVALID)
    provider, cipher = _services()
    documents = default_document_provider()
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        answer = contradictions.settle_contradiction(
            session,
            provider,
            cipher,
            organization_id=gym.id,
            transaction_id=transaction,
            decision=decision,
            amount_in_cents=amount_in_cents,
            currency=currency,
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
            documents=documents,
        )
    if not dry_run:  # committed: the stored refund is sent now
        with _unit() as session:
            answer = contradictions.send_stored_refund(
                session, provider, cipher, answer, now=clock.now(), documents=documents
            )
    if as_json:
        print_json(answer)
        return
    summary = {
        "outcome": answer["outcome"] + (" [dry run]" if dry_run else ""),
        "status": answer["transaction"]["status"],
        "amount": f"{answer['transaction']['amountInCents'] / 100:.2f} "
        f"{answer['transaction']['currency']}",
        "refund": (answer.get("refund") or {}).get("status") or answer["refundTransactionId"],
    }
    render_mapping({k: v for k, v in summary.items() if v is not None}, title=str(transaction))


def _resolve(
    action: Callable[..., dict[str, Any]],
    organization: str,
    transaction: uuid.UUID,
    operator: str,
    dry_run: bool,
    as_json: bool,
    *,
    ask: bool = False,
    **arguments: Any,
) -> None:
    """One resolution action on the organization's transaction (a protected attempt or a desk
    charge), audited under the operator; `ask`: it asks the original merchant account about
    the stored attempt by its ids (never a debit), so it gets the provider and the cipher."""
    from gymctl.access.gyms import resolve_organization

    if ask:
        provider, cipher = _services()
        arguments.update(provider=provider, cipher=cipher)

    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        view = action(
            session,
            organization_id=gym.id,
            transaction_id=transaction,
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
            **arguments,
        )
    _render_attempt(view, as_json)


def _inspect(
    inspect: Callable[..., dict[str, Any]], organization: str, transaction: uuid.UUID, as_json: bool
) -> None:
    """Show one stored attempt of the organization as `inspect` types it (no provider call)."""
    from gymctl.access.gyms import resolve_organization

    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        view = inspect(session, gym.id, transaction, now=clock.now())
    _render_attempt(view, as_json)


def _render_attempt(view: dict[str, Any], as_json: bool) -> None:
    """A protected attempt or a desk charge: the stored attempt, its state and what may follow
    (a desk charge has no kind, resolution or collection hold; those lines are left out)."""
    if as_json:
        print_json(view)
        return
    attempt, tx = view["attempt"], view["transaction"]
    actions = view.get("actions") or {}
    summary = {
        "outcome": view.get("outcome"),
        "state": view["state"],
        "status": tx["status"],
        "kind": tx.get("kind"),
        "amount": f"{tx['amountInCents'] / 100:.2f} {tx['currency']}",
        "externalAttemptId": attempt["externalAttemptId"],
        "terminal": attempt["terminal"],
        "startedAt": attempt["startedAt"],
        "decision": (view.get("resolution") or {}).get("decision"),
        "collectionHeld": view.get("collectionHeld"),
        "actions": ", ".join(name for name, on in actions.items() if on) or "none",
    }
    render_mapping({k: v for k, v in summary.items() if v is not None}, title=tx["id"])


@desk_app.command("show")
def desk_charge_show(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Inspect a desk charge: its stored attempt and state (no provider call)."""
    from gymctl.billing import desk_resolution

    _inspect(desk_resolution.inspect_desk_charge, organization, transaction, as_json)


@desk_app.command("reconcile")
def desk_charge_reconcile(
    organization: str = ORG,
    transaction: uuid.UUID = TRANSACTION,
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Look a pending desk charge up by its stored id on its merchant account; never charges."""
    from gymctl.billing import desk_resolution
    from gymctl.providers.documents import default_document_provider

    act, docs = desk_resolution.reconcile_desk_charge, default_document_provider()
    _resolve(act, organization, transaction, operator, dry_run, as_json, ask=True, documents=docs)


@app.command("opening-day")
def opening_day_command(
    organization: str = ORG,
    subscription: uuid.UUID = SUBSCRIPTION,
    on: str = typer.Option(
        ...,
        "--on",
        help="The new opening day: a day (the gym's local midnight) or an ISO time with an "
        "explicit UTC offset.",
    ),
    operator: str = OPERATOR,
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON_OPTION,
) -> None:
    """Move a presale's opening day (and its first charge)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing import opening_day

    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        answer = opening_day.edit_opening_day(
            session,
            organization_id=gym.id,
            subscription_id=subscription,
            opening_day=day_or_instant(on),
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
        )
    if as_json:
        print_json(answer)
    else:
        render_mapping(answer, title="presale opening day")


def _add_settings_commands() -> None:
    """`settings` and `charges` live in their own module (loaded with this group)."""
    from gymctl.cli.billing_settings import charges_app, settings_app

    app.add_typer(settings_app, name="settings")
    app.add_typer(charges_app, name="charges")


_add_settings_commands()

# --- The forecast (issue 24) --------------------------------------------------------------------


def _seed(value: int) -> int:
    """--seed in the range the HTTP forecast takes (0 to forecast.MAX_SEED)."""
    from gymctl.billing.forecast import MAX_SEED

    if not 0 <= value <= MAX_SEED:
        raise typer.BadParameter(f"{value} is not a seed from 0 to {MAX_SEED}")
    return value


def _chart_file(value: Path | None) -> Path | None:
    """--chart: a file that can be written, whose suffix names a format the chart is drawn in
    (a picture named .svg holding PNG bytes opens nowhere); found before the forecast runs."""
    from gymctl.billing.forecast_chart import FORMATS, chart_format

    if value is not None and chart_format(value) is None:
        named = ", ".join(suffix for suffix in FORMATS if suffix)
        raise typer.BadParameter(f"{value.name}: a chart is drawn as {named}")
    return writable_file(value)


@app.command("simulate")
def simulate_command(
    organization: str = ORG,
    until: str = typer.Option(..., "--until", help="The last day: YYYY-MM-DD or an ISO UTC time."),
    decline_rate: float = typer.Option(
        0.0, "--decline-rate", help="The share of card charges declined (0 to 1)."
    ),
    seed: int = typer.Option(
        0, "--seed", callback=_seed, help="The seed of the declines (same seed, same run)."
    ),
    from_history: bool = typer.Option(
        False, "--from-history", help="Decline the organization's own share of the last 90 days."
    ),
    by: str = typer.Option("week", "--by", help="day, week or month."),
    lifecycle_only: bool = typer.Option(
        False, "--lifecycle-only", help="Leave the collector out (another provider collects)."
    ),
    chart: Path | None = typer.Option(
        None,
        "--chart",
        callback=_chart_file,
        help="Also draw the forecast to a file: PNG, or SVG or PDF by its suffix.",
    ),
    explain: uuid.UUID | None = typer.Option(
        None, "--explain", help="The timeline of one subscription in the forecast."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Forecast the organization's billing until a date: the daemons' sweeps on a scratch copy
    (the real database is only read; no card is charged, no email sent)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing.codes import FORECAST_PERIOD_INVALID
    from gymctl.billing.forecast import PERIODS, check_explain, simulate

    one_of(by, PERIODS, "--by", FORECAST_PERIOD_INVALID)
    _, cipher = _services()
    start, last = clock.now(), _day_or_instant(until)
    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        slug, gym_id = gym.slug, gym.id
        if explain is not None:
            check_explain(session, gym_id, explain)
    # A session of its own, outside any transaction: simulate then ends its read as soon as
    # the organization is copied. Its caller's transaction would hold the embedded default's
    # write lock (a PostgreSQL session idle in transaction) for the whole forecast.
    with (
        _unit(dry_run=True) as session,
        _forecast_clock(start, last, quiet=as_json) as progress,
        _stopped_as_by_ctrl_c(),
    ):
        result = simulate(
            session,
            gym_id,
            now=start,
            until=last,
            cipher=cipher,
            by=by,
            decline_rate=decline_rate,
            seed=seed,
            from_history=from_history,
            lifecycle_only=lifecycle_only,
            progress=progress,
        )
    report = result.as_dict()
    if explain is not None:
        report["explain"] = {"subscriptionId": str(explain), "timeline": result.explain(explain)}
    if chart:
        from gymctl.billing.forecast_chart import write_chart

        write_file("--chart", chart, lambda path: write_chart(report, path))
        report["chart"] = str(chart)
    if as_json:
        print_json(report)
        return
    _render_forecast(slug, report)


@contextmanager
def _stopped_as_by_ctrl_c() -> Iterator[None]:
    """SIGTERM and SIGHUP (a `timeout`, a closed terminal, a cancelled job) stop the forecast as
    Ctrl-C does: its thread stops at its next tick and removes its scratch copy. Python's own
    handling ended the process at once and left the copy behind, up to hundreds of MB a run."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    # One the caller ignores stays ignored: `nohup gymctl billing simulate ...` runs on.
    previous = {
        number: signal.signal(number, stop)
        for number in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(number) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def _forecast_clock(
    start: datetime, until: datetime, *, quiet: bool
) -> Iterator[Callable[[datetime], None] | None]:
    """On a terminal, a bar on stderr that follows the forecast clock (a large gym's year takes
    a minute or two); with --json or off a terminal nothing, so both read as before."""
    if quiet or not err_console.is_terminal or until <= start:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    span = (until - start).total_seconds()
    columns = (TextColumn("forecast clock {task.fields[day]}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("forecast", total=span, day=f"{start:%Y-%m-%d}")

        def reached(at: datetime) -> None:
            bar.update(task, completed=(at - start).total_seconds(), day=f"{at:%Y-%m-%d}")

        yield reached


@app.command("forecasts")
def forecasts_command(organization: str = ORG, as_json: bool = JSON_OPTION) -> None:
    """The forecasts platform admins queued over HTTP for this organization, newest first: their
    status, how far each got, and why one failed (the daemons' billing_forecasts job runs them)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.billing.forecast_runs import recent_runs, run_view, stored_until

    with _unit(dry_run=True) as session:
        gym = resolve_organization(session, organization)
        slug = gym.slug
        runs = [run_view(run, with_report=False) for run in recent_runs(session, gym.id)]
    if as_json:
        print_json(runs)
        return
    rows = [
        {
            "id": run["id"],
            "status": run["status"],
            "until": f"{until:%Y-%m-%d}" if (until := stored_until(run["parameters"])) else "?",
            "progress": f"{run['progress']:.0%}",
            "asked at": f"{run['createdAt']:%Y-%m-%d %H:%M}",
            "error": (run["error"] or {}).get("code"),
        }
        for run in runs
    ]
    columns = ["id", "status", "until", "progress", "asked at", "error"]
    render_rows(rows, columns, title=f"{slug}: queued billing forecasts")


def _day_or_instant(value: str) -> datetime:
    """--until: a day (its first instant in UTC, as the HTTP forecast reads one) or an instant;
    a refusal names both forms (`2027-02-30` is meant as a day, and was refused as if it were a
    time without its UTC offset)."""
    given = day_or_instant(value)
    return given if isinstance(given, datetime) else clock.day_start(value)


def _render_forecast(slug: str, report: dict[str, Any]) -> None:
    rows = [
        {
            "period": f"{p['periodStart']:%Y-%m-%d}",
            "money in": _money(p["moneyInCents"]),
            "refunds out": _money(p["refundsOutCents"]),
            "debts opened": p["debtsOpened"],
            "debts cleared": p["debtsCleared"],
            "cancelled (non-payment)": p["cancelledForNonPayment"],
            "notices matured": p["noticesMatured"],
            "presales opened": p["presalesOpened"],
            "active at end": p["activeAtEnd"],
        }
        for p in report["periods"]
    ]
    render_rows(
        rows,
        list(rows[0]) if rows else ["period"],
        title=f"{slug}: billing forecast until {report['until']:%Y-%m-%d} "
        f"(decline rate {report['declineRate']:.0%}"
        + (", lifecycle only" if report["lifecycleOnly"] else "")
        + ")",
    )
    if "explain" in report:
        timeline = [
            {"at": step["at"], "sweep": step["job"], "event": step["event"], "why": step["payload"]}
            for step in report["explain"]["timeline"]
        ]
        render_rows(
            timeline,
            ["at", "sweep", "event", "why"],
            title=f"subscription {report['explain']['subscriptionId']}",
        )
    if "chart" in report:
        err_console.print(f"chart written to {report['chart']}")


def _money(cents: int) -> str:
    return f"{cents / 100:,.2f}"
