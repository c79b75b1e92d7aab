"""Roster imports over HTTP (spec A 5.3, 8): the request refuses what is refused up front and
queues the rest; the daemons register the rows a chunk per transaction, each chunk's outcomes
stored with it; the import is read back with the CLI's results."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select

from daemons.jobs import JOBS
from gymctl.access import member_imports
from gymctl.access.erasure import erase_personal_data
from gymctl.models import (
    Invitation,
    MemberImport,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
    User,
)
from gymctl.models.organizations import Tier
from gymctl.providers.mail import read_mailbox
from tests import factories
from tests.access.conftest import links_sent, snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

MINUTE = timedelta(minutes=1)


def upload(client, gym, csv, by=Role.owner):
    return client.post(
        f"/organizations/{gym.id}/members/import",
        data=csv,
        headers={**gym[by].headers, "Content-Type": "text/csv"},
    )


def upload_file(client, gym, csv: bytes, by=Role.owner):
    return client.post(
        f"/organizations/{gym.id}/members/import",
        data={"file": (io.BytesIO(csv), "roster.csv")},
        headers=gym[by].headers,
        content_type="multipart/form-data",
    )


def read(client, gym, import_id, by=Role.owner):
    return client.get(
        f"/organizations/{gym.id}/members/import/{import_id}", headers=gym[by].headers
    )


def work(app, session_factory, now=NOW, **options):
    outreach = app.extensions["gymctl"].outreach
    return member_imports.work_imports(session_factory, outreach, now=now, **options)


def roster(*emails):
    return "email,name\n" + "".join(f"{email},Name of {email}\n" for email in emails)


def users(session, *where):
    session.expire_all()
    return session.scalar(select(func.count()).select_from(User).where(*where))


def test_the_request_queues_the_rows_and_registers_no_one(client, gym, session, mailbox):
    before = users(session)
    response = upload(client, gym, roster("a@example.test", "bad", "b@example.test"))

    assert response.status_code == 202
    job = response.json
    assert response.headers["Location"] == f"/organizations/{gym.id}/members/import/{job['id']}"
    assert (job["status"], job["total"], job["done"], job["error"]) == ("queued", 2, 0, None)
    assert job["results"]["members"] == {
        "created": [],
        "existing": [],
        "unverified": [],
        "invalid": [{"row": 3, "reason": "email_invalid"}],  # refused before queueing
    }
    assert users(session) == before
    assert read_mailbox(mailbox) == []


@pytest.mark.parametrize(
    ("csv", "row"),
    [
        ("email,name\nok@example.test,Ok\n\nnot-an-address,Bad\n", 4),  # after a blank line
        ('email,name\nok@example.test,"Ok\nsecond line"\nnot-an-address,Bad\n', 4),  # quoted
        ("email,name\r\n\r\n\r\nnot-an-address,Bad\r\n", 4),  # blank lines, CRLF
    ],
)
def test_a_refusal_names_the_line_of_the_file_it_is_on(client, gym, csv, row):
    """s54 (a hunt): the row numbers counted the records the csv module yields, so a blank
    line (a spreadsheet's empty row) or a quoted line break pointed every later refusal at the
    line before it."""
    response = upload(client, gym, csv)

    assert response.status_code == 202, response.json
    assert response.json["results"]["members"]["invalid"] == [
        {"row": row, "reason": "email_invalid"}
    ]


def test_the_daemon_registers_each_row_as_the_cli_does(app, client, gym, session, session_factory):
    factories.user(session, identity_id="user_unproven", email="unproven@example.test")
    session.commit()
    job = upload(
        client,
        gym,
        roster(
            "new@example.test", "member@iron.example", "unproven@example.test", "New@example.test"
        ),
    ).json

    assert work(app, session_factory) == {
        "imports": 1,
        "created": 1,
        "existing": 1,
        "unverified": 1,
    }

    done = read(client, gym, job["id"]).json
    assert (done["status"], done["done"], done["finishedAt"]) == ("finished", 3, NOW.isoformat())
    assert done["results"]["members"] == {
        "created": ["new@example.test"],
        "existing": ["member@iron.example"],
        "unverified": ["unproven@example.test"],
        "invalid": [{"row": 5, "reason": "duplicate"}],
    }
    created = session.scalar(select(User).where(User.email == "new@example.test"))
    assert (created.identity_id, created.signup_origin) == (None, "import")
    assert work(app, session_factory) == {"imports": 0}


def test_a_large_roster_is_registered_a_chunk_per_transaction_across_passes(
    app, client, gym, session, session_factory, monkeypatch
):
    """A chunk is CHUNK_ROWS rows here: its time bound (CHUNK_SECONDS of the real clock) is
    set out of reach, so a loaded machine does not end a chunk early; each pass's budget reads
    the test's clock."""
    monkeypatch.setattr(member_imports, "CHUNK_SECONDS", 3600.0)
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.elite  # no cap
    session.commit()
    emails = [f"r{n:03}@example.test" for n in range(120)]
    job = upload(client, gym, roster(*emails)).json
    ticks = iter(range(100))

    first = work(app, session_factory, budget_seconds=1.5, monotonic=lambda: next(ticks))

    assert first == {"imports": 1, "created": member_imports.CHUNK_ROWS}
    assert read(client, gym, job["id"]).json["done"] == member_imports.CHUNK_ROWS
    work(app, session_factory, monotonic=lambda: 0.0)  # the budget is never spent
    done = read(client, gym, job["id"]).json
    assert (done["status"], done["done"]) == ("finished", 120)
    assert done["results"]["members"]["created"] == emails  # in CSV order
    assert users(session, User.signup_origin == "import") == 120


def test_members_who_joined_meanwhile_can_fill_the_cap_and_the_import_stops_there(
    app, client, gym, session, session_factory
):
    """The cap is refused up front (spec A 8) and checked again with each chunk: what was
    registered stays, the rest is not imported, and the import says why."""
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter  # 150 active members; the fixture's gym has one
    for n in range(147):
        person = factories.user(session, identity_id=None, email=f"m{n}@example.test")
        factories.membership(session, user=person, organization=organization)
    session.commit()
    job = upload(client, gym, roster("late1@example.test", "late2@example.test")).json
    joined = factories.user(session, identity_id=None, email="walkin@example.test")
    factories.membership(session, user=joined, organization=organization)
    session.commit()  # 149 now: the import's two would make 151

    assert work(app, session_factory) == {"imports": 1, "member_cap_exceeded": 1}

    stopped = read(client, gym, job["id"]).json
    assert (stopped["status"], stopped["error"], stopped["done"]) == (
        "failed",
        {"code": "member_cap_exceeded"},
        0,
    )
    assert users(session, User.email.like("late%")) == 0


def test_a_mail_server_down_holds_no_row_and_the_import_reads_as_for_an_address_without_login(
    settings, session_factory, clock, client, gym, session, mailbox
):
    """Spec A 3: a gym may not learn whether an address has an account. A row whose address
    is a login's asks the person to link; its email goes out after the chunk commits, so a
    mail server down neither holds the row nor names it in the results (the row was held and
    its fourth failure listed as `mail_failed`: the login's address alone). The request waits,
    unsent, for the `link_requests` sweep."""
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    factories.user(
        session, identity_id="user_proven", email="proven@example.test", email_verified_at=NOW
    )
    session.commit()
    job = upload(client, gym, roster("first@example.test", "proven@example.test", "after@x.test"))
    broken = create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=SmtpMailer("smtp://127.0.0.1:1", settings.mail_from),
    )

    assert work(broken, session_factory) == {"imports": 1, "created": 3}

    done = read(client, gym, job.json["id"]).json
    assert (done["status"], done["done"], done["error"]) == ("finished", 3, None)
    members = done["results"]["members"]
    assert members["created"] == ["first@example.test", "proven@example.test", "after@x.test"]
    assert set(members) == {"created", "existing", "unverified", "invalid"}  # nothing failed
    [request] = session.scalars(select(Invitation).where(Invitation.profile_user_id.is_not(None)))
    assert (request.send_count, read_mailbox(mailbox)) == (0, [])
    assert links_sent(client) == {"sent": 1, "failed": 0}
    assert [m["To"] for m in read_mailbox(mailbox)] == ["proven@example.test"]
    assert links_sent(client) == {"sent": 0, "failed": 0}


