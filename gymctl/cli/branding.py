"""`gymctl branding ...`: the brand workspace from the command line, the same domain functions
as the HTTP routes (operator actions carry no actor)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gymctl import clock
from gymctl.cli import codes
from gymctl.cli.inputs import read_given
from gymctl.cli.output import JSON, console, print_json, render_rows
from gymctl.errors import DomainError, invalid, not_found

app = typer.Typer(no_args_is_help=True)
ORG = typer.Argument(..., help="Organization id or slug.")
CHANNEL = typer.Argument(..., help="brand, website or app.")


def _palette_options(
    primary: str, secondary, button, card, background, dark_card, dark_background
) -> dict[str, str]:
    given = {
        "primaryColor": primary,
        "secondaryColor": secondary,
        "buttonColor": button,
        "cardColor": card,
        "backgroundColor": background,
        "darkCardColor": dark_card,
        "darkBackgroundColor": dark_background,
    }
    return {name: value for name, value in given.items() if value is not None}


COLOUR = {"help": "#RRGGBB; derived when left out."}


@app.command("derive")
def derive_command(
    primary: str = typer.Argument(..., help="primaryColor, #RRGGBB."),
    secondary: str | None = typer.Option(None, "--secondary", **COLOUR),
    button: str | None = typer.Option(None, "--button", **COLOUR),
    card: str | None = typer.Option(None, "--card", **COLOUR),
    background: str | None = typer.Option(None, "--background", **COLOUR),
    dark_card: str | None = typer.Option(None, "--dark-card", **COLOUR),
    dark_background: str | None = typer.Option(None, "--dark-background", **COLOUR),
    as_json: bool = JSON,
) -> None:
    """The published brand a palette would give, with every text role's contrast ratio."""
    from gymctl.branding.derive import brand as derive_brand
    from gymctl.branding.derive import contrast_report
    from gymctl.branding.palette import Palette

    palette = Palette.parse(
        _palette_options(primary, secondary, button, card, background, dark_card, dark_background)
    )
    tokens = derive_brand(palette)
    ratios = contrast_report(tokens)
    if as_json:
        print_json({"brand": tokens, "contrast": ratios})
        return
    rows = [
        {"role": role, "light": tokens["light"][role], "dark": tokens["dark"][role]}
        | {"light ratio": ratios["light"].get(role), "dark ratio": ratios["dark"].get(role)}
        for role in tokens["light"]
    ]
    render_rows(rows, ["role", "light", "light ratio", "dark", "dark ratio"], title="brand")


@app.command("palette")
def palette_command(
    organization: str = ORG,
    primary: str = typer.Option(..., "--primary", help="primaryColor, #RRGGBB."),
    secondary: str | None = typer.Option(None, "--secondary", **COLOUR),
    button: str | None = typer.Option(None, "--button", **COLOUR),
    card: str | None = typer.Option(None, "--card", **COLOUR),
    background: str | None = typer.Option(None, "--background", **COLOUR),
    dark_card: str | None = typer.Option(None, "--dark-card", **COLOUR),
    dark_background: str | None = typer.Option(None, "--dark-background", **COLOUR),
    name: str | None = typer.Option(None, "--name", help="The brand's name (default: kept)."),
    as_json: bool = JSON,
) -> None:
    """Save the brand draft's palette (and name); logos are kept. Nothing goes live."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import workspace
    from gymctl.config import get_settings
    from gymctl.db import session_scope
    from gymctl.providers.storage import storage_from_settings

    settings = get_settings()
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        workspace.save_brand_draft(
            session,
            storage_from_settings(settings),
            gym.id,
            palette=_palette_options(
                primary, secondary, button, card, background, dark_card, dark_background
            ),
            name=name if name is not None else workspace.KEEP,
            actor_user_id=None,
            now=clock.now(),
        )
        state = workspace.channel(session, gym.id, "brand")
    _show_channel(state, as_json)


@app.command("website")
def website_command(
    organization: str = ORG,
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Content JSON."),
    as_json: bool = JSON,
) -> None:
    """Save the website's draft content (a new revision) from a JSON file."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import workspace
    from gymctl.branding.website import MAX_CONTENT_BYTES
    from gymctl.db import session_scope
    from gymctl.jsondepth import MAX_DEPTH, depth

    raw = read_given(file, "FILE", limit=MAX_CONTENT_BYTES)
    if len(raw) > MAX_CONTENT_BYTES:
        raise invalid(codes.WEBSITE_CONTENT_INVALID, f"{file} is over {MAX_CONTENT_BYTES} bytes")
    if depth(raw) > MAX_DEPTH:  # the parser recurses: deeper is a crash, not an answer
        raise invalid(codes.WEBSITE_CONTENT_INVALID, f"{file} nests deeper than {MAX_DEPTH} levels")
    try:
        content = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise invalid(codes.WEBSITE_CONTENT_INVALID, f"{file} is not JSON") from None
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        workspace.save_website_draft(
            session, gym.id, content=content, actor_user_id=None, now=clock.now()
        )
        state = workspace.channel(session, gym.id, "website")
    _show_channel(state, as_json)


