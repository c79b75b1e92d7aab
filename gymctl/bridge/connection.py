"""The organization's connection to the external system (spec B 2.6, 5).

The api-key is pasted once and checked with a real call: a 401 there is a clear refusal and
nothing is stored. A check that cannot finish (the external system is down) keeps the key,
encrypted, as a pending connection the dispatcher checks again. The key exists in plaintext
only in memory, for the calls; it is never written to a job config, a log line or an event.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, exists, func, select, update
from sqlalchemy.orm import Session

from gymctl.bridge import codes, entity_map, queue
from gymctl.bridge.client import (
    CallFailure,
    ConnectionPool,
    ExternalCallError,
    ExternalGymClient,
    Throttle,
    user_pages,
)
from gymctl.config import Settings
from gymctl.crypto import FieldCipher, Keyring
from gymctl.db import (
    READ_ONLY,
    is_postgres,
    locked_row,
    release_for_outside_call,
    session_lock,
    transaction_lock,
)
from gymctl.errors import DomainError, bad_gateway, conflict, invalid, not_found, unavailable
from gymctl.events import EventKind, emit
from gymctl.identity.users import address_keys
from gymctl.models import Membership, MembershipStatus, Organization, Role, User
from gymctl.models.bridge import (
    EXTERNAL_GYM,
    WAITING,
    ConnectionStatus,
    EntityLink,
    EntityType,
    IntegrationConnection,
    OpStatus,
    Origin,
    RosterEntry,
    SyncOp,
)
from gymctl.models.integrity import UniqueViolation, unique_violation

logger = logging.getLogger("gymctl.bridge")

CREDENTIALS = {"table": "integration_connections", "column": "credentials_ciphertext"}
KEY_SETTING = "GYMCTL_BRIDGE_CREDENTIALS_KEY"
ACTIVE_ACCOUNT = "uq_integration_connections_active_account"
MAX_KEY_CHARS = 256


def _cipher(settings: Settings) -> FieldCipher:
    if settings.bridge_credentials_key is None:
        raise unavailable(codes.BRIDGE_NOT_CONFIGURED, f"{KEY_SETTING} is not set")
    return FieldCipher(
        Keyring.parse(settings.bridge_credentials_key.get_secret_value(), setting=KEY_SETTING)
    )


def _base_url(settings: Settings) -> str:
    if not settings.bridge_api_url:
        raise unavailable(
            codes.BRIDGE_DISABLED, "the bridge is disabled (GYMCTL_BRIDGE_API_URL is unset)"
        )
    return settings.bridge_api_url


def find_connection(session: Session, organization_id: uuid.UUID) -> IntegrationConnection | None:
    return session.scalar(
        select(IntegrationConnection).where(
            IntegrationConnection.organization_id == organization_id
        )
    )


# How long a disconnect waits for the call in flight, and a dispatcher for a disconnect's
# commit: well past a call's longest (the dispatcher's Policy.timeout, 10 s).
CALLS_WAIT_SECONDS = 30.0


def _calls(organization_id: uuid.UUID) -> tuple[str, str]:
    """The names of the gate to the organization's calls lock, and of the lock."""
    return f"bridge:calls-gate:{organization_id}", f"bridge:calls:{organization_id}"


@contextmanager
def calls_held(bind: Engine | Connection, organization_id: uuid.UUID) -> Iterator[bool]:
    """The dispatcher's side, around each call (from its check that the gym is still
    connected to the call's answer): the organization's calls lock, which a disconnect takes
    until it commits, so once one has committed no call of the gym is in flight or leaves
    after it. False if a disconnect held it CALLS_WAIT_SECONDS. The lock is taken through a
    gate a disconnect holds while it waits: a dispatcher sending call after call takes the
    lock back within a moment of each answer, and the disconnect, trying now and then,
    waited out the whole run. `bind`: the dispatcher's session's (session_lock)."""
    gate, lock = _calls(organization_id)
    with ExitStack() as held:
        with session_lock(bind, gate, wait_seconds=CALLS_WAIT_SECONDS) as passed:
            calls = passed and held.enter_context(
                session_lock(bind, lock, wait_seconds=CALLS_WAIT_SECONDS)
            )
        yield calls is not None


class Disconnected(Exception):
    """The organization was disconnected (or its key replaced) while a run of it held the
    old key: no further call leaves with it."""


