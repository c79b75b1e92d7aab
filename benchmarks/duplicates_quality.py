"""Precision and recall of the duplicates report on hand-labelled pairs (issue 22).

tests/movements/data/duplicate_labels.json holds pairs of free-exercise-db movements, each
labelled duplicate, variant or different with the reason read from their instructions. This
script seeds the 873 movements into a fresh embedded SQLite database with the local model (the
same seed as POST .../seed and `gymctl movements seed`), runs the report (the same call as
POST .../duplicates) with no limit, and scores it: a labelled pair the report lists is a
predicted duplicate. Variants and different movements are both negatives. Reported pairs nobody
labelled are printed apart (they count for neither figure). Goal: precision >= 0.9, recall >= 0.7.
Prints JSON; asserts nothing.

    python benchmarks/duplicates_quality.py [--threshold 0.92] [--details]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "movements" / "data"


def labelled_pairs() -> list[dict]:
    return json.loads((DATA / "duplicate_labels.json").read_text())["labels"]


def report_pairs(threshold: float) -> tuple[list[dict], dict]:
    from gymctl import migrate
    from gymctl.db import get_engine, session_scope
    from gymctl.db import session_factory as make_factory
    from gymctl.movements.duplicates import duplicates_report
    from gymctl.movements.embeddings import LocalEmbedder
    from gymctl.movements.seed import seed_library
    from gymctl.providers.storage import FolderObjectStore

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/quality.db"
        migrate.upgrade(url)
        store = FolderObjectStore(Path(folder) / "objects", url_base="http://x", secret=b"s")
        store.put(
            "library.json",
            (DATA / "free-exercise-db.json").read_bytes(),
            content_type="application/json",
        )
        engine = get_engine(url)
        embedder = LocalEmbedder()
        with session_scope(make_factory(engine)) as session:
            seed_library(session, store, embedder, key="library.json", now=datetime.now(UTC))
        with session_scope(make_factory(engine)) as session:
            report = duplicates_report(
                session, model=embedder.model, threshold=threshold, limit=100_000
            )
        engine.dispose()
    return report["pairs"], {k: v for k, v in report.items() if k.startswith("excluded")}


def score(labels: list[dict], pairs: list[dict]) -> dict:
    reported = {frozenset((p["a"]["name"], p["b"]["name"])): p for p in pairs}
    outcome: Counter[str] = Counter()
    missed, wrong = [], []
    for label in labels:
        key = frozenset((label["a"], label["b"]))
        found = key in reported
        reported.pop(key, None)
        if label["label"] == "duplicate":
            outcome["tp" if found else "fn"] += 1
            if not found:
                missed.append([label["a"], label["b"], label["reason"]])
        elif found:
            outcome["fp"] += 1
            wrong.append([label["a"], label["b"], label["label"], label["reason"]])
    tp, fp, fn = outcome["tp"], outcome["fp"], outcome["fn"]
    return {
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
        "truePositives": tp,
        "falsePositives": wrong,
        "missedDuplicates": missed,
        "unlabelledReported": sorted(
            [p["a"]["name"], p["b"]["name"], p["similarity"]] for p in reported.values()
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threshold", type=float, default=0.92)
    args = parser.parse_args()
    labels = labelled_pairs()
    pairs, excluded = report_pairs(args.threshold)
    print(
        json.dumps(
            {
                "labelledPairs": len(labels),
                "labels": Counter(label["label"] for label in labels),
                "threshold": args.threshold,
                "reportedPairs": len(pairs),
                **excluded,
                **score(labels, pairs),
                "goal": {"precision": 0.9, "recall": 0.7},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
