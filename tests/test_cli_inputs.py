"""Files named as a command's input: only a regular file is read, and never past its limit
(gymctl.cli.inputs). A FIFO waited for a writer for ever; /dev/zero filled the memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymctl.access.registrations import MAX_ROSTER_BYTES
from gymctl.branding.website import MAX_CONTENT_BYTES
from gymctl.cli import app as gymctl_app
from gymctl.cli.releases import MAX_CREDENTIAL_BYTES
from gymctl.config import get_settings
from gymctl.errors import DomainError

# Each reads its file before it opens the database: the home holds none.
COMMANDS = {
    "assets": lambda file: ["assets", "normalize", file, "--slot", "logo"],
    "website": lambda file: ["branding", "website", "demo-gym", file],
    "roster": lambda file: ["members", "import", "demo-gym", file],
    "push credential": lambda file: [
        "releases",
        "app",
        "configure",
        "demo-gym",
        "--push-credential",
        file,
    ],
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GYMCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GYMCTL_DATABASE_URL", raising=False)
    monkeypatch.setenv("MAX_BRAND_ASSET_BYTES", "4096")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def invoke(args: list[str]):
    return CliRunner().invoke(gymctl_app, args, env={"COLUMNS": "400"})  # one line a message


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.timeout(30)  # the FIFO waited here for ever
def test_a_fifo_or_a_device_is_a_usage_error_not_a_wait(home, command):
    fifo = home / "named-pipe"
    os.mkfifo(fifo)
    for given in (str(fifo), "/dev/zero"):
        result = invoke(COMMANDS[command](given))
        assert result.exit_code == 2, result.output
        assert "is not a regular file" in result.output
    assert not (home / "home").exists() or not any((home / "home").glob("*.db"))


def _sparse(folder: Path, name: str, size: int) -> str:
    path = folder / name
    with path.open("wb") as file:
        file.truncate(size)
    return str(path)


@pytest.mark.parametrize(
    ("command", "limit", "code"),
    [
        ("website", MAX_CONTENT_BYTES, "website_content_invalid"),
        ("roster", MAX_ROSTER_BYTES, "import_invalid"),
        ("assets", 4096, "brand_asset_size"),
    ],
)
def test_a_file_past_its_limit_is_refused_with_the_commands_code(home, command, limit, code):
    result = invoke(COMMANDS[command](_sparse(home, "big", limit + 1)))
    assert result.exit_code != 0
    assert isinstance(result.exception, DomainError), result.output
    assert result.exception.code == code


def test_a_push_credential_past_a_key_files_size_is_a_usage_error(home):
    result = invoke(COMMANDS["push credential"](_sparse(home, "big", MAX_CREDENTIAL_BYTES + 1)))
    assert result.exit_code == 2, result.output
    assert "not a push credential" in result.output