LIVE = (ConnectionStatus.active, ConnectionStatus.pending)
# The connection's status and key, and the stored payload of an op about to call (none:
# NULL), in one read.
_STATUS = select(
    IntegrationConnection.status,
    IntegrationConnection.credentials_ciphertext,
    select(SyncOp.payload).where(SyncOp.id == bindparam("op_id")).scalar_subquery(),
).where(IntegrationConnection.id == bindparam("connection_id"))


@contextmanager
def connected_calls(
    session: Session,
    connection: IntegrationConnection,
    key: str | None,
    *,
    payload_of: uuid.UUID | None = None,
) -> Iterator[dict[str, Any] | None]:
    """Around each call with the key `key` (the ciphertext the client was opened from): the
    session's transaction, if it began one, is committed (never one open across a call);
    then, under the organization's calls lock to the call's answer (calls_held), the
    connection is read again, and Disconnected is raised unless it is still connected with
    that key: once a disconnect (or a new key) has committed, no call leaves with the old
    one. Yields the stored payload of the op `payload_of` names (None without one)."""
    session.commit()
    bind = session.get_bind()  # a dispatcher's: the organization lock's connection
    joined = isinstance(bind, Connection) and bind.in_transaction()
    with calls_held(bind, connection.organization_id) as held:
        if not held:  # a disconnect has held it that long
            raise Disconnected("a disconnect holds the organization's calls")
        params = {"connection_id": connection.id, "op_id": payload_of}
        if joined or is_postgres(session):
            row = session.execute(_STATUS, params).one_or_none()
            session.commit()
        else:
            # SQLite: the session's transaction would begin with the write lock, which a
            # disconnect may hold while it waits for this call (unless the session joined
            # its caller's transaction, which holds what it holds).
            with bind.engine.connect() as reader:
                reader.execution_options(**READ_ONLY)
                row = reader.execute(_STATUS, params).one_or_none()
        status, stored_key, stored = row or (None, None, None)
        if status not in LIVE:
            raise Disconnected(f"the connection is {status.value if status else 'gone'}")
        if stored_key != key:
            raise Disconnected("the connection's key was replaced")
        yield stored


def still_connected(session: Session, connection: IntegrationConnection, key: str | None) -> bool:
    """The connection read again under its row lock (a transaction left open for the write
    that follows): still connected with the key `key` (the ciphertext a client was opened
    from). A disconnect or a new key committed since stands: what an answer to the old key
    says is not written over it."""
    locked_row(session, IntegrationConnection, connection.id)
    return connection.status in LIVE and connection.credentials_ciphertext == key


def on_account(session: Session, connection: IntegrationConnection, account: str | None) -> bool:
    """The connection read again under its row lock (a transaction left open for the write
    that follows): still on the external account `account`, the one a run's answers came
    from. A switch committed since (`_switched`) forgot the links made there: the ids the old
    account answered name no one, or a stranger, at the new one, and are not written."""
    locked_row(session, IntegrationConnection, connection.id)
    return connection.external_account_id == account


def stop_calls(session: Session, organization_id: uuid.UUID) -> bool:
    """The disconnect's side (calls_held): the gate, then the calls lock once the call in
    flight is answered, both to the end of the session's transaction; False if either was
    held past CALLS_WAIT_SECONDS."""
    gate, lock = _calls(organization_id)
    return transaction_lock(session, gate, wait_seconds=CALLS_WAIT_SECONDS) and transaction_lock(
        session, lock, wait_seconds=CALLS_WAIT_SECONDS
    )


def require_connection(session: Session, organization_id: uuid.UUID) -> IntegrationConnection:
    connection = find_connection(session, organization_id)
    if connection is None:
        raise not_found(codes.BRIDGE_NOT_CONNECTED, "the organization has no bridge connection")
    return connection


def open_client(
    connection: IntegrationConnection,
    settings: Settings,
    throttle: Throttle,
    timeout: float,
    pool: ConnectionPool | None = None,
) -> ExternalGymClient:
    if connection.credentials_ciphertext is None:
        raise conflict(codes.BRIDGE_NOT_CONNECTED, "the connection holds no api-key")
    api_key = _cipher(settings).decrypt(
        connection.credentials_ciphertext, row_id=str(connection.id), **CREDENTIALS
    )
    return ExternalGymClient(
        _base_url(settings),
        api_key,
        throttle=throttle,
        timeout=timeout,
        account_id=connection.external_account_id,
        pool=pool,
    )


