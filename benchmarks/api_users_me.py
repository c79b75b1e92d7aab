"""Throughput of GET /users/me against GET /health, under gunicorn on PostgreSQL, with the key
set healthy and then down.

The goals (issue 20): /users/me serves at least 70% of /health's requests per second on the same
server; and while the provider's key set is down, /users/me stays within 10% of its healthy
throughput (stale keys serve). This script only measures and reports (JSON on stdout); it
asserts nothing about timing.

Steps: create and migrate its own database (`gymctl_bench`), seed the demo gym (its owner has a
membership, an active organization and legal consents owed), make an RSA key pair, serve its key
set on loopback twice (JWKS servers in this process; one can be switched down: 503), start two
identical gunicorn servers on free loopback ports, each verifying tokens against its own key set
(no PEM key: the key-set path), warm both up, switch the second one's key set down and wait until
every worker's cached set is older than its five-minute lifetime (about four and a half minutes
of idle waiting: every key lookup is then a stale one and refreshes are failing), then measure in
interleaved rounds, healthy and down side by side (the idle server costs nothing meanwhile):

1. /health and /users/me with one long-lived token for `user_demo_owner` (as a client reuses its
   token): `ratio_users_me_to_health` (healthy server);
2. the same with a fresh token per request (each one a miss of the verified-token memory, so the
   key set is consulted every time): `users_me_fresh_tokens`;
3. `keys_down`: per round, the down server's /users/me against the healthy one's measured next to
   it, and the median over rounds (also against /health of each server, which cancels what the
   two servers might differ in). Drift of the machine, which made the earlier one-run-after-the-
   other figure swing from 0.84 to 0.95, hits both sides of each round alike.

`--no-keys-down` starts only the healthy server, for the healthy figures (no wait).

Server: gunicorn as `gymctl serve` runs it (sync workers, 2 by default, no access log here).
Concurrency: two client threads per worker by default. A sync worker serves one request at a
time, so one request in flight plus one waiting in the listen backlog per worker keeps every
worker busy. On the 2-core machine this saturates it (~90% busy) while the client, one process
and so at most one core, takes 40-60% of one core; with one thread per worker the workers idle
between requests (/health drops ~20%), more threads add no throughput. Each thread has its own
keep-alive httpx.Client (sync workers close the connection after each response; gthread keeps
it). Both endpoints are measured the same way, in alternating rounds (A B, B A, ...) after a
warm-up, so drift from other load on the machine hits both.

    python benchmarks/api_users_me.py [--requests 3000] [--workers 2] [--concurrency 4]
        [--no-keys-down]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import gymctl
from gymctl import migrate
from gymctl.db import get_engine, session_factory, session_scope
from gymctl.identity.tokens import KEY_SET_LIFETIME
from gymctl.quickstart import seed_demo_gym

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "gymctl_bench"
USER = "user_demo_owner"
GOAL = 0.70
KEYS_DOWN_GOAL = 0.90
ENDPOINTS = {"health": "/health", "users_me": "/users/me", "users_me_fresh_tokens": "/users/me"}
KID = "bench"
SECRET_KEY = "sk_bench_identity"


# --- database --------------------------------------------------------------------------------


@contextlib.contextmanager
def bench_database(admin_url: str) -> Iterator[str]:
    """A fresh, migrated and seeded `gymctl_bench`, dropped on the way out."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")

    def recreate(create: bool) -> None:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
            if create:
                connection.execute(text(f"CREATE DATABASE {BENCH_DB}"))

    recreate(create=True)
    url = make_url(admin_url).set(database=BENCH_DB).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        engine = get_engine(url)
        with session_scope(session_factory(engine)) as session:
            seed_demo_gym(session, now=datetime.now(UTC))
        engine.dispose()
        yield url
    finally:
        get_engine(url).dispose()
        recreate(create=False)
        admin.dispose()


def postgres_version(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text("SHOW server_version")).scalar_one()
    finally:
        engine.dispose()


# --- identity --------------------------------------------------------------------------------