def test_a_chunk_whose_transaction_is_lost_is_registered_again_once(
    app, client, gym, session, session_factory
):
    job = upload(client, gym, roster("crash@example.test")).json
    crashed = []

    def crash_once(committing):
        if not committing.in_nested_transaction() and not crashed and committing.dirty:
            crashed.append(True)
            raise ConnectionError("the database went away")

    event.listen(session_factory, "before_commit", crash_once)
    try:
        assert work(app, session_factory) == {"imports": 1, "deferred": 1}
    finally:
        event.remove(session_factory, "before_commit", crash_once)
    assert users(session, User.email == "crash@example.test") == 0

    work(app, session_factory, now=NOW + MINUTE)

    assert read(client, gym, job["id"]).json["results"]["members"]["created"] == [
        "crash@example.test"
    ]
    assert users(session, User.email == "crash@example.test") == 1


@pytest.mark.parametrize("change", ["removed", "gym_inactive"])
def test_an_asker_removed_or_a_gym_made_inactive_meanwhile_stops_the_import(
    app, client, gym, session, session_factory, change
):
    job = upload(client, gym, roster("x@example.test"), by=Role.admin).json
    if change == "removed":
        session.get(Membership, gym[Role.admin].membership.id).status = MembershipStatus.cancelled
        code = "permission_denied"
    else:
        session.get(Organization, gym.id).status = OrganizationStatus.inactive
        code = "organization_not_found"
    session.commit()

    assert work(app, session_factory) == {"imports": 1, code: 1}

    session.expire_all()
    stopped = session.get(MemberImport, uuid.UUID(job["id"]))
    assert (stopped.status, stopped.error_code) == ("failed", code)
    assert users(session, User.email == "x@example.test") == 0


