"""Model-generated content scorers: `llm_generated` (text written by an LLM) and `poor_mt`
(low-quality machine translation). DeepSeek-V4-style data step: such text carries little information
and is treated as implicit repetition, so the pipeline drops documents above configured thresholds.

Each scorer is a quantized fastText supervised classifier (word uni+bigrams) on a normalized, bounded
sample of the document's *prose lines*.

`llm_generated` has a second head for chat/instruction-tuned models, whose text the n-gram model
(trained mostly on pure samples of weak base models) does not recognise: a logistic regression on
style features from the literature on LLM writing (`style_features`: the excess vocabulary of
Kobak et al. 2024 and Liang et al. 2024, sentence-length burstiness, discourse-marker openers,
specificity). The heads are combined as independent evidence, naive-Bayes style, both being trained
on balanced classes: logit p = logit p_ngram + logit p_style. Both parts are reported
(`llm_ngram`, `llm_style`); the threshold applies to the combination.

Optionally (`train_filter(..., stats=True)`) a logistic regression stacks cheap statistics onto the
n-gram probability (repetition, type-token ratio, compression ratio, function-word rate,
sentence-length profile); the shipped models do not stack (MODEL_CARD.md). `filters/train_synthetic.py`
reproduces both models; the JSON beside each holds its heads, threshold, languages and held-out metrics.

Page robustness: extracted pages start with a title line, a byline/date line and may carry
boilerplate. Lines shorter than `MIN_PROSE_WORDS` words are left out of the sample (titles, bylines,
menus, "Share" links); training texts were given random titles, bylines and boilerplate of the same
kind so that what survives the line filter is not informative either.

No Beam here: `SyntheticTextScorer(...)` takes picklable arguments only; `load()` (or the first
`score()`) reads the models, so a DoFn calls it in `setup()`.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from collections import Counter
from pathlib import Path

MODELS_DIR = Path(__file__).parent / "models"
LLM_MODEL = MODELS_DIR / "llm_generated.ftz"
MT_MODEL = MODELS_DIR / "poor_mt.ftz"

MIN_PROSE_WORDS = 8  # shorter lines (title, byline, menus) are not scored
MAX_CHARS = 1500  # bounded prose sample per document: cost is O(1) in document length

# Languages each model was trained on (lid.176 codes). Elsewhere the score is 0.0 and
# `<name>_supported` is False: we do not drop what we cannot judge.
LLM_LANGS = ("en",)
MT_LANGS = ("en", "de")

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"\w+|[^\w\s]")
_NONZERO_DIGITS = "123456789"  # ASCII digits other than 0, each written as 0 by `normalize`
_SENT_END = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")

FUNCTION_WORDS = {
    "en": set("""a an the and or but if of to in on at by for with from as is are was were be been being
        it its this that these those he she they we you i me him her them us my your his their our not no
        so than then there here which who whom whose what when where why how all any some can could would
        should will shall may might must do does did have has had into about over after before up out""".split()),
    "de": set("""der die das den dem des ein eine einen einem einer eines und oder aber wenn als wie
        ist sind war waren sein wird werden wurde hat haben hatte es sie er wir ihr ich du nicht kein
        keine so dass daß zu im in an auf aus bei mit nach von vor für über unter durch um auch noch
        nur schon sehr man sich was wer wo wann warum dies diese dieser dieses jene""".split()),
}


# --------------------------------------------------------------------------------------- text sample
def prose_sample(text: str, max_chars: int = MAX_CHARS, min_words: int = MIN_PROSE_WORDS) -> str:
    """The document's prose lines joined into one line, at most ~max_chars characters.

    Lines with fewer than `min_words` words (CJK: fewer than 2*min_words CJK characters) are skipped:
    titles, bylines, dates, navigation. If nothing is left, all lines are used.
    """
    kept, size = [], 0
    lines = text.split("\n")
    for line in lines:
        line = line.strip()
        if not line:
            continue
        words = line.count(" ") + 1
        if words < min_words and len(_CJK.findall(line[:200])) < 2 * min_words:
            continue
        kept.append(line)
        size += len(line) + 1
        if size >= max_chars:
            break
    if not kept:
        kept = [ln.strip() for ln in lines[:200] if ln.strip()]
    sample = " ".join(kept)
    if len(sample) > max_chars:
        cut = sample.rfind(" ", 0, max_chars)
        sample = sample[: cut if cut > max_chars // 2 else max_chars]
    return " ".join(sample.split())  # whitespace runs as one space, stripped: str.split's whitespace is \s


def normalize(sample: str) -> str:
    """fastText input: lower case, ASCII digits -> 0, punctuation split off words, one line."""
    text = sample.lower()
    for digit in _NONZERO_DIGITS:  # str.replace searches for one character; str.translate maps each one
        text = text.replace(digit, "0")
    return " ".join(_TOKEN.findall(text))


STAT_NAMES = ("ttr50", "dup3", "compress", "funcw", "sent_len", "sent_cv", "word_len", "comma", "quote")


def text_stats(sample: str, lang: str = "en") -> list[float]:
    """Cheap statistics of a prose sample (see STAT_NAMES); all bounded, length-insensitive."""
    words = [w.lower() for w in _WORD.findall(sample)]
    n = len(words)
    if n < 5:
        return [0.0] * len(STAT_NAMES)
    # moving-average type-token ratio over 50-word windows (length-independent lexical variety)
    win = 50
    if n <= win:
        ttr = len(set(words)) / n
    else:
        starts = range(0, n - win + 1, 25)
        ttr = sum(len(set(words[i:i + win])) for i in starts) / (win * len(starts))
    tri = list(zip(words, words[1:], words[2:]))
    dup3 = 1.0 - len(set(tri)) / len(tri) if tri else 0.0
    raw = sample.encode("utf-8")
    compress = len(zlib.compress(raw, 6)) / max(len(raw), 1)
    fw = FUNCTION_WORDS.get(lang, FUNCTION_WORDS["en"])
    funcw = sum(w in fw for w in words) / n
    sents = [s for s in _SENT_END.split(sample) if s.strip()]
    lens = [len(_WORD.findall(s)) for s in sents] or [n]
    mean = sum(lens) / len(lens)
    sd = math.sqrt(sum((x - mean) ** 2 for x in lens) / len(lens))
    word_len = sum(len(w) for w in words) / n
    comma = (sample.count(",") + sample.count("，")) / n
    quote = sum(sample.count(q) for q in "\"“”«»„") / n
    return [ttr, dup3, compress, funcw, math.log1p(mean), sd / max(mean, 1e-9), word_len, comma, quote]


# ------------------------------------------------------------------------- chat-model style features
# Words whose frequency rose sharply with ChatGPT-era writing: the "excess vocabulary" of Kobak et al.
# 2024 (arXiv:2406.07016, PubMed 2010-2024) and the adjectives of Liang et al. 2024 (arXiv:2403.07183,
# peer reviews), plus the connectives both list. Prior knowledge, not fitted to our data.
STYLE_WORDS = frozenset("""
    delve delves delved delving showcase showcases showcasing showcased underscore underscores underscoring
    intricate intricacies pivotal crucial crucially notably additionally furthermore moreover comprehensive
    enhance enhances enhancing enhanced foster fosters fostering fostered realm realms tapestry multifaceted
    nuanced nuances insights insightful vital essential ensure ensures ensuring robust seamless seamlessly
    landscape navigate navigating navigates leverage leveraging emphasize emphasizes emphasizing highlight
    highlights highlighting overall ultimately embark embarking journey resonate resonates vibrant bustling
    holistic dynamic valuable invaluable impactful elevate unlock unlocking harness harnessing strive striving
    commendable innovative meticulous meticulously noteworthy versatile profound testament individuals various
    numerous significant significantly aspects aspect potential paramount garner garnered intriguing
    captivating enduring unwavering interplay endeavor endeavors encompass encompasses encompassing facilitate
    facilitates boast boasts""".split())
OPENERS = frozenset("""however additionally furthermore moreover overall ultimately consequently therefore thus indeed
    importantly notably""".split()) | {"in addition", "in conclusion", "in summary"}
FIRST_PERSON = ("i", "me", "my", "i'm", "i've")
_EN_WORD = re.compile(r"[a-z']+|\d+")  # on lower-cased text
_CAPITALIZED = re.compile(r"(?<![A-Za-z'])[A-Z]")
_CONTRACTIONS = ("n't", "'s", "'re", "'ve", "'ll", "'d", "'m")
STYLE_NAMES = ("style_words", "openers", "sent_cv", "sent_len", "contractions", "first_person", "digits",
               "capitalized", "long_words", "exclaim_question", "semicolon_colon", "parens", "quotes", "commas")


def _opens_with_connective(sentence: str) -> bool:
    head = sentence.lstrip("\"'\u201c\u2018(").split(None, 2)
    one = head[0].rstrip(",;:").lower() if head else ""
    return one in OPENERS or (len(head) > 1 and f"{one} {head[1].rstrip(',;:').lower()}" in OPENERS)


def style_counts_python(lowered: str, sample: str) -> tuple[int, int, int, int, int, int, int]:
    """(words, style words, digit words, long words, contractions, first-person words, capitals) of a prose
    sample and its lower-cased form, what `style_features` counts: the words `_EN_WORD` finds (counted over
    distinct words), the capitals `_CAPITALIZED` finds. The oracle of filters/_words.c `style_counts`, which
    `style_counts` is where it was built."""
    counts = Counter(_EN_WORD.findall(lowered))
    style = digits = long_words = contractions = 0
    for w, c in counts.items():
        if w in STYLE_WORDS:
            style += c
        if w[0].isdigit():
            digits += c
        if len(w) >= 9:
            long_words += c
        if "'" in w and w.endswith(_CONTRACTIONS):
            contractions += c
    return (sum(counts.values()), style, digits, long_words, contractions, sum(counts[w] for w in FIRST_PERSON),
            len(_CAPITALIZED.findall(sample)))


try:
    from filters import _words  # built by `pip install` (setup.py) where a C compiler is

    def style_counts(lowered: str, sample: str) -> tuple[int, int, int, int, int, int, int]:
        """See `style_counts_python`."""
        return _words.style_counts(lowered, sample, STYLE_WORDS)
except ImportError:
    style_counts = style_counts_python


def style_features(sample: str) -> list[float]:
    """English style profile of a prose sample (see STYLE_NAMES): chat models write in the excess
    vocabulary, open sentences with connectives, vary sentence length less (low burstiness) and name
    fewer specifics (digits, proper nouns, quotes) than people do. One pass over the <= MAX_CHARS sample
    for the word counts (`style_counts`), regex and str.count for the rest."""
    words, style, digits, long_words, contractions, first_person, capitals = style_counts(
        sample.lower().replace("\u2019", "'"), sample)
    n = max(words, 1)
    sents = [x for x in _SENT_END.split(sample) if x.strip()]
    lens = [len(x.split()) for x in sents] or [n]
    mean = sum(lens) / len(lens)
    sd = math.sqrt(sum((x - mean) ** 2 for x in lens) / len(lens))
    per_sentence = max(len(sents), 1)
    return [
        100 * style / n,
        sum(map(_opens_with_connective, sents)) / per_sentence,
        sd / max(mean, 1.0),
        math.log1p(mean),
        100 * contractions / n,
        100 * first_person / n,
        100 * digits / n,
        capitals / n,
        long_words / n,
        (sample.count("!") + sample.count("?")) / per_sentence,
        100 * (sample.count(";") + sample.count(":")) / n,
        100 * sample.count("(") / n,
        100 * sum(sample.count(q) for q in '"\u201c\u201d') / n,
        sample.count(",") / n,
    ]


# --------------------------------------------------------------------------------------------- model
class _Classifier:
    """One shipped scorer: fastText model + the heads in the JSON beside it: optional stacking of text
    statistics (`stack`) and, for llm, the chat-model style head (`style_head`)."""

    def __init__(self, ftz_path: str):
        import fasttext

        fasttext.FastText.eprint = lambda *a, **k: None  # silence the load-time warning
        self.model = fasttext.load_model(str(ftz_path))
        meta_path = str(ftz_path)[: -len(Path(ftz_path).suffix)] + ".json"
        self.meta = {}
        try:
            if os.path.exists(meta_path):
                with open(meta_path) as fh:
                    self.meta = json.load(fh)
        except (OSError, ValueError):
            self.meta = {}
        self.stack = self.meta.get("stack")  # {"mean": [...], "std": [...], "coef": [...], "bias": b}
        self.style = self.meta.get("style_head")  # same form, over STYLE_NAMES

    def ft_prob(self, normalized: str) -> float:
        if not normalized:
            return 0.0
        labels, probs = self.model.predict(normalized, k=2)
        for lab, p in zip(labels, probs):
            if lab == "__label__pos":
                return min(max(float(p), 0.0), 1.0)
        return 0.0

    def parts(self, sample: str, lang: str, normalized: str | None = None) -> dict:
        """{"ngram": p, "style": q or None, "prob": combined}."""
        p = self.ft_prob(normalize(sample) if normalized is None else normalized)
        if self.stack:
            p = stacked_prob(self.stack, p, text_stats(sample, lang))
        q = logistic(self.style, style_features(sample)) if self.style else None
        return {"ngram": p, "style": q, "prob": p if q is None else combine(p, q)}

    def prob(self, sample: str, lang: str, normalized: str | None = None) -> float:
        return self.parts(sample, lang, normalized)["prob"]


def ft_logit(p: float) -> float:
    p = min(max(p, 1e-5), 1 - 1e-5)
    return math.log(p / (1 - p))


def _sigmoid(z: float) -> float:
    z = min(max(z, -30.0), 30.0)
    return 1.0 / (1.0 + math.exp(-z))


def logistic(head: dict, x: list[float]) -> float:
    """A logistic-regression head {"mean", "std", "coef", "bias"} on standardized features x."""
    z = head["bias"]
    for v, m, s, c in zip(x, head["mean"], head["std"], head["coef"]):
        z += c * (v - m) / s
    return _sigmoid(z)


def stacked_prob(stack: dict, p: float, stats: list[float]) -> float:
    return logistic(stack, [ft_logit(p)] + list(stats))


def combine(p: float, q: float) -> float:
    """Two heads trained on balanced classes, read as independent evidence (naive Bayes): the
    log-odds add. Either head alone being sure is enough; two weak votes add up."""
    return add_evidence(p, ft_logit(q))


def add_evidence(p: float, logit: float) -> float:
    """p with one more independent head's log-odds added."""
    return _sigmoid(ft_logit(p) + logit)