def mint_token(key: rsa.RSAPrivateKey, subject: str, lifetime: timedelta, jti: str = "0") -> str:
    """One session (sid) for every token, so no token makes the server record a new session;
    `jti` makes each token a different string."""
    issued = int(time.time())
    claims = {
        "sub": subject,
        "sid": "sess_bench",
        "jti": jti,
        "iat": issued,
        "nbf": issued,
        "exp": issued + int(lifetime.total_seconds()),
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})


class KeySetServer:
    """The provider's GET /v1/jwks on loopback, checking the secret key; `down` answers 503."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": KID, "alg": "RS256"}
        body = json.dumps({"keys": [jwk]}).encode()
        self.down = False
        self.requests = {"served": 0, "refused": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ok = (
                    not server.down
                    and self.path == "/v1/jwks"
                    and self.headers.get("Authorization") == f"Bearer {SECRET_KEY}"
                )
                server.requests["served" if ok else "refused"] += 1
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if ok else 0))
                self.end_headers()
                if ok:
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


# --- server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    base_url: str
    log: Path


@contextlib.contextmanager
def gunicorn(
    database_url: str,
    key_set_url: str,
    home: Path,
    *,
    workers: int,
    worker_class: str,
    threads: int,
) -> Iterator[Server]:
    port = free_port()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("GYMCTL_", "IDENTITY_", "SENTRY_", "TEST_"))
    }
    env.update(
        GYMCTL_ENV="development",
        GYMCTL_DATABASE_URL=database_url,
        IDENTITY_API_URL=key_set_url,
        IDENTITY_SECRET_KEY=SECRET_KEY,
        GYMCTL_LOG_LEVEL="WARNING",
        GYMCTL_HOME=str(home),
    )
    argv = [
        sys.executable, "-m", "gunicorn",
        "--workers", str(workers),
        "--worker-class", worker_class,
        "--threads", str(threads),
        "--bind", f"127.0.0.1:{port}",
        "webhooks.app:create_app()",
    ]  # fmt: skip
    log = home / "gunicorn.log"
    with log.open("wb") as output:
        # cwd is the temporary home: no `.env` of the checkout is read by the server.
        process = subprocess.Popen(argv, env=env, cwd=home, stdout=output, stderr=output)
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until_up(server)
        yield server
    finally:
        stop(process)


def wait_until_up(server: Server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if client.get("/health").status_code == 200:
                    return
            time.sleep(0.1)
    tail = server.log.read_text(errors="replace")[-4000:]
    raise RuntimeError(f"gunicorn did not answer /health within {timeout:.0f} s:\n{tail}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- load ------------------------------------------------------------------------------------


@dataclass
class Phase:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    round_rates: list[float] = field(default_factory=list)  # requests/s of each round


def run_phase(
    clients: list[httpx.Client],
    path: str,
    headers: Callable[[], dict[str, str]],
    count: int,
    into: Phase,
) -> None:
    """`count` requests to `path`, shared by one thread per client; timed as a whole.
    `headers()` gives each request's headers (called under the phase's lock)."""
    remaining = iter(range(count))
    lock = threading.Lock()
    results: list[tuple[list[float], int, list[str]]] = []

    def work(client: httpx.Client) -> None:
        latencies: list[float] = []
        errors = 0
        samples: list[str] = []
        while True:
            with lock:
                if next(remaining, None) is None:
                    break
                request_headers = headers()
            started = time.perf_counter()
            try:
                response = client.get(path, headers=request_headers)
                failure = (
                    None
                    if response.status_code == 200
                    else f"{response.status_code} {response.text[:200]}"
                )
            except httpx.HTTPError as error:
                failure = repr(error)
            latencies.append(time.perf_counter() - started)
            if failure is not None:
                errors += 1
                if len(samples) < 3:
                    samples.append(failure)
        with lock:
            results.append((latencies, errors, samples))

    threads = [threading.Thread(target=work, args=(client,)) for client in clients]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    into.seconds += elapsed
    into.round_rates.append(count / elapsed if elapsed else 0.0)
    for latencies, errors, samples in results:
        into.requests += len(latencies)
        into.errors += errors
        into.latencies.extend(latencies)
        into.error_samples.extend(samples[: 3 - len(into.error_samples)])


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def throughput(phase: Phase) -> float:
    return phase.requests / phase.seconds if phase.seconds else 0.0


def summary(phase: Phase) -> dict[str, object]:
    latencies = sorted(phase.latencies)
    body: dict[str, object] = {
        "requests": phase.requests,
        "errors": phase.errors,
        "requests_per_s": round(throughput(phase), 1),
        "requests_per_s_median_of_rounds": round(statistics.median(phase.round_rates), 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }
    if phase.error_samples:
        body["error_samples"] = phase.error_samples
    return body


def bearer_headers(tokens: Iterator[str]) -> Callable[[], dict[str, str]]:
    return lambda: {"Authorization": f"Bearer {next(tokens)}"}


def measure(
    clients: dict[str, list[httpx.Client]],
    headers: dict[str, Callable[[], dict[str, str]]],
    args,
) -> dict[str, dict[str, Phase]]:
    """Every endpoint of every server in alternating rounds, each endpoint measured on the
    servers back to back: (A1 A2) (B1 B2) (C1 C2), then (C2 C1) (B2 B1) (A2 A1), ..."""
    runs = {run: {name: Phase() for name in ENDPOINTS} for run in clients}
    order = [(name, run) for name in ENDPOINTS for run in clients]
    per_round = [
        args.requests // args.rounds + (1 if r < args.requests % args.rounds else 0)
        for r in range(args.rounds)
    ]
    for count in per_round:
        for name, run in order:
            run_phase(clients[run], ENDPOINTS[name], headers[name], count, runs[run][name])
        order.reverse()
    return runs


def load(
    servers: dict[str, Server],
    key_sets: dict[str, KeySetServer],
    key: rsa.RSAPrivateKey,
    args: argparse.Namespace,
) -> dict[str, dict[str, Phase]]:
    """Warm every server up; with a "keys_down" server, switch its key set down and wait until
    its workers' sets are stale; then every endpoint of every server in interleaved rounds."""
    lifetime = timedelta(days=1)
    token = mint_token(key, USER, lifetime)
    fresh = iter(
        [mint_token(key, USER, lifetime, jti=str(n)) for n in range(2 * args.requests + 1)]
    )
    headers = {
        "health": lambda: {},
        "users_me": lambda: {"Authorization": f"Bearer {token}"},
        "users_me_fresh_tokens": bearer_headers(fresh),
    }
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = {
        run: [
            httpx.Client(base_url=server.base_url, limits=limits, timeout=30.0)
            for _ in range(args.concurrency)
        ]
        for run, server in servers.items()
    }
    try:
        for run in servers:  # warm-up: imports, pools, caches, the key set of every worker
            for name in ("health", "users_me"):
                run_phase(clients[run], ENDPOINTS[name], headers[name], args.warmup, Phase())
        fetched_by = time.monotonic()
        if "keys_down" in key_sets:
            key_sets["keys_down"].down = True
            # Every worker fetched the set during the warm-up (a fresh set is not refetched):
            # past its lifetime each lookup is a stale one and each refresh fails.
            stale_at = fetched_by + KEY_SET_LIFETIME.total_seconds() + 5
            time.sleep(max(0.0, stale_at - time.monotonic()))
        return measure(clients, headers, args)
    finally:
        for run_clients in clients.values():
            for client in run_clients:
                client.close()


