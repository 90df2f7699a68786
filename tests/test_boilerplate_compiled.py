"""The boilerplate model's compiled line scores (filters/_boilerplate.c) against their Python oracle
(filters/boilerplate.py `line_scores_python`: `line_features` and `LineModel.scores`): the same logit,
bit for bit, for every non-blank line, under the shipped head and the two held-out ones, on every code
point as a line of its own and between words, on random texts of lines built to reach every feature
(bullets, indents, colons, ellipses, commas, symbols, digits, wide characters, repeats, runs of short
lines between prose) and on real pages' text in several languages."""

import random
import sys

import pytest

from filters import boilerplate
from filters.boilerplate import line_scores_python, load_model, remove_context_boilerplate
from tests.test_words_compiled import real_texts

HEADS = ("model", "fit_half_0", "fit_half_1")

# Pieces of lines: words of several scripts and cases (a title case ǅ, an upper-case-less script, Han, wide
# Latin), digits of several kinds, '_' (a word character that is no letter), marks, every bullet, comma and
# symbol the features count, sentence ends, closing quotes, colons and ellipses of both kinds, spaces.
WORDS = ("Home", "news", "ǅungla", "İstanbul", "straße", "ΣΟΦΙΑ", "日本語の記事", "ＡＢＣ", "한국어", "עברית",
         "2024", "٣٤", "１２", "x_y", "e\u0301", "Read", "more", "Photo", "Menu", "of", "the", "a")
MARKS = ("•", "‣", "◦", "●", "○", "▪", "▫", "■", "□", "►", "▶", "▸", "▹", "➢", "➤", "✓", "✔", "-", "*", "·", "・",
         ">", "»", "|", "@", "©", "#", "«", "/", ",", "，", "、", ".", "!", "?", "。", "”", ")", ":", "：", "...",
         "…", " ", "\t", "\u00a0", "\u3000")


def random_line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:  # prose: a sentence or two, perhaps long
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60)))
        return words + rng.choice((". ", "! ", "? ", "。", ".” ")) + rng.choice(("", "And then it ended."))
    line = "".join(rng.choice(WORDS) + rng.choice(MARKS) for _ in range(rng.randint(1, 8)))
    if rng.random() < 0.2:
        line = rng.choice(MARKS) + " " + line
    return rng.choice(("", " ", "\t", "   ")) + line + rng.choice(("", "", ":", "：", "...", "…", " ", "."))


def random_text(rng: random.Random, n: int) -> str:
    lines = [random_line(rng) for _ in range(n)]
    for _ in range(n // 5):  # repeated lines, blank lines between
        k = rng.randrange(n)
        lines.insert(rng.randrange(n), rng.choice((lines[k], "", "  ")))
    return "\n".join(lines)


def same_scores(text: str) -> bool:
    lines = text.split("\n")
    for head in HEADS:
        model = load_model(None, head)
        compiled, oracle = boilerplate.line_scores(lines, model), line_scores_python(lines, model)
        if [s.hex() for s in compiled] != [s.hex() for s in oracle]:
            return False
    return True


def test_the_line_steps_use_the_compiled_scores():
    from filters import _boilerplate  # built by `pip install -e .` (setup.py); make setup builds it

    assert boilerplate.line_scores is not line_scores_python
    text = "Breaking News\nHome\nNews\nSport\nThe council met on Monday. It voted.\nShare this\nMore stories"
    model = load_model()
    scores = boilerplate.line_scores(text.split("\n"), model)
    assert scores == line_scores_python(text.split("\n"), model)
    assert scores[0] == scores[4] == float("inf") and all(s < float("inf") for s in scores[1:4])
    assert remove_context_boilerplate(text)[1] > 0
    with pytest.raises(ValueError):
        _boilerplate.line_scores(["a"], ["a"], [1], [False], [False], [0.0], 0.0)
    with pytest.raises(TypeError):
        _boilerplate.line_scores([""], [""], [0], [False], [False], model.weights, 0.0)


def test_every_code_point_gives_the_oracle_s_scores():
    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF and chr(c) != "\n"]
    for i in range(0, len(points), 4096):
        chunk = points[i:i + 4096]
        # every point inside and at the start of words, 32 to a line, between a title and a sentence
        lines = [" ".join(f"{c}x Ab{c}cd 1{c}2 {c}" for c in chunk[j:j + 32]) for j in range(0, len(chunk), 32)]
        assert same_scores("Title\n" + "\n".join(lines) + "\nA sentence ends here.\nMenu"), hex(ord(chunk[0]))
    model = load_model()
    for i in range(0, 0x10000, 4096):  # each BMP point first and last in a line of its own (indent, bullet, colon)
        chunk = [c for c in points[i:i + 4096] if ord(c) < 0x10000]
        lines = ["Title", *(f"{c}x {c}" for c in chunk), "A sentence ends here.", *(f"x {c}" for c in chunk)]
        assert boilerplate.line_scores(lines, model) == line_scores_python(lines, model), hex(i)


@pytest.mark.parametrize("seed", range(20))
def test_random_texts_give_the_oracle_s_scores(seed):
    rng = random.Random(seed)
    for n in (1, 2, 3, 5, rng.randint(10, 40), rng.randint(100, 400)):
        assert same_scores(random_text(rng, n)), (seed, n)
    assert same_scores("All prose here.\nAnd here.")  # every line prose: every line kept
    assert same_scores("")


def test_real_pages_give_the_oracle_s_scores():
    texts = real_texts()  # whole pages' text: their menus and footers too
    assert len(texts) > 100
    removed = 0
    for text in texts:
        assert same_scores(text)
        removed += remove_context_boilerplate(text)[1]
    assert removed > 1000  # the model judged, and removed, many lines of these pages
