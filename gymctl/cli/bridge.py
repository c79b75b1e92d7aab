"""`gymctl bridge ...`: the operators' door to the bridge with the external gym system."""

from __future__ import annotations

import signal
import sys
import threading

import typer

from gymctl import clock
from gymctl.cli.output import JSON, choice, err_console, print_json, render_mapping, render_rows
from gymctl.errors import DomainError

app = typer.Typer(no_args_is_help=True)


@app.command("status")
def status(
    organization: str = typer.Argument(..., help="Organization id or slug."), as_json: bool = JSON
) -> None:
    """Connection, queue depth by status, oldest pending age, parked count, last run."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge import queue
    from gymctl.bridge.connection import describe, find_connection
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        report = {
            "organization": gym.slug,
            "connection": describe(find_connection(session, gym.id)),
            **queue.depth(session, gym.id, now=clock.now()),
        }
    if as_json:
        print_json(report)
        return
    connection = report["connection"]
    last_run = connection.get("lastRun") or {}
    render_mapping(
        {
            "connection": connection["status"],
            "external account": connection.get("externalAccountId"),
            "last error": connection.get("lastError"),
            **{f"queue {name}": count for name, count in report["byStatus"].items()},
            "oldest pending (s)": report["oldestPendingAgeSeconds"],
            "parked": report["parked"],
            "last run": last_run.get("at"),
            "last run sent": last_run.get("succeeded"),
        },
        title=f"bridge of {gym.slug}",
    )


@app.command("ops")
def ops(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    status_filter: str | None = typer.Option(
        None, "--status", help="Only this status: pending, failed, parked, ..."
    ),
    limit: int = typer.Option(100, "--limit", "-n", min=1, max=1000),
    as_json: bool = JSON,
) -> None:
    """The organization's sync ops in queue order (no payloads: they hold personal data)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge import queue
    from gymctl.db import session_scope
    from gymctl.models.bridge import OpStatus

    if status_filter is not None:
        status_filter = choice(OpStatus, status_filter, "--status")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        rows = [
            queue.describe(op)
            for op in queue.list_ops(session, gym.id, status=status_filter, limit=limit)
        ]
    render_rows(
        rows,
        ["id", "opType", "aggregateKey", "status", "attempts", "issueCode", "lastError"],
        title=f"sync ops of {gym.slug}",
        as_json=as_json,
    )


@app.command("retry")
def retry(op_id: int = typer.Argument(..., help="Sync op id."), as_json: bool = JSON) -> None:
    """A parked op (or one backing off) back to pending now."""
    from gymctl.bridge import queue
    from gymctl.db import session_scope

    with session_scope() as session:
        row = queue.describe(queue.retry(session, op_id, now=clock.now()))
    render_mapping(row, title=f"op {op_id}", as_json=as_json)


@app.command("dismiss")
def dismiss(op_id: int = typer.Argument(..., help="Sync op id."), as_json: bool = JSON) -> None:
    """Give a parked op up: never sent, and its aggregate moves on."""
    from gymctl.bridge import queue
    from gymctl.db import session_scope

    with session_scope() as session:
        row = queue.describe(queue.dismiss(session, op_id, now=clock.now()))
    render_mapping(row, title=f"op {op_id}", as_json=as_json)


@app.command("dispatch")
def dispatch(
    once: bool = typer.Option(False, "--once", help="Serve every organization due now, then exit."),
    workers: int = typer.Option(16, "--workers", min=1, max=256, help="Organizations at once."),
    as_json: bool = JSON,
) -> None:
    """Run a dispatcher (any number may run, on any machines) until SIGTERM/SIGINT."""
    from gymctl.bridge.dispatcher import Policy, process_label, run_dispatcher
    from gymctl.config import get_settings
    from gymctl.db import get_engine

    settings = get_settings()
    settings.check()
    if not settings.bridge_api_url:
        raise DomainError("bridge_disabled", "GYMCTL_BRIDGE_API_URL is unset", status=503)
    policy = Policy.from_settings(settings, workers=workers)
    stop = threading.Event()
    if not once and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    engine = get_engine(settings.resolved_database_url)
    summaries = run_dispatcher(
        engine, settings, policy, runner=process_label(), once=once, stop=stop
    )
    render_rows(
        (summary.as_dict() for summary in summaries),
        ["organization_id", "claimed", "succeeded", "failed", "parked", "requests", "stopped"],
        title="bridge dispatch",
        as_json=as_json,
    )


