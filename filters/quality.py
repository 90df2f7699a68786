"""Heuristic document-quality rules: Gopher quality + repetition, C4 (doc level), FineWeb.

Pure Python (stdlib ``re`` + numpy); no Beam imports, so it can be used from a DoFn,
a notebook or a unit test alike.

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

Every rule has its own reason code and threshold; every measured value is returned so
a dropped document can be audited.  Usage::

    qf = QualityFilter(QualityConfig.from_dict(cfg_dict))
    reasons, values = qf(text, lang)        # reasons == [] -> keep

Multilingual behaviour (all documented per rule below):

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

import dataclasses
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "QualityConfig",
    "QualityFilter",
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


def _mark_class() -> str:
    """Combining marks (Mn/Mc/Me) + ZWNJ/ZWJ, which stdlib ``\\w`` does not match.

    Without them Devanagari, Thai, Bengali, ... words (and NFD-normalised Latin) would be
    cut at every vowel sign.  BMP only (see above); built once at import (~8 ms).
    """
    ranges: list[list[int]] = []
    for cp in range(0x10000):
        ch = chr(cp)
        if unicodedata.category(ch)[0] == "M" and not ch.isalnum():
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    ranges.append([0x200C, 0x200D])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


_MARKS = _mark_class()
_LETTER = rf"[^\W_{_CJK}]"  # letter/digit of a space-delimited script (not Han/Kana)
_STEM = rf"{_LETTER}+(?:[{_MARKS}]+{_LETTER}*)*"
_WORD = rf"{_STEM}(?:['’\-]{_STEM})*"
_WORD_RE = re.compile(_WORD)
_WORD_OR_CJK_RUN_RE = re.compile(rf"({_WORD})|([{_CJK}]+)")
_CJK_RE = re.compile(rf"[{_CJK}]")
# A whitespace-delimited run of punctuation/symbols ("|", "--", "==>", "•", "#"), which
# is a token for the alphabetic-word rule only (see _count_symbol_tokens).
_SYMBOL_TOKEN_RE = re.compile(r"\s[^\w\s]+(?!\S)")
_SYMBOL_TOKEN_AT_START_RE = re.compile(r"[^\w\s]+(?!\S)")
# A word token (as produced by _WORD_RE) with no alphabetic character: digits only.
_NON_ALPHA_WORD_RE = re.compile(rf"[\d'’\-{_MARKS}]+")
_DIGIT_RE = re.compile(r"\d")

_HANGUL_SYLLABLES_RE = re.compile("[\uac00-\ud7a3]+")
# East-Asian wide / full-width characters (count double for the short-line rule).
_WIDE_RE = re.compile(
    "[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff01-\uff60\uffe0-\uffe6]"
)

# Sentence terminators that need no following space (CJK and other scripts).
_TERMINAL_NOSPACE = "。｡！？．؟۔।॥։።။།។‼⁇⁈⁉"
_CLOSERS = "\"'”’“»«›‹」』）)]】〕〉》"  # closing quotes / brackets
_CLOSERS_CLS = re.escape(_CLOSERS)
_LINE_END_CHARS = frozenset(".!?" + _TERMINAL_NOSPACE + "\"'”’“»«›‹」』")
_BRACKET_END_RE = re.compile(rf"[.!?{_TERMINAL_NOSPACE}][{_CLOSERS_CLS}]+$")

# C4 sentence counter: one match per sentence end.
#   * a ``. ! ?`` run that does not follow whitespace or another terminator (so it ends
#     a word, a number or a closing quote/bracket), is not an ellipsis ("...", "…") and
#     is followed -- after optional closing quotes/brackets -- by whitespace, the end of
#     the text or a CJK character (so the dot in "3.14" does not count);
#   * a run of CJK / other-script terminators (。！？ ...), no following space needed.
# The pattern starts with a plain character class (look-arounds come second) so that
# ``re`` can skip quickly to candidate characters (4x faster than look-behind first).
_SENT_END_RE = re.compile(
    rf"[.!?{_TERMINAL_NOSPACE}]"
    rf"(?:(?<=[.!?])(?<![\s.!?…⋯].)(?!(?<=\.)\.)[.!?]*[{_CLOSERS_CLS}]*"
    rf"(?=\s|$|[{_CJK}\uac00-\ud7a3])"
    rf"|(?<=[{_TERMINAL_NOSPACE}])[{_TERMINAL_NOSPACE}]*)"
)

_LOREM_RE = re.compile(r"lorem\s+ipsum", re.IGNORECASE)
_ELLIPSIS_RE = re.compile(r"\.{3,}|[…⋯]+")
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


def tokenize(text: str) -> list[str]:
    """Word tokens of ``text``; the single tokenizer used by every rule.

    * Space-delimited scripts (Latin, Cyrillic, Greek, Hangul, Arabic, Devanagari, ...):
      maximal runs of letters/digits plus combining marks, with internal apostrophes and
      hyphens kept (``don't``, ``E-Mail``); all other punctuation and symbols separate
      words and are not words themselves.
    * Han, Hiragana and Katakana: every character is one word.
    * Scripts written without spaces but not covered above (Thai, Lao, Khmer, Burmese,
      Tibetan) come out as one token per space-delimited phrase; the word-length rule is
      skipped for them (``gopher_word_length_skip_langs``).

    Compiled regexes only: text without Han/Kana is one ``findall``; otherwise Han/Kana
    come out as runs that are split with ``list.extend`` (no per-character Python loop).
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


def _count_symbol_tokens(text: str) -> int:
    """Whitespace-delimited runs of punctuation/symbols only ("|", "-->", "•", "###")."""
    n = len(_SYMBOL_TOKEN_RE.findall(text))
    return n + 1 if _SYMBOL_TOKEN_AT_START_RE.match(text) else n


# --------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------

_TOP_NGRAMS_DEFAULT = ((2, 0.20), (3, 0.18), (4, 0.16))
_DUP_NGRAMS_DEFAULT = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
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
    items = _pairs("gopher_stop_words", value)
    out = {}
    for lang, words in items:
        if isinstance(words, str) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"gopher_stop_words[{lang!r}] must be a list of strings")
        out[normalize_lang(str(lang))] = tuple(sorted({w.lower() for w in words}))
    return tuple(sorted(out.items()))