# --- main ------------------------------------------------------------------------------------


def version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per endpoint (default 3000)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument(
        "--worker-class", default="sync", help="gunicorn worker class (default sync, as served)"
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per gthread worker")
    parser.add_argument(
        "--concurrency", type=int, default=None, help="client threads (default 2 per worker)"
    )
    parser.add_argument("--warmup", type=int, default=200, help="warm-up requests per endpoint")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds (default 8)")
    parser.add_argument(
        "--keys-down",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure with the key set down and stale (waits ~4.5 min; default on)",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("GYMCTL_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL),
        help="PostgreSQL URL allowed to create databases (GYMCTL_BENCH_DATABASE_URL)",
    )
    args = parser.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = 2 * args.workers * args.threads
    args.rounds = max(1, min(args.rounds, args.requests))
    return args


def rate(phases: dict[str, Phase], name: str) -> float:
    return throughput(phases[name])


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


def paired(phases: dict[str, Phase], name: str) -> float:
    """The median over rounds of `name`'s throughput against /health's in the same round (of the
    same server): drift of the machine cancels best here."""
    return statistics.median(
        mine / health
        for mine, health in zip(phases[name].round_rates, phases["health"].round_rates, strict=True)
    )


def keys_down_report(runs: dict[str, dict[str, Phase]]) -> dict[str, object]:
    """Each /users/me figure of the server whose key set is down against the healthy server's,
    round by round (measured back to back), as the median over rounds: raw, and each against
    /health of its own server. The goal is judged on the raw median."""
    healthy, down = runs["healthy"], runs["keys_down"]
    report: dict[str, object] = {}
    for name in ("users_me", "users_me_fresh_tokens"):
        rounds = [
            d / h
            for d, h in zip(down[name].round_rates, healthy[name].round_rates, strict=True)
            if h
        ]
        relative = [
            (d / dh) / (h / hh)
            for d, dh, h, hh in zip(
                down[name].round_rates,
                down["health"].round_rates,
                healthy[name].round_rates,
                healthy["health"].round_rates,
                strict=True,
            )
            if dh and h and hh
        ]
        median = round(statistics.median(rounds), 3)
        report[name] = {
            "requests_per_s": summary(down[name])["requests_per_s"],
            "vs_healthy_median_of_rounds": median,
            "vs_healthy_rounds": [round(r, 3) for r in rounds],
            "vs_healthy_of_totals": ratio(rate(down, name), rate(healthy, name)),
            "vs_healthy_relative_to_health_median_of_rounds": round(statistics.median(relative), 3),
            "goal_met": median >= KEYS_DOWN_GOAL,
        }
    report["health"] = summary(down["health"])
    report["goal_vs_healthy"] = KEYS_DOWN_GOAL
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gymctl-bench-") as tmp:
        home = Path(tmp)  # no identity key under it: the server uses the key set, not a PEM
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_sets = {"healthy": KeySetServer(key)}
        if args.keys_down:
            key_sets["keys_down"] = KeySetServer(key)
        try:
            with bench_database(args.admin_url) as url, contextlib.ExitStack() as stack:
                server_version = postgres_version(url)
                servers = {}
                for run, key_set in key_sets.items():
                    run_home = home / run
                    run_home.mkdir()
                    servers[run] = stack.enter_context(
                        gunicorn(
                            url,
                            key_set.url,
                            run_home,
                            workers=args.workers,
                            worker_class=args.worker_class,
                            threads=args.threads,
                        )
                    )
                runs = load(servers, key_sets, key, args)
        finally:
            for key_set in key_sets.values():
                key_set.close()
    healthy = runs["healthy"]
    users_me_ratio = round(paired(healthy, "users_me"), 3)
    report = {
        "health": summary(healthy["health"]),
        "users_me": summary(healthy["users_me"]),
        "users_me_fresh_tokens": summary(healthy["users_me_fresh_tokens"]),
        "ratio_users_me_to_health": users_me_ratio,
        "ratio_users_me_fresh_tokens_to_health": round(paired(healthy, "users_me_fresh_tokens"), 3),
        "ratio_users_me_to_health_of_totals": ratio(
            rate(healthy, "users_me"), rate(healthy, "health")
        ),
        "goal_ratio": GOAL,
        "goal_met": users_me_ratio >= GOAL,
        "keys_down": keys_down_report(runs) if "keys_down" in runs else None,
        "key_set_requests": {run: key_set.requests for run, key_set in key_sets.items()},
        "workers": args.workers,
        "worker_class": args.worker_class,
        "threads_per_worker": args.threads,
        "concurrency": args.concurrency,
        "requests_per_endpoint": args.requests,
        "warmup_per_endpoint": args.warmup,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "gymctl": gymctl.__version__,
        "server": {
            "gunicorn": version("gunicorn"),
            "flask": version("flask"),
            "werkzeug": version("werkzeug"),
            "sqlalchemy": version("sqlalchemy"),
            "psycopg": version("psycopg"),
            "postgresql": server_version,
        },
        "client": {"httpx": version("httpx")},
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
