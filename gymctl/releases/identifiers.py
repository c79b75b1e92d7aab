"""Validators of a dedicated app's identity (spec A 2.12): Apple and Android IDs follow different
rules, and IDs generated from the link slug replace its hyphens with underscores for Android.

Apple (CFBundleIdentifier): letters, digits, hyphens and periods, reverse-DNS, at most 155
characters. Android (applicationId): at least two segments, each starting with a letter and made
of letters, digits and underscores, and (as a Java package) never a Java keyword or literal.
"""

from __future__ import annotations

import re

from gymctl.errors import DomainError, invalid
from gymctl.releases import codes

APPLE_MAX = 155
ANDROID_MAX = 150
LINK_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$")
_APPLE_SEGMENT = re.compile(r"^[A-Za-z0-9-]+$")
_ANDROID_SEGMENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SCHEME_BRAND = re.compile(r"^[a-z][a-z0-9]*$")

# Java's reserved words and literals: none may be a package segment.
JAVA_KEYWORDS = frozenset(
    {
        "abstract",
        "assert",
        "boolean",
        "break",
        "byte",
        "case",
        "catch",
        "char",
        "class",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extends",
        "final",
        "finally",
        "float",
        "for",
        "goto",
        "if",
        "implements",
        "import",
        "instanceof",
        "int",
        "interface",
        "long",
        "native",
        "new",
        "package",
        "private",
        "protected",
        "public",
        "return",
        "short",
        "static",
        "strictfp",
        "super",
        "switch",
        "synchronized",
        "this",
        "throw",
        "throws",
        "transient",
        "try",
        "void",
        "volatile",
        "while",
        "true",
        "false",
        "null",
        "_",
        "var",
        "record",
        "yield",
        "sealed",
        "permits",
        "non-sealed",
    }
)


def _invalid(code: str, message: str) -> DomainError:
    return invalid(code, message)


def validate_apple_bundle_id(value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > APPLE_MAX:
        raise _invalid(codes.APPLE_BUNDLE_ID_INVALID, f"1 to {APPLE_MAX} characters")
    segments = value.split(".")
    if len(segments) < 2 or not all(_APPLE_SEGMENT.fullmatch(s) for s in segments):
        raise _invalid(
            codes.APPLE_BUNDLE_ID_INVALID,
            "reverse-DNS segments of letters, digits and hyphens, e.g. com.example.app",
        )
    return value


def validate_android_package(value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > ANDROID_MAX:
        raise _invalid(codes.ANDROID_PACKAGE_INVALID, f"1 to {ANDROID_MAX} characters")
    segments = value.split(".")
    if len(segments) < 2:
        raise _invalid(codes.ANDROID_PACKAGE_INVALID, "at least two segments, e.g. com.example.app")
    for segment in segments:
        if not _ANDROID_SEGMENT.fullmatch(segment):
            raise _invalid(
                codes.ANDROID_PACKAGE_INVALID,
                "each segment starts with a letter and holds only letters, digits and _",
            )
        if segment in JAVA_KEYWORDS:
            raise _invalid(codes.ANDROID_PACKAGE_INVALID, f"'{segment}' is a Java keyword")
    return value


def validate_link_slug(value: str) -> str:
    if not isinstance(value, str) or not LINK_SLUG.fullmatch(value):
        raise _invalid(
            codes.BRANDED_APP_LINK_SLUG_INVALID,
            "2 to 40 lowercase letters, digits and inner hyphens",
        )
    return value


def android_segment(slug: str) -> str:
    """The slug as an Android package segment: hyphens become underscores; a leading digit gets
    a `g` in front and a Java keyword an `_app` behind, so every valid slug maps to a segment."""
    segment = validate_link_slug(slug).replace("-", "_")
    if segment[0].isdigit():
        segment = f"g{segment}"
    if segment in JAVA_KEYWORDS:
        segment = f"{segment}_app"
    return segment


def generated_apple_bundle_id(prefix: str, slug: str) -> str:
    return validate_apple_bundle_id(f"{prefix}.{validate_link_slug(slug)}")


def generated_android_package(prefix: str, slug: str) -> str:
    return validate_android_package(f"{prefix}.{android_segment(slug)}")


def url_scheme(brand: str, slug: str) -> str:
    """`<brand>-<slug>`: the only URL scheme a dedicated binary registers (RFC 3986 scheme)."""
    if not _SCHEME_BRAND.fullmatch(brand):
        raise _invalid(codes.BRANDED_APP_SCHEME_INVALID, "the scheme brand is lowercase a-z0-9")
    return f"{brand}-{validate_link_slug(slug)}"


def link_paths(slug: str) -> tuple[str, str]:
    """Exactly /b/<slug> and everything below /b/<slug>/, never the bare prefix /b/<slug>*
    (which would also claim /b/<slug>extra, another gym's link)."""
    slug = validate_link_slug(slug)
    return f"/b/{slug}", f"/b/{slug}/"