@dataclass(frozen=True)
class Account:
    external_account_id: str
    bridge_membership_type_id: str


def check_account(client: ExternalGymClient, membership_type_id: str | None) -> Account:
    """Two reads: the locations name the account, the membership types hold the free
    non-recurring bridge type (named, or the only such type)."""
    locations = client.locations()
    if not locations:
        raise conflict(codes.BRIDGE_ACCOUNT_EMPTY, "the external account has no location")
    account = str(locations[0].get("box_id"))
    free = [
        str(kind["id"])
        for kind in client.membership_types()
        if not kind.get("price") and not kind.get("is_recurring")
    ]
    if membership_type_id is not None:
        if membership_type_id not in free:
            raise conflict(
                codes.BRIDGE_MEMBERSHIP_TYPE_INVALID,
                "that membership type is not a free non-recurring type of the account",
            )
        return Account(account, membership_type_id)
    if not free:
        raise conflict(
            codes.BRIDGE_MEMBERSHIP_TYPE_MISSING,
            "create a free non-recurring membership type at the external system first",
        )
    if len(free) > 1:
        raise conflict(
            codes.BRIDGE_MEMBERSHIP_TYPE_AMBIGUOUS,
            "several free non-recurring membership types: name one (bridgeMembershipTypeId)",
            candidates=free,
        )
    return Account(account, free[0])


def connect(
    session: Session,
    organization_id: uuid.UUID,
    api_key: str,
    *,
    settings: Settings,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    membership_type_id: str | None = None,
    timeout: float = 10.0,
    switch_account: bool = False,
) -> IntegrationConnection:
    """Check the key with real calls, then store it encrypted (active, or pending when the
    external system could not answer). A refused key (401) stores nothing. A key of another
    external account than the gym's links name is refused unless `switch_account` (activate)."""
    api_key = api_key.strip()
    # Sent as the api-key header: printable ASCII only (a header carries no other character;
    # one the header cannot encode reached the HTTP client and answered 500).
    if not api_key or len(api_key) > MAX_KEY_CHARS or not all("!" <= ch <= "~" for ch in api_key):
        raise invalid(codes.BRIDGE_KEY_MALFORMED, "the api-key is empty or malformed")
    cipher = _cipher(settings)
    client = ExternalGymClient(
        _base_url(settings),
        api_key,
        throttle=Throttle(settings.bridge_rate, taking_over=False),
        timeout=timeout,
    )
    account: Account | None = None
    problem: str | None = None
    release_for_outside_call(session)  # the key check holds no write lock (decisions s41)
    with client:
        try:
            account = check_account(client, membership_type_id)
        except ExternalCallError as error:
            if error.kind == CallFailure.unauthorized:
                raise invalid(
                    codes.BRIDGE_KEY_INVALID,
                    "the external system refused the api-key (401)",
                ) from None
            if not error.transient and error.kind != CallFailure.rate_limited:
                raise bad_gateway(
                    codes.BRIDGE_CHECK_FAILED, f"the key check failed: {error}"
                ) from None
            problem = str(error)
    connection = find_connection(session, organization_id)
    if connection is None:
        connection = IntegrationConnection(id=uuid.uuid4(), organization_id=organization_id)
        session.add(connection)
    connection.credentials_ciphertext = cipher.encrypt(
        api_key, row_id=str(connection.id), **CREDENTIALS
    )
    if switch_account and account is None:
        # Kept pending, the switch would be checked later without the owner's word.
        raise conflict(
            codes.BRIDGE_SWITCH_UNCHECKED,
            f"the external system did not answer the key check ({problem}): switching a gym "
            "to another account needs it; nothing was stored, try again",
        )
    if account is not None:
        activate(
            session,
            connection,
            account,
            now=now,
            switch_account=switch_account,
            actor_user_id=actor_user_id,
        )
    else:
        connection.status = ConnectionStatus.pending
        connection.last_error = f"key check unfinished: {problem}"
        connection.bridge_membership_type_id = membership_type_id
    connection.disconnected_at = None
    connection.updated_at = now
    try:
        with unique_violation(ACTIVE_ACCOUNT):
            session.flush()
    except UniqueViolation:
        raise account_in_use() from None  # another gym's connect won the race
    emit(
        session,
        EventKind.audit,
        "bridge.connected",
        at=now,
        aggregate_type="integration_connection",
        aggregate_id=connection.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"status": connection.status.value, "provider": connection.provider},
    )
    return connection


