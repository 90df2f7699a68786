"""Exact deduplication on normalized text (the C4 / Gopher exact-match step, done per document).

Normalization removes differences that do not change content: Unicode compatibility forms, case,
punctuation and whitespace. One survivor per hash, chosen as the smallest document id, so the choice
does not depend on arrival order, worker count or runner.
"""

from __future__ import annotations

import re
import unicodedata

import xxhash

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def word_runs_python(text: str) -> str:
    """The runs of alphanumeric characters of `text` joined by one space: the oracle of
    filters/_words.c `word_runs`, which `word_runs` is where it was built."""
    return _NON_WORD.sub(" ", text).strip()


try:
    from filters._words import word_runs  # built by `pip install` (setup.py) where a C compiler is
except ImportError:
    word_runs = word_runs_python


def normalize_for_hash(text: str) -> str:
    """NFKC, casefolded, every run of characters that are not letters or digits as one space."""
    return word_runs(unicodedata.normalize("NFKC", text).casefold())


def text_hash(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(normalize_for_hash(text).encode("utf-8"))

