"""A clean 16-bit or palette PNG is stored byte for byte, and that is what spec A asks: asset
intake rule 3 ("A PNG that needs no crop, fill or removal, is upright and already within the
slot's bounds is stored byte-for-byte (passthrough)"). Neither the spec nor the pipeline promises
8-bit samples, sRGB or stripped chunks for such a PNG; validation (rule 8) still judges it.
Through the upload route, into a real S3 endpoint on loopback (moto's server), the object read
back is the upload's bytes.

Found on the way: a 16-bit greyscale PNG whose transparency is a tRNS colour key was refused
brand_logo_transparent (the pipeline saw no alpha in it), and the thumbnail upload turned 16-bit
grey white (a plain convert clips it)."""

from __future__ import annotations

import io
import struct
import uuid
import zlib

import numpy as np
import pytest
from PIL import Image

from gymctl.clock import FixedClock
from gymctl.models import BrandAsset, Movement, Role
from gymctl.providers.storage import S3ObjectStore
from tests.assets import corpus
from tests.assets.test_routes import upload
from tests.conftest import NOW
from tests.providers.test_storage import BUCKET, s3_endpoint  # noqa: F401 (fixture)
from webhooks.app import create_app

pytestmark = pytest.mark.embedded  # both engines


def raw_png(pixels: np.ndarray, colour_type: int, *, chunks: tuple = ()) -> bytes:
    """A PNG of `pixels` (uint16: depth 16) as written by an image editor, filter none."""
    height, width = pixels.shape[:2]
    rows = pixels.astype(">u2").reshape(height, -1).view(np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + b"".join(chunk(kind, body) for kind, body in chunks)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def rgba16_logo() -> bytes:
    """16-bit RGBA, transparent around an opaque block, with a text chunk and a gAMA chunk."""
    pixels = np.zeros((200, 300, 4), np.uint16)
    pixels[50:150, 75:225] = (0x1234, 0x8000, 0xC000, 0xFFFF)
    return raw_png(pixels, 6, chunks=((b"gAMA", struct.pack(">I", 45455)), (b"tEXt", b"Title\0x")))


def grey16_keyed_logo() -> bytes:
    """16-bit greyscale whose transparency is a tRNS colour key (white, 0xFFFF)."""
    pixels = np.full((200, 300), 0xFFFF, np.uint16)
    pixels[50:150, 75:225] = 0x4000
    return raw_png(pixels, 0, chunks=((b"tRNS", struct.pack(">H", 0xFFFF)),))


def rgb16_icon() -> bytes:
    """A 1024 px opaque 16-bit RGB icon."""
    pixels = np.full((1024, 1024, 3), 0x2000, np.uint16)
    pixels[256:768, 256:768] = (0xFFFF, 0x8000, 0x0100)
    return raw_png(pixels, 2)


@pytest.fixture
def app(settings, session_factory, clock, s3_endpoint):  # noqa: F811 (fixture)
    store = S3ObjectStore(BUCKET, endpoint_url=s3_endpoint, region="us-east-1")
    return create_app(settings, session_factory=session_factory, clock=clock, store=store)


@pytest.mark.parametrize(
    ("slot", "make"),
    [
        ("logo", rgba16_logo),
        ("wordmark", grey16_keyed_logo),  # refused brand_logo_transparent before
        ("splashLogo", corpus.palette_trns_png),
        ("icon", rgb16_icon),
    ],
)
def test_a_clean_16_bit_or_palette_png_is_stored_byte_for_byte(app, session, gym, slot, make):
    data = make()
    answer = upload(app.test_client(), gym, slot, data)
    assert answer.status_code == 201, answer.json
    asset = session.get(BrandAsset, uuid.UUID(answer.json["id"]))
    assert asset.report["passthrough"] is True
    assert app.extensions["gymctl"].store.get(answer.json["key"]) == data  # rule 3, as is


def test_validation_still_judges_a_passed_through_16_bit_png(app, gym):
    """An opaque 16-bit PNG passes through no slot that needs transparency (rule 8)."""
    opaque = raw_png(np.full((200, 300, 3), 0x8000, np.uint16), 2)
    answer = upload(app.test_client(), gym, "logo", opaque)
    assert (answer.status_code, answer.json["code"]) == (400, "brand_logo_transparent")


def test_a_16_bit_grey_thumbnail_is_scaled_not_clipped_to_white(app, session, gym):
    """The thumbnail upload always re-encodes to 8-bit (gymctl/movements/thumbnails.py): 16-bit
    grey 0x8000 and 0x4000 come out about 128 and 64, not white."""
    row = Movement(organization_id=gym.id, slug="grey-lift", name="Grey Lift")
    session.add(row)
    session.commit()
    settings = app.extensions["gymctl"].settings
    live = create_app(
        settings.model_copy(update={"public_images_base_url": "https://images.example.test"}),
        session_factory=app.extensions["gymctl"].session_factory,
        clock=FixedClock(NOW),
        store=app.extensions["gymctl"].store,
    )
    answer = live.test_client().put(
        f"/organizations/{gym.id}/exercises/{row.id}/thumbnail",
        data={"file": (io.BytesIO(corpus.grey16_png(300)), "t.png")},
        headers=gym[Role.owner].headers,
        content_type="multipart/form-data",
    )
    assert answer.status_code == 200, answer.json
    key = answer.json["thumbnailUrl"].removeprefix("https://images.example.test/")
    stored = Image.open(io.BytesIO(live.extensions["gymctl"].store.get(key)))
    assert stored.mode == "RGB"
    left, right = stored.getpixel((10, 10)), stored.getpixel((290, 10))
    assert abs(left[0] - 128) <= 2, left  # before: 255, clipped to white
    assert abs(right[0] - 64) <= 2, right
