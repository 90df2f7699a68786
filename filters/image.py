"""Defensive image decoding, perceptual hashing and CLIP-style image–text relevance (no Beam here).

Decoding (`decode_image`) treats every byte string as hostile, as img2dataset and DataComp's
downloaders must: a byte cap before anything is parsed; only an allow-list of raster formats is
offered to Pillow (no EPS/PostScript, which would run Ghostscript); the decompression-bomb limit is
checked on the header's size before any pixel is decoded (and Pillow's own bomb warning counts as an
error, not a warning); truncated files are reasons, never grey-filled images (Pillow's global
LOAD_TRUNCATED_IMAGES stays off). Then: EXIF orientation applied, the first frame of an animation,
palette/CMYK/16-bit/grey converted to RGB with alpha composited on white, and the size rules (min side
>= 150 px and aspect <= 3 by default, as in LAION/DataComp-style filtering).

Content addressing: sha256 of the bytes as fetched. Perceptual hash: imagehash's pHash (DCT of a
32x32 grey thumbnail, 64 bits; Zauner 2010) of the RGB image after a box pre-reduction (and JPEG DCT
scaling) to about 4x the thumbnail, which keeps large images cheap and leaves the hash of a resized
copy within a few bits of its original's.

Relevance (`ClipScorer`): cosine similarity of CLIP (Radford et al. 2021) or SigLIP (Zhai et al. 2023)
image and text embeddings, loaded through transformers from a local path or a hub name (offline when
HF_HUB_OFFLINE=1). LAION-5B kept English pairs at CLIP ViT-B/32 similarity >= 0.28; thresholds are
model-specific (SigLIP's cosines sit lower).
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import imagehash
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

DEFAULT_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "AVIF")  # JPEG covers MPO
PHASH_WORK_SIDE = 128  # pHash input is pre-reduced to about this size (the hash itself uses 32x32)
WHITE = (255, 255, 255)
EXIF_ORIENTATION = 0x0112
HIGH_BIT_MODES = {"I", "F", "I;16", "I;16B", "I;16L", "I;16N"}


@dataclass
class DecodedImage:
    sha256: str
    width: int     # after EXIF orientation
    height: int
    format: str    # Pillow's format name: JPEG, PNG, GIF, WEBP, ...
    frames: int    # > 1 for animations (only the first frame is used)
    phash: int     # 64-bit imagehash pHash as an unsigned int


class DecodeRules(NamedTuple):
    """The limits `open_image` and `decode_image` apply: the pairs branch's `image_pairs` settings
    (ImagePairsConfig.decode_rules), with the interleaved branch's own size rules where it decodes."""

    min_side: int         # px, both sides
    max_aspect: float     # longer side / shorter side
    max_pixels: int       # decompression-bomb limit
    max_image_bytes: int  # larger bodies are not decoded
    formats: tuple[str, ...] = DEFAULT_FORMATS  # Pillow formats decoded


class ImageRejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def to_rgb(im: Image.Image) -> Image.Image:
    """Any Pillow mode -> RGB: 16-bit/float scaled to 8 bits, transparency composited on white."""
    if im.mode in HIGH_BIT_MODES:
        arr = np.asarray(im, dtype=np.float64)
        top = float(arr.max()) if arr.size else 0.0
        arr = arr * (255.0 / top) if top > 0 else arr
        im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L")
    if im.mode in ("P", "L", "1", "RGB") and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        im = im.convert("RGBA")
        canvas = Image.new("RGB", im.size, WHITE)
        canvas.paste(im, mask=im.getchannel("A"))
        return canvas
    return im if im.mode == "RGB" else im.convert("RGB")


