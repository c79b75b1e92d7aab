"""`gymctl branding ...` on the embedded default: derive, save, publish in order, show the
projection, print the minisite address; refusals exit 1 with their code."""

from __future__ import annotations

import json

from tests.branding.conftest import CONTENT
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_derive_prints_the_brand_and_the_contrast_of_every_text_role(home_env):  # noqa: F811
    out = json.loads(gymctl(home_env, "branding", "derive", "#FFF8C0", "--json").stdout)
    assert out["brand"]["schemaVersion"] == 2
    assert min(out["contrast"]["light"].values()) >= 4.5
    refused = gymctl(home_env, "branding", "derive", "yellow", check=False)
    assert refused.returncode == 1
    assert "palette_color_invalid" in refused.stderr


def test_the_workflow_from_palette_to_minisite(home_env, tmp_path):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    gymctl(home_env, "branding", "palette", "demo-gym", "--primary", "#E4572E", "--name", "Demo")
    content = tmp_path / "site.json"
    content.write_text(json.dumps({**CONTENT, "headline": "From the command line"}))
    gymctl(home_env, "branding", "website", "demo-gym", str(content))
    view = json.loads(gymctl(home_env, "branding", "workspace", "demo-gym", "--json").stdout)
    assert [c["pending"] for c in view["channels"]] == [True, True, False]

    run = json.loads(
        gymctl(
            home_env, "branding", "publish", "demo-gym", "--channel", "website",
            "--channel", "brand", "--json",
        ).stdout
    )  # fmt: skip
    assert [(r["channel"], r["result"]) for r in run["results"]] == [
        ("brand", "verified"),
        ("website", "verified"),
    ]
    shown = json.loads(gymctl(home_env, "branding", "show", "demo-gym", "--schema", "2").stdout)
    assert shown["branding"]["palette"]["primaryColor"] == "#E4572E"
    assert shown["branding"]["palette"]["backgroundStyle"] == "tinted"
    site = json.loads(gymctl(home_env, "branding", "minisite", "demo-gym", "--json").stdout)
    assert site == {
        "url": "http://127.0.0.1:8000/sites/demo-gym",
        "host": "demo-gym.sites.localhost",
        "status": "published",
    }

    gymctl(home_env, "branding", "restore", "demo-gym", "brand", "--revision", "1")
    gymctl(home_env, "branding", "unpublish", "demo-gym", "website")
    site = json.loads(gymctl(home_env, "branding", "minisite", "demo-gym", "--json").stdout)
    assert site["status"] == "minisite_unpublished"
    refused = gymctl(home_env, "branding", "unpublish", "demo-gym", "website", check=False)
    assert refused.returncode == 1
    assert "website_not_published" in refused.stderr

    gymctl(home_env, "branding", "unpublish", "demo-gym", "brand")
    failed = gymctl(
        home_env, "branding", "publish", "demo-gym", "--channel", "app", "--json", check=False
    )
    assert failed.returncode == 1
    [result] = json.loads(failed.stdout)["results"]
    assert (result["result"], result["code"]) == ("failed", "brand_not_published")


def test_a_website_file_nested_past_the_parser_is_refused_not_a_crash(home_env, tmp_path):  # noqa: F811
    """json.loads recurses: a file 100,000 levels deep crashed the command (exit 70). Its depth
    is measured first, as the API measures a body's."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused = gymctl(home_env, "branding", "website", "demo-gym", str(deep), check=False)
    assert refused.returncode == 1, refused.stderr
    assert "website_content_invalid" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_brand_name_the_route_would_refuse_is_refused_here_too(home_env):  # noqa: F811
    """The route's body refuses an empty or multi-line name; the command line saved '' and
    a newline, and `publish` put the empty name live."""
    gymctl(home_env, "quickstart", "--json")
    for name in ("", "  ", "Iron\nTemple", "x" * 201):
        refused = gymctl(
            home_env, "branding", "palette", "demo-gym", "--primary", "#E4572E", "--name", name,
            "--json", check=False,
        )  # fmt: skip
        assert refused.returncode == 1, name
        assert json.loads(refused.stdout)["code"] == "brand_name_invalid"
    kept = gymctl(
        home_env, "branding", "palette", "demo-gym", "--primary", "#E4572E", "--name", " Iron ",
        "--json",
    )  # fmt: skip
    assert kept.returncode == 0
