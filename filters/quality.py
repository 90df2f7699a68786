"""Heuristic document-quality rules: Gopher quality + repetition, C4 (doc level), FineWeb, CJK.

Pure Python (stdlib ``re`` + numpy; pydantic for the config); no Beam imports, so it can
be used from a DoFn, a notebook or a unit test alike.

Rules follow the published heuristics and datatrove's reference implementations,
with the published default thresholds:

* Gopher quality filter   -- Rae et al. 2021, "Scaling Language Models: Methods,
  Analysis & Insights from Training Gopher", appendix A.1.1 (datatrove
  ``GopherQualityFilter``).
* Gopher repetition filter -- same paper, appendix A.1.1 / table A1 (datatrove
  ``GopherRepetitionFilter``).
* C4 -- Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
  Text-to-Text Transformer", section 2.2; only the *document-level* parts of datatrove's
  ``C4QualityFilter`` (lorem ipsum, curly bracket, minimum sentence count).  Lines are
  never rewritten or dropped here.
* FineWeb -- Penedo et al. 2024, "The FineWeb Datasets" (datatrove ``FineWebQualityFilter``).
* CJK -- this project's rules for what the word rules cannot see in Chinese and Japanese text
  (each Han/Kana character is a word there): text written one character per bracket pair.

Every rule -- threshold field, comparison, reason code, measured value, default and
source -- is declared once, in :data:`RULES`; :class:`QualityConfig`'s threshold fields
and :class:`QualityFilter`'s ``reason_codes`` / ``value_keys`` / checks are generated from
it.  Every measured value is returned so a dropped document can be audited.  Usage::

    qf = QualityFilter(QualityConfig.from_dict(cfg_dict))
    reasons, values = qf(text, lang)        # reasons == [] -> keep

Multilingual behaviour (documented per measure function below):

* One tokenizer, :func:`tokenize`, is used by every rule.  Space-delimited scripts are
  split into runs of letters/digits/combining marks (internal ``'``/``’``/``-`` kept,
  other punctuation dropped); every Han / Hiragana / Katakana character is one word, so
  zh/ja documents get sane word counts and n-gram statistics.  Hangul is space-delimited
  and tokenized like Latin.
* Blank (whitespace-only) lines are ignored by every line-based rule, and lines are
  compared after stripping surrounding whitespace, so the same text laid out with
  ``\\n`` or ``\\n\\n`` between paragraphs gets the same line statistics.
* Terminal punctuation covers ``. ! ?``, CJK ``。 ！ ？ ｡ ．``, other scripts' sentence
  terminators (``؟ ۔ । ॥ ։ ። ။ ། ។``) and closing quotes.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, NamedTuple, Optional

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    ValidationInfo,
    create_model,
)

from filters.line_end import CLOSERS, TERMINAL_NOSPACE, ends_with_terminal

__all__ = [
    "QualityConfig",
    "QualityFilter",
    "Rule",
    "RULES",
    "FAMILIES",
    "GUARDS",
    "tokenize",
    "normalize_lang",
    "DEFAULT_STOP_WORDS",
]

# --------------------------------------------------------------------------------------
# Character classes
# --------------------------------------------------------------------------------------

# Han + Kana: every character is one "word".  (U+3099/U+309A, the combining voicing
# marks, are deliberately left out: they are combining marks, see _MARKS.)
# Character classes are kept inside the BMP on purpose: CPython's ``re`` compiles a BMP
# class into a bitmap but checks a class with astral ranges range by range (3-4x slower
# tokenizer).  Astral Han (extensions B-G, rare) is still a letter, so a run of them
# becomes one word instead of one word per character.
_CJK = (
    "\u3005-\u3007"  # 々 〆 〇
    "\u3041-\u3096"  # Hiragana
    "\u309b-\u309f"
    "\u30a0-\u30ff"  # Katakana (incl. ー)
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
)


def _char_class(member) -> str:
    """A regex character class body of the BMP characters for which ``member(ch)`` holds, as ranges."""
    ranges: list[list[int]] = []
    for cp in range(0x10000):
        if member(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


def _mark_class() -> str:
    """Combining marks (Mn/Mc/Me) + ZWNJ/ZWJ, which stdlib ``\\w`` does not match.

    Without them Devanagari, Thai, Bengali, ... words (and NFD-normalised Latin) would be
    cut at every vowel sign.  BMP only (see above); built once at import (~8 ms).
    """
    return _char_class(lambda ch: unicodedata.category(ch)[0] == "M" and not ch.isalnum()) + "\u200c\u200d"


_MARKS = _mark_class()
# Characters of a word that are not alphabetic: digits (Nd) and the other numbers \w matches ("½", "²", "①",
# "Ⅻ"), which Gopher's "contains an alphabetic character" does not count either.
_NUMBERS = _char_class(lambda ch: ch.isalnum() and not ch.isalpha())
_LETTER = rf"[^\W_{_CJK}]"  # letter/digit of a space-delimited script (not Han/Kana)
_STEM = rf"{_LETTER}+(?:[{_MARKS}]+{_LETTER}*)*"
# Digits joined by a separator stay one word ("6,680.69", "1.86", "10:30am", "2019/05/28", "3.5mm"), as a
# whitespace split (Gopher's words) and word tokenizers (nltk, spaCy) keep them: split at each separator, a
# market report counted three words without a letter per figure and failed the alphabetic-word rule (an xsum
# report of mixed-dev: 0.735 against 0.8; 0.844 as one word per figure, 0.851 split at whitespace). Every
# alternative of the repeated group starts with its own character and cannot fail after it: a linear scan.
_WORD = rf"{_STEM}(?:['’\-]{_STEM}|(?<=\d)[.,:/](?=\d){_STEM})*"
_WORD_RE = re.compile(_WORD)
_WORD_OR_CJK_RUN_RE = re.compile(rf"({_WORD})|([{_CJK}]+)")
_CJK_RE = re.compile(rf"[{_CJK}]")
_BRACKETED_CJK_RE = re.compile(rf"[【\[（(「『〔〈《]\s?[{_CJK}]\s?[】\]）)」』〕〉》]")
# A whitespace-delimited run of punctuation/symbols ("|", "--", "==>", "•", "#"), which
# is a token for the alphabetic-word rule only (see _count_symbol_tokens).
_SYMBOL_TOKEN_RE = re.compile(r"\s[^\w\s]+(?!\S)")
_SYMBOL_TOKEN_AT_START_RE = re.compile(r"[^\w\s]+(?!\S)")
# A word token (as produced by _WORD_RE) with no alphabetic character: numbers, perhaps with separators.
_NON_ALPHA_WORD_RE = re.compile(rf"[{_NUMBERS}'’\-.,:/{_MARKS}]+")
_NUMBER_RE = re.compile(rf"[{_NUMBERS}]")

_HANGUL_SYLLABLES_RE = re.compile("[\uac00-\ud7a3]+")
# East-Asian wide / full-width characters (count double for the short-line rule).
_WIDE_RE = re.compile(
    "[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff01-\uff60\uffe0-\uffe6]"
)

_CLOSERS_CLS = re.escape(CLOSERS)

# C4 sentence counter: one match per sentence end.
#   * a ``. ! ?`` run that does not follow whitespace or another terminator (so it ends
#     a word, a number or a closing quote/bracket), is not an ellipsis ("...", "…") and
#     is followed -- after optional closing quotes/brackets -- by whitespace, the end of
#     the text or a CJK character (so the dot in "3.14" does not count);
#   * spaced punctuation, as tokenised corpora and some PDF-to-text tools write it
#     ("... to the south . although only ..."): a single ``.`` (not "..") or a ``!``/``?``
#     run between a word (or a closing bracket/quote) and a space (or the end);
#   * a missing space ("... said Mills.Allen, who ..."): a ``. ! ?`` right after two
#     lower-case letters and right before a capitalised word (so "e.g.", "Mr.Smith",
#     "U.S.Army", "node.js" and domain names do not count);
#   * a run of CJK / other-script terminators (。！？ ...), no following space needed.
# The pattern starts with a plain character class (look-arounds come second) so that
# ``re`` can skip quickly to candidate characters (4x faster than look-behind first).
_LOWER, _UPPER = "a-zß-öø-ÿа-яё", "A-ZÀ-ÖØ-ÞА-ЯЁ"
_SENT_END_RE = re.compile(
    rf"[.!?{TERMINAL_NOSPACE}]"
    rf"(?:(?<=[.!?])(?<![\s.!?…⋯].)(?!(?<=\.)\.)[.!?]*[{_CLOSERS_CLS}]*"
    rf"(?=\s|$|[{_CJK}\uac00-\ud7a3])"
    rf"|(?<=[\w{_CLOSERS_CLS}][ \t][.!?])(?!(?<=\.)\.)[!?]*(?=[ \t\n]+\S|\s*$)"
    rf"|(?<=[{_LOWER}]{{2}}[.!?])(?=[{_UPPER}][{_LOWER}])"
    rf"|(?<=[{TERMINAL_NOSPACE}])[{TERMINAL_NOSPACE}]*)"
)

_LOREM_RE = re.compile(r"lorem\s+ipsum", re.IGNORECASE)
# The lookahead only admits the positions where a branch can start: the regex engine then skips to them
# instead of trying both branches at every character (the same matches).
_ELLIPSIS_RE = re.compile(r"(?=[.…⋯])(?:\.{3,}|[…⋯]+)")
_ELLIPSIS_ENDS = ("...", "…", "⋯")
# Bullet markers (datatrove: "•" and "-").  En/em dashes are deliberately not bullets:
# they open dialogue lines in Russian, Spanish, French, ... fiction.
_BULLETS = frozenset("•‣◦●○▪▫■□►▶▸▹➢➤✓✔-*·・")
_PARA_SPLIT_RE = re.compile(r"\n\s*\n")

# --------------------------------------------------------------------------------------
# Languages
# --------------------------------------------------------------------------------------

#: Gopher's English stop words (Rae et al. 2021, A.1.1) and small equivalents
#: (most frequent function words) for other languages.  The stop-word rule is applied
#: only to languages listed here; for every other language it is skipped.
DEFAULT_STOP_WORDS: dict[str, tuple[str, ...]] = {
    "en": ("the", "be", "to", "of", "and", "that", "have", "with"),
    "de": ("der", "die", "das", "und", "zu", "ist", "nicht", "mit", "den", "dem",
           "des", "von", "sich", "ein", "eine", "auf", "für"),
    "fr": ("le", "la", "les", "de", "des", "du", "et", "un", "une", "est", "que",
           "pour", "dans", "qui"),
    "es": ("el", "la", "los", "las", "de", "y", "que", "en", "un", "una", "es", "por",
           "con", "para", "del"),
    "it": ("il", "la", "di", "e", "che", "un", "una", "per", "non", "è", "con", "del",
           "della"),
    "pt": ("o", "a", "os", "as", "de", "e", "que", "do", "da", "em", "um", "uma",
           "para", "com", "não"),
    "nl": ("de", "het", "een", "en", "van", "is", "dat", "op", "te", "met", "niet",
           "zijn"),
    "ru": ("и", "в", "не", "на", "что", "с", "по", "это", "как", "к", "из", "он", "она",
           "то"),
}

# Common ISO 639-2/3 codes (GlotLID / CLD3 style) mapped to the 639-1 codes used here.
_LANG_ALIASES = {
    "eng": "en", "deu": "de", "ger": "de", "fra": "fr", "fre": "fr", "spa": "es",
    "ita": "it", "por": "pt", "nld": "nl", "dut": "nl", "rus": "ru",
    "zho": "zh", "chi": "zh", "cmn": "zh", "yue": "zh", "wuu": "zh", "lzh": "zh",
    "jpn": "ja", "kor": "ko", "tha": "th", "lao": "lo", "khm": "km", "mya": "my",
    "bur": "my", "bod": "bo", "tib": "bo",
}


def normalize_lang(lang: str | None) -> str:
    """``"zh-Hans"``, ``"zh_TW"``, ``"__label__zh"``, ``"cmn_Hani"`` -> ``"zh"``."""
    if not lang:
        return ""
    lang = lang.strip().lower()
    if lang.startswith("__label__"):
        lang = lang[len("__label__"):]
    lang = lang.replace("_", "-").split("-", 1)[0]
    return _LANG_ALIASES.get(lang, lang)


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------


def tokenize_python(text: str) -> list[str]:
    """Word tokens of ``text``; the single tokenizer used by every rule.

    * Space-delimited scripts (Latin, Cyrillic, Greek, Hangul, Arabic, Devanagari, ...):
      maximal runs of letters/digits plus combining marks, with internal apostrophes and
      hyphens kept (``don't``, ``E-Mail``), as are ``. , : /`` between digits (``6,680.69``,
      ``10:30``); all other punctuation and symbols separate
      words and are not words themselves.
    * Han, Hiragana and Katakana: every character is one word.
    * Scripts written without spaces but not covered above (Thai, Lao, Khmer, Burmese,
      Tibetan) come out as one token per space-delimited phrase; the word-length rule is
      skipped for them (``gopher_word_length_skip_langs``).

    This is the oracle of the compiled filters/_words.c, which `tokenize` is where it was built:
    text without Han/Kana is one ``findall``; otherwise Han/Kana come out as runs that are split
    with ``list.extend`` (no per-character Python loop).
    """
    if _CJK_RE.search(text) is None:
        return _WORD_RE.findall(text)
    out: list[str] = []
    append, extend = out.append, out.extend
    for word, run in _WORD_OR_CJK_RUN_RE.findall(text):
        if word:
            append(word)
        else:
            extend(run)
    return out


@functools.cache
def char_classes() -> bytes:
    """One byte per BMP code point for filters/_words.c, from the classes the regexes above use:
    1 a mark (``_MARKS``), 2 Han/Kana (``_CJK``), 4 a number that is not a letter (``_NUMBERS``),
    8 a wide character (``_WIDE_RE``), 16 a Hangul syllable (``_HANGUL_SYLLABLES_RE``), 32 a word
    character (the regex ``\\w``) other than ``_``."""
    table, bmp = bytearray(0x10000), "".join(map(chr, range(0x10000)))
    for bit, pattern in ((1, f"[{_MARKS}]"), (2, f"[{_CJK}]"), (4, f"[{_NUMBERS}]"), (8, _WIDE_RE.pattern),
                         (16, _HANGUL_SYLLABLES_RE.pattern), (32, r"[^\W_]")):
        for m in re.finditer(pattern, bmp):
            for cp in range(*m.span()):
                table[cp] |= bit
    return bytes(table)


def word_stats_python(words: list[str], stop: frozenset[str] | None) -> tuple[int, int, int]:
    """(characters of the words, words without a letter, stop words): the oracle of
    filters/_words.c, which `word_stats` is where it was built. A word without a letter does not
    start with an alphabetic character and is decimal or made of numbers, marks and the separators
    a word may hold (``_NON_ALPHA_WORD_RE``); a stop word's lower() is in `stop`."""
    no_letter = sum(1 for w in words if not w[0].isalpha() and (w.isdecimal() or _NON_ALPHA_WORD_RE.fullmatch(w)))
    n_stop = sum(1 for w in words if w.lower() in stop) if stop else 0
    return sum(map(len, words)), no_letter, n_stop