def activate(
    session: Session,
    connection: IntegrationConnection,
    account: Account,
    *,
    now: datetime,
    switch_account: bool = False,
    actor_user_id: uuid.UUID | None = None,
) -> None:
    """The checked account becomes the connection's; 409 bridge_account_in_use when another
    gym is active on it (its members would be written into that gym's system, and its roster
    imported as this gym's). The database holds the rule too (one active gym per account).
    Another account than the one the gym's links were made with is `_switched` to only when
    asked."""
    in_use = session.scalar(
        select(IntegrationConnection.id).where(
            IntegrationConnection.provider == (connection.provider or EXTERNAL_GYM),
            IntegrationConnection.external_account_id == account.external_account_id,
            IntegrationConnection.status == ConnectionStatus.active,
            IntegrationConnection.id != connection.id,
        )
    )
    if in_use is not None:
        raise account_in_use()
    previous = connection.external_account_id
    if previous is not None and previous != account.external_account_id:
        _switched(session, connection, account, asked=switch_account, now=now, actor=actor_user_id)
    connection.status = ConnectionStatus.active
    connection.external_account_id = account.external_account_id
    connection.bridge_membership_type_id = account.bridge_membership_type_id
    connection.last_error = None
    connection.connected_at = now
    connection.schedule_poll_due_at = now
    connection.reconcile_due_at = now
    connection.updated_at = now


_SENT_OR_GONE = (OpStatus.succeeded, OpStatus.superseded, OpStatus.dismissed)


def _switched(
    session: Session,
    connection: IntegrationConnection,
    account: Account,
    *,
    asked: bool,
    now: datetime,
    actor: uuid.UUID | None,
) -> None:
    """The gym connects another external account than its links were made with (the key of
    another gym pasted by mistake, or the gym moved accounts there). Its entity map names the
    old account's classes, users, memberships and bookings: kept, the first poll took every
    linked class missing from the new schedule for one removed there and cancelled it with
    its members' seats, and a member's change went to the id the old account gave, which at
    the new one names no one or a stranger. So it is 409 bridge_account_changed, nothing
    written, unless the owner asks to switch: the old links and the history of the ops sent
    there are forgotten (audited, counted), and the gym starts over as at a first connect:
    each member, plan and seat goes to the new account at its next change (a member searched
    for first), or is linked by the roster import; classes link at the next schedule poll.
    As at a disconnect, the call in flight with the old key is waited for (stop_calls) and
    the old account's stored roster is purged (an import matched addresses against both
    accounts' rosters, linking members to the old one's users); an answer of the old account
    held by a run is not written (the dispatcher's `on_account` check)."""
    gym = connection.organization_id
    counts = dict(
        session.execute(
            select(EntityLink.entity_type, func.count())
            .where(EntityLink.organization_id == gym)
            .group_by(EntityLink.entity_type)
        ).all()
    )
    if not counts:
        return  # nothing was linked to the old account: nothing to mistake
    if not asked:
        raise conflict(
            codes.BRIDGE_ACCOUNT_CHANGED,
            "this key is of another external account than the one the gym's links were made "
            "with: connecting it would cancel the gym's classes and write its members' changes "
            "to the wrong people; to move the gym to this account, connect with switchAccount "
            "(--switch-account), which forgets the old account's links",
            links=sum(counts.values()),
        )
    if not stop_calls(session, gym):
        logger.warning(
            "bridge account switch of organization %s: a call held it for %.0f s; switched anyway",
            gym,
            CALLS_WAIT_SECONDS,
        )
    session.execute(delete(EntityLink).where(EntityLink.organization_id == gym))
    roster = session.execute(delete(RosterEntry).where(RosterEntry.organization_id == gym))
    # What was sent there: kept, the mirror read each member as created and each plan and
    # seat as sent, and sent the new account nothing. Without it the gym starts over as at a
    # first connect; ops still to send (or parked) stay, to go to the new account.
    history = session.execute(
        delete(SyncOp).where(SyncOp.organization_id == gym, SyncOp.status.in_(_SENT_OR_GONE))
    ).rowcount
    _set_apart_counted_keys(session, gym)
    emit(
        session,
        EventKind.audit,
        "bridge.account_switched",
        at=now,
        aggregate_type="integration_connection",
        aggregate_id=connection.id,
        organization_id=connection.organization_id,
        actor_user_id=actor,
        payload={
            "from": connection.external_account_id,
            "to": account.external_account_id,
            "linksForgotten": {str(kind): count for kind, count in counts.items()},
            "opsForgotten": history,
            "rosterPurged": roster.rowcount,
        },
    )