def with_lm_head(p: float, discrepancy: float | None, lm_logit) -> float:
    """`llm_generated` with the LM head: the Fast-DetectGPT discrepancy d calibrated as log-odds
    a*d + b (lm_logit = [a, b], from `curate fit-lm-head`); p itself without a calibration or a d."""
    if not lm_logit or discrepancy is None:
        return p
    return round(add_evidence(p, lm_logit[0] * discrepancy + lm_logit[1]), 6)


def in_lm_band(p: float, band) -> bool:
    """Whether the LM head is computed for a document whose `llm_generated` without it is p: inside
    `band` = [lo, hi] (`curate fit-lm-head`: beyond it, the LM head's log-odds on the fit texts, from
    their 1st to their 99th percentile, cannot carry p across the threshold), or always without a band."""
    return band is None or band[0] <= p <= band[1]


def _base_lang(lang: str | None) -> str:
    return (lang or "").split("_")[0].lower()


class SyntheticTextScorer:
    """Probability that a document is LLM output (`llm_generated`) or poor MT (`poor_mt`).

    score(text, lang) -> {"llm_generated": p, "poor_mt": q,
                          "llm_generated_supported": bool, "poor_mt_supported": bool,
                          "llm_ngram": p1, "llm_style": p2}   (the parts of p, where llm is supported)
    `lang` is the lid.176 code of the document (the pipeline's language stage). For a language a model
    was not trained on, its probability is 0.0 and `<name>_supported` is False (never dropped).
    Paths may be local or any Beam filesystem path (copied locally once, like filters/language.py).
    """

    def __init__(self, llm_model: str | None = None, mt_model: str | None = None,
                 max_chars: int = MAX_CHARS, min_prose_words: int = MIN_PROSE_WORDS):
        self.llm_model = str(llm_model or LLM_MODEL)
        self.mt_model = str(mt_model or MT_MODEL)
        self.max_chars = max_chars
        self.min_prose_words = min_prose_words
        self._llm = self._mt = None

    def load(self) -> "SyntheticTextScorer":
        if self._llm is None:
            self._llm = _Classifier(self.llm_model)
            self._mt = _Classifier(self.mt_model)
        return self

    def __getstate__(self):  # pickles (Beam) without the loaded models
        return {**self.__dict__, "_llm": None, "_mt": None}

    def thresholds(self) -> dict:
        """The shipped drop thresholds (held-out-calibrated, in each model's JSON)."""
        self.load()
        return {"llm_generated": self._llm.meta.get("threshold", 0.5), "poor_mt": self._mt.meta.get("threshold", 0.5)}

    @property
    def llm_langs(self) -> tuple:
        return tuple(self.load()._llm.meta.get("languages", LLM_LANGS))

    @property
    def mt_langs(self) -> tuple:
        return tuple(self.load()._mt.meta.get("languages", MT_LANGS))

    def score(self, text: str, lang: str = "en") -> dict:
        self.load()
        lang = _base_lang(lang)
        sample = prose_sample(text or "", self.max_chars, self.min_prose_words)
        out = {"llm_generated": 0.0, "poor_mt": 0.0,
               "llm_generated_supported": lang in self.llm_langs, "poor_mt_supported": lang in self.mt_langs}
        if len(sample) < 20:  # nothing to judge
            return out
        line = normalize(sample)
        if out["llm_generated_supported"]:
            parts = self._llm.parts(sample, lang, line)
            out["llm_generated"] = round(parts["prob"], 6)
            out["llm_ngram"] = round(parts["ngram"], 6)
            if parts["style"] is not None:
                out["llm_style"] = round(parts["style"], 6)
        if out["poor_mt_supported"]:
            out["poor_mt"] = round(self._mt.prob(sample, lang, line), 6)
        return out

    __call__ = score


def drop_thresholds(shipped: dict, cfg) -> dict:
    """The thresholds the synthetic stage drops at: `<name>_threshold` of its config section where set,
    else the shipped one."""
    configured = {name: getattr(cfg, f"{name}_threshold") for name in shipped}
    return {name: value if configured[name] is None else configured[name] for name, value in shipped.items()}


def synthetic_drop(scores: dict, thresholds: dict) -> str | None:
    """The first of llm_generated / poor_mt whose model judges the language and whose probability is at
    least its threshold, or None."""
    return next((name for name in ("llm_generated", "poor_mt")
                 if scores[f"{name}_supported"] and scores[name] >= thresholds[name]), None)