class TextCounts(NamedTuple):
    """What the rules count over a document's whole text besides its words and lines."""

    symbol_tokens: int  #: whitespace-delimited runs of punctuation/symbols only ("|", "-->", "•", "###")
    ellipses: int  #: runs of three or more dots, runs of "…" / "⋯"
    hangul_extra_jamo: int  #: letters more when Hangul syllables are counted as jamo (`_hangul_extra_jamo`)
    cjk_chars: int  #: Han/Kana characters
    has_number: bool  #: a number that is not a letter (``_NUMBERS``) occurs
    has_wide: bool  #: an East-Asian wide / full-width character (``_WIDE_RE``) occurs


def text_counts_python(text: str) -> TextCounts:
    """The oracle of filters/_words.c, which `text_counts` is where it was built: regex scans, each skipped
    where a cheaper test shows it would find nothing."""
    ellipses = len(_ELLIPSIS_RE.findall(text)) if ("..." in text or "…" in text or "⋯" in text) else 0
    return TextCounts(
        _count_symbol_tokens(text),
        ellipses,
        _hangul_extra_jamo(text) if _HANGUL_SYLLABLES_RE.search(text) else 0,
        len(_CJK_RE.findall(text)) if _CJK_RE.search(text) else 0,
        _NUMBER_RE.search(text) is not None,
        _WIDE_RE.search(text) is not None,
    )


