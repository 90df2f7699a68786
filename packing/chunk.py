"""Deterministic chunking of over-long documents, before mixing (DeepSeek-V4.1 report §4.1: so that
training tokens are spread evenly over data shards and training steps).

A document of n tokens (tokens(doc), see packing/tokenizer.py) longer than the chunk limit C is cut
into consecutive chunks of at most C tokens. Each cut is placed greedily from the front: the next cut
lies in the window (s + C - W, s + C] after the current chunk start s, at the position of the best
boundary class found there, the latest one among equals (so chunks stay long):

    PARAGRAPH (3)   the text before the cut ends in a blank line
    SENTENCE  (2)   ... ends a sentence (. ! ? … followed by space, 。！？, or a line break)
    WORD      (1)   whitespace on either side, or a character of a script written without spaces
    TOKEN     (0)   any other token boundary (also: right after BOS, right before EOS)
    INSIDE_CHAR(-1) a byte-level token that starts inside a multi-byte character

The window is W = min(window, C // 8) tokens, so every chunk but the last holds more than 7/8 C.
Cuts are on the token sequence of the *whole* document, so the chunks concatenated in index order are
exactly tokens(doc): no re-tokenization at a seam. A cut depends only on the document's text and its
token offsets, never on the runner, worker count or the rest of the corpus. Chunk id = (doc id, index).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

PARAGRAPH, SENTENCE, WORD, TOKEN, INSIDE_CHAR = 3, 2, 1, 0, -1
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*$")
_SENTENCE = re.compile(r"[.!?…][\"'”’)\]]*\s+$")
_SENTENCE_AT_END = re.compile(r"[.!?…][\"'”’)\]]*$")
_CJK_SENTENCE = re.compile(r"[。！？][」』”’）)]*\s*$")
_HEAD = 8  # characters before a cut that decide its class
_NO_SPACE_SCRIPTS = "\u2e80"  # CJK radicals onwards: Han, kana, Hangul, full-width forms


def chunk_window(limit: int, window: int) -> int:
    return max(1, min(window, limit // 8))


def chunk_ends(n: int, limit: int, window: int, boundary: Callable[[int], int]) -> list[int]:
    """Exclusive end positions of the chunks of an n-token document (the last is n).

    `boundary(p)` is the class of a cut right before token p (0 < p < n)."""
    if limit <= 0:
        raise ValueError(f"chunk limit must be positive, got {limit}")
    w = chunk_window(limit, window)
    ends, start = [], 0
    while n - start > limit:
        best, best_class = start + limit, None
        for p in range(start + limit, start + limit - w, -1):
            c = boundary(p)
            if best_class is None or c > best_class:
                best, best_class = p, c
                if c == PARAGRAPH:
                    break
        ends.append(best)
        start = best
    ends.append(n)
    return ends


class TextBoundaries:
    """`boundary(p)` for a document tokenized as [BOS]*prefix + text tokens + [EOS]*...: the class of a
    cut before document token p, from the text around the start of text token p - prefix."""

    def __init__(self, text: str, offsets: Sequence[tuple[int, int]], prefix: int):
        self.text, self.offsets, self.prefix = text, offsets, prefix

    def __call__(self, p: int) -> int:
        j = p - self.prefix
        if j <= 0 or j >= len(self.offsets):
            return TOKEN
        c = self.offsets[j][0]
        if c < self.offsets[j - 1][1]:
            return INSIDE_CHAR
        head = self.text[max(0, c - _HEAD):c]
        nxt = self.text[c:c + 1]
        if _PARAGRAPH.search(head):
            return PARAGRAPH
        if (head.endswith("\n") or _SENTENCE.search(head) or _CJK_SENTENCE.search(head)
                or (nxt.isspace() and _SENTENCE_AT_END.search(head))):
            return SENTENCE
        if head[-1:].isspace() or nxt.isspace() or head[-1:] >= _NO_SPACE_SCRIPTS:
            return WORD
        return TOKEN


def split_document(text: str, n_tokens: int, offsets_of: Callable[[], Sequence[tuple[int, int]]],
                   prefix: int, limit: int, window: int) -> list[int]:
    """Chunk ends for one document; `offsets_of()` (the tokenizer's character offsets of the text
    tokens) is called only when the document is longer than `limit`."""
    if n_tokens <= limit:
        return [n_tokens]
    offsets = offsets_of()
    if not prefix + len(offsets) <= n_tokens <= prefix + len(offsets) + 1:
        raise ValueError(f"{len(offsets)} token offsets do not match a document of {n_tokens} tokens")
    return chunk_ends(n_tokens, limit, window, TextBoundaries(text, offsets, prefix))
