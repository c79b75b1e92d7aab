"""Names in the owner's emails are shown as the gym shows them, on one line (decisions s46:
every text of an email's context on one line; s42: "An erased member shows as erased in the
erasing gym's views ... the retention digest and case notices"). A hunt in s54 found a member's
name holding a line break (a desk registration takes any text) adding a forged case line to the
digest, the context's rows being left as typed; and a presale case email sent after an erasure
(the mail server was down at the withdrawal) naming the erased member, whose row a login keeps."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.access.erasure import erase_personal_data
from gymctl.providers.mail import MailError, read_mailbox
from gymctl.retention import digest, presales
from tests.billing import factories as bf
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded


class _Down:
    def send(self, email):
        raise MailError("SMTP smtp://127.0.0.1:1 failed: ConnectionRefusedError")


def test_a_member_name_with_a_line_break_stays_on_its_case_line(
    session, session_factory, gym, mailer, mailbox
):
    gym.member.name = "Noa\n- Eve Forged: cancellation_notice, ends 2099-01-01"
    subscription = bf.make_subscription(session, gym, current_period_end=NOW + timedelta(days=20))
    give_notice(session, gym, subscription)
    session.commit()

    assert digest.send_digests(session_factory, mailer, now=NOW + timedelta(hours=3))["sent"] == 1

    body = read_mailbox(mailbox)[0].get_content()
    [line] = [line for line in body.splitlines() if line.startswith("- ")]  # one open case
    assert line.startswith("- Noa - Eve Forged: cancellation_notice, ends 2099-01-01")


def test_a_presale_case_email_sent_after_the_erasure_names_no_one(
    session, session_factory, gym, mailer, mailbox
):
    gym.member.name = "Noa Secretname"
    gym.member.identity_id = gym.member.identity_id or "user_noa_login"  # a login: row kept
    subscription = bf.make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    _, case = presales.withdraw_presale(
        session, gym.organization.id, subscription.id, actor_user_id=gym.member.id,
        by_member=True, locale="en", now=NOW,
    )  # fmt: skip
    session.commit()
    presales.notify_withdrawal(session, _Down(), case.id, now=NOW)  # not handed over
    erase_personal_data(
        session, gym.organization, gym.member.id, actor_user_id=gym.owner.id,
        now=NOW + timedelta(minutes=1),
    )  # fmt: skip
    session.commit()

    presales.presale_cases_pass(session_factory, mailer, now=NOW + timedelta(minutes=5))

    [sent] = read_mailbox(mailbox)
    text = sent["Subject"] + "\n" + sent.get_content()
    assert "Secretname" not in text
    assert "Erased member" in text