def _count_symbol_tokens(text: str) -> int:
    """Whitespace-delimited runs of punctuation/symbols only ("|", "-->", "•", "###")."""
    n = len(_SYMBOL_TOKEN_RE.findall(text))
    return n + 1 if _SYMBOL_TOKEN_AT_START_RE.match(text) else n


try:
    from filters import _words  # built by `pip install` (setup.py) where a C compiler is

    def tokenize(text: str) -> list[str]:
        """Word tokens of ``text`` (see `tokenize_python`), the single tokenizer used by every rule."""
        return _words.tokenize(text, char_classes())

    def word_stats(words: list[str], stop: frozenset[str] | None) -> tuple[int, int, int]:
        """See `word_stats_python`."""
        return _words.word_stats(words, stop or None, char_classes())

    def text_counts(text: str) -> TextCounts:
        """See `text_counts_python`."""
        return TextCounts(*_words.text_counts(text, char_classes()))
except ImportError:
    tokenize, word_stats = tokenize_python, word_stats_python
    text_counts = text_counts_python


# --------------------------------------------------------------------------------------
# Rules: every threshold -> reason, declared once
# --------------------------------------------------------------------------------------

#: Rule families, in output order; each is also a boolean config field of that name.
FAMILIES = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "cjk")

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}

#: Conditions a rule can be restricted to (:attr:`Rule.when`); implemented in
#: :meth:`QualityFilter._guard`.
GUARDS: dict[str, str] = {
    "spaced_script": "only for languages written with spaces (not in gopher_word_length_skip_langs)",
    "stop_word_list": "only for languages with a list in gopher_stop_words",
    "line_punct_zero": "a ratio of exactly 0 passes when fineweb_line_punct_exclude_zero is true",
}


