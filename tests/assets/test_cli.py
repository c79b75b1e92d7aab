"""`gymctl assets normalize`: the same pipeline on a local file, refusals as codes and exit 1."""

from __future__ import annotations

import json

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
