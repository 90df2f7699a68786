"""Samples: what the shards hold for each final document, whatever its modality (DeepSeek-V4.1 report
§1.3: the pretraining corpus is the text set and the multimodal set, image-text pairs and interleaved
documents, mixed at a fixed token ratio).

A sample is a list of parts, each a text or an image:

    text         OUT/docs/text         [text]
    interleaved  OUT/docs/interleaved  its nodes in order: consecutive text nodes joined by a blank line
                                       into one text part, each image node an image part
    pair         OUT/docs/pairs        [image, caption]: the image first, then its text (alt text,
                                       figure caption or adjacent text: `text_source`), as a captioning
                                       sample (the model reads the image and learns to describe it)

tokens(sample) = [BOS] + tokens(part 1) + tokens(part 2) + ... + [EOS], where a text part is encoded on
its own (add_special_tokens=False, as packing/tokenizer.py) and an image part is `tokens` copies of the
image placeholder id (DeepSeek-V3's `<｜image｜>`), tokens = the visual-token count of the image resized
by the vision policy (packing/vision.py). A text document is one text part, so its tokens are exactly
tokens(doc) of packing/tokenizer.py. The trainer writes the image's embeddings over its block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packing.tokenizer import ID_DTYPE, DocTokenizer
from packing.vision import VisionPolicy, fitted_size

MODALITIES = ("text", "pair", "interleaved")
TEXT, PAIR, INTERLEAVED = MODALITIES
MULTIMODAL = (PAIR, INTERLEAVED)


@dataclass(frozen=True)
class ImagePart:
    sha256: str
    width: int   # resized, pixels
    height: int
    tokens: int


def image_part(sha256: str, width: int, height: int, policy: VisionPolicy) -> ImagePart:
    w, h = fitted_size(int(width), int(height), policy)
    unit = policy.patch * policy.merge
    return ImagePart(sha256, w, h, (w // unit) * (h // unit))


def sample_parts(doc: dict, modality: str, policy: VisionPolicy) -> list:
    """The parts of a document of `modality` (module docstring); empty texts are left out."""
    if modality == TEXT:
        return [doc["text"]] if doc.get("text") else []
    if modality == PAIR:
        return [image_part(doc["image_sha256"], doc["width"], doc["height"], policy)] + (
            [doc["alt"]] if doc.get("alt") else [])
    parts: list = []
    for node in doc["nodes"]:
        if node["type"] == "image":
            parts.append(image_part(node["image_sha256"], node["width"], node["height"], policy))
        elif node.get("text"):
            if parts and isinstance(parts[-1], str):
                parts[-1] += "\n\n" + node["text"]
            else:
                parts.append(node["text"])
    return parts


@dataclass
class EncodedSample:
    ids: np.ndarray   # uint32 tokens(sample)
    images: list      # [first visual token, tokens, sha256, height, width] per image, in order
    texts: list       # (first token, text) per text part: for the chunk boundaries

    @property
    def visual_tokens(self) -> int:
        return sum(n for _, n, *_ in self.images)


def encode_samples(tok: DocTokenizer, samples: list[list], image_id: int | None) -> list[EncodedSample]:
    """tokens(sample) of each sample, all text parts of the batch in one tokenizer call."""
    texts = [part for parts in samples for part in parts if isinstance(part, str)]
    encoded = iter(tok.encode_texts(texts))
    out = []
    for parts in samples:
        pieces, images, spans, at = [tok.prefix_ids], [], [], len(tok.prefix)
        for part in parts:
            if isinstance(part, str):
                ids = next(encoded)
                spans.append((at, part))
            else:
                if image_id is None:
                    raise ValueError("the tokenizer has no image placeholder token (pack.image_token)")
                ids = np.full(part.tokens, image_id, dtype=ID_DTYPE)
                images.append([at, part.tokens, part.sha256, part.height, part.width])
            pieces.append(ids)
            at += len(ids)
        pieces.append(tok.suffix_ids)
        out.append(EncodedSample(np.concatenate(pieces).astype(ID_DTYPE, copy=False), images, spans))
    return out
