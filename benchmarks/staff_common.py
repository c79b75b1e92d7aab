"""What the staff benchmarks (bulk_invite.py, member_import.py, concurrent_invites.py) share: a
migrated database with one gym whose owner can call the API (the deployment's settings are the
tests': tests.conftest.deployment_settings), and the machine a figure was measured on."""

from __future__ import annotations

import os
import platform
from typing import Any


def gym_database(url: str, idp: Any, **organization: Any) -> tuple[Any, Any]:
    """Migrate `url` and make one gym with an owner (`organization` sets its columns): the
    session factory and the gym."""
    from sqlalchemy.orm import sessionmaker

    from gymctl.db import get_engine
    from gymctl.migrate import upgrade
    from gymctl.models import Role
    from tests import factories

    upgrade(url)
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    with factory() as session:
        gym = factories.make_gym(session, name="Bench", roles=[Role.owner], idp=idp)
        for name, value in organization.items():
            setattr(gym.organization, name, value)
        session.commit()
    return factory, gym


def machine() -> dict[str, Any]:
    """Python, cores and load: this machine is shared, and its load stretches wall times."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
