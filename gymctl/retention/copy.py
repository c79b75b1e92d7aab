"""Localized copy of the refusals the spec calls localized (plan change, externally billed),
and of the presale withdrawal refused while its charge is in flight.

Three locales: en (the default and the fallback), he, es. The locale comes from the client
(X-Locale, else Accept-Language) or from what was recorded with the member's act.
"""

from __future__ import annotations

LOCALES = ("en", "he", "es")
DEFAULT_LOCALE = "en"

MESSAGES: dict[str, dict[str, str]] = {
    "presale_swap_requires_same_group": {
        "en": "You can only switch to another plan of the same plan group.",
        "he": "אפשר לעבור רק למנוי אחר מאותה קבוצת מנויים.",
        "es": "Solo puedes cambiar a otro plan del mismo grupo de planes.",
    },
    "plan_change_charge_in_flight": {
        "en": "A payment for this plan is being processed. Try again in a few minutes.",
        "he": "תשלום עבור המנוי הזה נמצא בעיבוד. נסו שוב בעוד כמה דקות.",
        "es": "Se está procesando un pago de este plan. Inténtalo de nuevo en unos minutos.",
    },
    "presale_charge_in_flight": {
        "en": "The opening-day payment is being processed. Try again in a few minutes.",
        "he": "תשלום יום הפתיחה נמצא בעיבוד. נסו שוב בעוד כמה דקות.",
        "es": "Se está procesando el pago del día de apertura. Inténtalo de nuevo en unos minutos.",
    },
    "externally_billed": {
        "en": "This gym bills memberships outside the app: ask the gym to change it there.",
        "he": "המכון מחייב מנויים מחוץ לאפליקציה: פנו למכון כדי לשנות זאת שם.",
        "es": (
            "Este gimnasio factura las membresías fuera de la app: "
            "pide al gimnasio que lo cambie allí."
        ),
    },
}


def pick_locale(*candidates: str | None) -> str:
    """The first supported locale among the candidates (an X-Locale value, an Accept-Language
    header, a stored choice); en when none is."""
    for candidate in candidates:
        for part in (candidate or "").replace(";", ",").split(","):
            tag = part.strip().lower()[:2]
            if tag in LOCALES:
                return tag
    return DEFAULT_LOCALE


def message(code: str, locale: str | None) -> str:
    texts = MESSAGES[code]
    return texts.get(locale or DEFAULT_LOCALE, texts[DEFAULT_LOCALE])
