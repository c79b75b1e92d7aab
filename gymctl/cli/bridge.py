"""`gymctl bridge ...`: the operators' door to the bridge with the external gym system."""

from __future__ import annotations

import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

from gymctl import clock
from gymctl.cli import codes
from gymctl.cli.output import JSON, choice, err_console, print_json, render_mapping, render_rows
from gymctl.errors import DomainError, bad_gateway, conflict, forbidden, unavailable
from gymctl.ids import MAX_ROW_ID

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

app = typer.Typer(no_args_is_help=True)
OPERATOR = typer.Option(
    ..., "--operator", help="Your user: database id or identity subject (audited as the actor)."
)


def _operator(session: Session, ref: str) -> uuid.UUID:
    """Every operator write is audited under a real user (spec B 7: 403 without one)."""
    from gymctl.access.trail import resolve_user

    try:
        return resolve_user(session, ref).id
    except DomainError:
        raise forbidden(codes.OPERATOR_UNKNOWN, "--operator names no user") from None


@contextmanager
def _operator_write(
    operator: str, organization: str | None = None
) -> Iterator[tuple[Session, Any, uuid.UUID]]:
    """One transaction of an operator's write: the session, the organization (when one is
    named) and the operator's user id, which the write is audited under."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.db import session_scope

    with session_scope() as session:
        gym = resolve_organization(session, organization) if organization is not None else None
        yield session, gym, _operator(session, operator)


def _op_action(action: str, op_id: int, operator: str, as_json: bool) -> None:
    """retry or dismiss one op (queue.retry, queue.dismiss), audited under the operator. A
    retry of an op queued already succeeds and says so (alreadyQueued), as a repeat should."""
    from gymctl.bridge import queue

    with _operator_write(operator) as (session, _, actor):
        if action == "retry":
            op, queued = queue.retry(session, op_id, now=clock.now(), actor_user_id=actor)
            row = {**queue.describe(op), "alreadyQueued": queued}
        else:
            op = queue.dismiss(session, op_id, now=clock.now(), actor_user_id=actor)
            row = queue.describe(op)
    render_mapping(row, title=f"op {op_id}", as_json=as_json)


@contextmanager
def _locked_client(organization: str) -> Iterator[tuple[Session, Any, Any]]:
    """The organization's connection and a client at its rate, holding its dispatch lock (so
    no dispatcher calls for it meanwhile). The external system failing (down, an error, an
    odd answer) is a refusal naming it, not a crash: what was read and committed stays. Each
    call is a dispatcher's (connected_calls): none leaves once a disconnect has committed,
    which is a refusal too."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge.client import ExternalCallError, Throttle
    from gymctl.bridge.connection import (
        Disconnected,
        connected_calls,
        open_client,
        require_connection,
    )
    from gymctl.bridge.dispatcher import organization_lock
    from gymctl.config import get_settings
    from gymctl.db import get_engine, session_factory, session_scope

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    with session_scope(session_factory(engine)) as session:
        gym_id = resolve_organization(session, organization).id
    with organization_lock(engine, gym_id, wait_seconds=60) as connection:
        if connection is None:
            raise conflict(codes.BRIDGE_BUSY, "a dispatcher holds the organization")
        with session_scope(session_factory(engine)) as session:
            bridge = require_connection(session, gym_id)
            throttle = Throttle(settings.bridge_rate)
            with open_client(bridge, settings, throttle, timeout=10.0) as client:
                key = bridge.credentials_ciphertext
                client.around_call = lambda: connected_calls(session, bridge, key)
                try:
                    yield session, bridge, client
                except ExternalCallError as error:
                    raise bad_gateway(
                        codes.BRIDGE_CALL_FAILED, f"the external system failed: {error}"
                    ) from None
                except Disconnected:
                    raise conflict(
                        codes.BRIDGE_NOT_CONNECTED,
                        "the organization was disconnected meanwhile: nothing more was read",
                    ) from None


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
        None,
        "--status",
        help="pending, in_flight, succeeded, failed, parked, superseded or dismissed.",
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
def retry(
    op_id: int = typer.Argument(..., min=1, max=MAX_ROW_ID, help="Sync op id."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """A parked op (or one backing off) back to pending now."""
    _op_action("retry", op_id, operator, as_json)


@app.command("dismiss")
def dismiss(
    op_id: int = typer.Argument(..., min=1, max=MAX_ROW_ID, help="Sync op id."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Give a parked op up: never sent, and its aggregate moves on."""
    _op_action("dismiss", op_id, operator, as_json)


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
        raise unavailable(codes.BRIDGE_DISABLED, "GYMCTL_BRIDGE_API_URL is unset")
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
    switch_account: bool = typer.Option(
        False,
        "--switch-account",
        help="The key is of another external account than the gym's links: forget them.",
    ),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Read the api-key from standard input (never an argument: shells keep history), check it
    with a real call and store it encrypted."""
    from gymctl.bridge.connection import connect, describe
    from gymctl.config import get_settings

    api_key = (
        typer.prompt("api-key", hide_input=True) if sys.stdin.isatty() else sys.stdin.readline()
    )
    settings = get_settings()
    with _operator_write(operator, organization) as (session, gym, actor):
        row = describe(
            connect(
                session,
                gym.id,
                api_key,
                settings=settings,
                now=clock.now(),
                membership_type_id=membership_type,
                actor_user_id=actor,
                switch_account=switch_account,
            )
        )
        slug = gym.slug  # read in the session: the key check ended the transaction that read it
    render_mapping(row, title=f"bridge of {slug}", as_json=as_json)


@app.command("disconnect")
def disconnect_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Revoke the connection: the key and the stored external roster are purged."""
    from gymctl.bridge.connection import describe, disconnect

    with _operator_write(operator, organization) as (session, gym, actor):
        row = describe(disconnect(session, gym.id, now=clock.now(), actor_user_id=actor))
    render_mapping(row, title=f"bridge of {gym.slug}", as_json=as_json)


@app.command("import")
def import_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Read the external roster (no phone numbers kept) and link members by email (origin
    import). Waits for the organization's dispatcher to let go, to keep to its rate."""
    from gymctl.bridge import inbound
    from gymctl.bridge.connection import import_roster

    with _locked_client(organization) as (session, bridge, client):
        actor = _operator(session, operator)
        outcome = import_roster(session, bridge, client, now=clock.now())
        inbound.audit(session, bridge.organization_id, "bridge.roster_imported", outcome,
                      now=clock.now(), actor_user_id=actor)  # fmt: skip
        session.commit()
    render_mapping(outcome, title="roster import", as_json=as_json)


@app.command("drift")
def drift_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    as_json: bool = JSON,
) -> None:
    """The entity map beside what the external system holds now (members, bridge memberships,
    the poll window's bookings): missing either side, different, orphaned. Ids only."""
    from gymctl.bridge.drift import drift

    with _locked_client(organization) as (session, bridge, client):
        report = drift(session, bridge.organization_id, client, now=clock.now,
                       type_id=bridge.bridge_membership_type_id)  # fmt: skip
    if as_json:
        print_json(report)
        return
    rows = [
        {"area": area, "kind": kind, "count": len(items),
         "ids": ", ".join(str(i.get("externalId", i) if isinstance(i, dict) else i)
                          for i in items[:5])}
        for area, part in report.items() if area != "summary"
        for kind, items in part.items()
    ]  # fmt: skip
    render_rows(rows, ["area", "kind", "count", "ids"], title=f"drift of {organization}")


@app.command("issues")
def issues_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    as_json: bool = JSON,
) -> None:
    """The owner's inbox: parked ops with their candidates, and external changes to settle."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.bridge import inbound, inbox, queue
    from gymctl.db import session_scope
    from gymctl.models.bridge import OpStatus

    with session_scope() as session:
        gym = resolve_organization(session, organization)
        parked = queue.list_ops(session, gym.id, status=OpStatus.parked, limit=1000)
        report = {
            "issues": [inbox.describe(session, op) for op in parked],
            "external": [inbound.describe(issue) for issue in inbound.open_issues(session, gym.id)],
        }
    if as_json:
        print_json(report)
        return
    rows = [
        {"id": op["id"], "issue": op["issueCode"], "candidates": ", ".join(
            c["externalId"] for c in op.get("candidates", []))}
        for op in report["issues"]
    ] + [{"id": i["id"], "issue": i["kind"], "candidates": i["subject"]}
         for i in report["external"]]  # fmt: skip
    render_rows(rows, ["id", "issue", "candidates"], title=f"issues of {gym.slug}")


@app.command("resolve")
def resolve_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    op_id: int = typer.Argument(
        ..., min=1, max=MAX_ROW_ID, help="The parked op (identity_conflict, class_unmatched)."
    ),
    external_id: str = typer.Argument(..., help="The candidate to link."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Link one of a parked op's candidates; the op is sent again."""
    from gymctl.bridge import inbox, queue

    with _operator_write(operator, organization) as (session, gym, actor):
        op = inbox.link(session, gym.id, op_id, external_id, now=clock.now(),
                        actor_user_id=actor, operator=operator)  # fmt: skip
        row = queue.describe(op)
    render_mapping(row, title=f"op {op_id}", as_json=as_json)


@app.command("cutover")
def cutover_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    class_type: uuid.UUID = typer.Argument(..., help="The series' class type."),
    weekday: int = typer.Argument(..., help="Monday 0 .. Sunday 6 (the gym's timezone)."),
    start_time: str = typer.Argument(..., help="HH:MM, the gym's timezone."),
    cutover_on: datetime = typer.Argument(..., formats=["%Y-%m-%d"], help="From this day."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Move a recurring class series' source of truth to the platform from a day on."""
    from gymctl.bridge import cutover

    with _operator_write(operator, organization) as (session, gym, actor):
        row = cutover.describe(
            cutover.set_cutover(
                session,
                gym.id,
                class_type,
                weekday,
                start_time,
                cutover_on.date(),
                now=clock.now(),
                actor_user_id=actor,
                operator=operator,
            )
        )
    render_mapping(row, title="series cutover", as_json=as_json)


@app.command("link-class")
def link_class_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    session_id: uuid.UUID = typer.Argument(..., help="The platform class session."),
    external_class: str = typer.Argument(..., help="The external class (schedule) id."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Link a class session to its external class: its parked bookings are sent again, and
    seats registered at a class linked before move to this one."""
    from gymctl.bridge import classes

    with _operator_write(operator, organization) as (session, gym, actor):
        row = classes.link_class(session, gym.id, session_id, external_class, now=clock.now(),
                                 actor_user_id=actor, operator=operator)  # fmt: skip
    render_mapping(row, title="class linked", as_json=as_json)


@app.command("link")
def link_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    entity_type: str = typer.Argument(..., help="member, schedule, staff, ..."),
    platform_id: str = typer.Argument(..., help="The platform entity's id."),
    external_id: str = typer.Argument(..., help="The external entity's id."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Link by hand (origin manual), e.g. to settle an identity_conflict before a retry. A
    schedule link is a class session's pick of its external class, made as link-class makes
    it (the map alone left the seats registered at the old external class)."""
    from gymctl.bridge import classes, entity_map, inbound
    from gymctl.models.bridge import EntityType, Origin

    entity_type = choice(EntityType, entity_type, "ENTITY_TYPE")
    with _operator_write(operator, organization) as (session, gym, actor):
        entity_map.check_platform_id(session, gym.id, entity_type, platform_id)
        external_id = entity_map.check_external_id(external_id)
        if entity_type is EntityType.schedule:
            row = classes.link_class(session, gym.id, uuid.UUID(platform_id), external_id,
                                     now=clock.now(), actor_user_id=actor,
                                     operator=operator)  # fmt: skip
        else:
            linked = {"entityType": entity_type.value, "platformId": platform_id,
                      "externalId": external_id}  # fmt: skip
            inbound.audit(session, gym.id, "bridge.linked_by_operator", linked,
                          now=clock.now(), actor_user_id=actor)  # fmt: skip
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
