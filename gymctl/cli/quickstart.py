"""`gymctl quickstart`: the embedded default, from nothing to a signed-in API call."""

from __future__ import annotations

import typer
from rich.panel import Panel

from gymctl.cli.output import JSON, console, print_json, render_rows


def quickstart(
    port: int = typer.Option(8000, help="Port shown in the curl line (`gymctl serve --port`)."),
    as_json: bool = JSON,
) -> None:
    """Create GYMCTL_HOME, migrate, seed a demo gym, run each sweep once, print a dev token."""
    from daemons.runner import run_daemons
    from gymctl import clock, migrate
    from gymctl.access.invitations import Outreach
    from gymctl.access.memberships import membership_of
    from gymctl.billing.demo import seed_demo_billing
    from gymctl.branding.demo import publish_demo_brand
    from gymctl.branding.minisites import minisite_url
    from gymctl.config import get_settings
    from gymctl.crypto import billing_cipher
    from gymctl.db import session_factory, session_scope
    from gymctl.identity.dev_keys import ensure_signing_key, mint_dev_token
    from gymctl.providers.card_factory import card_provider_from_settings
    from gymctl.providers.identity_admin import identity_admin_from_settings
    from gymctl.providers.mail import mailer_from_settings
    from gymctl.providers.storage import storage_from_settings
    from gymctl.quickstart import (
        DEMO_SLUG,
        demo_invitation,
        demo_logo,
        publish_demo_library,
        seed_demo_gym,
    )

    settings = get_settings()
    settings.check()
    settings.home.mkdir(parents=True, exist_ok=True)
    migrate.upgrade()
    key_created = ensure_signing_key(settings)
    outreach = Outreach(
        settings,
        mailer_from_settings(settings),
        identity_admin_from_settings(settings, session_factory()),
    )
    with session_scope() as session:
        demo = seed_demo_gym(session, now=clock.now())
        invited = demo_invitation(session, outreach, demo, now=clock.now())
        logo = demo_logo(
            session,
            storage_from_settings(settings),
            demo,
            now=clock.now(),
            max_bytes=settings.max_brand_asset_bytes,
        )
        member = membership_of(session, demo.organization.id, demo.people[2][0].id)
        billing = seed_demo_billing(
            session,
            card_provider_from_settings(settings),
            billing_cipher(settings),
            home=settings.home,
            organization_id=demo.organization.id,
            member=member,
            now=clock.now(),
        )
        people = [
            {"identityId": user.identity_id, "email": user.email, "role": role.value}
            for user, role in demo.people
        ]
        organization = {"id": str(demo.organization.id), "name": demo.organization.name}
    branding = publish_demo_brand(
        session_factory(),
        storage_from_settings(settings),
        settings,
        demo.organization.id,
        DEMO_SLUG,
        now=clock.now(),
    )
    minisite = minisite_url(settings, DEMO_SLUG)
    library = publish_demo_library(storage_from_settings(settings))
    sweeps = run_daemons(None, once=True, settings=settings)
    token = mint_dev_token(settings, "user_demo_owner", now=clock.now())
    curl = f'curl -s -H "Authorization: Bearer {token}" http://127.0.0.1:{port}/users/me'
    if as_json:
        print_json(
            {
                "home": str(settings.home.resolve()),
                "database": settings.resolved_database_url,
                "revision": migrate.current(),
                "organization": organization,
                "people": people,
                "invitation": invited,
                "logo": logo,
                "branding": branding,
                "billing": billing,
                "minisite": minisite,
                "movementLibrary": library,
                "mailbox": str(settings.mailbox_path.resolve()),
                "sweeps": [sweep.as_row() for sweep in sweeps],
                "token": token,
                "curl": curl,
            }
        )
        return
    console.print(
        Panel.fit(
            f"home      {settings.home.resolve()}\n"
            f"database  {settings.resolved_database_url} (revision {migrate.current()})\n"
            f"gym       {organization['name']} ({organization['id']})"
            + ("" if demo.created else "  [dim]already seeded[/dim]")
            + ("\nkey       local signing key created" if key_created else ""),
            title="gymctl quickstart",
        )
    )
    render_rows(people, ["identityId", "email", "role"], title="demo people")
    if invited:
        console.print(
            f"invitation: owner invited {invited['email']} as {invited['role']}; the email is in "
            f"{settings.mailbox_path.resolve()}; the coach signed up and it was "
            f"{invited['status']} (membership {invited['membership']})",
            highlight=False,
        )
    if billing:
        console.print(
            "billing: the demo gym takes cards through the sandbox provider (terminal 1000); "
            f"Dana's monthly renewal ({billing['subscriptionId']}) was due and the catch-up "
            "sweep below charged it once",
            highlight=False,
        )
    if logo:
        console.print(
            f"member-app logo: background removed, stored at {settings.resolved_storage_url}"
            f"/{logo['key']} ({logo['width']}x{logo['height']}, {logo['bytes']} bytes)",
            highlight=False,
        )
    if branding:
        render_rows(
            branding["results"], ["channel", "result", "revision"], title="demo brand published"
        )
    render_rows(
        [sweep.as_row() for sweep in sweeps], ["job", "status", "result"], title="sweeps run once"
    )
    console.print(
        f"movement library file in storage: {library} "
        f"(seed it with: gymctl movements seed {library} --operator user_demo_owner)",
        highlight=False,
    )
    console.print("\nStart the API:  [bold]gymctl serve[/bold]   then, in another terminal:\n")
    print(curl)  # noqa: T201
    console.print(f"\nThe demo gym's minisite (while serving):  {minisite}", highlight=False)
    console.print(
        "\nOther people: [bold]gymctl users dev-token user_demo_coach[/bold]", highlight=False
    )