@dataclass(frozen=True)
class Rule:
    """One document rule: a document fails when ``value <fails> threshold``.

    The threshold is the config field :attr:`field`; ``None`` switches the rule off.
    Special forms (see :attr:`kind`):

    * ``"per_n"`` -- :attr:`reason` and :attr:`value` contain ``{n}``; the field is an
      ``{n: threshold}`` map and the rule is applied once per entry, n ascending;
    * ``"switch"`` -- the field is a boolean that switches the rule on; the threshold is
      the constant :attr:`fixed`.

    Several rules may share a :attr:`reason` (the two mean-word-length bounds): the reason
    is reported once if any of them fails.  :attr:`reason_codes` and :attr:`value_keys`
    of :class:`QualityFilter` are the reasons and values of :data:`RULES`, in table order.
    """

    reason: str  #: reason code, e.g. "gopher_too_few_words"
    value: str  #: measured value key, e.g. "gopher_word_count"
    field: str  #: QualityConfig field holding the threshold, e.g. "gopher_min_doc_words"
    fails: str  #: comparison that FAILS the document: "<", "<=", ">", ">=" (value OP threshold)
    default: float | int | bool | tuple[tuple[int, float], ...] | None  #: the field's default
    family: str  #: one of FAMILIES
    #: the paper + section and the reference code whose comparison this follows
    source: str
    #: what the threshold is (first part of the config field's description)
    doc: str
    #: a GUARDS key restricting the rule, or None
    when: str | None = None
    #: the threshold of a "switch" rule (boolean field)
    fixed: float | None = None

    def __post_init__(self) -> None:
        if self.fails not in _OPS:
            raise ValueError(f"{self.reason}: fails must be one of {sorted(_OPS)}, got {self.fails!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"{self.reason}: unknown family {self.family!r}")
        if self.when is not None and self.when not in GUARDS:
            raise ValueError(f"{self.reason}: unknown guard {self.when!r}")
        if ("{n}" in self.reason) != ("{n}" in self.value):
            raise ValueError(f"{self.reason}: reason and value must both contain {{n}} or neither")
        if (self.fixed is not None) != isinstance(self.default, bool):
            raise ValueError(f"{self.reason}: a switch rule (boolean default) needs `fixed`, others none")

    @property
    def kind(self) -> str:
        """``"per_n"``, ``"switch"`` or ``"threshold"``."""
        if "{n}" in self.reason:
            return "per_n"
        return "switch" if isinstance(self.default, bool) else "threshold"

    def expand(self, config: QualityConfig) -> list[tuple[str, str, float | None]]:
        """``(reason, value key, threshold or None = off)`` of this rule under ``config``."""
        setting = getattr(config, self.field)
        if self.kind == "per_n":
            return [(self.reason.format(n=n), self.value.format(n=n), thr) for n, thr in setting]
        if self.kind == "switch":
            return [(self.reason, self.value, self.fixed if setting else None)]
        return [(self.reason, self.value, setting)]

    def describe(self) -> str:
        """Field description: what the threshold is, when it fails, where the default is from."""
        if self.kind == "switch":
            test = f"when true, fails if {self.value} {self.fails} {self.fixed:g}"
        elif self.kind == "per_n":
            test = f"{{n: threshold}}; fails if {self.value} {self.fails} threshold, for each n"
        else:
            test = f"fails if {self.value} {self.fails} threshold; null turns the rule off"
        when = f"; {GUARDS[self.when]}" if self.when else ""
        return f"{self.doc} ({test}{when}; reason {self.reason}). Default and comparison: {self.source}"


_GOPHER = "Rae et al. 2021 (Gopher) A.1.1"
_GOPHER_A1 = "Rae et al. 2021 (Gopher) A.1.1, table A1"
_C4 = "Raffel et al. 2020 (C4) 2.2"
_FINEWEB = "Penedo et al. 2024 (FineWeb) sec. 3, custom heuristic filters"
_DT_GQ, _DT_GR = "datatrove GopherQualityFilter", "datatrove GopherRepetitionFilter"
_DT_C4, _DT_FW = "datatrove C4QualityFilter", "datatrove FineWebQualityFilter"

#: Every document rule, in output order.  Comparisons were checked against datatrove's
#: ``gopher_quality_filter.py``, ``gopher_repetition_filter.py``, ``c4_filters.py`` and
#: ``fineweb_quality_filter.py``: all agree.  One general difference: datatrove's Gopher
#: filters test ``if threshold and ...``, so a threshold of 0 turns a rule off there; here
#: only ``None`` does, and 0 is an ordinary threshold.
RULES: tuple[Rule, ...] = (
    # ---- Gopher quality
    Rule("gopher_too_few_words", "gopher_word_count", "gopher_min_doc_words", "<", 50,
         "gopher_quality", f"{_GOPHER}: fewer than 50 words; {_DT_GQ}: n_words < min_doc_words",
         "Minimum number of words"),
    Rule("gopher_too_many_words", "gopher_word_count", "gopher_max_doc_words", ">", 100_000,
         "gopher_quality", f"{_GOPHER}: more than 100,000 words; {_DT_GQ}: n_words > max_doc_words",
         "Maximum number of words"),
    Rule("gopher_mean_word_length", "gopher_mean_word_length", "gopher_min_avg_word_length", "<", 3.0,
         "gopher_quality",
         f"{_GOPHER}: mean word length outside 3 to 10 characters; {_DT_GQ}: avg_n_words < "
         "min_avg_word_length (datatrove reports its own reason, gopher_below_avg_threshold)",
         "Minimum mean word length in characters (Hangul: letters, see gopher_hangul_length_in_jamo)",
         when="spaced_script"),
    Rule("gopher_mean_word_length", "gopher_mean_word_length", "gopher_max_avg_word_length", ">", 10.0,
         "gopher_quality",
         f"{_GOPHER}: mean word length outside 3 to 10 characters; {_DT_GQ}: avg_n_words > "
         "max_avg_word_length (datatrove reports its own reason, gopher_above_avg_threshold)",
         "Maximum mean word length in characters", when="spaced_script"),
    Rule("gopher_symbol_ratio", "gopher_symbol_word_ratio", "gopher_max_symbol_word_ratio", ">", 0.1,
         "gopher_quality",
         f"{_GOPHER}: symbol-to-word ratio greater than 0.1 for the hash symbol or the ellipsis; "
         f"{_DT_GQ}: count('#') / n_words > max_symbol_word_ratio, and the same for ellipses "
         "(two tests with one threshold; here one value, the larger count)",
         "Maximum ratio of hash symbols or ellipses (whichever is more) to words"),
    Rule("gopher_bullet_lines", "gopher_bullet_line_ratio", "gopher_max_bullet_lines_ratio", ">", 0.9,
         "gopher_quality",
         f"{_GOPHER}: more than 90% of lines starting with a bullet point; {_DT_GQ}: bullet lines / "
         "lines > max_bullet_lines_ratio",
         "Maximum fraction of non-blank lines starting with a bullet"),
    Rule("gopher_ellipsis_lines", "gopher_ellipsis_line_ratio", "gopher_max_ellipsis_lines_ratio", ">",
         0.3, "gopher_quality",
         f"{_GOPHER}: more than 30% of lines ending with an ellipsis; {_DT_GQ}: ellipsis lines / lines "
         "> max_ellipsis_lines_ratio",
         "Maximum fraction of non-blank lines ending with an ellipsis"),
    Rule("gopher_alpha_words", "gopher_alpha_word_ratio", "gopher_min_alpha_words_ratio", "<", 0.8,
         "gopher_quality",
         f"{_GOPHER}: 80% of words must contain an alphabetic character; {_DT_GQ}: alphabetic words / "
         "n_words < max_non_alpha_words_ratio (a minimum despite datatrove's parameter name)",
         "Minimum fraction of tokens (words and whitespace-delimited symbol runs) that contain a letter"),
    Rule("gopher_stopwords", "gopher_stopword_count", "gopher_min_stop_words", "<", 2,
         "gopher_quality",
         f"{_GOPHER}: at least two of the, be, to, of, and, that, have, with; {_DT_GQ}: "
         "stop-word count < min_stop_words (datatrove: English list, case-sensitive)",
         "Minimum number of stop-word occurrences", when="stop_word_list"),
    # ---- Gopher repetition
    Rule("gopher_dup_lines", "gopher_dup_line_frac", "gopher_dup_line_frac", ">", 0.3,
         "gopher_repetition",
         f"{_GOPHER_A1}: duplicate line fraction 0.30; {_DT_GR}: line_duplicates / len(lines) > dup_line_frac",
         "Maximum fraction of non-blank lines that repeat an earlier line"),
    Rule("gopher_dup_paras", "gopher_dup_para_frac", "gopher_dup_para_frac", ">", 0.3,
         "gopher_repetition",
         f"{_GOPHER_A1}: duplicate paragraph fraction 0.30; {_DT_GR}: paragraphs_duplicates / "
         "len(paragraphs) > dup_para_frac",
         "Maximum fraction of paragraphs that repeat an earlier paragraph"),
    Rule("gopher_dup_line_chars", "gopher_dup_line_char_frac", "gopher_dup_line_char_frac", ">", 0.2,
         "gopher_repetition",
         f"{_GOPHER_A1}: duplicate line character fraction 0.20; {_DT_GR}: char_duplicates / len(text) "
         "> dup_line_char_frac",
         "Maximum fraction of the document's characters inside repeated lines"),
    Rule("gopher_dup_para_chars", "gopher_dup_para_char_frac", "gopher_dup_para_char_frac", ">", 0.2,
         "gopher_repetition",
         f"{_GOPHER_A1}: duplicate paragraph character fraction 0.20; {_DT_GR}: char_duplicates / "
         "len(text) > dup_para_char_frac",
         "Maximum fraction of the document's characters inside repeated paragraphs"),
    Rule("gopher_top_{n}gram", "gopher_top_{n}gram_frac", "gopher_top_ngram_fracs", ">",
         ((2, 0.20), (3, 0.18), (4, 0.16)), "gopher_repetition",
         f"{_GOPHER_A1}: top 2/3/4-gram character fraction 0.20/0.18/0.16; {_DT_GR}: top_char_length / "
         "len(text) > n_frac (here over word characters, and the characters its occurrences cover counted "
         "once, so overlapping repeats never exceed 1; see _measure_gopher_repetition)",
         "Maximum share of word characters in the most frequent word n-gram, per n"),
    Rule("gopher_dup_{n}gram", "gopher_dup_{n}gram_frac", "gopher_dup_ngram_fracs", ">",
         ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)), "gopher_repetition",
         f"{_GOPHER_A1}: duplicate 5..10-gram character fraction 0.15..0.10; {_DT_GR}: "
         "n_duplicates_char / len(text) > n_frac (here over word characters)",
         "Maximum share of word characters covered by repeated word n-grams, per n"),
    # ---- C4 (document level)
    Rule("c4_lorem_ipsum", "c4_lorem_ipsum", "c4_filter_lorem_ipsum", ">", True, "c4",
         f"{_C4}: remove any page where the phrase 'lorem ipsum' appears; {_DT_C4} filter_lorem_ipsum: "
         "'lorem ipsum' in line (datatrove looks only in lines its line filters keep)",
         "Drop documents containing 'lorem ipsum' (case-insensitive)", fixed=0),
    Rule("c4_curly_bracket", "c4_curly_bracket", "c4_filter_curly_bracket", ">", True, "c4",
         f"{_C4}: remove any page that contains a curly bracket; {_DT_C4} filter_curly_bracket: "
         "'{' in line (datatrove looks only in lines its line filters keep)",
         "Drop documents containing '{'", fixed=0),
    Rule("c4_too_few_sentences", "c4_sentence_count", "c4_min_sentences", "<", 3, "c4",
         f"{_C4}: the paper's 'fewer than 3 sentences'; {_DT_C4}: num_sentences < min_num_sentences "
         "(same comparison, but datatrove/TFDS default to 5, counted after dropping lines)",
         "Minimum number of sentence ends in the whole document"),
    # ---- FineWeb
    Rule("fineweb_line_punct", "fineweb_line_punct_ratio", "fineweb_line_punct_thr", "<=", 0.12,
         "fineweb",
         f"{_FINEWEB}; {_DT_FW}: ratio <= line_punct_thr and not (ratio == 0 and "
         "line_punct_exclude_zero) -- the same <= (datatrove counts blank lines too)",
         "Lowest fraction of non-blank lines ending in terminal punctuation that still fails",
         when="line_punct_zero"),
    Rule("fineweb_short_lines", "fineweb_short_line_ratio", "fineweb_short_line_thr", ">=", 0.67,
         "fineweb",
         f"{_FINEWEB}; {_DT_FW}: ratio >= short_line_thr -- the same >= (datatrove counts blank "
         "lines too and has no wide-character width)",
         "Fraction of non-blank lines of at most fineweb_short_line_length columns at which a document fails"),
    Rule("fineweb_dup_line_chars", "fineweb_dup_line_char_ratio", "fineweb_char_duplicates_ratio", ">=",
         0.01, "fineweb",
         f"{_FINEWEB}; {_DT_FW}: find_duplicates(non_empty_lines) chars / len(text without newlines) >= "
         "char_duplicates_ratio -- the same >= (default 0.01 as datatrove)",
         "Fraction of characters (newlines excluded) in repeated lines at which a document fails"),
    Rule("fineweb_newline_ratio", "fineweb_newline_word_ratio", "fineweb_new_line_ratio", ">", 0.3,
         "fineweb",
         f"{_FINEWEB}; {_DT_FW}: text.count('\\n') / len(words) > new_line_ratio (here line breaks "
         "between non-blank lines)",
         "Maximum line breaks per word"),
    # ---- CJK
    Rule("cjk_bracketed_chars", "cjk_bracketed_char_ratio", "cjk_max_bracketed_char_ratio", ">", 0.2, "cjk",
         "this project: bracketed Han/Kana characters / Han/Kana characters > max_bracketed_char_ratio. "
         "SEO spam writes Chinese one character per bracket pair (【随】【着】【经】【济】, "
         "003338.cn in Common Crawl CC-MAIN-2020-34: 0.77 of its Han characters) so keyword filters miss it; "
         "the word rules see ordinary one-character words. Real text brackets a single character for a "
         "numbered heading or a note, (一) or 【注】: under 0.01 on every other zh/ja page of the bundled "
         "sample and mixed-dev",
         "Maximum share of Han/Kana characters that stand alone between brackets"),
)

