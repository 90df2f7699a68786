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
    INSIDE_IMAGE(-2) inside an image's block of visual tokens: never cut (the block is atomic)

The window is W = min(window, C // 8) tokens, so every chunk but the last holds more than 7/8 C. When
the whole window lies inside an image block, the cut goes right before the block (a shorter chunk); a
block that starts a chunk and is longer than C cannot be placed (ImageBlockTooLong).
Cuts are on the token sequence of the *whole* document, so the chunks concatenated in index order are
exactly tokens(doc): no re-tokenization at a seam. A cut depends only on the document's text and its
token offsets, never on the runner, worker count or the rest of the corpus. Chunk id = (doc id, index).
"""

from __future__ import annotations

import bisect
import re
from typing import Callable, Sequence

PARAGRAPH, SENTENCE, WORD, TOKEN, INSIDE_CHAR, INSIDE_IMAGE = 3, 2, 1, 0, -1, -2
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*$")
_SENTENCE = re.compile(r"[.!?…][\"'”’)\]]*\s+$")
_SENTENCE_AT_END = re.compile(r"[.!?…][\"'”’)\]]*$")
_CJK_SENTENCE = re.compile(r"[。！？][」』”’）)]*\s*$")
_HEAD = 8  # characters before a cut that decide its class
_NO_SPACE_SCRIPTS = "\u2e80"  # CJK radicals onwards: Han, kana, Hangul, full-width forms


def chunk_window(limit: int, window: int) -> int:
    return max(1, min(window, limit // 8))


class ImageBlockTooLong(ValueError):
    """An image's visual-token block is longer than the chunk limit: no chunking can keep it whole."""


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
            if c != INSIDE_IMAGE and (best_class is None or c > best_class):
                best, best_class = p, c
                if c == PARAGRAPH:
                    break
        if best_class is None:  # the window is inside an image block: cut right before the block
            best = next((p for p in range(start + limit - w, start, -1) if boundary(p) != INSIDE_IMAGE), None)
            if best is None:
                raise ImageBlockTooLong(f"an image block at token {start} is longer than the chunk limit {limit}")
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


class SampleBoundaries:
    """`boundary(p)` for a sample whose tokens are [BOS] + text and image parts + [EOS]
    (packing/samples.py): inside an image block INSIDE_IMAGE, at either edge of one PARAGRAPH (an image
    stands apart like a paragraph), in a text part the TextBoundaries of that part. A part's token
    offsets are computed only when a cut is looked for inside it."""

    def __init__(self, texts: Sequence[tuple[int, str]], images: Sequence[Sequence], offsets_of: Callable):
        self.texts = list(texts)  # (first token of the part, its text), in order
        self.edges = {edge for start, n, *_ in images for edge in (start, start + n)}
        self.inside = [(start, start + n) for start, n, *_ in images]
        self.offsets_of, self._parts = offsets_of, {}

    def __call__(self, p: int) -> int:
        if p in self.edges:
            return PARAGRAPH
        if any(a < p < b for a, b in self.inside):
            return INSIDE_IMAGE
        k = bisect.bisect_right([start for start, _ in self.texts], p) - 1
        if k < 0:
            return TOKEN
        if k not in self._parts:
            start, text = self.texts[k]
            self._parts[k] = TextBoundaries(text, self.offsets_of(text), start)
        return self._parts[k](p)


def split_sample(n_tokens: int, limit: int, window: int, boundary_of: Callable[[], Callable[[int], int]]) -> list[int]:
    """Chunk ends of one sample of n_tokens; `boundary_of()` (its boundary function) is called only
    when the sample is longer than `limit`."""
    if n_tokens <= limit:
        return [n_tokens]
    return chunk_ends(n_tokens, limit, window, boundary_of())


def split_document(text: str, n_tokens: int, offsets_of: Callable[[], Sequence[tuple[int, int]]],
                   prefix: int, limit: int, window: int) -> list[int]:
    """Chunk ends for one text document (tokens(doc) = prefix BOS tokens + text tokens + EOS);
    `offsets_of()` (the tokenizer's character offsets of the text tokens) is called only when the
    document is longer than `limit`."""
    def boundary():
        offsets = offsets_of()
        if not prefix + len(offsets) <= n_tokens <= prefix + len(offsets) + 1:
            raise ValueError(f"{len(offsets)} token offsets do not match a document of {n_tokens} tokens")
        return TextBoundaries(text, offsets, prefix)

    return split_sample(n_tokens, limit, window, boundary)
