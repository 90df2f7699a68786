"""Paragraph-level rules for interleaved documents (no Beam here): each paragraph of a document's text
nodes is judged on its own and removed when it fails, before the document-level rules see what is left
(OBELICS, Laurençon et al. 2023, sec. 3.3 and its `config_filter_web_documents.yaml`: node-level
filtering, then document-level thresholds on the rest).

A web document's paragraph is a line of a text node (the linearisation puts every block element, a
paragraph, heading, list item or table row, on a line of its own); a PDF's is a whole text block (its
lines are where the layout wrapped). The rules are OBELICS's node-level rules that hold in any language,
with its thresholds:
- `node_words`: fewer than 4 or more than 1,000 words (words as the quality rules count them: one per Han
  or Kana character, so a Chinese paragraph is not one word);
- `node_char_repetition` (off by default): character 10-grams, the share of all of them taken by the
  most repeated (at most sqrt(distinct) of those that occur more than once) > 0.1. On paragraphs its
  sqrt cap ranks a phrase loop below real prose (docs/design.md, "Interleaved documents"); the word
  rule below catches loops;
- `node_word_repetition`: word 5-grams that occur more than once, their share of all > 0.1;
- `node_special_characters`: characters that are not letters or combining marks (punctuation, symbols,
  digits, whitespace) > 0.3 of the paragraph (a table row's cell separators counted as the space they
  stand for): code, markup, number tables, separator rows;
- `node_punctuation`: a paragraph of 12 or more words and punctuation marks with less than 0.1% of
  them punctuation (`, ; : ? ! .` and their forms in CJK, Arabic, Greek, Devanagari, Armenian and
  Ethiopic text; a table row's cell separators count too): a run of keywords, not prose.
A PDF's block that fails the punctuation rule alone but carries on a passing neighbour's sentence stays
(`continues`: a wrapped line a column break left alone); PDFs' thresholds differ where scholarly text
needs it (`interleaved_text.pdf_nodes`). OBELICS's English-only node rules (stop-word and common-word
ratios, flagged words) are left out: the documents here are in any language, and the document-level
rules (the quality stage's, per kind of document) judge the rest.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool

# CELL_SEPARATOR, between a table row's cells: the special-character rule sees it as the space it stands
# for, and the punctuation rule counts it as a mark (a row's cells are no keyword run).
from extract.interleaved import CELL_SEPARATOR
from filters.quality import _MARKS, char_classes, tokenize

# Runs of letters (any script: \w less digits and "_") and runs of combining marks: every other character
# (punctuation, symbols, digits, whitespace) is a special character. Matched as runs of two plain classes:
# far fewer matches than characters, and no lookahead at each character.
_LETTER_OR_MARK_RUN = re.compile(rf"[^\W\d_]+|[{_MARKS}]+")
# OBELICS's punctuation (, ; : ? ! .), and the same marks of other scripts: full-width and CJK, Arabic
# (، ؛ ؟ ۔), Greek question mark, Devanagari danda, Armenian, Ethiopic.
PUNCTUATION = (",;:?!.\uff0c\uff1b\uff1a\uff1f\uff01\uff0e\u3001\u3002\u060c\u061b\u061f\u06d4"
               "\u037e\u0964\u0965\u0589\u055d\u055e\u1362\u1363\u1364\u1367")
_PUNCTUATION = re.compile(f"[{re.escape(PUNCTUATION)}]")


class NodeRules(BaseModel):
    """The paragraph rules' switches and thresholds (OBELICS's node-level values)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: StrictBool = Field(True, description="judge each paragraph and remove the failing ones before the "
                                                  "document rules (OBELICS's node-level filtering)")
    min_words: int = Field(4, ge=0, description="fewer words: node_words (OBELICS: 4)")
    max_words: int = Field(1000, ge=1, description="more words: node_words (OBELICS: 1,000)")
    char_repetition_n: int = Field(10, ge=1, description="character n-gram length of the repetition ratio")
    max_char_repetition: Optional[float] = Field(None, ge=0, le=1, description=(
        "node_char_repetition above this (OBELICS: 0.1); null: off (on paragraphs it ranks phrase loops below "
        "real prose: filters/nodes.py)"))
    word_repetition_n: int = Field(5, ge=1, description="word n-gram length of the repetition ratio")
    max_word_repetition: float = Field(0.1, ge=0, le=1, description="node_word_repetition above this (OBELICS: 0.1)")
    max_special_characters: float = Field(0.3, ge=0, le=1, description="node_special_characters above this: "
                                                                         "not letters or marks (OBELICS: 0.3)")
    min_punctuation: float = Field(0.001, ge=0, le=1, description="node_punctuation below this share of words "
                                                                  "and marks (OBELICS: 0.001)")
    punctuation_min_words: int = Field(12, ge=0, description="the punctuation rule judges paragraphs of at least "
                                                             "this many words and marks (OBELICS: 12)")


def char_repetition(text: str, n: int) -> float:
    """OBELICS's character repetition ratio: of the text's character n-grams, the share taken by the
    most frequent ones that repeat, at most sqrt(distinct n-grams) of them."""
    counts = Counter(text[i:i + n] for i in range(len(text) - n + 1))
    if not counts:
        return 0.0
    repeated = sorted((c for c in counts.values() if c > 1), reverse=True)
    top = repeated[:int(math.sqrt(len(counts)))]
    return sum(top) / (len(text) - n + 1)


