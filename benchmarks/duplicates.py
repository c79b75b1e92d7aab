"""The duplicates report over 20 000 movements with 768-dimension embeddings (issues 11, 22:
a movement's vector is three 256-dimension parts, name, instructions and attributes).

Goal: under 5 s and under 500 MB on the 2-core machine. This script measures and prints JSON;
it asserts nothing.

Steps: create and migrate its own PostgreSQL database (`gymctl_bench_duplicates`), insert N
canonical movements with unit random 768-d float32 embeddings in 16 movement patterns (by
default), 1% of them planted near-duplicates (the original's vector plus small noise, the same
pattern) and some with variant-qualifier names; then run `duplicates_report` (the same call as
POST .../duplicates and `gymctl movements duplicates`) in a fresh process per run, so each run's
peak RSS is its own: load the rows, blocked matrix products, filters, reference counts, alias
collisions. Reports the median wall time and peak RSS (the whole process: interpreter,
libraries, the rows and the matrix blocks) over the runs. Finally drops the database.
`--patterns 1` puts every movement in one pattern: the worst case, where no row can be skipped.

    python benchmarks/duplicates.py [--movements 20000] [--runs 5] [--patterns 16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url

ADMIN_URL = os.environ.get(
    "GYMCTL_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DB = "gymctl_bench_duplicates"
MODEL = "bench-256"
DIMENSIONS = 3 * 256
WORDS = ["press", "squat", "row", "curl", "raise", "pull", "push", "lunge", "swing", "clean"]
QUALIFIERS = ["", "", "", "Incline ", "One-Arm ", "Seated ", "Pronated "]


def bench_url() -> str:
    return make_url(ADMIN_URL).set(database=DB).render_as_string(hide_password=False)


def populate(url: str, count: int, pattern_count: int) -> None:
    from gymctl.models import Movement
    from gymctl.movements.embeddings import stored_model

    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(count, DIMENSIONS)).astype(np.float32)
    planted = count // 100
    sources = rng.choice(count - planted, size=planted, replace=False)
    vectors[count - planted :] = vectors[sources] + rng.normal(
        scale=0.08, size=(planted, DIMENSIONS)
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    patterns = rng.integers(0, pattern_count, size=count)
    patterns[count - planted :] = patterns[sources]
    now = datetime.now(UTC)
    rows = []
    for i in range(count):
        source = sources[i - (count - planted)] if i >= count - planted else i
        words = [WORDS[(source * 7 + k) % len(WORDS)] for k in range(3)]
        name = QUALIFIERS[i % len(QUALIFIERS)] + " ".join(words).title() + f" {source}"
        rows.append(
            {
                "id": uuid.uuid4(),
                "slug": f"m-{i}",
                "name": name,
                "aliases": [],
                "primary_muscles": [],
                "instructions": [],
                "video_candidates": [],
                "video_rejected_ids": [],
                "cues": [],
                "common_faults": [],
                "scaling_options": [],
                "video_status": "none",
                "movement_pattern": f"pattern-{patterns[i]}",
                "equipment": "barbell",
                "embedding": vectors[i].astype("<f4").tobytes(),
                "embedding_model": stored_model(MODEL),
                "created_at": now,
                "updated_at": now,
            }
        )
    engine = create_engine(url)
    with engine.begin() as connection:
        for start in range(0, count, 2000):
            connection.execute(insert(Movement), rows[start : start + 2000])
    engine.dispose()


def one_run(url: str) -> None:
    """Child process: one report, its wall time and the process's peak RSS."""
    from sqlalchemy.orm import Session

    from gymctl.movements.duplicates import duplicates_report

    engine = create_engine(url)
    with Session(engine) as session:
        session.execute(text("SELECT 1"))  # connect before timing
        started = time.perf_counter()
        report = duplicates_report(session, model=MODEL, threshold=0.92, limit=100)
        seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peakRssMb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "considered": report["considered"],
                "candidates": report["candidates"],
                "excludedVariantQualifier": report["excludedVariantQualifier"],
                "excludedEquipment": report["excludedEquipment"],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--movements", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--patterns", type=int, default=16, help="distinct movement patterns")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        one_run(args.child)
        return
    from gymctl import migrate

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        connection.execute(text(f"CREATE DATABASE {DB}"))
    try:
        url = bench_url()
        migrate.upgrade(url)
        populate(url, args.movements, args.patterns)
        runs = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, __file__, "--child", url],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(out.stdout))
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        admin.dispose()
    print(
        json.dumps(
            {
                "movements": args.movements,
                "dimensions": DIMENSIONS,
                "runs": args.runs,
                "patterns": args.patterns,
                "medianSeconds": round(statistics.median(r["seconds"] for r in runs), 3),
                "medianPeakRssMb": round(statistics.median(r["peakRssMb"] for r in runs), 1),
                "candidates": runs[0]["candidates"],
                "excludedVariantQualifier": runs[0]["excludedVariantQualifier"],
                "goal": {"seconds": 5, "peakRssMb": 500},
                "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