def test_a_row_the_gym_erased_while_queued_is_not_registered(
    app, client, gym, session, session_factory
):
    person = factories.user(session, identity_id=None, email="gone@example.test")
    factories.membership(
        session, user=person, organization=gym.organization, status=MembershipStatus.cancelled
    )
    session.commit()
    job = upload(client, gym, roster(" Gone@Example.test", "stays@example.test")).json

    erased = erase_personal_data(
        session, gym.organization, person.id, actor_user_id=gym[Role.owner].user.id, now=NOW
    )
    session.commit()
    work(app, session_factory)

    assert erased["importRows"] == 1
    members = read(client, gym, job["id"]).json["results"]["members"]
    assert members["created"] == ["stays@example.test"]
    [placeholder] = members["erased"]
    assert placeholder.endswith("@erased.invalid")
    assert users(session, func.lower(User.email) == "gone@example.test") == 0


def test_a_fourth_unfinished_import_of_a_gym_waits_for_one_to_finish(
    app, client, gym, session, session_factory
):
    for n in range(member_imports.UNFINISHED_PER_ORGANIZATION):
        assert upload(client, gym, roster(f"q{n}@example.test")).status_code == 202
    before = snapshot(session)

    refused = upload(client, gym, roster("late@example.test"))

    assert (refused.status_code, refused.json["code"]) == (429, "member_import_queue_full")
    assert snapshot(session) == before
    work(app, session_factory)
    assert upload(client, gym, roster("late@example.test")).status_code == 202


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"name\nX\n", "import_invalid"),  # no email column
        (b"email\n\xff\xfe@example.test\n", "import_invalid"),  # not UTF-8
        # past the csv module's field limit (128 KiB): its csv.Error was a 500
        (b"email,name\na@example.test," + b"n" * 131_073 + b"\n", "import_invalid"),
    ],
    ids=["no email column", "not UTF-8", "a field past the csv limit"],
)
@pytest.mark.parametrize("as_file", [False, True], ids=["body", "multipart"])
def test_a_roster_refused_up_front_queues_nothing(client, gym, session, body, code, as_file):
    before = snapshot(session)
    response = upload_file(client, gym, body) if as_file else upload(client, gym, body)
    assert (response.status_code, response.json["code"]) == (422, code)
    assert snapshot(session) == before