def word_repetition_python(words: list[str], n: int) -> float:
    """OBELICS's word repetition ratio: the share of word n-grams that occur more than once (none where no
    word does). The oracle of filters/_words.c, which `word_repetition` is where it was built."""
    total = len(words) - n + 1
    if total <= 0 or len(set(words)) == len(words):
        return 0.0
    counts = Counter(zip(*(words[i:] for i in range(n))))
    return sum(c for c in counts.values() if c > 1) / total


def paragraph_counts_python(text: str) -> tuple[int, int]:
    """(how many characters of `text` are neither letters nor combining marks, how many are PUNCTUATION):
    the oracle of filters/_words.c, which `paragraph_counts` is where it was built."""
    return len(text) - sum(map(len, _LETTER_OR_MARK_RUN.findall(text))), len(_PUNCTUATION.findall(text))


try:
    from filters import _words  # built by `pip install` (setup.py) where a C compiler is

    def paragraph_counts(text: str) -> tuple[int, int]:
        """See `paragraph_counts_python`."""
        return _words.paragraph_counts(text, char_classes(), PUNCTUATION)

    word_repetition = _words.word_repetition  # (words: list[str], n: int) -> float; see `word_repetition_python`
except ImportError:
    paragraph_counts, word_repetition = paragraph_counts_python, word_repetition_python


def judge_paragraph(text: str, rules: NodeRules) -> str | None:
    """The first paragraph rule `text` fails, or None."""
    words = tokenize(text.lower())
    if not rules.min_words <= len(words) <= rules.max_words:
        return "node_words"
    if rules.max_char_repetition is not None and \
            char_repetition(text, rules.char_repetition_n) > rules.max_char_repetition:
        return "node_char_repetition"
    if word_repetition(words, rules.word_repetition_n) > rules.max_word_repetition:
        return "node_word_repetition"
    plain = text.replace(CELL_SEPARATOR, " ") if CELL_SEPARATOR in text else text  # cells as the page shows them
    special, marks = paragraph_counts(plain)  # a separator holds no punctuation: the same marks as in `text`
    if special / len(plain) > rules.max_special_characters:
        return "node_special_characters"
    marks += text.count(CELL_SEPARATOR)
    if len(words) + marks >= rules.punctuation_min_words and marks / (len(words) + marks) < rules.min_punctuation:
        return "node_punctuation"
    return None


# A block that ends in one of these (or in a closing quote or bracket after one) ends its sentence.
_SENTENCE_END = ".!?:;\u3002\uff01\uff1f\u0964\u06d4\u061f\u0589\u1362"
_CLOSERS = "\"'\u201d\u2019)]\u00bb"


def continues(block: str, next_block: str) -> bool:
    """Whether `next_block` carries on a sentence `block` leaves open, as where a PDF's layout breaks a
    paragraph across columns or pages: `block` ends in a letter, a hyphen or a comma (not a sentence
    end, not a page number) and `next_block` starts with a lower-case letter (scripts without case
    never join)."""
    end = block.rstrip().rstrip(_CLOSERS)
    return bool(end) and (end[-1].isalpha() or end[-1] in "-,\u2010") and next_block.lstrip()[:1].islower()


def _rescued(texts: list, i: int, verdicts: list, rules: NodeRules) -> bool:
    """Whether text block `i`, which fails the punctuation rule alone, carries on the sentence of a
    neighbouring block that passes (next to it in reading order), and the two pass as one paragraph:
    a wrapped line of prose left alone by a column or page break has no punctuation mark of its own.
    (The other rules judge what a block is, however the layout cut it.)"""
    if verdicts[i] != "node_punctuation":
        return False
    for j in (i - 1, i + 1):
        if not 0 <= j < len(texts) or texts[j] is None or verdicts[j] is not None:
            continue
        first, then = (texts[j], texts[i]) if j < i else (texts[i], texts[j])
        if continues(first, then) and judge_paragraph(f"{first.strip()} {then.strip()}", rules) is None:
            return True
    return False


def filter_text_nodes(nodes: list[dict], rules: NodeRules, by_line: bool) -> tuple[list[dict], list[tuple[str, str]]]:
    """The nodes with every failing paragraph removed from their text and text nodes left empty removed;
    image nodes keep their place (and their caption and alt). A paragraph is a line of a text node
    (`by_line`: a web page's linearisation), else a whole text node (a PDF's block); a block that fails
    the punctuation rule alone stays when it carries on the sentence of a neighbouring block that
    passes and the two pass together (one wrapped line of a paragraph broken at a column's foot). Also
    (reason, paragraph) for each paragraph removed, in order."""
    if not rules.enabled:
        return nodes, []
    if not by_line:
        texts = [n["text"] if n["type"] == "text" else None for n in nodes]
        verdicts = [judge_paragraph(t, rules) if t is not None and t.strip() else None for t in texts]
        for i, verdict in enumerate(verdicts):
            if _rescued(texts, i, verdicts, rules):
                verdicts[i] = None
        removed = [(v, t) for v, t in zip(verdicts, texts) if v is not None]
        return [n for n, v in zip(nodes, verdicts) if v is None and (n["type"] != "text" or n["text"].strip())], removed
    out, removed = [], []
    for node in nodes:
        if node["type"] != "text":
            out.append(node)
            continue
        kept = []
        for paragraph in node["text"].split("\n"):
            reason = judge_paragraph(paragraph, rules) if paragraph.strip() else None
            if reason is None:
                kept.append(paragraph)
            else:
                removed.append((reason, paragraph))
        text = "\n".join(kept).strip()
        if text:
            out.append(node if text == node["text"] else {**node, "text": text})
    return out, removed
