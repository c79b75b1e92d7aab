"""`gymctl assets normalize FILE --slot SLOT`: the intake pipeline on a local file."""

from __future__ import annotations

from pathlib import Path

import typer

from gymctl.assets.types import Slot, Transform
from gymctl.cli.inputs import read_given
from gymctl.cli.output import (
    JSON,
    err_console,
    print_json,
    render_mapping,
    writable_file,
    write_file,
)

app = typer.Typer(no_args_is_help=True)


@app.command("normalize")
def normalize_command(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="PNG, JPEG or WebP."),
    slot: Slot = typer.Option(..., "--slot", help="icon, logo, wordmark or splashLogo."),
    transform: str | None = typer.Option(
        None,
        "--transform",
        help='JSON: {"crop": {"x", "y", "width", "height"}, "background": "#RRGGBB", '
        '"removeBackground": true}',
    ),
    out: Path | None = typer.Option(
        None, "--out", callback=writable_file, help="Where to write the PNG."
    ),
    as_json: bool = JSON,
) -> None:
    """Print the normalization report; a refusal prints its code and exits 1."""
    from gymctl.assets.pipeline import normalize
    from gymctl.config import get_settings

    max_bytes = get_settings().max_brand_asset_bytes
    result = normalize(
        read_given(file, "FILE", limit=max_bytes),  # past it: the pipeline's brand_asset_size
        slot,
        Transform.parse(transform, slot),
        source="upload",
        max_bytes=max_bytes,
    )
    if out is not None:
        write_file("--out", out, lambda path: path.write_bytes(result.png))
        err_console.print(f"wrote {out} ({len(result.png)} bytes)")
    if as_json:
        print_json(result.report)
    else:
        render_mapping(result.report, title=f"{file.name} -> {slot.value}")