def test_a_roster_with_old_mac_line_endings_is_read_like_any_other(client, gym, session):
    """A lone CR ends a line (csv's own newline handling): the rows are queued as with LF."""
    response = upload_file(client, gym, b"email,name\ra@example.test,A\rb@example.test,B\r")
    assert response.status_code == 202, response.json
    assert response.json["total"] == 2
    assert response.json["results"]["members"]["invalid"] == []


def test_another_gyms_import_reads_as_missing_and_members_cannot_read_one(client, gym, session):
    other = factories.make_gym(session, name="Elsewhere")
    session.commit()
    mine = upload(client, gym, roster("a@example.test")).json["id"]
    foreign = MemberImport(
        organization_id=other.organization.id,
        path="/elsewhere",
        total=0,
        status="finished",
        created_at=NOW,
    )
    session.add(foreign)
    session.commit()

    for import_id in (foreign.id, uuid.uuid4()):
        response = read(client, gym, import_id)
        assert (response.status_code, response.json["code"]) == (404, "member_import_not_found")
    members = read(client, gym, mine, by=Role.member)
    assert (members.status_code, members.json["code"]) == (403, "permission_denied")


def test_finished_imports_are_forgotten_after_thirty_days(
    app, client, gym, session, session_factory
):
    upload(client, gym, roster("old@example.test"))
    work(app, session_factory)
    assert work(app, session_factory, now=NOW + timedelta(days=29)) == {"imports": 0}
    assert work(app, session_factory, now=NOW + timedelta(days=31))["forgotten"] == 1
    assert session.scalar(select(func.count()).select_from(MemberImport)) == 0


def test_the_daemon_job_registers_with_the_deployments_outside_parts(
    client, gym, session, session_factory, settings
):
    job = upload(client, gym, roster("job@example.test")).json
    daemon = next(j for j in JOBS if j.name == "member_imports")

    assert daemon.own_transactions
    assert daemon.run(session_factory, NOW, settings) == {"imports": 1, "created": 1}
    assert read(client, gym, job["id"]).json["status"] == "finished"


def test_two_imports_asked_together_count_each_others_rows_against_the_cap(
    app, client, gym, session, session_factory
):
    """The second import is refused up front (spec A 8) rather than both half done: the cap
    counts the rows queued imports have yet to register."""
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter  # 150; the fixture's gym has one active member
    session.commit()
    first = upload(client, gym, roster(*(f"a{n}@example.test" for n in range(100))))
    assert first.status_code == 202
    before = snapshot(session)

    second = upload(client, gym, roster(*(f"b{n}@example.test" for n in range(100))))

    assert (second.status_code, second.json["code"]) == (422, "member_cap_exceeded")
    assert snapshot(session) == before
    work(app, session_factory)
    assert read(client, gym, first.json["id"]).json["done"] == 100


def test_an_address_with_an_invisible_format_character_is_its_rows_refusal(client, gym, session):
    before = users(session)
    response = upload(client, gym, "email\n\u202eevil@example.test\nann\u200b@example.test\n")
    assert response.json["results"]["members"]["invalid"] == [
        {"row": 2, "reason": "email_invalid"},
        {"row": 3, "reason": "email_invalid"},
    ]
    assert response.json["total"] == 0
    assert users(session) == before