def open_image(data: bytes, rules: DecodeRules, work_side: int | None = None) -> tuple[Image.Image, dict]:
    """Decode `data` defensively into an RGB image; raises ImageRejected with a reason.
    `work_side` lets JPEG decode at a reduced DCT scale (never below that side): the full stream is
    still decoded, so truncation is still caught. Returns (rgb image, header facts)."""
    if len(data) > rules.max_image_bytes:
        raise ImageRejected("image_too_large", f"{len(data)} bytes")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            warnings.simplefilter("ignore", UserWarning)  # palette-transparency notices
            im = Image.open(io.BytesIO(data), formats=list(rules.formats))
            width, height = im.size
            if width * height > rules.max_pixels:
                raise ImageRejected("decompression_bomb", f"{width}x{height} > {rules.max_pixels} px")
            orientation = im.getexif().get(EXIF_ORIENTATION, 1)
            if orientation in (5, 6, 7, 8):
                width, height = height, width
            check_size(width, height, rules)
            facts = {"width": width, "height": height, "format": im.format or "",
                     "frames": int(getattr(im, "n_frames", 1) or 1)}
            if work_side and im.format == "JPEG":
                im.draft("RGB", (work_side, work_side))
            im.load()
            im = ImageOps.exif_transpose(im) if orientation != 1 else im
            return to_rgb(im), facts
    except ImageRejected:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageRejected("decompression_bomb", str(exc)[:200]) from None
    except UnidentifiedImageError:
        raise ImageRejected("not_an_image", f"not one of {','.join(rules.formats)}") from None
    except EOFError as exc:
        raise ImageRejected("truncated", repr(exc)[:200]) from None
    except OSError as exc:
        reason = "truncated" if "truncated" in str(exc).lower() else "decode_error"
        raise ImageRejected(reason, str(exc)[:200]) from None
    except Exception as exc:  # SyntaxError, ValueError, struct.error...: a hostile file costs one image
        raise ImageRejected("decode_error", repr(exc)[:200]) from None


def check_size(width: int, height: int, rules: DecodeRules) -> None:
    if min(width, height) < rules.min_side:
        raise ImageRejected("too_small", f"{width}x{height} < {rules.min_side} px")
    if max(width, height) > rules.max_aspect * min(width, height):
        raise ImageRejected("bad_aspect", f"{width}x{height} > {rules.max_aspect}:1")


def phash(rgb: Image.Image) -> int:
    """imagehash.phash of `rgb` after a box reduction to about PHASH_WORK_SIDE px (cheap on large images)."""
    factor = min(rgb.size) // PHASH_WORK_SIDE
    if factor >= 2:
        rgb = rgb.reduce(factor)
    return int(str(imagehash.phash(rgb)), 16)


def decode_image(data: bytes, rules: DecodeRules) -> DecodedImage | str:
    """DecodedImage, or the reason the bytes are rejected under `rules`."""
    try:
        rgb, facts = open_image(data, rules, PHASH_WORK_SIDE)
    except ImageRejected as err:
        return err.reason
    return DecodedImage(sha256=hashlib.sha256(data).hexdigest(), phash=phash(rgb), **facts)


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


class ClipScorer:
    """Image–text cosine similarity with a CLIPModel, SiglipModel or Siglip2Model (local path or hub
    name). The image embeddings come with the scores, for embedding dedup with the same model."""

    def __init__(self, model: str, device: str = "cpu"):
        import torch
        from transformers import AutoConfig, AutoProcessor, CLIPModel, Siglip2Model, SiglipModel

        kind = AutoConfig.from_pretrained(model).model_type
        classes = {"clip": CLIPModel, "siglip": SiglipModel, "siglip2": Siglip2Model}
        if kind not in classes:
            raise ValueError(f"{model}: model type {kind!r} is not one of {sorted(classes)}")
        self.torch = torch
        self.device = device
        self.model = classes[kind].from_pretrained(model).to(device).eval()
        self.processor = AutoProcessor.from_pretrained(model)
        self.padding = "max_length" if kind.startswith("siglip") else True  # SigLIP was trained on padded text
        # the text tower's own length (CLIP: 77), whatever the tokenizer's model_max_length says
        self.max_tokens = self.model.config.text_config.max_position_embeddings

    def encode(self, images: list[Image.Image], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """L2-normalised (image embeddings, text embeddings), one row per pair."""
        with self.torch.inference_mode():
            inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=self.padding,
                                    truncation=True, max_length=self.max_tokens).to(self.device)
            out = self.model(**inputs)
            img = self.torch.nn.functional.normalize(out.image_embeds.float(), dim=-1)
            txt = self.torch.nn.functional.normalize(out.text_embeds.float(), dim=-1)
        return img.cpu().numpy(), txt.cpu().numpy()

    def score(self, images: list[Image.Image], texts: list[str]) -> list[float]:
        img, txt = self.encode(images, texts)
        return [float(s) for s in (img * txt).sum(axis=1)]