# --------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------

_NO_SPACE_LANGS = ("zh", "ja", "th", "lo", "km", "my", "bo")


def _pairs(name: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in value
    ):
        return value
    raise ValueError(f"{name} must be a mapping (or a list of pairs), got {value!r}")


def _freeze_stop_words(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{lang: [words]}`` -> ``((lang, (word, ...)), ...)``: lang normalised, words lower-cased,
    sorted, deduplicated; languages sorted."""
    items = _pairs("gopher_stop_words", value)
    out = {}
    for lang, words in items:
        if isinstance(words, str) or not isinstance(words, Iterable):
            raise ValueError(f"gopher_stop_words[{lang!r}] must be a list of strings")
        words = list(words)
        if not all(isinstance(w, str) for w in words):
            raise ValueError(f"gopher_stop_words[{lang!r}] must be a list of strings")
        out[normalize_lang(str(lang))] = tuple(sorted({w.lower() for w in words}))
    return tuple(sorted(out.items()))


def _freeze_ngrams(value: Any, info: ValidationInfo) -> tuple[tuple[int, float], ...]:
    """``{n: frac}`` (n may be a YAML string key, ``"2"``) -> ``((n, frac), ...)``, n ascending."""
    name = info.field_name
    items = _pairs(name, value)
    out = {}
    for n, thr in items:
        try:
            n_int = int(n)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: n-gram size {n!r} is not an integer") from None
        if n_int < 1 or str(n_int) != str(n).strip():
            raise ValueError(f"{name}: n-gram size {n!r} must be a positive integer")
        if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0 <= thr:
            raise ValueError(f"{name}[{n}]: threshold must be a non-negative number, got {thr!r}")
        out[n_int] = float(thr)
    return tuple(sorted(out.items()))


def _freeze_langs(value: Any, info: ValidationInfo) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{info.field_name} must be a list of language codes")
    return tuple(normalize_lang(v) for v in value)


def _number(value: Any, info: ValidationInfo, *, optional: bool, integer: bool, minimum: int) -> Any:
    """A finite number >= ``minimum`` (or None when ``optional``), returned as given; an
    integral float is accepted for an integer setting and becomes an int.  bool and
    strings are refused."""
    name = info.field_name
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        what = "a non-negative number" + (" or null" if optional else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    if integer and not isinstance(value, int):
        if not float(value).is_integer():
            raise ValueError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def _number_type(base: type, *, optional: bool, minimum: int = 0) -> Any:
    """A plain validator (pydantic's own float/int coercion would turn an int threshold into a
    float and accept strings); ``json_schema_input_type`` keeps the schema typed."""
    kind = Optional[base] if optional else base  # noqa: UP045 (a runtime type expression)
    check = partial(_number, optional=optional, integer=base is int, minimum=minimum)
    return Annotated[kind, PlainValidator(check, json_schema_input_type=kind)]


Threshold = _number_type(float, optional=True)
IntThreshold = _number_type(int, optional=True)
Count = _number_type(int, optional=False)
PositiveCount = _number_type(int, optional=False, minimum=1)
StopWords = Annotated[tuple[tuple[str, tuple[str, ...]], ...], BeforeValidator(_freeze_stop_words)]
NgramFracs = Annotated[tuple[tuple[int, float], ...], BeforeValidator(_freeze_ngrams)]
LangCodes = Annotated[tuple[str, ...], BeforeValidator(_freeze_langs)]


class _QualitySettings(BaseModel):
    """The settings that are not a rule threshold (those are generated from :data:`RULES`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    c4_line_filter: StrictBool = Field(True, description=(
        "Remove C4's policy lines and its javascript lines, narrowed to notices that JavaScript is needed "
        "(filters/clean.py), before the rules, as datatrove's C4QualityFilter does in the FineWeb recipe; the "
        "document rules see the cleaned text."))
    label_lines: StrictBool = Field(True, description=(
        "Remove lines that are only an ad slot's label (\"Advertisement\", \"Story continues below advertisement\", "
        "\"Anzeige\"), a photo credit (\"Photo: Hau Dinh, AP\"), skip links (\"Skip to main content\", "
        "\"Zum Inhalt springen\"), a heading of other articles, sharing or comments (\"Related stories\", "
        "\"Artikel teilen\", \"Comments\"), a widget's (\"Print\", \"Loading...\", \"5 min read\"), a form's "
        "notice (\"Your email address will not be published\") or a call to action in a short line (\"Subscribe "
        "to our newsletter\", \"Jetzt teilen\"), and the rest of the text from a heading of other articles, a "
        "comment form or an author box in its second half (filters/clean.py), before the rules; the document rules "
        "see the cleaned text."))
    link_list_lines: StrictBool = Field(True, description=(
        "Remove lines that only list links (>= 3 URLs or domain names, >= 80% of the line; filters/clean.py) "
        "before the rules; the document rules see the cleaned text."))
    boilerplate_model: StrictBool = Field(True, description=(
        "Remove the lines filters/boilerplate.py's context model calls boilerplate (menus, share bars, bylines, "
        "photo credits: lines without a sentence end judged with their neighbours; the first line, a line ending "
        "in punctuation or with a sentence end in it, 200 columns long, ending in a colon after 4 words, or between "
        "two lines with sentences always stays) before the rules; the document rules see the cleaned text. "
        "Held-out F1 0.940 -> 0.946 on the scrapinghub pages; on mixed-dev 9 more human pages kept, llm and "
        "poor_mt kept unchanged (docs/benchmarks.md, text_branch_eval.py)."))
    template_lines: StrictBool = Field(True, description=(
        "Remove per-host template lines before the other line steps and the rules: a line (normalised: "
        "whitespace, case, digits as 0) on >= template_lines_min_pages distinct pages of the same host, and "
        "on >= template_lines_min_share of them (filters/template_lines.py; C4, OBELICS, RefinedWeb remove "
        "lines repeated across pages). A cross-page step: `curate extract` reads its inputs twice for it. On "
        "mixed-dev it removes 1,000 boilerplate lines from 775 pages and moves labelled outcomes by a page or "
        "two (docs/benchmarks.md, text_branch_eval.py)."))
    template_lines_min_pages: _number_type(int, optional=False, minimum=2) = Field(3, description=(
        "Distinct pages of a host (copies with the same lines count once) a template line is on at least."))
    template_lines_min_share: float = Field(0.1, ge=0, le=1, description=(
        "Share of a host's distinct pages a template line is on at least; binds from 31 pages up with "
        "the defaults (a common phrase on 3 of 10,000 pages is no template)."))
    rendering_max_copies: _number_type(int, optional=False) = Field(4, description=(
        "Last line step before the rules: a line of >= 60 characters that ends a sentence (perhaps followed by "
        "a bracketed credit) and occurs 2..N times in a page, compared without a leading bullet or a trailing "
        "\"less\" / \"more\" toggle, keeps only its first occurrence (a gallery caption the markup renders in "
        "the slide list, full, collapsed and on the slide; filters/clean.py), and a line cut off by an ellipsis "
        "(\"... more\") "
        "whose first 60 or more characters begin another line of the page goes. Lines repeated more often, "
        "and repeated lines that end no sentence (menus, link lists), keep every copy: they are the repetition "
        "rules' evidence. "
        "0 or 1: off."))
    gopher_quality: StrictBool = Field(True, description=(
        "Run the Gopher quality rules (Rae et al. 2021, A.1.1); off: their values are not measured."))
    gopher_repetition: StrictBool = Field(True, description=(
        "Run the Gopher repetition rules (Rae et al. 2021, A.1.1, table A1); off: not measured."))
    c4: StrictBool = Field(True, description=(
        "Run the C4 document-level rules (Raffel et al. 2020, 2.2); off: not measured."))
    fineweb: StrictBool = Field(True, description=(
        "Run the FineWeb rules (Penedo et al. 2024); off: not measured."))
    cjk: StrictBool = Field(True, description=(
        "Run the CJK rules (this project's; filters/quality.py); off: not measured."))
    gopher_stop_words: StopWords = Field(_freeze_stop_words(DEFAULT_STOP_WORDS), description=(
        "{lang: [words]} for the stop-word rule, which runs only for languages listed here "
        "(replaces the built-in lists: Gopher's English list, Rae et al. 2021 A.1.1, and small "
        "lists of the most frequent function words of de, fr, es, it, pt, nl, ru)."))
    gopher_word_length_skip_langs: LangCodes = Field(_NO_SPACE_LANGS, description=(
        "Languages written without spaces, whose 'words' are single characters or whole phrases: "
        "the mean-word-length bounds are skipped and n-grams are scaled by gopher_cjk_ngram_scale "
        "(this project's choice)."))
    gopher_hangul_length_in_jamo: StrictBool = Field(True, description=(
        "Measure Hangul word length in letters (jamo) rather than syllable blocks: counted in blocks "
        "ordinary Korean prose averages < 3 and fails (this project's choice)."))
    gopher_cjk_ngram_scale: Count = Field(2, description=(
        "n-gram length multiplier for gopher_word_length_skip_langs, whose n-grams are characters: "
        "a Chinese word averages 1.5-2 characters; unscaled, 8% of real human zh pages of our dev "
        "corpus failed (this project's choice)."))
    fineweb_line_punct_exclude_zero: StrictBool = Field(False, description=(
        "Let a document with no line ending in punctuation pass the line-punctuation rule "
        "(datatrove FineWebQualityFilter line_punct_exclude_zero, default false)."))
    fineweb_short_line_length: Count = Field(30, description=(
        "Maximum length in columns of a 'short' line for fineweb_short_line_thr "
        "(datatrove FineWebQualityFilter short_line_length, default 30)."))
    fineweb_wide_char_width: PositiveCount = Field(2, description=(
        "Columns an East-Asian wide character counts for the short-line length: a 15-character "
        "Chinese sentence is not 'short' (1 = upstream datatrove; 2 is this project's choice)."))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> QualityConfig:
        """Build from a plain dict (e.g. YAML); ``None`` or ``{}`` gives the defaults and
        unknown keys raise ``ValueError``.

        ``gopher_top_ngram_fracs`` / ``gopher_dup_ngram_fracs`` accept ``{n: frac}``
        (YAML string keys are fine) and ``gopher_stop_words`` accepts ``{lang: [words]}``
        (it *replaces* the built-in lists).
        """
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"QualityConfig.from_dict expects a mapping, got {type(d).__name__}")
        known = set(cls.model_fields)
        unknown = sorted(str(k) for k in d if k not in known)
        if unknown:
            raise ValueError(
                f"unknown quality config key(s): {', '.join(unknown)}; "
                f"valid keys: {', '.join(sorted(known))}"
            )
        return cls(**dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (round-trips through :meth:`from_dict`)."""
        out = self.model_dump()
        out["gopher_stop_words"] = {k: list(v) for k, v in self.gopher_stop_words}
        out["gopher_top_ngram_fracs"] = dict(self.gopher_top_ngram_fracs)
        out["gopher_dup_ngram_fracs"] = dict(self.gopher_dup_ngram_fracs)
        out["gopher_word_length_skip_langs"] = list(self.gopher_word_length_skip_langs)
        return out


def _rule_field(rule: Rule) -> tuple[Any, Any]:
    """(type, FieldInfo) of the config field of a rule, from the rule's default."""
    if rule.kind == "per_n":
        kind = NgramFracs
    elif rule.kind == "switch":
        kind = StrictBool
    elif isinstance(rule.default, int):
        kind = IntThreshold
    else:
        kind = Threshold
    extra = {"reason": rule.reason, "value": rule.value, "fails": rule.fails, "family": rule.family}
    return kind, Field(rule.default, description=rule.describe(), json_schema_extra=extra)


def _rule_fields() -> dict[str, tuple[Any, Any]]:
    fields: dict[str, tuple[Any, Any]] = {}
    for rule in RULES:
        if rule.field in fields or rule.field in _QualitySettings.model_fields:
            raise ValueError(f"config field {rule.field!r} is declared twice")
        fields[rule.field] = _rule_field(rule)
    return fields


QualityConfig = create_model(
    "QualityConfig",
    __base__=_QualitySettings,
    __module__=__name__,
    __doc__=(
        "Thresholds of every rule and the other settings, with the published defaults.\n\n"
        "A frozen, hashable pydantic model.  A numeric threshold set to ``None`` switches that\n"
        "single rule off; the four ``gopher_quality`` / ``gopher_repetition`` / ``c4`` /\n"
        "``fineweb`` booleans switch a whole family off (its values are then not measured\n"
        "either).  The rule fields are generated from :data:`RULES` (one per ``Rule.field``,\n"
        "described by the rule); build from a plain dict (e.g. YAML) with :meth:`from_dict`,\n"
        "which rejects unknown keys.\n"
    ),
    **_rule_fields(),
)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _div(a: float, b: float) -> float:
    return float(a) / b if b else 0.0


def ngram_coverage_python(words: list[str], top_ns: tuple[int, ...],
                          dup_ns: tuple[int, ...]) -> tuple[int, dict[int, int], dict[int, int]]:
    """Word n-gram coverage for the Gopher repetition values (the oracle of the compiled
    filters/_ngrams.c, which `ngram_coverage` is where it was built): the characters of all words;
    for each n of `top_ns`, those of the words covered by the occurrences of the most frequent n-gram
    (ties: the longest in characters, then the first seen), each word once, 0 when no n-gram occurs
    twice; for each n of `dup_ns`, those of the words covered by occurrences that repeat an earlier
    one, each word once."""
    top = {n: 0 for n in top_ns}
    dup = {n: 0 for n in dup_ns}
    n_words = len(words)
    lens = np.fromiter(map(len, words), np.int64, n_words)
    total = int(lens.sum())
    max_n = max([*top_ns, *dup_ns], default=0)
    if n_words < 2 or max_n < 1:
        return total, top, dup
    vocab: dict[str, int] = {}
    ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), np.int64, n_words)
    csum = np.concatenate(([0], np.cumsum(lens)))
    # gram[i] = exact id of the n-gram starting at word i, built from the (n-1)-gram id
    # and the next word id; first[g] = index of the first occurrence of n-gram g.
    base = len(vocab)
    gram = ids  # word ids are already dense n-gram ids for n = 1
    for n in range(1, min(max_n, n_words) + 1):
        if n > 1 or n in top_ns or n in dup_ns:
            key = ids if n == 1 else gram[:-1] * base + ids[n - 1:]
            uniq, first, gram = np.unique(key, return_index=True, return_inverse=True)
            if len(uniq) == len(key):
                break  # no n-gram repeats, so no longer one does either: all zeros
            gram = gram.reshape(-1)
        if n not in top_ns and n not in dup_ns:
            continue
        m = len(gram)
        if n in top_ns:
            counts = np.bincount(gram)
            if int(counts.max()) >= 2:
                # the most frequent n-gram (ties: the longest in characters, then the first
                # seen); its characters are those of the words its occurrences cover, each
                # once: occurrences overlap when a phrase repeats with a period shorter than
                # n ("click here. click here." for n = 3), and length x count would exceed 1
                glen = np.empty(len(counts), np.int64)
                glen[gram] = csum[n:n + m] - csum[:m]
                tied = np.flatnonzero(counts == counts.max())
                best = tied[glen[tied] == glen[tied].max()]
                g = best[np.argmin(first[best])]
                covered = np.convolve((gram == g).astype(np.int64), np.ones(n, np.int64)) > 0
                top[n] = int(lens[covered].sum())
        if n in dup_ns:
            is_repeat = first[gram] != np.arange(m)
            if is_repeat.any():
                covered = np.convolve(is_repeat.astype(np.int64), np.ones(n, np.int64)) > 0
                dup[n] = int(lens[covered].sum())
    return total, top, dup


