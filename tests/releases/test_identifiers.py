"""Spec A 2.12: Apple and Android IDs use different validators; generated Android package
segments replace slug hyphens with underscores."""

from __future__ import annotations

import pytest

from gymctl.errors import DomainError
from gymctl.releases import identifiers

REAL_APPLE = [
    "com.example.app",
    "com.apple.mobilesafari",
    "com.burbn.instagram",
    "com.google.Maps",
    "net.whatsapp.WhatsApp",
    "com.my-gym.app",  # hyphens are allowed by Apple
    "com.24hourfitness.app",  # so is a leading digit in a segment
]
BAD_APPLE = [
    "",
    "app",  # not reverse-DNS
    "com..example",
    ".com.example",
    "com.example.",
    "com.example.my_app",  # underscore: not in Apple's alphabet
    "com.example.*",  # a wildcard App ID, not a bundle ID
    "com.example.app name",
    "com.exämple.app",
    "com." + "a" * 152,  # 156 characters
    "com.example.app\n",  # `$` matched before a final newline: it passed
]
REAL_ANDROID = [
    "com.example.app",
    "com.google.android.apps.maps",
    "com.instagram.android",
    "org.mozilla.firefox",
    "com.whatsapp",
    "com.example.my_app",
    "com.example.App2",
]
BAD_ANDROID = [
    "",
    "example",  # one segment
    "com.example.my-app",  # hyphens are not allowed in Android
    "com.24hourfitness.app",  # a segment starts with a digit
    "com._example.app",  # ... or an underscore
    "com.example.new",  # a Java keyword
    "com.example.class",
    "com.example.true",  # a literal
    "com..example",
    "com.example.",
    "com.exämple.app",
    "com." + "a" * 147,  # 151 characters
    "com.example.app\n",
]


# Each store's validator and the code it refuses with.
VALIDATORS = {
    "apple": (identifiers.validate_apple_bundle_id, "apple_bundle_id_invalid"),
    "android": (identifiers.validate_android_package, "android_package_invalid"),
}


@pytest.mark.parametrize(
    ("store", "value"),
    [("apple", v) for v in REAL_APPLE] + [("android", v) for v in REAL_ANDROID],
)
def test_real_world_apple_bundle_ids_and_android_package_names_pass(store, value):
    validate, _code = VALIDATORS[store]
    assert validate(value) == value


@pytest.mark.parametrize(
    ("store", "value"),
    [("apple", v) for v in BAD_APPLE] + [("android", v) for v in BAD_ANDROID],
)
def test_invalid_apple_bundle_ids_and_android_package_names_are_refused(store, value):
    validate, code = VALIDATORS[store]
    with pytest.raises(DomainError) as refused:
        validate(value)
    assert (refused.value.code, refused.value.status) == (code, 400)


def test_generated_android_segments_replace_slug_hyphens_with_underscores():
    assert identifiers.generated_android_package("com.gymctl.gym", "iron-temple-north") == (
        "com.gymctl.gym.iron_temple_north"
    )
    # Apple keeps the hyphens.
    assert identifiers.generated_apple_bundle_id("com.gymctl.gym", "iron-temple-north") == (
        "com.gymctl.gym.iron-temple-north"
    )


def test_every_valid_slug_generates_a_valid_android_segment():
    """A leading digit gets a letter in front, a Java keyword a suffix."""
    assert identifiers.android_segment("24-7-fitness") == "g24_7_fitness"
    assert identifiers.android_segment("new") == "new_app"
    assert identifiers.generated_android_package("com.gymctl.gym", "24-7") == "com.gymctl.gym.g24_7"


@pytest.mark.parametrize(
    "slug", ["", "a", "-iron", "iron-", "Iron", "iron_temple", "x" * 41, "iron-temple\n"]
)
def test_link_slugs_are_lowercase_words_joined_by_hyphens(slug):
    with pytest.raises(DomainError) as refused:
        identifiers.validate_link_slug(slug)
    assert refused.value.code == "branded_app_link_slug_invalid"


def test_the_url_scheme_is_brand_dash_slug_and_links_are_exact():
    assert identifiers.url_scheme("gymctl", "iron-temple") == "gymctl-iron-temple"
    assert identifiers.link_paths("iron-temple") == ("/b/iron-temple", "/b/iron-temple/")