def test_a_name_too_long_for_a_user_is_its_rows_refusal_not_the_imports(client, gym):
    response = upload(
        client, gym, f"email,name\nok@example.test,Ok\nlong@example.test,{'n' * 201}\n"
    )
    assert response.json["total"] == 1
    assert response.json["results"]["members"]["invalid"] == [{"row": 3, "reason": "name_too_long"}]


def test_a_roster_over_the_row_limit_is_refused_up_front(client, gym, session, monkeypatch):
    monkeypatch.setattr(member_imports, "MAX_ROWS", 3)
    before = snapshot(session)
    response = upload(client, gym, roster(*(f"m{n}@example.test" for n in range(4))))
    assert (response.status_code, response.json["code"]) == (422, "import_invalid")
    assert snapshot(session) == before


@pytest.mark.parametrize("trouble", ["defect", "database"])
def test_a_row_that_always_fails_ends_failed_alone_and_the_rows_around_it_are_registered_once(
    app, client, gym, session, session_factory, mailbox, trouble
):
    """A defect this row alone meets fails it at once. A database error in its statements rolls
    back its savepoint only: the rows before it stay registered (a login's row emailed once,
    its link good), the row is tried again 1, 5 and 15 minutes later, and its fourth failure
    is its outcome. Either way the rows after it are registered."""
    from sqlalchemy.exc import OperationalError

    factories.user(
        session, identity_id="user_proven", email="proven@example.test", email_verified_at=NOW
    )
    session.commit()
    job = upload(
        client, gym, roster("proven@example.test", "poison@example.test", "fine@example.test")
    ).json

    def poisoned(flushing, *_):
        if any(getattr(row, "email", None) == "poison@example.test" for row in flushing.new):
            if trouble == "defect":
                raise ValueError("a defect this row alone meets")
            raise OperationalError("INSERT", {}, Exception("the row's insert fails"))

    event.listen(session_factory, "before_flush", poisoned)
    try:
        if trouble == "database":
            first = work(app, session_factory)
            assert first == {"imports": 1, "created": 1, "deferred": 1}
            for at in (NOW + MINUTE, NOW + 6 * MINUTE):
                assert work(app, session_factory, now=at) == {"imports": 1, "deferred": 1}
            last = work(app, session_factory, now=NOW + 21 * MINUTE)
            assert last == {"imports": 1, "failed": 1, "created": 1}
        else:
            last = work(app, session_factory)
            assert last == {"imports": 1, "failed": 1, "created": 2}
    finally:
        event.remove(session_factory, "before_flush", poisoned)

    members = read(client, gym, job["id"]).json["results"]["members"]
    assert members["created"] == ["proven@example.test", "fine@example.test"]
    assert members["failed"] == [{"email": "poison@example.test", "reason": "failed"}]
    # The login was asked to link once: its row was never rolled back and done again.
    assert links_sent(client) == {"sent": 1, "failed": 0}
    assert [m["To"] for m in read_mailbox(mailbox)] == ["proven@example.test"]


def test_a_step_lost_four_times_stops_the_import_blaming_no_row(
    app, client, gym, session, session_factory
):
    """A transaction lost outside the rows (its commit, the database itself) says nothing
    about a row: the import waits 1, 5 and 15 minutes, then stops (failed), no row marked."""
    job = upload(client, gym, roster("healthy@example.test")).json

    def commit_fails(committing):
        if not committing.in_nested_transaction() and any(
            isinstance(row, MemberImport) and row.done for row in committing.dirty
        ):
            raise ConnectionError("the commit never reaches the database")

    event.listen(session_factory, "before_commit", commit_fails)
    try:
        for at in (NOW, NOW + MINUTE, NOW + 6 * MINUTE):
            assert work(app, session_factory, now=at) == {"imports": 1, "deferred": 1}
        assert work(app, session_factory, now=NOW + 21 * MINUTE) == {"imports": 1, "failed": 1}
    finally:
        event.remove(session_factory, "before_commit", commit_fails)

    stopped = read(client, gym, job["id"]).json
    assert (stopped["status"], stopped["error"], stopped["done"]) == (
        "failed",
        {"code": "failed"},
        0,
    )
    assert "failed" not in stopped["results"]["members"]  # no row blamed
    assert users(session, User.email == "healthy@example.test") == 0


