"""`gymctl movements ...`: the movement library's operator commands (spec B 4.5), each the twin
of an admin route, run here directly with progress bars (the routes enqueue the long ones).
Work that calls outside services commits before each call (gymctl.movements.units): on the
embedded default no other writer waits on the command's calls."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gymctl import clock
from gymctl.cli import codes
from gymctl.cli.operators import operator_id
from gymctl.cli.output import JSON, err_console, one_of, print_json, render_mapping, render_rows
from gymctl.errors import invalid

if TYPE_CHECKING:
    from gymctl.movements.services import Library

app = typer.Typer(no_args_is_help=True)
video = typer.Typer(no_args_is_help=True, help="Video candidates: discover, rank, verify, demote.")
app.add_typer(video, name="video")

OPERATOR = typer.Option(
    ..., "--operator", help="Your user: database id or identity subject (audited as the actor)."
)
DRY_RUN = typer.Option(False, "--dry-run", help="Report what would change; write nothing.")


class Bars:
    """rich progress bars on stderr, one per phase the domain announces."""

    def __init__(self, progress: Progress) -> None:
        self._progress, self._task = progress, None

    def start(self, label: str, total: int) -> None:
        self._task = self._progress.add_task(label, total=total)

    def advance(self, count: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, count)


@contextmanager
def bars() -> Iterator[Bars]:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    # Off a terminal a bar draws nothing but leaves a blank line on stderr: none at all there.
    with Progress(
        *columns,
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as progress:
        yield Bars(progress)


def _library() -> Library:
    from gymctl.config import get_settings
    from gymctl.movements.services import library_from_settings

    return library_from_settings(get_settings())


def _show(result: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print_json(result)
    else:
        render_mapping({k: v for k, v in result.items() if not isinstance(v, list)}, title=title)


@app.command("seed")
def seed_command(
    key: str = typer.Argument(..., help="Object key of the published library file."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Overwrite enriched fields."),
    rpm: int | None = typer.Option(None, "--rpm", min=1, help="Embedding requests a minute."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Upsert the canonical library by slug from a library file in object storage."""
    from gymctl.db import session_scope
    from gymctl.movements import seed

    library = _library()
    with bars() as progress, session_scope() as session:
        result = seed.seed_library(
            session,
            library.store,
            library.embedder,
            key=key,
            rebuild=rebuild,
            rpm=rpm,
            now=clock.now(),
            actor_user_id=operator_id(session, operator),
            progress=progress,
            checkpoint=session.commit,
        )
    _show(result, as_json, f"seeded from {key}")


@app.command("duplicates")
def duplicates_command(
    limit: int | None = typer.Option(
        None, "--limit", min=1, max=100_000, help="Pairs to show (default: the report's own limit)."
    ),
    as_json: bool = JSON,
) -> None:
    """Candidate duplicate pairs and alias collisions (a report; writes nothing)."""
    from gymctl.db import session_scope
    from gymctl.movements.duplicates import DEFAULT_LIMIT, duplicates_report
    from gymctl.movements.embeddings import threshold_for

    limit = DEFAULT_LIMIT if limit is None else limit
    library = _library()
    model = library.embedder.model
    with session_scope() as session:
        report = duplicates_report(
            session, model=model, threshold=threshold_for(library.settings, model), limit=limit
        )
    if as_json:
        print_json(report)
        return
    rows = [
        {
            "similarity": p["similarity"],
            "parts": " ".join(f"{k[0]} {v:.2f}" for k, v in p["evidence"]["parts"].items()),
            "a": p["a"]["name"],
            "b": p["b"]["name"],
            "why": "\n".join(p["evidence"]["agrees"]),
            "differs": "\n".join(p["evidence"]["differs"]) or "-",
            "suggestedWinner": p["a"]["name"]
            if p["suggestedWinnerId"] == p["a"]["id"]
            else p["b"]["name"],
            "ids": f"{p['a']['id']} {p['b']['id']}",
        }
        for p in report["pairs"]
    ]
    title = (
        f"{report['candidates']} candidate pairs (threshold {report['threshold']}, "
        f"{report['model']}); excluded: {report['excludedVariantQualifier']} variant "
        f"look-alikes, {report['excludedEquipment']} other implements, "
        f"{report['excludedMuscles']} other muscles"
    )
    columns = ["similarity", "parts", "a", "b", "why", "differs", "suggestedWinner", "ids"]
    render_rows(rows, columns, title=title)
    _render_collisions(report["aliasCollisions"])


