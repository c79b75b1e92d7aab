"""Throughput of GET /users/me against GET /health, under gunicorn on PostgreSQL.

The goal: /users/me serves at least 70% of /health's requests per second on the same server.
This script only measures and reports (JSON on stdout); it asserts nothing about timing.

Steps: create and migrate its own database (`gymctl_bench`), seed the demo gym (its owner has a
membership, an active organization and legal consents owed), make an RSA key pair and a long-lived
token for `user_demo_owner`, start gunicorn on a free loopback port, warm up, then send the same
number of requests to each endpoint in alternating rounds, and finally stop gunicorn and drop the
database.

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
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import gymctl
from gymctl import migrate
from gymctl.db import get_engine, session_factory, session_scope
from gymctl.quickstart import seed_demo_gym

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "gymctl_bench"
USER = "user_demo_owner"
GOAL = 0.70
ENDPOINTS = {"health": "/health", "users_me": "/users/me"}


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


def key_pair(directory: Path) -> tuple[rsa.RSAPrivateKey, str]:
    """An RSA key written to `directory` (private and public PEM); returns the key, public PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (directory / "signing_key.pem").write_bytes(private_pem)
    (directory / "public_key.pem").write_bytes(public_pem)
    return key, public_pem.decode()


def mint_token(key: rsa.RSAPrivateKey, subject: str, lifetime: timedelta) -> str:
    issued = int(time.time())
    claims = {
        "sub": subject,
        "sid": f"sess_bench_{issued}",
        "iat": issued,
        "nbf": issued,
        "exp": issued + int(lifetime.total_seconds()),
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "bench"})


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
    database_url: str, public_pem: str, home: Path, *, workers: int, worker_class: str, threads: int
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
        IDENTITY_JWT_KEY=public_pem,
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


def run_phase(
    clients: list[httpx.Client], path: str, headers: dict[str, str], count: int, into: Phase
) -> None:
    """`count` requests to `path`, shared by one thread per client; timed as a whole."""
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
            started = time.perf_counter()
            try:
                response = client.get(path, headers=headers)
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
    into.seconds += time.perf_counter() - started
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
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }
    if phase.error_samples:
        body["error_samples"] = phase.error_samples
    return body


def load(server: Server, token: str, args: argparse.Namespace) -> dict[str, Phase]:
    bearer = {"Authorization": f"Bearer {token}"}
    headers = {"health": {}, "users_me": bearer}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [
        httpx.Client(base_url=server.base_url, limits=limits, timeout=30.0)
        for _ in range(args.concurrency)
    ]
    try:
        for name, path in ENDPOINTS.items():  # warm-up: imports, pools, caches in every worker
            run_phase(clients, path, headers[name], args.warmup, Phase())
        phases = {name: Phase() for name in ENDPOINTS}
        order = list(ENDPOINTS)
        per_round = [
            args.requests // args.rounds + (1 if r < args.requests % args.rounds else 0)
            for r in range(args.rounds)
        ]
        for count in per_round:  # alternating rounds: A B, B A, A B, ...
            for name in order:
                run_phase(clients, ENDPOINTS[name], headers[name], count, phases[name])
            order.reverse()
        return phases
    finally:
        for client in clients:
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
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gymctl-bench-") as tmp:
        home = Path(tmp)
        (home / "identity").mkdir()
        key, public_pem = key_pair(home / "identity")
        token = mint_token(key, USER, lifetime=timedelta(days=1))
        with bench_database(args.admin_url) as url:
            server_version = postgres_version(url)
            with gunicorn(
                url,
                public_pem,
                home,
                workers=args.workers,
                worker_class=args.worker_class,
                threads=args.threads,
            ) as server:
                phases = load(server, token, args)
    health_rps = throughput(phases["health"])
    ratio = throughput(phases["users_me"]) / health_rps if health_rps else None
    report = {
        "health": summary(phases["health"]),
        "users_me": summary(phases["users_me"]),
        "ratio_users_me_to_health": round(ratio, 3) if ratio is not None else None,
        "goal_ratio": GOAL,
        "goal_met": ratio is not None and ratio >= GOAL,
        "workers": args.workers,
        "worker_class": args.worker_class,
        "threads_per_worker": args.threads,
        "concurrency": args.concurrency,
        "requests_per_endpoint": args.requests,
        "warmup_per_endpoint": args.warmup,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
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
