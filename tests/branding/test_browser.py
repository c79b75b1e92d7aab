"""The minisite in a real browser (headless Chromium from Debian's chromium and chromium-driver,
driven by Selenium): for several palettes, including a very light and a very dark primary
colour, in the light and the dark colour scheme, every text role's computed colour is read with
the background it actually sits on and its contrast ratio checked (spec A 2.9, 8)."""

from __future__ import annotations

import os
import re
import shutil
import threading

import pytest
from werkzeug.serving import make_server

from gymctl.branding import publishing, workspace
from gymctl.branding.contrast import BLACK, WHITE, ratio
from tests.branding.conftest import drafts
from tests.conftest import NOW

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# CI installs both (.ci/run), so there a missing browser is a failure, never a silent skip.
pytestmark = pytest.mark.skipif(
    (CHROMIUM is None or CHROMEDRIVER is None) and not os.environ.get("CI"),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)

PALETTES = {
    "very-light-primary": {"primaryColor": "#FFF8C0"},
    "very-dark-primary": {"primaryColor": "#0B0B2A"},
    "brand-blue-owner-button": {"primaryColor": "#1C40A0", "buttonColor": "#FFE600"},
    "neon-green": {"primaryColor": "#00FF00", "secondaryColor": "#FF00FF"},
    "grey-owner-surfaces": {
        "primaryColor": "#808080",
        "backgroundColor": "#777777",
        "cardColor": "#2A2A2A",
        "darkBackgroundColor": "#F0F0F0",
    },
}

# Every [data-role] element: its computed colour and the first opaque background behind it.
READ_ROLES = """
return Array.from(document.querySelectorAll('[data-role]')).map(el => {
  let bg = 'rgba(0, 0, 0, 0)', node = el;
  while (node) {
    const c = getComputedStyle(node).backgroundColor;
    if (c && !/rgba\\(.*,\\s*0\\)$/.test(c) && c !== 'transparent') { bg = c; break; }
    node = node.parentElement;
  }
  return [el.dataset.role, getComputedStyle(el).color, bg];
});
"""


def _hex(css: str) -> str:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return f"#{r:02X}{g:02X}{b:02X}"


@pytest.fixture
def server(app):
    httpd = make_server("127.0.0.1", 0, app, threaded=False)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    thread.join(timeout=10)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # The machine has no network beyond loopback: no background fetches at start.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ):
        options.add_argument(flag)
    options.add_argument("--window-size=1200,1600")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def test_every_text_role_is_readable_in_the_browser(
    server, browser, session, session_factory, store, gym, tmp_path
):
    drafts(session, store, gym.id)
    checked = 0
    for name, palette in PALETTES.items():
        workspace.save_brand_draft(
            session,
            store,
            gym.id,
            palette=palette,
            name="Iron Temple",
            logos={},
            actor_user_id=None,
            now=NOW,
        )
        session.commit()
        results = publishing.publish_channels(
            session_factory, store, gym.id, ["brand", "website"], actor_user_id=None, now=NOW
        )
        assert [r.result for r in results] == ["verified", "verified"], name
        for scheme in ("light", "dark"):
            browser.execute_cdp_cmd(
                "Emulation.setEmulatedMedia",
                {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
            )
            # A query of its own per visit: the public page may be cached for 60 s.
            browser.get(f"{server}/sites/{gym.organization.slug}?visit={name}-{scheme}")
            roles = browser.execute_script(READ_ROLES)
            fills = {role: _hex(bg) for role, _, bg in roles}
            assert fills["onPrimary"] == palette["primaryColor"], "the page is not this palette"
            assert {role for role, _, _ in roles} >= {
                "heading",
                "text",
                "textMuted",
                "link",
                "onCard",
                "onCardMuted",
                "onPrimary",
                "onSecondary",
                "onButton",
            }
            for role, colour, background in roles:
                fg, bg = _hex(colour), _hex(background)
                assert ratio(fg, bg) >= 4.5, (name, scheme, role, fg, bg)
                light_fill = ratio(BLACK, bg) >= max(ratio(WHITE, bg), 5.5)
                if role in ("onPrimary", "onButton") and light_fill:
                    assert ratio(fg, bg) >= 5.5, (name, scheme, role, fg, bg)
                checked += 1
            screenshot = tmp_path / f"minisite-{name}-{scheme}.png"
            browser.save_screenshot(str(screenshot))
            assert screenshot.stat().st_size > 0
    assert checked >= len(PALETTES) * 2 * 9
