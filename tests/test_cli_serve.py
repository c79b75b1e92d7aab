"""`gymctl serve` keeps to its own folder: gunicorn (27) would otherwise open a control socket at
`~/.gunicorn/gunicorn.ctl`, outside GYMCTL_HOME, one path for every server of the user: each new
server unlinks the running one's socket, and `shutdown` or `worker kill` sent there reaches
whichever started last."""

from __future__ import annotations

import subprocess
import time

from tests.test_quickstart import GYMCTL, free_port, gymctl, home_env, wait_for  # noqa: F401


def test_serve_opens_no_gunicorn_control_socket_in_the_home_folder(home_env, tmp_path):  # noqa: F811
    home = tmp_path / "user-home"
    home.mkdir()
    env = {**home_env, "HOME": str(home)}
    gymctl(env, "db", "upgrade")
    port = free_port()
    server = subprocess.Popen(
        [*GYMCTL, "serve", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/health")
        deadline = time.monotonic() + 2  # the control server starts in a thread of the master
        while time.monotonic() < deadline and not (home / ".gunicorn").exists():
            time.sleep(0.1)
        assert not (home / ".gunicorn").exists(), list((home / ".gunicorn").iterdir())
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert list(home.iterdir()) == []