@app.command("connect")
def connect_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    membership_type: str | None = typer.Option(
        None, "--membership-type", help="The free non-recurring bridge membership type's id."
    ),
    as_json: bool = JSON,
) -> None:
    """Read the api-key from standard input (never an argument: shells keep history), check it
    with a real call and store it encrypted."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge.connection import connect, describe
    from gymctl.config import get_settings
    from gymctl.db import session_scope

    api_key = (
        typer.prompt("api-key", hide_input=True) if sys.stdin.isatty() else sys.stdin.readline()
    )
    settings = get_settings()
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        row = describe(
            connect(
                session,
                gym.id,
                api_key,
                settings=settings,
                now=clock.now(),
                membership_type_id=membership_type,
            )
        )
    render_mapping(row, title=f"bridge of {gym.slug}", as_json=as_json)


@app.command("disconnect")
def disconnect_command(
    organization: str = typer.Argument(..., help="Organization id or slug."), as_json: bool = JSON
) -> None:
    """Revoke the connection: the key and the stored external roster are purged."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge.connection import describe, disconnect
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        row = describe(disconnect(session, gym.id, now=clock.now()))
    render_mapping(row, title=f"bridge of {gym.slug}", as_json=as_json)


@app.command("import")
def import_command(
    organization: str = typer.Argument(..., help="Organization id or slug."), as_json: bool = JSON
) -> None:
    """Read the external roster (no phone numbers kept) and link members by email (origin
    import). Waits for the organization's dispatcher to let go, to keep to its rate."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge.client import Throttle
    from gymctl.bridge.connection import import_roster, open_client, require_connection
    from gymctl.bridge.dispatcher import organization_lock
    from gymctl.config import get_settings
    from gymctl.db import get_engine, session_factory, session_scope

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    with session_scope(session_factory(engine)) as session:
        gym_id = resolve_organization(session, organization).id
    with organization_lock(engine, gym_id, wait_seconds=60) as connection:
        if connection is None:
            raise DomainError("bridge_busy", "a dispatcher holds the organization", status=409)
        with session_scope(session_factory(engine)) as session:
            bridge = require_connection(session, gym_id)
            throttle = Throttle(settings.bridge_rate)
            with open_client(bridge, settings, throttle, timeout=10.0) as client:
                outcome = import_roster(session, bridge, client, now=clock.now())
    render_mapping(outcome, title="roster import", as_json=as_json)


@app.command("link")
def link_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    entity_type: str = typer.Argument(..., help="member, schedule, staff, ..."),
    platform_id: str = typer.Argument(..., help="The platform entity's id."),
    external_id: str = typer.Argument(..., help="The external entity's id."),
    as_json: bool = JSON,
) -> None:
    """Link by hand (origin manual), e.g. to settle an identity_conflict before a retry."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge import entity_map
    from gymctl.db import session_scope
    from gymctl.models.bridge import EntityType, Origin

    entity_type = choice(EntityType, entity_type, "ENTITY_TYPE")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        row = entity_map.describe(
            entity_map.link(
                session,
                gym.id,
                entity_type,
                platform_id=platform_id,
                external_id=external_id,
                origin=Origin.manual,
                now=clock.now(),
            )
        )
    if not as_json:
        err_console.print(f"linked {entity_type.value} {platform_id} -> {external_id}")
    render_mapping(row, title="link", as_json=as_json)
