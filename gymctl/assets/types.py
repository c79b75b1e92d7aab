"""The pipeline's vocabulary: slots, the owner's transform, the result and the refusal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gymctl.errors import DomainError
from gymctl.jsondepth import depth

# {"crop": {...}} is the deepest valid transform; the parser recurses, so deeper is refused first.
MAX_TRANSFORM_DEPTH = 2


class Slot(StrEnum):
    icon = "icon"
    logo = "logo"
    wordmark = "wordmark"
    splashLogo = "splashLogo"


class AssetRefused(DomainError):
    """An owner refusal: the file (or the transform) is not a valid slot image. Always 400 with
    one of the spec's codes; `width`/`height`/`format` are what was read, for the rejected event."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        format: str | None = None,
        width: int | None = None,
        height: int | None = None,
    ) -> None:
        super().__init__(code, message, status=400)
        self.format, self.width, self.height = format, width, height


@dataclass(frozen=True)
class Crop:
    """A rectangle in orientation-corrected pixels."""

    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class Transform:
    """The owner's choices (multipart text part `transform`, JSON):
    {"crop": {"x", "y", "width", "height"}, "background": "#RRGGBB" (icon only),
     "removeBackground": true|false (other slots only)}. Every field is optional."""

    crop: Crop | None = None
    background: tuple[int, int, int] | None = None
    remove_background: bool = False

    @classmethod
    def parse(cls, text: str | None, slot: Slot) -> Transform:
        if text is None or not text.strip():
            return cls()
        if depth(text.encode("utf-8", "surrogatepass")) > MAX_TRANSFORM_DEPTH:
            raise AssetRefused("brand_asset_crop", "the transform nests deeper than a crop")
        try:
            data = json.loads(text)
        except ValueError:
            raise AssetRefused("brand_asset_crop", "the transform is not JSON") from None
        return cls.from_dict(data, slot)

    @classmethod
    def from_dict(cls, data: Any, slot: Slot) -> Transform:
        if not isinstance(data, dict):
            raise AssetRefused("brand_asset_crop", "the transform must be a JSON object")
        unknown = set(data) - {"crop", "background", "removeBackground"}
        if unknown:
            raise AssetRefused("brand_asset_crop", f"unknown transform fields: {sorted(unknown)}")
        crop = None
        if data.get("crop") is not None:
            box = data["crop"]
            keys = ("x", "y", "width", "height")
            if (
                not isinstance(box, dict)
                or set(box) != set(keys)
                or not all(type(box[k]) is int for k in keys)
                or box["width"] <= 0
                or box["height"] <= 0
            ):
                raise AssetRefused(
                    "brand_asset_crop", "crop needs integer x, y and positive width, height"
                )
            crop = Crop(**{k: box[k] for k in keys})
        background = None
        if data.get("background") is not None:
            if slot is not Slot.icon:
                raise AssetRefused("brand_asset_crop", "a background fill is for the icon only")
            background = _hex_colour(data["background"])
        remove = data.get("removeBackground", False)
        if type(remove) is not bool:
            raise AssetRefused("brand_asset_crop", "removeBackground must be true or false")
        if remove and slot is Slot.icon:
            raise AssetRefused("brand_asset_crop", "removeBackground is not for the icon")
        return cls(crop=crop, background=background, remove_background=remove)


def _hex_colour(value: Any) -> tuple[int, int, int]:
    if (
        not isinstance(value, str)
        or len(value) != 7
        or value[0] != "#"
        or any(c not in "0123456789abcdefABCDEF" for c in value[1:])
    ):
        raise AssetRefused("brand_asset_crop", "background must be a #RRGGBB colour")
    return int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16)


@dataclass
class NormalizedAsset:
    """The stored PNG and the report: exactly the properties of branding.asset_normalized."""

    png: bytes
    width: int
    height: int
    report: dict[str, Any] = field(default_factory=dict)
