"""`gymctl assets normalize`: the same pipeline on a local file, refusals as codes and exit 1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_normalize_prints_the_report_and_writes_the_png(home_env, tmp_path):  # noqa: F811
    source = tmp_path / "logo.jpg"
    image = Image.new("RGB", (900, 450), (250, 250, 250))
    ImageDraw.Draw(image).ellipse((200, 100, 700, 350), fill=(200, 30, 30))
    image.save(source, quality=90)
    out = tmp_path / "logo.png"
    result = gymctl(
        home_env,
        "assets",
        "normalize",
        str(source),
        "--slot",
        "logo",
        "--transform",
        '{"removeBackground": true}',
        "--out",
        str(out),
        "--json",
    )
    report = json.loads(result.stdout)
    assert (report["backgroundAnalysis"], report["backgroundRemoved"]) == ("flat", True)
    assert Image.open(out).mode == "RGBA"

    refused = gymctl(home_env, "assets", "normalize", str(source), "--slot", "logo", check=False)
    assert refused.returncode == 1
    assert "brand_logo_transparent" in refused.stderr


def test_a_transform_nested_past_the_parser_is_refused_not_a_crash(home_env, tmp_path):  # noqa: F811
    source = tmp_path / "logo.png"
    Image.new("RGBA", (800, 400), (0, 0, 0, 0)).save(source)
    refused = gymctl(
        home_env,
        "assets",
        "normalize",
        str(source),
        "--slot",
        "logo",
        "--transform",
        "[" * 100_000,
        check=False,
    )
    assert refused.returncode == 1
    assert "brand_asset_crop" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_an_out_path_that_cannot_be_written_is_a_usage_mistake_found_first(home_env, tmp_path):  # noqa: F811
    """--out in a folder that does not exist, or naming a folder, is exit 2 naming the option,
    before the image is normalized; no traceback, no crash log."""
    source = tmp_path / "logo.png"
    Image.new("RGBA", (800, 400), (0, 0, 0, 0)).save(source)
    for out, reason in [
        (tmp_path / "missing" / "logo.png", "does not exist"),
        (tmp_path, "is a folder"),
    ]:
        mistake = gymctl(
            home_env, "assets", "normalize", str(source), "--slot", "logo", "--out", str(out),
            check=False,
        )  # fmt: skip
        assert mistake.returncode == 2, mistake.stderr
        [line] = mistake.stderr.splitlines()
        assert line.startswith("usage error: Invalid value for '--out'"), line
        assert reason in line
    assert not (Path(home_env["GYMCTL_HOME"]) / "logs").exists()


@pytest.mark.skipif(
    not (Path("/dev/full").exists() and os.access("/dev", os.W_OK)),
    reason="needs /dev/full in a writable /dev",
)
def test_a_write_that_fails_is_a_refusal_not_a_crash(home_env, tmp_path):  # noqa: F811
    """The folder passed the check and the write failed anyway (here: no space left): exit 1
    with output_unwritable, not a crash."""
    source = tmp_path / "logo.png"
    image = Image.new("RGBA", (800, 400), (0, 0, 0, 0))
    ImageDraw.Draw(image).ellipse((200, 100, 600, 300), fill=(200, 30, 30, 255))
    image.save(source)
    refused = gymctl(
        home_env, "assets", "normalize", str(source), "--slot", "logo", "--out", "/dev/full",
        "--json", check=False,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr
    answer = json.loads(refused.stdout)
    assert answer["code"] == "output_unwritable"
    assert answer["message"].startswith("--out /dev/full: ")