def _freeze_ngrams(name: str, value: Any) -> tuple[tuple[int, float], ...]:
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


@dataclass(frozen=True)
class QualityConfig:
    """Thresholds of every rule, with the published (datatrove) defaults.

    A numeric threshold set to ``None`` switches that single rule off; the four
    ``gopher_quality`` / ``gopher_repetition`` / ``c4`` / ``fineweb`` booleans switch a
    whole family off (its values are then not measured either).  Build from a plain dict
    (e.g. YAML) with :meth:`from_dict`, which rejects unknown keys.
    """

    # C4's policy/javascript line removal (filters/clean.py), applied before the rules as
    # datatrove's C4QualityFilter does in the FineWeb recipe; the document rules see the cleaned text.
    c4_line_filter: bool = True

    # Rule families
    gopher_quality: bool = True
    gopher_repetition: bool = True
    c4: bool = True
    fineweb: bool = True

    # Gopher quality (Rae et al. 2021, A.1.1)
    gopher_min_doc_words: int | None = 50
    gopher_max_doc_words: int | None = 100_000
    gopher_min_avg_word_length: float | None = 3.0
    gopher_max_avg_word_length: float | None = 10.0
    gopher_max_symbol_word_ratio: float | None = 0.1
    gopher_max_bullet_lines_ratio: float | None = 0.9
    gopher_max_ellipsis_lines_ratio: float | None = 0.3
    gopher_min_alpha_words_ratio: float | None = 0.8
    gopher_min_stop_words: int | None = 2
    #: {lang: words}; the stop-word rule only runs for languages listed here.
    gopher_stop_words: tuple[tuple[str, tuple[str, ...]], ...] = field(
        default_factory=lambda: _freeze_stop_words(DEFAULT_STOP_WORDS)
    )
    #: Languages written without spaces: mean-word-length bounds are skipped.
    gopher_word_length_skip_langs: tuple[str, ...] = _NO_SPACE_LANGS
    #: Measure Hangul word length in letters (jamo) rather than syllable blocks.
    gopher_hangul_length_in_jamo: bool = True

    # Gopher repetition (Rae et al. 2021, A.1.1, table A1)
    gopher_dup_line_frac: float | None = 0.3
    gopher_dup_para_frac: float | None = 0.3
    gopher_dup_line_char_frac: float | None = 0.2
    gopher_dup_para_char_frac: float | None = 0.2
    gopher_top_ngram_fracs: tuple[tuple[int, float], ...] = _TOP_NGRAMS_DEFAULT
    gopher_dup_ngram_fracs: tuple[tuple[int, float], ...] = _DUP_NGRAMS_DEFAULT
    #: n-gram length multiplier for languages without spaces (character n-grams stand for words).
    gopher_cjk_ngram_scale: int = 2

    # C4 (Raffel et al. 2020, section 2.2), document level only
    c4_filter_lorem_ipsum: bool = True
    c4_filter_curly_bracket: bool = True
    c4_min_sentences: int | None = 3

    # FineWeb (Penedo et al. 2024)
    fineweb_line_punct_thr: float | None = 0.12
    fineweb_line_punct_exclude_zero: bool = False
    fineweb_short_line_thr: float | None = 0.67
    fineweb_short_line_length: int = 30
    #: Display width of an East-Asian wide character for short-line length (1 = upstream).
    fineweb_wide_char_width: int = 2
    fineweb_char_duplicates_ratio: float | None = 0.01
    fineweb_new_line_ratio: float | None = 0.3

    def __post_init__(self) -> None:
        defaults = {f.name: f for f in dataclasses.fields(self)}
        for name, f in defaults.items():
            value = getattr(self, name)
            if name == "gopher_stop_words":
                object.__setattr__(self, name, _freeze_stop_words(value))
            elif name in ("gopher_top_ngram_fracs", "gopher_dup_ngram_fracs"):
                object.__setattr__(self, name, _freeze_ngrams(name, value))
            elif name == "gopher_word_length_skip_langs":
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{name} must be a list of language codes")
                object.__setattr__(self, name, tuple(normalize_lang(v) for v in value))
            elif isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{name} must be true/false, got {value!r}")
            else:  # numeric threshold
                optional = name not in ("fineweb_short_line_length", "fineweb_wide_char_width")
                if value is None and optional:
                    continue
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not math.isfinite(value)
                    or value < 0
                ):
                    what = "a non-negative number" + (" or null" if optional else "")
                    raise ValueError(f"{name} must be {what}, got {value!r}")
                if isinstance(f.default, int) and not isinstance(value, int):
                    if not float(value).is_integer():
                        raise ValueError(f"{name} must be an integer, got {value!r}")
                    object.__setattr__(self, name, int(value))
        if self.fineweb_wide_char_width < 1:
            raise ValueError("fineweb_wide_char_width must be >= 1")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> QualityConfig:
        """Build from a plain dict; unknown keys raise ``ValueError``.

        ``gopher_top_ngram_fracs`` / ``gopher_dup_ngram_fracs`` accept ``{n: frac}``
        (YAML string keys are fine) and ``gopher_stop_words`` accepts ``{lang: [words]}``
        (it *replaces* the built-in lists).
        """
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"QualityConfig.from_dict expects a mapping, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in d if k not in known)
        if unknown:
            raise ValueError(
                f"unknown quality config key(s): {', '.join(unknown)}; "
                f"valid keys: {', '.join(sorted(known))}"
            )
        return cls(**dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (round-trips through :meth:`from_dict`)."""
        out = dataclasses.asdict(self)
        out["gopher_stop_words"] = {k: list(v) for k, v in self.gopher_stop_words}
        out["gopher_top_ngram_fracs"] = dict(self.gopher_top_ngram_fracs)
        out["gopher_dup_ngram_fracs"] = dict(self.gopher_dup_ngram_fracs)
        out["gopher_word_length_skip_langs"] = list(self.gopher_word_length_skip_langs)
        return out


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _div(a: float, b: float) -> float:
    return float(a) / b if b else 0.0


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


def _ends_with_terminal(line: str) -> bool:
    last = line[-1]
    return last in _LINE_END_CHARS or (last in _CLOSERS and _BRACKET_END_RE.search(line) is not None)


class _Doc:
    """Per-document shared state (tokens, lines), computed lazily once."""

    __slots__ = ("text", "_words", "_lines")

    def __init__(self, text: str):
        self.text = text
        self._words: list[str] | None = None
        self._lines: list[str] | None = None

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
    filter does both.  Reason codes come out in the fixed order of :attr:`reason_codes`::

        gopher_too_few_words, gopher_too_many_words, gopher_mean_word_length,
        gopher_symbol_ratio, gopher_bullet_lines, gopher_ellipsis_lines,
        gopher_alpha_words, gopher_stopwords,
        gopher_dup_lines, gopher_dup_paras, gopher_dup_line_chars, gopher_dup_para_chars,
        gopher_top_{n}gram (n ascending), gopher_dup_{n}gram (n ascending),
        c4_lorem_ipsum, c4_curly_bracket, c4_too_few_sentences,
        fineweb_line_punct, fineweb_short_lines, fineweb_dup_line_chars, fineweb_newline_ratio
    """

    def __init__(self, config: QualityConfig):
        if not isinstance(config, QualityConfig):
            raise TypeError("QualityFilter needs a QualityConfig (use QualityConfig.from_dict)")
        self.config = config
        self._stop_words = {lang: frozenset(ws) for lang, ws in config.gopher_stop_words}
        self._skip_len_langs = frozenset(config.gopher_word_length_skip_langs)
        self._top = config.gopher_top_ngram_fracs
        self._dup = config.gopher_dup_ngram_fracs

    # ---- public API ------------------------------------------------------------------

    @property
    def value_keys(self) -> list[str]:
        """Keys :meth:`measure` returns under this config (disabled families omitted)."""
        c, keys = self.config, []
        if c.gopher_quality:
            keys += [
                "gopher_word_count", "gopher_mean_word_length", "gopher_symbol_word_ratio",
                "gopher_bullet_line_ratio", "gopher_ellipsis_line_ratio",
                "gopher_alpha_word_ratio", "gopher_stopword_count",
            ]
        if c.gopher_repetition:
            keys += [
                "gopher_dup_line_frac", "gopher_dup_para_frac",
                "gopher_dup_line_char_frac", "gopher_dup_para_char_frac",
            ]
            keys += [f"gopher_top_{n}gram_frac" for n, _ in self._top]
            keys += [f"gopher_dup_{n}gram_frac" for n, _ in self._dup]
        if c.c4:
            keys += ["c4_lorem_ipsum", "c4_curly_bracket", "c4_sentence_count"]
        if c.fineweb:
            keys += [
                "fineweb_line_punct_ratio", "fineweb_short_line_ratio",
                "fineweb_dup_line_char_ratio", "fineweb_newline_word_ratio",
            ]
        return keys

    @property
    def reason_codes(self) -> list[str]:
        """Every reason code :meth:`check` can return under this config, in output order."""
        c, codes = self.config, []
        if c.gopher_quality:
            codes += [
                "gopher_too_few_words", "gopher_too_many_words", "gopher_mean_word_length",
                "gopher_symbol_ratio", "gopher_bullet_lines", "gopher_ellipsis_lines",
                "gopher_alpha_words", "gopher_stopwords",
            ]
        if c.gopher_repetition:
            codes += [
                "gopher_dup_lines", "gopher_dup_paras", "gopher_dup_line_chars",
                "gopher_dup_para_chars",
            ]
            codes += [f"gopher_top_{n}gram" for n, _ in self._top]
            codes += [f"gopher_dup_{n}gram" for n, _ in self._dup]
        if c.c4:
            codes += ["c4_lorem_ipsum", "c4_curly_bracket", "c4_too_few_sentences"]
        if c.fineweb:
            codes += [
                "fineweb_line_punct", "fineweb_short_lines", "fineweb_dup_line_chars",
                "fineweb_newline_ratio",
            ]
        return codes

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
        return values

    def check(self, values: Mapping[str, float], lang: str) -> list[str]:
        """Reason codes of every failed rule, in the order of :attr:`reason_codes`."""
        lang = normalize_lang(lang)
        c = self.config
        reasons: list[str] = []
        if c.gopher_quality:
            reasons += self._check_gopher_quality(values, lang)
        if c.gopher_repetition:
            reasons += self._check_gopher_repetition(values)
        if c.c4:
            reasons += self._check_c4(values)
        if c.fineweb:
            reasons += self._check_fineweb(values)
        return reasons

    def __call__(self, text: str, lang: str) -> tuple[list[str], dict[str, float]]:
        values = self.measure(text, lang)
        return self.check(values, lang), values

    # ---- Gopher quality ----------------------------------------------------------------

    def _measure_gopher_quality(self, doc: _Doc, lang: str) -> dict[str, float]:
        """Gopher quality filter (Rae et al. 2021, appendix A.1.1).

        * word count within [50, 100 000];
        * mean word length within [3, 10] characters -- skipped for languages written
          without spaces (``gopher_word_length_skip_langs``: zh, ja, th, ...), whose
          "words" are single characters or whole phrases.  Hangul words are measured in
          letters (jamo), the analogue of Latin letters (a syllable block holds 2-3):
          counted in blocks, ordinary Korean prose averages < 3 and would fail;
        * hash-to-word and ellipsis-to-word ratio each <= 0.1 (value: the larger one);
        * <= 90 % of lines start with a bullet, <= 30 % end with an ellipsis
          (blank lines ignored);
        * >= 80 % of tokens contain an alphabetic character; tokens here are the
          words plus whitespace-delimited symbol runs ("|", "==>", "•"), so symbol soup
          and number tables fail while punctuation attached to words does not count;
        * >= 2 occurrences of the language's stop words (Gopher's English list: the, be,
          to, of, and, that, have, with; small lists for de, fr, es, it, pt, nl, ru).
          Languages without a list get count 0 and the rule is skipped.
        """
        text, words = doc.text, doc.words
        n_words = len(words)
        word_chars = sum(map(len, words))
        if self.config.gopher_hangul_length_in_jamo and _HANGUL_SYLLABLES_RE.search(text):
            word_chars += _hangul_extra_jamo(text)
        # a word without any letter starts with a digit (see tokenize)
        n_non_alpha = 0
        if _DIGIT_RE.search(text):
            n_non_alpha = sum(
                1 for w in words
                if w[0].isdecimal() and (w.isdecimal() or _NON_ALPHA_WORD_RE.fullmatch(w))
            )
        n_hash = text.count("#") + text.count("＃")
        n_ellipsis = (
            len(_ELLIPSIS_RE.findall(text))
            if ("..." in text or "…" in text or "⋯" in text)
            else 0
        )
        lines = doc.lines
        n_bullet = sum(1 for ln in lines if ln[0] in _BULLETS)
        n_ell_lines = sum(1 for ln in lines if ln.endswith(_ELLIPSIS_ENDS))
        n_symbol_tokens = _count_symbol_tokens(text)
        stop = self._stop_words.get(lang)
        n_stop = sum(1 for w in words if w.lower() in stop) if stop else 0
        return {
            "gopher_word_count": float(n_words),
            "gopher_mean_word_length": _div(word_chars, n_words),
            "gopher_symbol_word_ratio": _div(max(n_hash, n_ellipsis), n_words),
            "gopher_bullet_line_ratio": _div(n_bullet, len(lines)),
            "gopher_ellipsis_line_ratio": _div(n_ell_lines, len(lines)),
            "gopher_alpha_word_ratio": _div(n_words - n_non_alpha, n_words + n_symbol_tokens),
            "gopher_stopword_count": float(n_stop),
        }

    def _check_gopher_quality(self, v: Mapping[str, float], lang: str) -> list[str]:
        c, out = self.config, []
        n = v["gopher_word_count"]
        if c.gopher_min_doc_words is not None and n < c.gopher_min_doc_words:
            out.append("gopher_too_few_words")
        if c.gopher_max_doc_words is not None and n > c.gopher_max_doc_words:
            out.append("gopher_too_many_words")
        if lang not in self._skip_len_langs:
            m = v["gopher_mean_word_length"]
            if (c.gopher_min_avg_word_length is not None and m < c.gopher_min_avg_word_length) or (
                c.gopher_max_avg_word_length is not None and m > c.gopher_max_avg_word_length
            ):
                out.append("gopher_mean_word_length")
        if _gt(v["gopher_symbol_word_ratio"], c.gopher_max_symbol_word_ratio):
            out.append("gopher_symbol_ratio")
        if _gt(v["gopher_bullet_line_ratio"], c.gopher_max_bullet_lines_ratio):
            out.append("gopher_bullet_lines")
        if _gt(v["gopher_ellipsis_line_ratio"], c.gopher_max_ellipsis_lines_ratio):
            out.append("gopher_ellipsis_lines")
        if c.gopher_min_alpha_words_ratio is not None and (
            v["gopher_alpha_word_ratio"] < c.gopher_min_alpha_words_ratio
        ):
            out.append("gopher_alpha_words")
        if (
            c.gopher_min_stop_words is not None
            and lang in self._stop_words
            and v["gopher_stopword_count"] < c.gopher_min_stop_words
        ):
            out.append("gopher_stopwords")
        return out

    # ---- Gopher repetition -------------------------------------------------------------

    def _measure_gopher_repetition(self, doc: _Doc, lang: str) -> dict[str, float]:
        """Gopher repetition filter (Rae et al. 2021, appendix A.1.1, table A1).

        * duplicate lines / paragraphs: fraction of (non-blank, stripped) lines and of
          paragraphs (split on blank lines) that are exact repeats of an earlier one
          (<= 0.3), and the fraction of the document's characters inside those repeats
          (<= 0.2);
        * top n-gram (n = 2, 3, 4): characters of the most frequent word n-gram times its
          count, over all word characters (<= 0.20 / 0.18 / 0.16); 0 when no n-gram
          occurs twice;
        * duplicate n-grams (n = 5..10): fraction of word characters covered by n-gram
          occurrences that repeat an earlier occurrence, overlaps counted once
          (<= 0.15 ... 0.10).

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
        out = {f"gopher_top_{n}gram_frac": 0.0 for n in top_ns.values()}
        out.update({f"gopher_dup_{n}gram_frac": 0.0 for n in dup_ns.values()})
        n_words = len(words)
        max_n = max([*top_ns, *dup_ns], default=0)
        if n_words < 2 or max_n < 1:
            return out
        vocab: dict[str, int] = {}
        ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), np.int64, n_words)
        lens = np.fromiter(map(len, words), np.int64, n_words)
        total = int(lens.sum())
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
                top = int(counts.max())
                if top >= 2:
                    glen = np.empty(len(counts), np.int64)
                    glen[gram] = csum[n:n + m] - csum[:m]
                    out[f"gopher_top_{top_ns[n]}gram_frac"] = _div(int(glen[counts == top].max()) * top, total)
            if n in dup_ns:
                is_repeat = first[gram] != np.arange(m)
                if is_repeat.any():
                    covered = np.convolve(is_repeat.astype(np.int64), np.ones(n, np.int64)) > 0
                    out[f"gopher_dup_{dup_ns[n]}gram_frac"] = _div(int(lens[covered].sum()), total)
        return out

    def _check_gopher_repetition(self, v: Mapping[str, float]) -> list[str]:
        c, out = self.config, []
        if _gt(v["gopher_dup_line_frac"], c.gopher_dup_line_frac):
            out.append("gopher_dup_lines")
        if _gt(v["gopher_dup_para_frac"], c.gopher_dup_para_frac):
            out.append("gopher_dup_paras")
        if _gt(v["gopher_dup_line_char_frac"], c.gopher_dup_line_char_frac):
            out.append("gopher_dup_line_chars")
        if _gt(v["gopher_dup_para_char_frac"], c.gopher_dup_para_char_frac):
            out.append("gopher_dup_para_chars")
        for n, thr in self._top:
            if v[f"gopher_top_{n}gram_frac"] > thr:
                out.append(f"gopher_top_{n}gram")
        for n, thr in self._dup:
            if v[f"gopher_dup_{n}gram_frac"] > thr:
                out.append(f"gopher_dup_{n}gram")
        return out

    # ---- C4 ------------------------------------------------------------------------------

    def _measure_c4(self, doc: _Doc) -> dict[str, float]:
        """C4 document-level rules (Raffel et al. 2020, section 2.2; datatrove C4QualityFilter).

        * ``c4_lorem_ipsum``: occurrences of "lorem ipsum" (case-insensitive), must be 0;
        * ``c4_curly_bracket``: occurrences of "{", must be 0;
        * ``c4_sentence_count``: sentence ends in the whole document, at least 3 (the
          paper's "fewer than 3 sentences"; TFDS/datatrove code uses 5 after dropping
          lines).  A sentence end is a ``. ! ?`` run after a word (not "...", not
          "3.14") followed by space/end, or a run of ``。！？`` / other-script
          terminators.  Lines are neither dropped nor rewritten here.
        """
        text = doc.text
        return {
            "c4_lorem_ipsum": float(len(_LOREM_RE.findall(text))),
            "c4_curly_bracket": float(text.count("{")),
            "c4_sentence_count": float(len(_SENT_END_RE.findall(text))),
        }

    def _check_c4(self, v: Mapping[str, float]) -> list[str]:
        c, out = self.config, []
        if c.c4_filter_lorem_ipsum and v["c4_lorem_ipsum"] > 0:
            out.append("c4_lorem_ipsum")
        if c.c4_filter_curly_bracket and v["c4_curly_bracket"] > 0:
            out.append("c4_curly_bracket")
        if c.c4_min_sentences is not None and v["c4_sentence_count"] < c.c4_min_sentences:
            out.append("c4_too_few_sentences")
        return out

    # ---- FineWeb -------------------------------------------------------------------------

    def _measure_fineweb(self, doc: _Doc) -> dict[str, float]:
        """FineWeb quality filter (Penedo et al. 2024; datatrove FineWebQualityFilter).

        Over non-blank, stripped lines (datatrove counts blank lines too):

        * ``fineweb_line_punct_ratio``: lines ending in terminal punctuation (any script,
          closing quotes included, optionally followed by a closing bracket); fails
          when <= 0.12;
        * ``fineweb_short_line_ratio``: lines of at most 30 characters; fails when
          >= 0.67.  East-Asian wide characters (Han, Kana, Hangul, full-width forms)
          count ``fineweb_wide_char_width`` (2) columns, so a 15-character Chinese
          sentence is not "short" (a Han character carries ~a word);
        * ``fineweb_dup_line_char_ratio``: characters in repeated lines over characters
          excluding newlines; fails when >= 0.01;
        * ``fineweb_newline_word_ratio``: line breaks (between non-blank lines, so a
          blank-line paragraph gap counts once) per word; fails when > 0.3.
        """
        c = self.config
        text, lines = doc.text, doc.lines
        n_lines = len(lines)
        n_punct = sum(1 for ln in lines if _ends_with_terminal(ln))
        limit = c.fineweb_short_line_length
        extra = c.fineweb_wide_char_width - 1
        if extra and _WIDE_RE.search(text):
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

    def _check_fineweb(self, v: Mapping[str, float]) -> list[str]:
        c, out = self.config, []
        r = v["fineweb_line_punct_ratio"]
        if c.fineweb_line_punct_thr is not None and r <= c.fineweb_line_punct_thr and not (
            r == 0 and c.fineweb_line_punct_exclude_zero
        ):
            out.append("fineweb_line_punct")
        if c.fineweb_short_line_thr is not None and v["fineweb_short_line_ratio"] >= c.fineweb_short_line_thr:
            out.append("fineweb_short_lines")
        if (
            c.fineweb_char_duplicates_ratio is not None
            and v["fineweb_dup_line_char_ratio"] >= c.fineweb_char_duplicates_ratio
        ):
            out.append("fineweb_dup_line_chars")
        if _gt(v["fineweb_newline_word_ratio"], c.fineweb_new_line_ratio):
            out.append("fineweb_newline_ratio")
        return out


def _gt(value: float, threshold: float | None) -> bool:
    return threshold is not None and value > threshold


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
