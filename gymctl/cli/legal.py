"""`gymctl legal publish|list`: the platform's legal documents (spec A 2.6). Publishing a new
version makes everyone who consented only to older ones owe consent again."""

from __future__ import annotations

import typer

from gymctl.cli.billing_common import DRY_RUN, OPERATOR, instant, unit
from gymctl.cli.output import JSON, console, print_json, render_rows

app = typer.Typer(no_args_is_help=True)
COLUMNS = ["type", "version", "locale", "state", "publishedAt", "url", "id"]


@app.command("publish")
def publish_command(
    doc_type: str = typer.Argument(
        ..., metavar="TYPE", help="terms_of_use, privacy_policy or fitness_waiver."
    ),
    version: str = typer.Argument(..., help="New for its type and locale, e.g. 2026-07."),
    url: str = typer.Argument(..., help="Where the text is: an https address."),
    operator: str = OPERATOR,
    locale: str = typer.Option("en", "--locale", help="Language tag of the text, e.g. es-ES."),
    published_at: str | None = typer.Option(
        None,
        "--published-at",
        help="ISO time with a UTC offset; now when left out, later to schedule it, never past.",
    ),
    dry_run: bool = DRY_RUN,
    as_json: bool = JSON,
) -> None:
    """Publish a new version of a legal document (rules: gymctl.access.legal.publish_document)."""
    from gymctl import clock
    from gymctl.access import legal
    from gymctl.cli.operators import operator_id

    at = None if published_at is None else instant(published_at)
    with unit(dry_run) as session:
        actor = operator_id(session, operator)
        now = clock.now()
        document = legal.publish_document(
            session,
            type=doc_type,
            version=version,
            url=url,
            locale=locale,
            published_at=at,
            actor_user_id=actor,
            actor=f"cli:{actor}",
            now=now,
        )
        result = legal.describe(session, document, now=now)
    if as_json:
        print_json({**result, "dryRun": dry_run})
        return
    console.print(
        f"{result['type']} {result['version']} ({result['locale']}) {result['state']} "
        f"from {result['publishedAt']}" + (" [dry run: nothing kept]" if dry_run else ""),
        markup=False,
    )


@app.command("list")
def list_command(as_json: bool = JSON) -> None:
    """Every legal document, newest first: scheduled, current (what members are asked to
    accept) or superseded."""
    from gymctl import clock
    from gymctl.access import legal
    from gymctl.db import session_scope

    with session_scope() as session:
        rows = legal.list_documents(session, now=clock.now())
    render_rows(rows, COLUMNS, title="legal documents", as_json=as_json)
