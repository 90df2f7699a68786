"""Defensive decoding (filters/image.py) and pHash near-duplicates, on real photos from the ukwa
Wikipedia capture (tests/data/images/main-page.warc.gz) and hostile files built from them."""

import io
import itertools
import random
import struct
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from dedup.image import bit_band_keys
from pipelines.image_pairs import ImagePairsConfig
from extract.warc import RawRecord, iter_records
from filters.image import decode_image, hamming, open_image

UKWA = Path(__file__).parent / "data" / "images" / "main-page.warc.gz"
PAIRS = ImagePairsConfig()
CFG = PAIRS.decode_rules()                   # defaults: min side 150, aspect <= 3
SMALL_OK = ImagePairsConfig(min_side=50).decode_rules()


@lru_cache(maxsize=1)
def ukwa_images() -> dict:
    """url -> bytes of every image response in the capture."""
    with open(UKWA, "rb") as fh:
        return {r.url: r.payload for r in iter_records(fh)
                if isinstance(r, RawRecord) and r.http_content_type.startswith("image/")}


def photo() -> bytes:
    """The capture's largest JPEG: the Emperor shrimp, 334x250."""
    return max((b for u, b in ukwa_images().items() if b[:3] == b"\xff\xd8\xff"), key=len)


def photos() -> list[bytes]:
    """The real JPEG photos of the page (thumbnails of different subjects)."""
    return [b for u, b in sorted(ukwa_images().items()) if b[:3] == b"\xff\xd8\xff"]


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def png_bomb(side: int = 20000) -> bytes:
    """A real side x side 1-bit PNG of one colour: ~50 KB on disk, 400 Mpx once decoded."""
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    row = b"\x00" + b"\x00" * ((side + 7) // 8)
    comp = zlib.compressobj(9)
    idat = b"".join(comp.compress(row * 1000) for _ in range(side // 1000)) + comp.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_real_photo_decodes_with_size_format_and_hashes():
    d = decode_image(photo(), CFG)
    assert (d.width, d.height, d.format, d.frames) == (334, 250, "JPEG", 1)
    assert len(d.sha256) == 64 and 0 <= d.phash < 2 ** 64


def test_decompression_bomb_is_rejected_before_decoding():
    bomb = png_bomb()
    assert len(bomb) < 200_000
    assert decode_image(bomb, CFG) == "decompression_bomb"
    # Pillow's own guard counts too (its warning is an error here), even with our limit opened up
    assert decode_image(bomb, CFG._replace(max_pixels=10 ** 12)) == "decompression_bomb"


def test_truncated_jpeg_and_png_are_reasons_not_grey_images():
    data = photo()
    assert decode_image(data[: len(data) // 2], CFG) == "truncated"
    png = encode(Image.open(io.BytesIO(data)), "PNG")
    assert decode_image(png[: len(png) // 2], CFG) == "truncated"
    assert not ImageFile.LOAD_TRUNCATED_IMAGES  # never switched on globally


def test_cmyk_palette_alpha_grey_and_16bit_become_rgb():
    src = Image.open(io.BytesIO(photo())).convert("RGB")
    cmyk = encode(src.convert("CMYK"), "JPEG", quality=90)
    pal = src.quantize(64)
    pal.info["transparency"] = 0
    rgba = src.convert("RGBA")
    rgba.putalpha(Image.new("L", src.size, 0))  # fully transparent: composited on white
    grey16 = Image.fromarray(np.asarray(src.convert("L"), dtype="uint16") * 257)
    for data, fmt in ((cmyk, "JPEG"), (encode(pal, "PNG", transparency=0), "PNG"), (encode(rgba, "PNG"), "PNG"),
                      (encode(grey16, "PNG"), "PNG")):
        d = decode_image(data, CFG)
        assert not isinstance(d, str) and d.format == fmt and (d.width, d.height) == src.size
    rgb, _ = open_image(encode(rgba, "PNG"), CFG)
    assert rgb.mode == "RGB" and rgb.getextrema() == ((255, 255),) * 3
    rgb, _ = open_image(cmyk, CFG)
    assert rgb.mode == "RGB"
    # the CMYK copy keeps its content: same pHash neighbourhood as the RGB original
    assert hamming(decode_image(cmyk, CFG).phash, decode_image(photo(), CFG).phash) <= 5


def test_animated_gif_uses_its_first_frame():
    src = Image.open(io.BytesIO(photo())).convert("RGB")
    frames = [src, src.transpose(Image.Transpose.FLIP_TOP_BOTTOM), Image.new("RGB", src.size, (0, 0, 0))]
    gif = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    d = decode_image(gif, CFG)
    assert d.format == "GIF" and d.frames == 3
    first = decode_image(encode(frames[0], "GIF"), CFG)
    assert hamming(d.phash, first.phash) <= 2


def test_exif_orientation_is_applied():
    src = Image.open(io.BytesIO(photo()))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    d = decode_image(encode(src, "JPEG", exif=exif.tobytes()), CFG)
    assert (d.width, d.height) == (250, 334)


@pytest.mark.parametrize("make, reason", [
    (lambda: b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 300 300\n", "not_an_image"),   # never Ghostscript
    (lambda: b"<html><body>soft 404</body></html>", "not_an_image"),
    (lambda: encode(Image.new("RGB", (120, 400)), "PNG"), "too_small"),
    (lambda: encode(Image.new("RGB", (1000, 200)), "PNG"), "bad_aspect"),
    (lambda: encode(Image.new("RGB", (1, 1)), "GIF"), "too_small"),
])
def test_rejections(make, reason):
    assert decode_image(make(), CFG) == reason


def test_byte_cap_and_configurable_size_rules():
    data = photo()
    assert decode_image(data, CFG._replace(max_image_bytes=1000)) == "image_too_large"
    small = encode(Image.open(io.BytesIO(data)).resize((100, 75)), "JPEG")
    assert decode_image(small, CFG) == "too_small"
    assert decode_image(small, SMALL_OK).width == 100
    assert decode_image(encode(Image.new("RGB", (800, 200)), "PNG"), CFG) == "bad_aspect"
    assert decode_image(encode(Image.new("RGB", (800, 200)), "PNG"), CFG._replace(max_aspect=4.0)).width == 800


def test_resized_and_recompressed_copies_are_within_the_threshold():
    """Copies of real photos (downscaled, recompressed, re-encoded) stay within Hamming 5 of their
    original; different photos of the page stay far apart."""
    threshold = PAIRS.phash.threshold
    originals = [p for p in photos() if min(Image.open(io.BytesIO(p)).size) >= 60]
    assert len(originals) >= 4
    for data in originals:
        src = Image.open(io.BytesIO(data)).convert("RGB")
        base = decode_image(data, SMALL_OK).phash
        w, h = src.size
        copies = [encode(src.resize((int(w * 0.6), int(h * 0.6)), Image.Resampling.LANCZOS), "JPEG", quality=60),
                  encode(src, "JPEG", quality=25), encode(src, "PNG"), encode(src, "WEBP", quality=50),
                  encode(src.resize((w * 2, h * 2)), "JPEG", quality=80)]
        for copy in copies:
            d = decode_image(copy, ImagePairsConfig(min_side=20).decode_rules())
            assert d.sha256 != decode_image(data, SMALL_OK).sha256
            assert hamming(d.phash, base) <= threshold
    hashes = [decode_image(p, SMALL_OK).phash for p in originals]
    assert min(hamming(a, b) for a, b in itertools.combinations(hashes, 2)) > 2 * threshold


def test_band_keys_pigeonhole():
    """8 bands of 8 bits, keys on 3-band combinations: every pair within distance 5 shares a key
    (5 flipped bits touch at most 5 bands, so 3 bands agree); distance-6 pairs may share none."""
    rng = random.Random(7)
    for _ in range(300):
        a = rng.getrandbits(64)
        flips = rng.sample(range(64), rng.randint(0, 5))
        b = a
        for bit in flips:
            b ^= 1 << bit
        assert set(bit_band_keys(a, 64, 8, 3)) & set(bit_band_keys(b, 64, 8, 3))
    a = 0
    b = sum(1 << (8 * band) for band in range(6))  # one bit in each of 6 bands
    assert not set(bit_band_keys(a, 64, 8, 3)) & set(bit_band_keys(b, 64, 8, 3))
    assert len(bit_band_keys(a, 64, 8, 3)) == 56
    with pytest.raises(ValueError):
        ImagePairsConfig.model_validate({"phash": {"key_bands": 4}})