try:
    from filters._ngrams import ngram_coverage  # built by `pip install` (setup.py) where a C compiler is
except ImportError:
    ngram_coverage = ngram_coverage_python


def _dup_count_chars(items: list[str]) -> tuple[int, int]:
    """(number of items seen before, their total length); first occurrences not counted."""
    seen: set[str] = set()
    n_dup = chars = 0
    for x in items:
        if x in seen:
            n_dup += 1
            chars += len(x)
        else:
            seen.add(x)
    return n_dup, chars


class _Doc:
    """Per-document shared state (tokens, lines), computed lazily once."""

    __slots__ = ("text", "_words", "_lines", "_counts")

    def __init__(self, text: str):
        self.text = text
        self._words: list[str] | None = None
        self._lines: list[str] | None = None
        self._counts: TextCounts | None = None

    @property
    def counts(self) -> TextCounts:
        if self._counts is None:
            self._counts = text_counts(self.text)
        return self._counts

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = tokenize(self.text)
        return self._words

    @property
    def lines(self) -> list[str]:
        """Non-blank lines, stripped."""
        if self._lines is None:
            self._lines = [s for s in (ln.strip() for ln in self.text.split("\n")) if s]
        return self._lines


# --------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------


class QualityFilter:
    """Applies the rule families of a :class:`QualityConfig` to one document.

    ``measure`` computes values, ``check`` turns values into reason codes, and calling the
    filter does both.  Reason codes come out in the fixed order of :attr:`reason_codes`,
    which is the order of :data:`RULES` (``gopher_top_{n}gram`` / ``gopher_dup_{n}gram``
    expanded with n ascending).
    """

    def __init__(self, config: QualityConfig):
        if not isinstance(config, QualityConfig):
            raise TypeError("QualityFilter needs a QualityConfig (use QualityConfig.from_dict)")
        self.config = config
        self._stop_words = {lang: frozenset(ws) for lang, ws in config.gopher_stop_words}
        self._skip_len_langs = frozenset(config.gopher_word_length_skip_langs)
        self._top = config.gopher_top_ngram_fracs
        self._dup = config.gopher_dup_ngram_fracs
        # reason -> [(value key, comparison, threshold, guard)], in RULES order; reasons of
        # switched-off rules keep their place in reason_codes but get no test.
        tests: dict[str, list[tuple[str, Callable[[Any, Any], bool], float, Any]]] = {}
        value_keys: dict[str, None] = {}
        for rule in RULES:
            if not getattr(config, rule.family):
                continue
            guard = self._guard(rule.when)
            for reason, key, threshold in rule.expand(config):
                value_keys[key] = None
                group = tests.setdefault(reason, [])
                if threshold is not None:
                    group.append((key, _OPS[rule.fails], threshold, guard))
        self._reason_codes = list(tests)
        self._value_keys = list(value_keys)
        self._tests = [(reason, tuple(group)) for reason, group in tests.items() if group]

    def __reduce__(self):
        # the compiled tests hold bound methods of self: rebuild from the config instead
        return type(self), (self.config,)

    def _guard(self, when: str | None) -> Callable[[float, str], bool] | None:
        """The condition ``GUARDS[when]`` as ``(value, lang) -> applies``; None: always."""
        if when is None:
            return None
        if when == "spaced_script":
            return self._is_spaced
        if when == "stop_word_list":
            return self._has_stop_words
        if when == "line_punct_zero":
            return self._nonzero_punct if self.config.fineweb_line_punct_exclude_zero else None
        raise ValueError(f"unknown guard {when!r}")

    def _is_spaced(self, value: float, lang: str) -> bool:
        return lang not in self._skip_len_langs

    def _has_stop_words(self, value: float, lang: str) -> bool:
        return lang in self._stop_words

    @staticmethod
    def _nonzero_punct(value: float, lang: str) -> bool:
        return value != 0

    # ---- public API ------------------------------------------------------------------

    @property
    def value_keys(self) -> list[str]:
        """Keys :meth:`measure` returns under this config (disabled families omitted)."""
        return list(self._value_keys)

    @property
    def reason_codes(self) -> list[str]:
        """Every reason code :meth:`check` can return under this config, in output order."""
        return list(self._reason_codes)

    def measure(self, text: str, lang: str) -> dict[str, float]:
        """All measured values (finite floats) of the enabled rule families."""
        lang = normalize_lang(lang)
        doc = _Doc(text or "")
        values: dict[str, float] = {}
        c = self.config
        if c.gopher_quality:
            values.update(self._measure_gopher_quality(doc, lang))
        if c.gopher_repetition:
            values.update(self._measure_gopher_repetition(doc, lang))
        if c.c4:
            values.update(self._measure_c4(doc))
        if c.fineweb:
            values.update(self._measure_fineweb(doc))
        if c.cjk:
            values.update(self._measure_cjk(doc))
        return values

    def check(self, values: Mapping[str, float], lang: str) -> list[str]:
        """Reason codes of every failed rule, in the order of :attr:`reason_codes`."""
        lang = normalize_lang(lang)
        reasons: list[str] = []
        for reason, tests in self._tests:
            for key, fails, threshold, guard in tests:
                value = values[key]
                if fails(value, threshold) and (guard is None or guard(value, lang)):
                    reasons.append(reason)
                    break
        return reasons

    def __call__(self, text: str, lang: str) -> tuple[list[str], dict[str, float]]:
        values = self.measure(text, lang)
        return self.check(values, lang), values

    # ---- Gopher quality ----------------------------------------------------------------

    def _measure_gopher_quality(self, doc: _Doc, lang: str) -> dict[str, float]:
        """Gopher quality values (Rae et al. 2021, appendix A.1.1); thresholds: :data:`RULES`.

        * ``gopher_word_count``: words (:func:`tokenize`);
        * ``gopher_mean_word_length``: mean word length in characters.  Its bounds are
          skipped for languages written without spaces (``gopher_word_length_skip_langs``:
          zh, ja, th, ...), whose "words" are single characters or whole phrases.  Hangul
          words are measured in letters (jamo), the analogue of Latin letters (a syllable
          block holds 2-3): counted in blocks, ordinary Korean prose is too short;
        * ``gopher_symbol_word_ratio``: the larger of the hash-to-word and the
          ellipsis-to-word ratio;
        * ``gopher_bullet_line_ratio`` / ``gopher_ellipsis_line_ratio``: fraction of lines
          that start with a bullet / end with an ellipsis (blank lines ignored);
        * ``gopher_alpha_word_ratio``: fraction of tokens that contain an alphabetic
          character; tokens here are the words plus whitespace-delimited symbol runs ("|",
          "==>", "•"), so symbol soup and number tables fail while punctuation attached to
          words does not count;
        * ``gopher_stopword_count``: occurrences of the language's stop words
          (``gopher_stop_words``).  Languages without a list get count 0 and the rule is
          skipped.
        """
        text, words = doc.text, doc.words
        n_words = len(words)
        stop = self._stop_words.get(lang)
        word_chars, n_non_alpha, n_stop = word_stats(words, stop)
        counts = doc.counts
        if self.config.gopher_hangul_length_in_jamo:
            word_chars += counts.hangul_extra_jamo
        if not counts.has_number:  # a word without any letter starts with a number (see tokenize)
            n_non_alpha = 0
        n_hash = text.count("#") + text.count("＃")
        lines = doc.lines
        n_bullet = sum(1 for ln in lines if ln[0] in _BULLETS)
        n_ell_lines = sum(1 for ln in lines if ln.endswith(_ELLIPSIS_ENDS))
        return {
            "gopher_word_count": float(n_words),
            "gopher_mean_word_length": _div(word_chars, n_words),
            "gopher_symbol_word_ratio": _div(max(n_hash, counts.ellipses), n_words),
            "gopher_bullet_line_ratio": _div(n_bullet, len(lines)),
            "gopher_ellipsis_line_ratio": _div(n_ell_lines, len(lines)),
            "gopher_alpha_word_ratio": _div(n_words - n_non_alpha, n_words + counts.symbol_tokens),
            "gopher_stopword_count": float(n_stop),
        }


    # ---- Gopher repetition -------------------------------------------------------------

    def _measure_gopher_repetition(self, doc: _Doc, lang: str) -> dict[str, float]:
        """Gopher repetition values (Rae et al. 2021, A.1.1, table A1); thresholds: :data:`RULES`.

        * duplicate lines / paragraphs: fraction of (non-blank, stripped) lines and of
          paragraphs (split on blank lines) that are exact repeats of an earlier one, and
          the fraction of the document's characters inside those repeats;
        * top n-gram (each n of ``gopher_top_ngram_fracs``): characters covered by the
          occurrences of the most frequent word n-gram, overlaps counted once, over all word
          characters (Gopher: "the fraction of characters contained within the most frequent
          n-gram"; length x count, datatrove's, exceeds 1 when occurrences overlap); 0 when no
          n-gram occurs twice;
        * duplicate n-grams (each n of ``gopher_dup_ngram_fracs``): fraction of word
          characters covered by n-gram occurrences that repeat an earlier occurrence,
          overlaps counted once.

        n-gram character counts exclude spaces and punctuation (as datatrove, which joins
        n-grams with ""), and so does the denominator -- the total word characters -- so
        the fractions do not depend on how densely a script uses spaces/punctuation
        (datatrove divides by ``len(text)``).  Each Han/Kana character is a word, so for
        zh/ja these are character n-grams, taken ``gopher_cjk_ngram_scale`` (2) times longer:
        a Chinese word averages about 1.5-2 characters, so a 5-character repeat is a 2-3 word
        phrase, and unscaled thresholds dropped 8% of real human zh pages in our dev corpus
        (1% of English ones).
        """
        text = doc.text
        lines = doc.lines
        paras = [p for p in (s.strip() for s in _PARA_SPLIT_RE.split(text)) if p]
        n_dup_lines, dup_line_chars = _dup_count_chars(lines)
        n_dup_paras, dup_para_chars = _dup_count_chars(paras)
        values = {
            "gopher_dup_line_frac": _div(n_dup_lines, len(lines)),
            "gopher_dup_para_frac": _div(n_dup_paras, len(paras)),
            "gopher_dup_line_char_frac": _div(dup_line_chars, len(text)),
            "gopher_dup_para_char_frac": _div(dup_para_chars, len(text)),
        }
        cjk = lang in self._skip_len_langs
        values.update(self._ngram_stats(doc.words, self.config.gopher_cjk_ngram_scale if cjk else 1))
        return values

    def _ngram_stats(self, words: list[str], scale: int = 1) -> dict[str, float]:
        # effective n (in tokens) -> the word n it stands for in the value key
        top_ns = {n * scale: n for n, _ in self._top}
        dup_ns = {n * scale: n for n, _ in self._dup}
        total, top, dup = ngram_coverage(words, tuple(top_ns), tuple(dup_ns))
        out = {f"gopher_top_{n}gram_frac": _div(top[eff], total) for eff, n in top_ns.items()}
        out.update({f"gopher_dup_{n}gram_frac": _div(dup[eff], total) for eff, n in dup_ns.items()})
        return out


    # ---- C4 ------------------------------------------------------------------------------

    def _measure_c4(self, doc: _Doc) -> dict[str, float]:
        """C4 document-level values (Raffel et al. 2020, section 2.2; datatrove C4QualityFilter);
        thresholds: :data:`RULES`.

        * ``c4_lorem_ipsum``: occurrences of "lorem ipsum" (case-insensitive);
        * ``c4_curly_bracket``: occurrences of "{";
        * ``c4_sentence_count``: sentence ends in the whole document.  A sentence end is a
          ``. ! ?`` run after a word (not "...", not "3.14") followed by space/end, the same
          written with a space before it ("south . although") or with none after it
          ("Mills.Allen"), or a run of ``。！？`` / other-script terminators.  Lines are
          neither dropped nor rewritten here.
        """
        text = doc.text
        return {
            "c4_lorem_ipsum": float(len(_LOREM_RE.findall(text))),
            "c4_curly_bracket": float(text.count("{")),
            "c4_sentence_count": float(len(_SENT_END_RE.findall(text))),
        }


    # ---- FineWeb -------------------------------------------------------------------------

    def _measure_fineweb(self, doc: _Doc) -> dict[str, float]:
        """FineWeb values (Penedo et al. 2024; datatrove FineWebQualityFilter); thresholds:
        :data:`RULES`.

        Over non-blank, stripped lines (datatrove counts blank lines too):

        * ``fineweb_line_punct_ratio``: lines ending in terminal punctuation (any script,
          closing quotes included, optionally followed by a closing bracket);
        * ``fineweb_short_line_ratio``: lines of at most ``fineweb_short_line_length``
          columns.  East-Asian wide characters (Han, Kana, Hangul, full-width forms)
          count ``fineweb_wide_char_width`` columns, so a 15-character Chinese sentence is
          not "short" (a Han character carries ~a word);
        * ``fineweb_dup_line_char_ratio``: characters in repeated lines over characters
          excluding newlines;
        * ``fineweb_newline_word_ratio``: line breaks (between non-blank lines, so a
          blank-line paragraph gap counts once) per word.
        """
        c = self.config
        text, lines = doc.text, doc.lines
        n_lines = len(lines)
        n_punct = sum(1 for ln in lines if ends_with_terminal(ln))
        limit = c.fineweb_short_line_length
        extra = c.fineweb_wide_char_width - 1
        if extra and doc.counts.has_wide:
            n_short = sum(
                1 for ln in lines
                if len(ln) <= limit and len(ln) + extra * len(_WIDE_RE.findall(ln)) <= limit
            )
        else:
            n_short = sum(1 for ln in lines if len(ln) <= limit)
        _, dup_chars = _dup_count_chars(lines)
        return {
            "fineweb_line_punct_ratio": _div(n_punct, n_lines),
            "fineweb_short_line_ratio": _div(n_short, n_lines),
            "fineweb_dup_line_char_ratio": _div(dup_chars, len(text) - text.count("\n")),
            "fineweb_newline_word_ratio": _div(max(n_lines - 1, 0), len(doc.words)),
        }

    # ---- CJK -----------------------------------------------------------------------------

    @staticmethod
    def _measure_cjk(doc: _Doc) -> dict[str, float]:
        """``cjk_bracketed_char_ratio``: Han/Kana characters that stand alone between an opening and
        a closing bracket (any of ``【[（(「『〔〈《`` with its partner or another closer), over all
        Han/Kana characters; 0 for text without any."""
        cjk_chars = doc.counts.cjk_chars
        if not cjk_chars:
            return {"cjk_bracketed_char_ratio": 0.0}
        return {"cjk_bracketed_char_ratio": _div(len(_BRACKETED_CJK_RE.findall(doc.text)), cjk_chars)}



def _hangul_extra_jamo(text: str) -> int:
    """Extra letters when Hangul syllables are counted as jamo (2 or 3 per block).

    Hangul syllables are word characters, so every one in ``text`` is inside a word.
    """
    syl = "".join(_HANGUL_SYLLABLES_RE.findall(text))
    if not syl:
        return 0
    cps = np.frombuffer(syl.encode("utf-32-le"), dtype=np.uint32).astype(np.int64) - 0xAC00
    # every block has a lead consonant + vowel (1 extra), plus a final consonant if any
    return int(len(cps) + np.count_nonzero(cps % 28))