# The mirror's dedupe keys that end in the count of the entity's ops (bridge.mirror): every
# one but a member's create, which is read by its exact key.
_COUNTED_KEY = ~SyncOp.dedupe_key.startswith("user.create:")
_SWITCH_MARK = ":switch-"


def _set_apart_counted_keys(session: Session, organization_id: uuid.UUID) -> None:
    """The ops a switch keeps take a mark of that switch on their counted dedupe keys. The
    mirror keys an entity's next op by how many ops it has; with the history forgotten
    those counts fall back, and a new change keyed as an op kept from before was taken for
    it (queue.enqueue answers an existing key with its op): a seat booked again after the
    switch was never sent. A key marked by an earlier switch is apart already."""
    mark = f"{_SWITCH_MARK}{uuid.uuid4().hex[:12]}"
    session.execute(
        update(SyncOp)
        .where(
            SyncOp.organization_id == organization_id,
            SyncOp.dedupe_key.is_not(None),
            _COUNTED_KEY,
            ~SyncOp.dedupe_key.contains(_SWITCH_MARK),
        )
        .values(dedupe_key=SyncOp.dedupe_key + mark)
        .execution_options(synchronize_session=False)
    )


def account_in_use() -> DomainError:
    """409 bridge_account_in_use. Which gym holds the account is not said: another tenant's."""
    return conflict(
        codes.BRIDGE_ACCOUNT_IN_USE,
        "that external account is connected to another gym: disconnect it there first",
    )


def disconnect(
    session: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    because: str | None = None,
) -> IntegrationConnection:
    """Revoke: the key and the stored external roster are purged. Queued ops stay (nothing is
    lost); they are sent again only after a new connect. `because`: why, when no one asked.
    A call in flight is waited for (stop_calls): none is made once this commits. A dispatcher
    stuck past CALLS_WAIT_SECONDS in a call does not keep the gym connected: that call is
    its last (it checks the status before each)."""
    if not stop_calls(session, organization_id):
        logger.warning(
            "bridge disconnect of organization %s: a call held it for %.0f s; disconnected anyway",
            organization_id,
            CALLS_WAIT_SECONDS,
        )
    connection = require_connection(session, organization_id)
    connection.status = ConnectionStatus.revoked
    connection.credentials_ciphertext = None
    connection.disconnected_at = now
    connection.schedule_poll_due_at = None
    connection.reconcile_due_at = None
    connection.updated_at = now
    purged = session.execute(
        delete(RosterEntry).where(RosterEntry.organization_id == organization_id)
    ).rowcount
    emit(
        session,
        EventKind.audit,
        "bridge.disconnected",
        at=now,
        aggregate_type="integration_connection",
        aggregate_id=connection.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"rosterPurged": purged, **({"because": because} if because else {})},
    )
    return connection


ORGANIZATION_DELETED = "organization_deleted"