def _render_collisions(collisions: list[dict[str, Any]]) -> None:
    rows = [
        {
            "term": c["term"],
            "movements": ", ".join(f"{m['name']} ({m['via']})" for m in c["movements"]),
        }
        for c in collisions
    ]
    render_rows(rows, ["term", "movements"], title=f"{len(rows)} alias collisions")


def _pair(text: str) -> tuple[uuid.UUID, uuid.UUID]:
    winner, _, loser = text.partition(":")
    try:
        return uuid.UUID(winner), uuid.UUID(loser)
    except ValueError:
        raise invalid(codes.MERGE_PAIR_INVALID, f"{text!r}: use WINNER_ID:LOSER_ID") from None


@app.command("merge")
def merge_command(
    pairs: list[str] = typer.Argument(..., help="WINNER_ID:LOSER_ID, one or more."),
    dry_run: bool = DRY_RUN,
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Merge losers into winners: references repointed, names folded into aliases, audited."""
    from gymctl.db import session_scope
    from gymctl.movements import merge

    library = _library()
    parsed = [_pair(p) for p in pairs]
    with bars() as progress, session_scope() as session:
        result = merge.merge_pairs(
            session,
            library.embedder,
            parsed,
            dry_run=dry_run,
            now=clock.now(),
            actor_user_id=operator_id(session, operator),
            progress=progress,
            video_threshold=library.settings.video_score_threshold,
        )
    if as_json:
        print_json(result)
        return
    rows = [{**p, "references": p.get("references")} for p in result["pairs"]]
    title = "merge (dry run)" if dry_run else "merge"
    columns = ["winnerId", "loserId", "outcome", "references", "videoReports"]
    render_rows(rows, columns, title=title)


@app.command("alias-collisions")
def alias_collisions_command(as_json: bool = JSON) -> None:
    """Folded terms that more than one canonical movement holds."""
    from gymctl.db import session_scope
    from gymctl.movements.duplicates import alias_collisions

    with session_scope() as session:
        collisions = alias_collisions(session)
    if as_json:
        print_json({"aliasCollisions": collisions})
    else:
        _render_collisions(collisions)


@app.command("alias-change")
def alias_change_command(
    source: uuid.UUID = typer.Argument(..., help="The movement holding the alias."),
    alias: str = typer.Argument(..., help="Any spelling of the term to remove."),
    dry_run: bool = DRY_RUN,
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Remove every spelling of a term from a movement's aliases (audited, re-embedded)."""
    from gymctl.db import session_scope
    from gymctl.movements import merge

    library = _library()
    with session_scope() as session:
        result = merge.alias_change(
            session,
            library.embedder,
            source_id=source,
            alias=alias,
            dry_run=dry_run,
            now=clock.now(),
            actor_user_id=operator_id(session, operator),
        )
    if as_json:
        print_json(result)
    else:
        render_mapping({k: str(v) for k, v in result.items()}, title="alias change")


@video.command("discover")
def discover_command(
    limit: int | None = typer.Option(None, "--limit", min=1, max=100_000),
    slug: list[str] | None = typer.Option(None, "--slug"),
    movement_id: list[uuid.UUID] | None = typer.Option(None, "--id"),
    force: bool = typer.Option(False, "--force", help="Search covered movements too."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Search video candidates (quota-limited; never removes anything)."""
    actor = _actor(operator, movement_id, slug)
    with bars() as progress:
        result = _discover(limit, slug, movement_id, force, actor, progress)
    if not (as_json and "error" in result):
        _show(result, as_json, "video discovery")
    _stopped(result, result)


def _actor(
    operator: str, ids: list[uuid.UUID] | None = None, slugs: list[str] | None = None
) -> uuid.UUID:
    """The operator a pass is audited as, resolved with its `--id` / `--slug` before any search,
    score or generation (the pass commits as it goes): no user is operator_user_required, a
    name of no live canonical movement movement_not_found."""
    from gymctl.db import session_scope
    from gymctl.movements.targets import require_targets

    with session_scope() as session:
        actor = operator_id(session, operator)
        require_targets(session, ids=ids, slugs=slugs)
    return actor


def _stopped(found: dict[str, Any], answer: dict[str, Any]) -> None:
    """A discovery the search API stopped exits 1 with its code and the answer beside it (with
    --json that is the one document; else the table is on stdout already)."""
    from gymctl.movements.discovery import refuse_if_stopped

    refuse_if_stopped(found, answer)


def _discover(limit, slug, ids, force, actor, progress) -> dict[str, Any]:
    from gymctl.db import session_scope
    from gymctl.movements import discovery

    library = _library()
    with session_scope() as session:
        return discovery.discover(
            session,
            library.search,
            library.settings,
            now=clock.now(),
            limit=limit,
            ids=ids,
            slugs=slug,
            force=force,
            actor_user_id=actor,
            progress=progress,
            checkpoint=session.commit,
        )


def _rank(dry_run, limit, slug, include_uncovered, actor, progress) -> dict[str, Any]:
    from gymctl.db import session_scope
    from gymctl.movements import ranking

    library = _library()
    with session_scope() as session:
        return ranking.rank(
            session,
            library.llm,
            library.settings,
            now=clock.now(),
            dry_run=dry_run,
            limit=limit,
            slugs=slug,
            include_uncovered=include_uncovered,
            actor_user_id=actor,
            progress=progress,
            checkpoint=session.commit,
        )


def _show_rank(result: dict[str, Any], as_json: bool) -> None:
    if as_json or "disabled" in result:
        print_json(result)
        return
    render_mapping(
        result["summary"], title=f"ranking ({result['skippedUncovered']} uncovered skipped)"
    )
    rows = [
        {
            "slug": r["slug"],
            "outcome": r["outcome"],
            "chosen": (r["chosen"] or {}).get("url"),
            "score": (r["chosen"] or {}).get("modelScore"),
            "previous": r["previousUrl"],
        }
        for r in result["report"]
    ]
    render_rows(rows, ["slug", "outcome", "chosen", "score", "previous"])


@video.command("rank")
def rank_command(
    dry_run: bool = DRY_RUN,
    limit: int | None = typer.Option(None, "--limit", min=1, max=100_000),
    slug: list[str] | None = typer.Option(None, "--slug"),
    include_uncovered: bool = typer.Option(False, "--include-uncovered"),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Score candidates with the model and pick each movement's video."""
    actor = _actor(operator, slugs=slug)
    with bars() as progress:
        result = _rank(dry_run, limit, slug, include_uncovered, actor, progress)
    _show_rank(result, as_json)


@video.command("refresh")
def refresh_command(
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Discovery saves; ranking writes nothing."
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, max=100_000),
    slug: list[str] | None = typer.Option(None, "--slug"),
    force: bool = typer.Option(False, "--force"),
    include_uncovered: bool = typer.Option(False, "--include-uncovered"),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Discover then rank; --dry-run affects only the ranking."""
    actor = _actor(operator, slugs=slug)
    with bars() as progress:
        found = _discover(limit, slug, None, force, actor, progress)
        ranked = _rank(dry_run, limit, slug, include_uncovered, actor, progress)
    answer = {"discover": found, "rank": ranked}
    if as_json:
        if "error" not in found:
            print_json(answer)
    else:
        _show(found, False, "video discovery")
        _show_rank(ranked, False)
    _stopped(found, answer)


@video.command("verify")
def verify_command(movement_id: uuid.UUID, operator: str = OPERATOR, as_json: bool = JSON) -> None:
    """Mark the movement's current video reviewed-good."""
    from gymctl.db import session_scope
    from gymctl.movements import ranking

    with session_scope() as session:
        actor = operator_id(session, operator)
        result = ranking.verify(session, movement_id, now=clock.now(), actor_user_id=actor)
    _show(result, as_json, "verified")


@video.command("demote")
def demote_command(movement_id: uuid.UUID, operator: str = OPERATOR, as_json: bool = JSON) -> None:
    """Reject the current video; the next scored candidate above the threshold replaces it."""
    from gymctl.db import session_scope
    from gymctl.movements import ranking

    library = _library()
    with session_scope() as session:
        actor = operator_id(session, operator)
        result = ranking.demote(
            session, movement_id, library.settings, now=clock.now(), actor_user_id=actor
        )
    _show(result, as_json, "demoted")


@app.command("cues")
def cues_command(
    dry_run: bool = DRY_RUN,
    rebuild: bool = typer.Option(False, "--rebuild", help="Rewrite rows that have them too."),
    limit: int | None = typer.Option(None, "--limit", min=1, max=100_000),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Write cues (3), common faults (2) and scaling options (2) with the chat model."""
    from gymctl.db import session_scope
    from gymctl.movements import cues

    library = _library()
    actor = _actor(operator)
    with bars() as progress, session_scope() as session:
        result = cues.write_cues(
            session,
            library.llm,
            now=clock.now(),
            dry_run=dry_run,
            rebuild=rebuild,
            limit=limit,
            actor_user_id=actor,
            progress=progress,
            checkpoint=session.commit,
        )
    _show(result, as_json, "cues")


@app.command("thumbnails")
def thumbnails_command(
    force: bool = typer.Option(False, "--force", help="Regenerate existing thumbnails too."),
    operator: str = OPERATOR,
    as_json: bool = JSON,
) -> None:
    """Generate missing thumbnails into the public images bucket."""
    from gymctl.db import session_scope
    from gymctl.movements import thumbnails

    library = _library()
    actor = _actor(operator)
    reason = thumbnails.disabled_reason(library.settings, library.images)
    if reason or library.images is None:
        _show({"generated": 0, "disabled": reason}, as_json, "thumbnails")
        return
    with session_scope() as session:
        rows = thumbnails.rows_needing_thumbnails(session, force=force)
    results = []
    with bars() as progress:
        progress.start("thumbnails", len(rows))
        for row in rows:
            with (
                session_scope() as session
            ):  # one movement per transaction: a failure keeps the rest
                results.append(
                    thumbnails.generate_thumbnail(
                        session,
                        library.images,
                        library.public_store,
                        library.settings,
                        movement_id=row.id,
                        force=force,
                        now=clock.now(),
                        actor_user_id=actor,
                        checkpoint=session.commit,
                    )
                )
            progress.advance()
    if as_json:
        print_json({"generated": len(results), "results": results})
    else:
        render_rows(results, ["slug", "thumbnailUrl", "skipped"], title="thumbnails")


@app.command("jobs")
def jobs_command(
    queue: str | None = typer.Option(None, "--queue", help="seed, thumbnails, videos or cues."),
    status: str | None = typer.Option(
        None, "--status", help="queued, running, succeeded or failed."
    ),
    as_json: bool = JSON,
) -> None:
    """The queued, running and finished library jobs, newest first."""
    from gymctl.db import session_scope
    from gymctl.movements import jobs

    # An unknown queue or status lists nothing: a usage mistake, not "no jobs".
    if queue is not None:
        one_of(queue, dict.fromkeys(jobs.QUEUES.values()), "--queue")
    if status is not None:
        one_of(status, jobs.STATUSES, "--status")
    with session_scope() as session:
        rows = jobs.list_jobs(session, queue=queue, status=status)
    render_rows(
        rows, ["id", "queue", "kind", "status", "attempts", "createdAt", "error"], as_json=as_json
    )


@app.command("job")
def job_command(
    queue: str,
    job_id: uuid.UUID,
    as_json: bool = typer.Option(
        True, "--json", help="Accepted for uniformity: this read is JSON either way."
    ),
) -> None:
    """One job and its return value (JSON)."""
    from gymctl.db import session_scope
    from gymctl.movements import jobs

    one_of(queue, dict.fromkeys(jobs.QUEUES.values()), "QUEUE")
    with session_scope() as session:
        print_json(jobs.get_job(session, queue, job_id))
