"""Where a line ends a sentence: FineWeb's line-punctuation rule as filters/quality.py applies it
(a line that ends in terminal punctuation, perhaps inside closing quotes or brackets). A module of its
own, with nothing but `re`, so that the extractor's child processes (extract/sandbox.py) can use the
same rule without loading the quality rules' dependencies."""

from __future__ import annotations

import re

# Sentence terminators that need no following space (CJK and other scripts).
TERMINAL_NOSPACE = "。｡！？．؟۔।॥։።။།។‼⁇⁈⁉"
CLOSERS = "\"'”’“»«›‹」』）)]】〕〉》"  # closing quotes / brackets
LINE_END_CHARS = frozenset(".!?" + TERMINAL_NOSPACE + "\"'”’“»«›‹」』")
BRACKET_END_RE = re.compile(rf"[.!?{TERMINAL_NOSPACE}][{re.escape(CLOSERS)}]+$")


def ends_with_terminal(line: str) -> bool:
    """`line` (stripped, not empty) ends a sentence."""
    last = line[-1]
    return last in LINE_END_CHARS or (last in CLOSERS and BRACKET_END_RE.search(line) is not None)
