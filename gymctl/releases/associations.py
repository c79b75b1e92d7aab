"""The web association files the API serves for dedicated apps (spec A 2.12), and the link
claims their binaries are built with.

Each enabled app of an active gym claims exactly /b/<slug> and /b/<slug>/... . Apple: an
`applinks` entry per app with both the current `components` form and the legacy `paths` form
(older iOS), never `/b/<slug>*`. Android: asset links prove the package and its certificate may
handle the site's links; which paths it handles is fixed in its manifest (the intent filters of
the build input: `path` /b/<slug> and `pathPrefix` /b/<slug>/), because asset links carry no
paths. An app without its team ID or certificate fingerprints is left out (it cannot be verified).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gymctl.config import Settings
from gymctl.models.releases import BrandedApp
from gymctl.releases import identifiers
from gymctl.releases.branded_apps import live_apps

HANDLE_ALL_URLS = "delegate_permission/common.handle_all_urls"


def link_claims(app: BrandedApp, settings: Settings) -> dict[str, Any]:
    """What the binary registers: its one URL scheme and its exact link paths."""
    exact, below = identifiers.link_paths(app.link_slug)
    return {
        "urlScheme": identifiers.url_scheme(settings.branded_app_scheme_brand, app.link_slug),
        "ios": {"components": [{"/": exact}, {"/": f"{below}*"}]},
        "android": {"intentFilters": [{"path": exact}, {"pathPrefix": below}]},
    }


def apple_app_site_association(session: Session) -> dict[str, Any]:
    details = []
    for app in live_apps(session):
        team = app.config.get("appleTeamId")
        if not team:
            continue
        exact, below = identifiers.link_paths(app.link_slug)
        app_id = f"{team}.{app.apple_bundle_id}"
        details.append(
            {
                "appIDs": [app_id],
                "appID": app_id,
                "components": [{"/": exact}, {"/": f"{below}*"}],
                "paths": [exact, f"{below}*"],
            }
        )
    return {"applinks": {"apps": [], "details": details}}


def asset_links(session: Session) -> list[dict[str, Any]]:
    statements = []
    for app in live_apps(session):
        fingerprints = app.config.get("androidCertSha256")
        if not fingerprints:
            continue
        statements.append(
            {
                "relation": [HANDLE_ALL_URLS],
                "target": {
                    "namespace": "android_app",
                    "package_name": app.android_package,
                    "sha256_cert_fingerprints": list(fingerprints),
                },
            }
        )
    return statements
