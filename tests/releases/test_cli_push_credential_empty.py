"""`gymctl releases app configure --push-credential FILE` with an empty file (or one of only
whitespace): no key file is that, and its digest (sha256 of nothing) was kept as the app's push
credential, a new config revision a release candidate would then carry. It is refused as the
release commands refuse (a DomainError, exit 1, `error push_credential_empty: ...`) before the
database is opened, the other settings given with it unwritten too."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.cli import main
from gymctl.models.releases import BrandedApp
from tests.access.conftest import snapshot
from tests.releases.test_cli import operator_env, run  # noqa: F401 (a fixture)


@pytest.fixture
def configured(operator_env):  # noqa: F811
    factory, org_id, _ = operator_env
    run("app", "create", "iron-temple")
    return factory, org_id


def _configure(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(["releases", "app", "configure", "iron-temple", *args])
    out = capsys.readouterr()
    return ended.value.code, out.out, out.err


@pytest.mark.parametrize("content", [b"", b"\n", b"  \r\n\t"], ids=["empty", "newline", "blank"])
def test_an_empty_push_credential_is_refused_and_nothing_changes(
    configured, tmp_path, capsys, content
):
    factory, _ = configured
    credential = tmp_path / "AuthKey.p8"
    credential.write_bytes(content)
    with factory() as session:
        before = snapshot(session)

    status, out, err = _configure(
        capsys, "--apple-team-id", "AB12CD34EF", "--push-credential", str(credential)
    )

    assert status == 1, (out, err)
    assert "error push_credential_empty:" in err
    assert str(credential) in err
    with factory() as session:
        assert snapshot(session) == before


def test_an_empty_push_credential_refused_in_json(configured, tmp_path, capsys):
    credential = tmp_path / "empty.p8"
    credential.touch()

    status, out, _ = _configure(capsys, "--push-credential", str(credential), "--json")

    assert status == 1
    assert json.loads(out)["code"] == "push_credential_empty"


def test_a_key_file_is_still_taken(configured, tmp_path, capsys):
    factory, org_id = configured
    credential = tmp_path / "AuthKey.p8"
    credential.write_bytes(b"-----BEGIN PRIVATE KEY-----")
    with factory() as session:
        query = select(BrandedApp).where(BrandedApp.organization_id == org_id)
        revision = session.scalar(query).config_revision

    status, out, err = _configure(capsys, "--push-credential", str(credential), "--json")

    assert status == 0, (out, err)
    with factory() as session:
        app = session.scalar(query)
        shown = json.loads(out)["config"]["pushCredentialSha256"]
        assert app.config["pushCredentialSha256"] == shown
        assert app.config_revision == revision + 1