def _show_channel(state: dict, as_json: bool) -> None:
    if as_json:
        print_json(state)
        return
    console.print(
        f"{state['channel']}: {'pending' if state['pending'] else 'up to date'}"
        f" ({'live' if state['live'] else 'not live'})",
        highlight=False,
    )


@app.command("workspace")
def workspace_command(organization: str = ORG, as_json: bool = JSON):
    """The three channels with their pending flags."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import workspace
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        view = workspace.workspace(session, gym.id)
    if as_json:
        print_json(view)
        return
    brand, website, app_ = view["channels"]
    live = {
        "brand": brand["published"]["revision"] if brand["published"] else None,
        "website": website["publishedContentRevision"],
        "app": app_["version"],
    }
    render_rows(
        [
            {"channel": c["channel"], "pending": c["pending"], "live": live[c["channel"]]}
            for c in view["channels"]
        ],
        ["channel", "pending", "live"],
        title=f"brand workspace of {gym.name} (live: revision or version)",
    )


@app.command("publish")
def publish_command(
    organization: str = ORG,
    channel: list[str] | None = typer.Option(
        None, "--channel", help="Repeat; run in the order brand, website, app (default: all)."
    ),
    as_json: bool = JSON,
) -> int:
    """Publish, verify each channel with a fresh read, stop at the first failure (exit 1)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import minisites, publishing, workspace
    from gymctl.config import get_settings
    from gymctl.db import session_factory, session_scope
    from gymctl.providers.storage import storage_from_settings

    channel = channel or list(workspace.CHANNELS)
    settings = get_settings()
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        gym_id, slug = gym.id, gym.slug
    results = publishing.publish_channels(
        session_factory(),
        storage_from_settings(settings),
        gym_id,
        channel,
        actor_user_id=None,
        now=clock.now(),
    )
    rows = [r.as_json() for r in results]
    completed = all(r.result == "verified" for r in results)
    if as_json:
        print_json({"results": rows, "completed": completed})
    else:
        render_rows(rows, ["channel", "result", "revision", "code", "durationMs"], title="publish")
        if completed and "website" in channel:
            console.print(f"minisite: {minisites.minisite_url(settings, slug)}", highlight=False)
    return 0 if completed else 1


@app.command("unpublish")
def unpublish_command(
    organization: str = ORG, channel: str = CHANNEL, as_json: bool = JSON
) -> None:
    """Take a channel's live revision down."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import publishing, workspace
    from gymctl.db import session_scope

    step = {
        "brand": publishing.unpublish_brand,
        "website": publishing.unpublish_website,
        "app": publishing.unpublish_app,
    }.get(channel)
    if step is None:
        raise not_found(codes.CHANNEL_UNKNOWN, "channels: brand, website, app")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        step(session, gym.id, actor_user_id=None, now=clock.now())
        state = workspace.channel(session, gym.id, channel)
    _show_channel(state, as_json)


@app.command("restore")
def restore_command(
    organization: str = ORG,
    channel: str = CHANNEL,
    revision: int | None = typer.Option(
        None,
        "--revision",
        min=1,
        max=2**31 - 1,  # the column's range: a larger one answered a crash
        help="A published revision (app: version); default: the live one.",
    ),
    as_json: bool = JSON,
) -> None:
    """Bring a published revision back into the draft (publish it to make it live)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import publishing, workspace
    from gymctl.config import get_settings
    from gymctl.db import session_scope
    from gymctl.providers.storage import storage_from_settings

    if channel not in workspace.CHANNELS:
        raise not_found(codes.CHANNEL_UNKNOWN, "channels: brand, website, app")
    store = storage_from_settings(get_settings())
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        common = {"actor_user_id": None, "now": clock.now()}
        if channel == "brand":
            publishing.restore_brand(session, store, gym.id, revision=revision, **common)
        elif channel == "website":
            publishing.restore_website(session, gym.id, revision=revision, **common)
        else:
            publishing.restore_app(session, store, gym.id, version=revision, **common)
        state = workspace.channel(session, gym.id, channel)
    _show_channel(state, as_json)


@app.command("show")
def show_command(
    organization: str = ORG,
    schema: str = typer.Option("4", "--schema", help="1 to 4 (what an installed app asks)."),
    as_json: bool = typer.Option(
        True, "--json", help="Accepted for uniformity: this read is JSON either way."
    ),
) -> None:
    """The public branding read (JSON), exactly as GET /public/organizations/:id/branding."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding.published import public_branding
    from gymctl.db import session_scope
    from gymctl.versioning import payload_schema

    version = payload_schema(schema, parameter="schema")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        print_json(
            {"organizationId": str(gym.id), **public_branding(session, gym.id, gym.name, version)}
        )


@app.command("minisite")
def minisite_command(organization: str = ORG, as_json: bool = JSON):
    """The minisite's address, host and whether it is live."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.branding import minisites
    from gymctl.config import get_settings
    from gymctl.db import session_scope

    settings = get_settings()
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        try:
            minisites.site_state(session, gym.slug)
            status = "published"
        except DomainError as negative:
            status = negative.code
        info = {
            "url": minisites.minisite_url(settings, gym.slug),
            "host": f"{gym.slug}.{settings.minisite_domain}",
            "status": status,
        }
    if as_json:
        print_json(info)
    else:
        console.print(f"{info['url']}  ({info['status']}; host {info['host']})", highlight=False)
