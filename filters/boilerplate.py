"""Context-aware boilerplate lines, in the spirit of jusText (Pomikálek 2011) and boilerpipe (Kohlschütter
et al. 2010): what the main-content extractor keeps of a page's template (navigation menus one item per
line, "Related articles" lists, share bars, bylines, photo credits, "Image 1 of 8", newsletter prompts),
judged per line of the extracted text from the line itself and, above all, from its neighbours.

Some lines are never removed. Prose lines: a line that ends in terminal punctuation (filters/quality.py's
line-end rule, the one FineWeb's line-punctuation ratio counts), holds two or more sentence ends (the C4
sentence counter) or is 200 columns or longer. So the step cannot lower a page's line-punctuation ratio
and no sentence of the article goes, and a paragraph the extractor cut short or a script that ends
sentences without punctuation (Thai) keeps its long lines. On the annotated pages below, held-out F1 with
the punctuation guard alone is within noise of guards that let the model judge short punctuated lines
too (0.950-0.954 mean over the two halves for guards of 1 to 150 columns), and keeping every punctuated
line still allows F1 0.98 with perfect judgement of the rest; the sentence and length guards cost
0.001-0.002 more per half (they were added after two Chinese human pages of the mixed-dev corpus lost a
whole paragraph that ended without punctuation; their thresholds were not tuned there). A line between
two lines that hold a sentence (a prose line, or one with a sentence end, such as "Here are the
highlights:"): a heading or a caption inside the article (69% of the lines between two punctuated lines
are content there; keeping them all costs under 0.001 held-out F1). And three kinds that a head fitted
on news pages misjudges elsewhere, found by reading what it removed from the real pages of the shared
data that are not news (research home pages of dolma's crawl, W3C articles, Distill, Wikipedia): of
their 281 removed lines, most were titles, and some the sentences that introduce a list or an example
("The basic unit of text is not always a Unicode code point when it comes to text operations such as
the following:"). So the first line stays (the page's title as a rule: the annotators leave headlines
out of the body, so a head learns to drop them), as does a line with a sentence end in it and a line
of 4 words or more ending in a colon (labels such as "Tags:" and "Read more:" are shorter). With them
those pages lose 164 lines (menus, footers, contact lines, dates, "Quick check" boxes, some headings)
and scrapinghub's held-out F1 goes from 0.953 to 0.946; keeping headlines is most of that (0.947
with the first line alone). On mixed-dev, keeping them also keeps the repetition rules' verdict on
generated pages whose headline restates the first words of their text (docs/benchmarks.md, text_branch_eval.py).

Per non-blank line, language-neutral features (no word lists, so a German or Chinese page is judged as an
English one): its length in columns (East-Asian wide characters count 2), capitalised-word, digit and
letter shares, commas, a bullet or indent, link symbols (@ © | # » / ...), a trailing colon or ellipsis,
how often the same line recurs in the page; and its context: the length and punctuation of the lines
before and after, the mean length of the 3 lines each side, the run of short unpunctuated lines (< 60
columns) it sits in, the distance to the nearest prose line before and after, whether it lies before the
first or after the last prose line, its position, the page's share of characters in prose lines and its
number of lines.

The judged lines are scored by a logistic regression (filters/logistic.fit_logreg) fitted by
filters/train_boilerplate.py on the default extractor's output for the 181 real article pages of
scrapinghub/article-extraction-benchmark, a line labelled content when most of its word tokens align (in
order) with the page's annotated articleBody; the weights and the threshold ship in
filters/models/boilerplate_lines.json with their held-out figures (its "metrics"). A line goes when its
score is below the threshold; the blank lines around it are merged. Deterministic, no Beam; the features
and the dot products are compiled (filters/_boilerplate.c) where a C compiler built them, the Python
implementation here being their oracle and fallback.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from functools import lru_cache
from operator import mul
from pathlib import Path

from filters.line_end import ends_with_terminal
from filters.quality import _SENT_END_RE, _WIDE_RE

MODEL_PATH = Path(__file__).parent / "models" / "boilerplate_lines.json"

PROSE_COLS = 200  # a line this long (columns) is prose, whatever its punctuation: kept
PROSE_SENTENCES = 2  # so is a line with this many sentence ends (filters/quality.py's C4 counter)
INTRO_WORDS = 4  # a line ending in a colon with this many words introduces what follows: kept
SHORT_COLS = 60  # a "short" line for the run feature: fewer columns, and not a prose line
WINDOW = 3  # lines each side for the mean neighbour length
MAX_DISTANCE = 10  # the distance to the nearest prose line is capped here (lines)

_WORD = re.compile(r"\w+")
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")
_SYMBOLS = "@©|#»«·/"
_BULLETS = frozenset("•‣◦●○▪▫■□►▶▸▹➢➤✓✔-*·・>»|")
_COMMAS = ",，、"

FEATURES = (
    "len", "cap", "digit", "letter", "comma", "bullet", "symbol", "repeat", "colon", "ellipsis",
    "len_prev", "end_prev", "len_next", "end_next", "len_window", "short_run",
    "prose_prev", "prose_next", "before_prose", "after_prose", "position", "doc_prose_share", "doc_lines",
)


def join_without(lines: list[str], drop: set[int]) -> str:
    """`lines` joined without the lines at the indexes in `drop` and stripped; the blank lines around a
    removed line are merged into one (the page's own gaps elsewhere stay as they are)."""
    out, gap = [], False
    for k, line in enumerate(lines):
        if k in drop:
            gap = True
            continue
        if line.strip():
            gap = False
        elif gap and out and not out[-1].strip():
            continue
        out.append(line)
    return "\n".join(out).strip()


def _own(raw: str, line: str, length: float, repeats: int) -> list[float]:
    """The line's own features (FEATURES[:10]); `length` is log1p of its columns."""
    upper = cased = 0
    for w in _WORD.findall(line):
        c = w[0]
        if c.isupper():
            upper += 1
            cased += 1
        elif c.islower():
            cased += 1
    chars = len(line) - line.count(" ") or 1
    return [
        length,
        upper / cased if cased else 0.0,
        len(_DIGIT.findall(line)) / chars,
        len(_LETTER.findall(line)) / chars,
        math.log1p(sum(line.count(c) for c in _COMMAS)),
        1.0 if raw[0].isspace() or line[0] in _BULLETS else 0.0,
        math.log1p(sum(line.count(c) for c in _SYMBOLS)),
        math.log(repeats),
        1.0 if line[-1] == ":" else 0.0,
        1.0 if line.endswith(("...", "…")) else 0.0,
    ]


def _introduces(line: str) -> bool:
    """A line that ends in a colon and has INTRO_WORDS words: it introduces the list, table or example
    below it ("Here are some facts about me:"); the labels that end in a colon are shorter ("Tags:",
    "Read more:", "Photo:")."""
    return line[-1] in ":：" and len(_WORD.findall(line)) >= INTRO_WORDS


def line_classes(lines: list[str]) -> tuple[list[tuple[str, str]], list[int], list[bool], list[bool]]:
    """The non-blank lines of `lines` as (raw, stripped), their widths in columns (East-Asian wide characters
    count 2), whether each is a prose line (it ends in terminal punctuation, holds PROSE_SENTENCES sentence
    ends or is PROSE_COLS long) and whether it holds a sentence (a prose line, or one with a sentence end:
    what a kept heading sits between)."""
    kept = [(raw, line) for raw in lines if (line := raw.strip())]
    cols = [len(line) if line.isascii() else len(line) + len(_WIDE_RE.findall(line)) for _, line in kept]
    ends = [PROSE_SENTENCES if c >= PROSE_COLS or ends_with_terminal(line) else len(_SENT_END_RE.findall(line))
            for c, (_, line) in zip(cols, kept)]
    return kept, cols, [e >= PROSE_SENTENCES for e in ends], [e > 0 for e in ends]


def line_features(lines: list[str]) -> tuple[list[list[float] | None], list[bool]]:
    """Per non-blank line of `lines` (in order; blank lines are skipped): its FEATURES, or None for a line
    that is kept whatever it scores (the first line, a line with a sentence end in it, an introduction, a
    line between two lines with sentences), and whether it is a prose line
    (it ends in terminal punctuation, holds PROSE_SENTENCES sentence ends or is PROSE_COLS long)."""
    kept, cols, prose, sentence = line_classes(lines)
    n = len(kept)
    if all(prose):
        return [None] * n, prose
    lens = [math.log1p(c) for c in cols]
    repeats = Counter(line for _, line in kept)
    run = [0] * n
    k = 0
    while k < n:
        if cols[k] < SHORT_COLS and not prose[k]:
            j = k + 1
            while j < n and cols[j] < SHORT_COLS and not prose[j]:
                j += 1
            run[k:j] = [math.log1p(j - k)] * (j - k)
            k = j
        else:
            k += 1
    prev_prose, last = [], None
    for k in range(n):
        prev_prose.append(min(k - last, MAX_DISTANCE) / MAX_DISTANCE if last is not None else 1.0)
        if prose[k]:
            last = k
    next_prose, last = [0.0] * n, None
    for k in range(n - 1, -1, -1):
        next_prose[k] = min(last - k, MAX_DISTANCE) / MAX_DISTANCE if last is not None else 1.0
        if prose[k]:
            last = k
    first_prose = prose.index(True) if any(prose) else n
    last_prose = n - 1 - prose[::-1].index(True) if any(prose) else -1
    doc_prose = sum(c for c, p in zip(cols, prose) if p) / (sum(cols) or 1)
    doc_lines = math.log1p(n)
    out: list[list[float] | None] = []
    for k, (raw, line) in enumerate(kept):
        if k == 0 or sentence[k] or _introduces(line) or 0 < k < n - 1 and sentence[k - 1] and sentence[k + 1]:
            out.append(None)  # the title, a sentence, an introduction, a heading or caption between two: kept
            continue
        window = lens[max(0, k - WINDOW):k] + lens[k + 1:k + 1 + WINDOW]
        out.append(_own(raw, line, lens[k], repeats[line]) + [
            lens[k - 1] if k else 0.0, 1.0 if k and prose[k - 1] else 0.0,
            lens[k + 1] if k + 1 < n else 0.0, 1.0 if k + 1 < n and prose[k + 1] else 0.0,
            sum(window) / len(window) if window else 0.0,
            run[k], prev_prose[k], next_prose[k],
            1.0 if k < first_prose else 0.0, 1.0 if k > last_prose else 0.0,
            k / (n - 1) if n > 1 else 0.0, doc_prose, doc_lines,
        ])
    return out, prose


class LineModel:
    """A fitted head (filters/logistic.fit_logreg's dict plus `threshold`): standardisation folded into
    the weights, so a line's score is one dot product."""

    def __init__(self, head: dict):
        if tuple(head["features"]) != FEATURES:
            raise ValueError(f"boilerplate model features {head['features']} != {list(FEATURES)}")
        self.weights = [c / s for c, s in zip(head["coef"], head["std"])]
        self.bias = head["bias"] - sum(w * m for w, m in zip(self.weights, head["mean"]))
        self.threshold = float(head["threshold"])

    def scores(self, features: list[list[float] | None]) -> list[float]:
        """Each line's logit (inf for a line without features: kept)."""
        w, b = self.weights, self.bias  # sum(map(mul)): the same additions in the same order, half the time
        return [math.inf if f is None else b + sum(map(mul, w, f)) for f in features]


def line_scores_python(lines: list[str], model: LineModel) -> list[float]:
    """Each non-blank line's logit under `model` (inf: kept whatever it scores): the oracle of
    filters/_boilerplate.c, which `line_scores` is where it was built."""
    return model.scores(line_features(lines)[0])


try:
    from filters import _boilerplate  # built by `pip install` (setup.py) where a C compiler is

    def line_scores(lines: list[str], model: LineModel) -> list[float]:
        """See `line_scores_python`."""
        kept, cols, prose, sentence = line_classes(lines)
        if all(prose):
            return [math.inf] * len(kept)
        return _boilerplate.line_scores([raw for raw, _ in kept], [line for _, line in kept], cols, prose, sentence,
                                        model.weights, model.bias)
except ImportError:
    line_scores = line_scores_python


@lru_cache(maxsize=4)
def load_model(path: str | None = None, name: str = "model") -> LineModel:
    """The shipped head (`model`: fitted on all 181 pages) or another one of the same file (`fit_half_0`,
    `fit_half_1`: fitted on one half of the pages, for held-out figures)."""
    return LineModel(json.loads(Path(path or MODEL_PATH).read_text())[name])


def remove_context_boilerplate(text: str, model: LineModel | None = None) -> tuple[str, int]:
    """(text without the lines the model calls boilerplate, number of lines removed). The blank lines
    around a removed line are merged into one and, when a line went, the text is stripped (as the other
    line steps of filters/clean.py do); nothing else changes."""
    lines = text.split("\n")
    model = model or load_model()
    drop = [s < model.threshold for s in line_scores(lines, model)]
    removed = sum(drop)
    if not removed:
        return text, 0
    judged = [k for k, raw in enumerate(lines) if raw.strip()]  # `drop` is per non-blank line
    return join_without(lines, {k for k, gone in zip(judged, drop) if gone}), removed
