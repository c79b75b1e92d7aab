"""Alembic, driven from code: `gymctl db ...`, the quick start and the tests share this."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

import migrations
from gymctl.config import get_settings
from gymctl.db import get_engine
from gymctl.errors import ConfigError


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", url or get_settings().resolved_database_url)
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    url = url or get_settings().resolved_database_url
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)


def is_known_revision(revision: str) -> bool:
    """Whether `revision` names a revision of the journal (or head, heads, base)."""
    if not revision.strip():  # alembic asserts on an empty one
        return False
    try:
        ScriptDirectory.from_config(alembic_config()).get_revisions(revision)
    except CommandError:  # alembic's ResolutionError is one
        return False
    return True


def current(url: str | None = None) -> str | None:
    with get_engine(url).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


@functools.cache
def head() -> str | None:
    """The newest revision of the journal (read once per process)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def history() -> list[tuple[str, str | None, str]]:
    """(revision, down_revision, message), newest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [
        (rev.revision, rev.down_revision, rev.doc or "")  # type: ignore[misc]
        for rev in script.walk_revisions()
    ]


def behind(url: str | None = None) -> str | None:
    """What to do when the database is not at this gymctl's revision (never migrated, or by
    another version), else None; None too when it cannot be reached (that is not a revision
    question). The common case: gymctl run outside the folder the quick start ran in, where the
    relative GYMCTL_HOME (./.gymctl) holds no database."""
    from sqlalchemy.engine import make_url

    url = make_url(url or get_settings().resolved_database_url)
    file = Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None
    try:
        # A missing SQLite file is at no revision: opening it to ask would create it.
        found = None if file is not None and not file.is_file() else current(str(url))
        wanted = head()
    except Exception:  # unreachable: the caller's own error stands
        return None
    if found == wanted:
        return None
    where = f"SQLite file {file.resolve()}" if file is not None else url.render_as_string()
    return (
        f"the database ({where}) is at revision {found or 'none: never migrated'}, "
        f"this gymctl needs {wanted}: run `gymctl db upgrade` (or `gymctl quickstart` for the "
        "demo gym), or set GYMCTL_HOME / GYMCTL_DATABASE_URL to the database you meant"
    )


def require_current(url: str | None = None) -> None:
    """A configuration error (exit 2) before a server or the daemons start on a database this
    gymctl has not migrated: the daemons crashed on the lock folder, then failed every job
    with SQL errors, and the server answered 503 and 401 to every request."""
    problem = behind(url)
    if problem is not None:
        raise ConfigError(problem)


def check(url: str | None = None) -> None:
    """Raise if the models and the migrated schema differ (`alembic check`)."""
    command.check(alembic_config(url))
