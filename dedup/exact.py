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


def normalize_for_hash(text: str) -> str:
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def text_hash(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(normalize_for_hash(text).encode("utf-8"))