def test_rows_the_gym_erased_in_a_queued_import_do_not_count_against_the_cap(client, gym, session):
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter  # 150; the fixture's gym has one active member
    person = factories.user(session, identity_id=None, email="gone@example.test")
    factories.membership(
        session, user=person, organization=organization, status=MembershipStatus.cancelled
    )
    session.commit()
    first = upload(client, gym, roster("gone@example.test", *(f"a{n}@x.test" for n in range(99))))
    assert first.status_code == 202
    erase_personal_data(
        session, organization, person.id, actor_user_id=gym[Role.owner].user.id, now=NOW
    )
    session.commit()

    # 1 + 99 waiting + 50 = 150: the erased row is not a newcomer.
    second = upload(client, gym, roster(*(f"b{n}@x.test" for n in range(50))))

    assert second.status_code == 202


def test_a_step_stops_taking_rows_after_its_seconds(app, client, gym, session, session_factory):
    """Each login's row sends an email while the step's transaction holds its locks (on the
    embedded default the database's write lock): a slow mail server shortens the step."""
    job = upload(client, gym, roster(*(f"s{n}@example.test" for n in range(5))))
    import_id = uuid.UUID(job.json["id"])
    ticks = iter(range(0, 100, 1))  # each row seems to take a second

    done = member_imports.import_next(
        session_factory,
        app.extensions["gymctl"].outreach,
        import_id,
        now=NOW,
        monotonic=lambda: next(ticks),
    )

    assert done == {"created": 2}  # CHUNK_SECONDS of 2
    assert read(client, gym, import_id).json["done"] == 2


def test_a_roster_imported_again_finds_its_members_whatever_letters_their_addresses_hold(
    app, client, gym, session, session_factory
):
    """An address is looked up with the database folding case on both sides: Python's
    str.lower() folds 'É' where SQLite's lower() does not, so each import of 'Élodie@x.test'
    found no one and added another user."""
    for _ in range(2):
        upload(client, gym, roster("Élodie@x.test", "ǅemal@x.test"))
        work(app, session_factory)

    assert users(session, User.email.in_(["Élodie@x.test", "ǅemal@x.test"])) == 2


def test_a_member_whose_address_holds_a_capital_e_acute_is_not_counted_as_a_newcomer(
    client, gym, session
):
    """The cap counts the addresses that are not active members already, as the database
    folds them (`same_address`): folded by str.lower(), 'Élodie@x.test' missed her own row on
    SQLite and the roster that adds one member to a gym one short of its cap was refused."""
    organization = session.get(Organization, gym.id)
    organization.tier = Tier.starter  # 150 active members; the fixture's gym has one
    for n in range(147):
        person = factories.user(session, identity_id=None, email=f"m{n}@example.test")
        factories.membership(session, user=person, organization=organization)
    elodie = factories.user(session, identity_id=None, email="Élodie@x.test")
    factories.membership(session, user=elodie, organization=organization)
    session.commit()  # 149 active

    answer = upload(client, gym, roster("Élodie@x.test", "new@x.test"))

    assert answer.status_code == 202, answer.json
    refused = upload(client, gym, roster("Élodie@x.test", "new@x.test", "newer@x.test"))
    # The first roster's two rows still wait: Élodie is not one of the two newcomers counted.
    assert (refused.status_code, refused.json["code"], refused.json["wouldAdd"]) == (
        422,
        "member_cap_exceeded",
        2,
    )
