"""Cross-lingual recurrence: which other languages of the corpus a document's content recurs in.

Machine-translated text restates content that exists in other languages; a document whose content has
near-translations in several other languages of the corpus is implicit repetition (Thompson et al.
2024, "A Shocking Amount of the Web is Machine Translated", arXiv 2401.05749, count the languages a
sentence recurs in across multi-way parallel web text). They match translations with a multilingual
sentence encoder (LASER); no PyPI wheel ships the weights of one that works across languages
(laser-encoders and model2vec download theirs at run time; wordllama's English-trained embeddings
score an unrelated same-language pair above a translation), so this matches what translation leaves
unchanged instead:

- **Anchors**: the tokens a translator copies: numbers (digits only, so 1,000 / 1.000 / 1000 agree),
  tokens mixing letters and digits (UTF-8, H2O), URLs and code-like tokens, acronyms (HTML), inner
  capitals (JavaScript), Latin-script words inside a text of another script (the Unicode of a Russian
  page), and capitalised Latin words that do not open a sentence (names), except in languages that
  capitalise every noun (German, Luxembourgish), where that rule would take every noun.
- **Anchor pairs**: consecutive anchors in document order, hashed (a translation keeps the order of
  what it copies; a pair is far rarer than an anchor, so two pages of one site sharing "HTML" and "2"
  share few pairs).
- **A match**: two documents in different languages sharing at least `min_shared` anchor pairs that
  make at least `min_containment` of the smaller document's pairs. An anchor pair found in more than
  `max_documents` documents (a site's boilerplate, a common date) is not evidence and is skipped: this
  bounds the pairs a shuffle key can emit (Elsayed et al. 2008, pairwise similarity with MapReduce).

Linear in the text: one regex without nested quantifiers, each gap between tokens read once.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel, ConfigDict, Field

_TOKEN = re.compile(r"[^\W_]+(?:[-.,/:#=+][^\W_]+)*")
_SENTENCE_END = re.compile("[.!?:;\n\u3002\uff01\uff1f]")
_DIGIT = re.compile(r"\d")
_CODE = re.compile(r"[./:#=+]")
NOUN_CAPITALISING = frozenset({"de", "lb"})
_FOREIGN_SCRIPT = 0x370  # code points from Greek on are not Latin script
_FOREIGN_SHARE = 0.3  # a text is in another script when this share of its words are


class CrossLingualConfig(BaseModel):
    """Thresholds of a cross-lingual match (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    min_shared: int = Field(3, ge=1, description="anchor pairs two documents of different languages must share")
    min_containment: float = Field(0.3, gt=0, le=1, description=(
        "the shared anchor pairs' share of the smaller document's anchor pairs"))
    max_documents: int = Field(50, ge=2, description=(
        "an anchor pair in more documents than this is skipped as evidence (boilerplate, common dates)"))
    drop_at_languages: int | None = Field(None, ge=1, description=(
        "drop a document whose content recurs in at least this many other languages (translated_elsewhere); "
        "null: only score it"))


def _foreign(word: str) -> bool:
    return ord(word[0]) >= _FOREIGN_SCRIPT


def anchors(text: str, lang: str = "") -> list[str]:
    """The document's anchors in order, lower-cased (module docstring)."""
    tokens = list(_TOKEN.finditer(text))
    foreign = sum(1 for m in tokens if _foreign(m.group())) > _FOREIGN_SHARE * len(tokens)
    names = not foreign and lang.split("-")[0] not in NOUN_CAPITALISING
    out, end = [], 0
    for m in tokens:
        word = m.group()
        opens = end == 0 or _SENTENCE_END.search(text, end, m.start()) is not None
        end = m.end()
        if not word.isascii():
            continue
        if word.isalpha():  # most words: the digit and code checks cannot apply
            if word.islower():
                if foreign and len(word) >= 3:
                    out.append(word)
            elif (len(word) >= 2 and word.isupper()) or word[1:] != word[1:].lower():
                out.append(word.lower())
            elif len(word) >= 3 and (foreign or (names and not opens)):
                out.append(word.lower())
        elif _DIGIT.search(word):
            keep = str.isalnum if any(c.isalpha() for c in word) else str.isdigit
            out.append("".join(c for c in word.lower() if keep(c)))
        elif _CODE.search(word) or (len(word) >= 2 and word.isupper()) \
                or ("-" not in word and word[1:] != word[1:].lower()):
            out.append(word.lower())
        elif len(word) >= 3 and (foreign or (names and not opens and word[0].isupper())):
            out.append(word.lower())
    return out


def anchor_pairs(text: str, lang: str = "") -> list[int]:
    """The distinct hashes of consecutive anchor pairs, sorted (64-bit, stable across processes)."""
    found = anchors(text, lang)
    return sorted({int.from_bytes(hashlib.blake2b(f"{a}\x1f{b}".encode(), digest_size=8).digest(), "little")
                   for a, b in zip(found, found[1:])})


def is_match(shared: int, size_a: int, size_b: int, cfg: CrossLingualConfig) -> bool:
    """Two documents of different languages sharing `shared` anchor pairs of their `size_a`, `size_b`."""
    return shared >= cfg.min_shared and shared >= cfg.min_containment * min(size_a, size_b)
