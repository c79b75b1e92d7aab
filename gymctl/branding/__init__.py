"""Branding (spec A 2.9, 2.10, 3, 4): the owner's palette and its derivation into the published
brand (OKLCH, WCAG contrast), legacy projections for installed apps, the brand workspace with its
three channels (brand, website, member app), publishing, and the gyms' minisites.

For other areas (issue 6, branded apps): `gymctl.branding.published.live_brand(session, org_id)`
is the published brand (schemaVersion 2), or None."""