def wind_down(session: Session, organization_id: uuid.UUID, *, now: datetime) -> bool:
    """Whether the gym was deleted (access.gyms.delete_organization). A deleted gym's bridge
    only sends what is queued: the deletion's own ops (its members' plans and seats given up
    there, their users deactivated: leaving.end_holdings) and any before them. It polls
    nothing (a booking made there would be placed in a gym no one reaches), and it is
    disconnected once no op it can still send is waiting or in flight (one behind a parked op
    waits for an owner no deleted gym has), or at once under a refused or unverified key (no
    owner can paste another): the key is purged, nothing is retried, the account is free for
    another gym. Called at the deletion and by the dispatcher."""
    deleted = session.scalar(
        select(Organization.deleted_at).where(Organization.id == organization_id)
    )
    if deleted is None:
        return False
    # Locked and read as it stands: the deletion and a dispatcher run may meet here, and a
    # status read earlier in the caller's session would disconnect it twice.
    connection = session.scalar(
        select(IntegrationConnection)
        .where(IntegrationConnection.organization_id == organization_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if connection is None or connection.status is ConnectionStatus.revoked:
        return True
    connection.schedule_poll_due_at = connection.reconcile_due_at = None
    unsent = session.scalar(
        select(
            exists().where(
                SyncOp.organization_id == organization_id,
                (SyncOp.status == OpStatus.in_flight)
                | (SyncOp.status.in_(WAITING) & ~queue.blocked()),
            )
        )
    )
    if connection.status is not ConnectionStatus.active or not unsent:
        disconnect(session, organization_id, now=now, because=ORGANIZATION_DELETED)
    return True


def import_roster(
    session: Session, connection: IntegrationConnection, client: ExternalGymClient, *, now: datetime
) -> dict[str, int]:
    """Read the external users into the roster (no phone numbers), then link each platform
    member whose email matches exactly one roster user (origin import). Each page is stored,
    and the members linked, only while the connection still stands as the import found it
    (still_connected): a disconnect committed meanwhile purged the roster, and a page read
    before it is not stored after it (Disconnected; the client's own calls stop at it when
    its caller guards them, connected_calls)."""
    organization_id = connection.organization_id
    key = connection.credentials_ciphertext
    # No transaction open across a call (the embedded default's one write lock; drift's rule):
    # each page is stored and committed before the next is asked for.
    session.commit()
    fetched = 0
    for rows in user_pages(client):
        _still_importing(session, connection, key)
        for row in rows:
            _store_roster_row(session, organization_id, row, now)
            fetched += 1
        session.commit()
    _still_importing(session, connection, key)
    # The external system's addresses meet ours by the project's one rule (address_keys, the
    # database's fold; decisions s48): str.lower() on theirs against SQL lower() on ours found
    # no one for 'Élodie@' on the embedded default (SQLite folds ASCII alone).
    entries = [
        (entry.email, entry.external_id)
        for entry in session.scalars(
            select(RosterEntry).where(RosterEntry.organization_id == organization_id)
        )
        if entry.email
    ]
    members = session.execute(
        select(Membership.id, User.email)
        .join(User, User.id == Membership.user_id)
        .where(
            Membership.organization_id == organization_id,
            Membership.role == Role.member,
            Membership.status == MembershipStatus.active,
        )
    ).all()
    keys = address_keys(
        session, [email for email, _ in entries] + [email for _, email in members if email]
    )
    roster: dict[str, list[str]] = {}
    for email, external_id in entries:
        roster.setdefault(keys[email], []).append(external_id)
    outcome = {"fetched": fetched, "linked": 0, "alreadyLinked": 0, "ambiguous": 0, "unmatched": 0}
    for membership_id, email in members:
        matches = roster.get(keys[email], []) if email else []
        if entity_map.find(session, organization_id, EntityType.member, membership_id):
            outcome["alreadyLinked"] += 1
        elif len(matches) == 1 and not entity_map.find_external(
            session, organization_id, EntityType.member, matches[0]
        ):
            entity_map.link(
                session,
                organization_id,
                EntityType.member,
                platform_id=membership_id,
                external_id=matches[0],
                origin=Origin.import_,
                now=now,
            )
            outcome["linked"] += 1
        else:
            outcome["ambiguous" if len(matches) > 1 else "unmatched"] += 1
    session.commit()
    return outcome


def _still_importing(session: Session, connection: IntegrationConnection, key: str | None) -> None:
    if not still_connected(session, connection, key):
        raise Disconnected("the organization was disconnected during the import")


def _store_roster_row(
    session: Session, organization_id: uuid.UUID, row: dict[str, Any], now: datetime
) -> None:
    external_id = str(row["id"])
    entry = session.scalar(
        select(RosterEntry).where(
            RosterEntry.organization_id == organization_id, RosterEntry.external_id == external_id
        )
    )
    if entry is None:
        entry = RosterEntry(organization_id=organization_id, external_id=external_id)
        session.add(entry)
    # Deliberately no phone: rosters keep none (spec B 2.6).
    entry.first_name = row.get("first_name")
    entry.last_name = row.get("last_name")
    entry.email = row.get("email")
    entry.active = bool(row.get("active", True))
    entry.fetched_at = now


def describe(connection: IntegrationConnection | None) -> dict[str, Any]:
    """The connection as owners and operators see it: never the key or its ciphertext."""
    if connection is None:
        return {"status": "not_connected"}
    return {
        "status": connection.status.value,
        "provider": connection.provider,
        "externalAccountId": connection.external_account_id,
        "bridgeMembershipTypeId": connection.bridge_membership_type_id,
        "lastError": connection.last_error,
        "connectedAt": connection.connected_at.isoformat() if connection.connected_at else None,
        "lastRun": connection.last_run or None,
    }
