"""The test fakes' HTTP servers on loopback."""

from __future__ import annotations

import threading
from socketserver import BaseServer

# How often a fake's serve_forever looks for its shutdown: close() waits for that look, once in
# every test that starts a fake (the identity provider's starts in 2,859). socketserver's default
# is 0.5 s; at 0.01 the idle thread's wake-ups cost nothing measurable.
POLL_SECONDS = 0.01


def serve_in_thread(server: BaseServer) -> threading.Thread:
    """Serve `server` on a daemon thread until its shutdown()."""
    thread = threading.Thread(target=server.serve_forever, args=(POLL_SECONDS,), daemon=True)
    thread.start()
    return thread
