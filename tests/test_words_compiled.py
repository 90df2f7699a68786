"""The compiled word tokenizer, Gopher word statistics, whole-text counts, template-line normalisation,
exact dedup's word runs, the style features', the paragraph rules' counts and the cross-lingual anchors
(filters/_words.c) against their Python oracles (filters/quality.py tokenize_python, word_stats_python,
text_counts_python; filters/template_lines.py normalised_lines_python; dedup/exact.py word_runs_python;
filters/synthetic.py style_counts_python; filters/nodes.py paragraph_counts_python and dedup/crosslingual.py
anchors_python, whose oracle tests are in tests/test_nodes.py and tests/test_crosslingual.py): the same
words, counts, lines and runs on every code point, on random texts mixing scripts, marks, digits,
separators and whitespace, and on real pages' text in several languages. Also the ellipsis count's regex
against its plain form."""

import random
import re
import sys
from pathlib import Path

import pytest

from dedup import exact
from dedup.exact import word_runs_python
from filters import nodes, quality, synthetic, template_lines
from filters.nodes import paragraph_counts_python
from filters.quality import char_classes, text_counts_python, tokenize_python, word_stats_python
from filters.synthetic import STYLE_WORDS, style_counts_python
from filters.template_lines import normalised_lines_python

ROOT = Path(__file__).resolve().parents[1]
STOP = quality.QualityFilter(quality.QualityConfig())._stop_words

# Characters whose class or case matters to the rules: letters of several scripts, Han, Kana and astral Han,
# combining marks (BMP and astral), ZWJ/ZWNJ, decimal digits (ASCII, Arabic-Indic, full-width, astral), other
# numbers (², ½, Ⅻ, ①), the separators a word may hold, other punctuation and symbols, '_', every kind of
# space, characters whose lower case is special (İ, ẞ, ǅ, Σ, Ⓐ), Hangul with and without a final consonant,
# right-to-left scripts and wide characters that are neither Han/Kana nor Hangul syllables (！, ㄱ).
POOL = ("aAbBzZéÉßẞİıǅǄΣσςΩЖжक ि ्" "ไทย" "한국하" "字漢" "ひカ々〇ー" "\U00020000\U0002a6d6" "عربيשלום"
        "\u0301\u0308\u093f\U0001d167\u200c\u200d" "0129٣۴१０９\U0001d7cf" "²½Ⅻ①" "'’-.,:/"
        "!?;\"()[]#…⋯•|_~@&*+=<>€$！ㄱ" " \t\n\r\x0b\x1c\u0085\u2028\u00a0\u2003\u3000\u200b" "ⒶⓐＡａ𝐀"
        "\U0001f600")


def compiled():
    from filters import _words  # built by `pip install -e .` (setup.py); make setup builds it

    return _words


def random_text(rng: random.Random, n: int) -> str:
    if rng.random() < 0.2:  # any code point at all
        return "".join(chr(rng.choice((rng.randrange(0xD800), rng.randrange(0xE000, 0x110000)))) for _ in range(n))
    return "".join(rng.choice(POOL) for _ in range(n))


def text_counts(text: str) -> tuple:
    return compiled().text_counts(text, char_classes())


def normalised_lines(text: str) -> list[str]:
    return compiled().normalised_lines(text.casefold())


def same_style_counts(text: str) -> bool:
    """The compiled style counts are the oracle's, for the text as style_features lowers it and as it is."""
    for lowered in (text.lower().replace("\u2019", "'"), text):
        if compiled().style_counts(lowered, text, STYLE_WORDS) != style_counts_python(lowered, text):
            return False
    return True


def test_the_quality_rules_use_the_compiled_tokenizer_and_statistics():
    words = compiled()
    assert quality.tokenize("don't 6,680.69 字字") == ["don't", "6,680.69", "字", "字"]
    assert quality.tokenize is not tokenize_python and quality.word_stats is not word_stats_python
    assert quality.tokenize("x y") == words.tokenize("x y", char_classes())
    assert quality.text_counts is not text_counts_python
    assert quality.text_counts("| 한 ... 字 ３") == text_counts_python("| 한 ... 字 ３") == (2, 1, 2, 1, True, True)
    assert template_lines.normalised_lines is not normalised_lines_python
    assert template_lines.normalised_lines(" Page 3\tOF 12 \n\nStraße ٣") == ["page 0 of 00", "", "strasse 0"]
    assert exact.word_runs is not word_runs_python
    assert exact.normalize_for_hash(" Ｈello,_WORLD!! ß-٣ ") == "hello world ss ٣"
    assert synthetic.style_counts is not style_counts_python
    sample = "I've noted, crucially, that IBM's 2024 report doesn't delve into it: My view isn't O'Brien's."
    lowered = sample.lower()
    assert synthetic.style_counts(lowered, sample) == style_counts_python(lowered, sample) == (15, 2, 1, 2, 5, 2, 4)
    assert nodes.paragraph_counts is not paragraph_counts_python  # its oracle tests: tests/test_nodes.py
    assert nodes.paragraph_counts("Né 3½ – ok, done.") == paragraph_counts_python("Né 3½ – ok, done.") == (8, 2)


def test_every_code_point_between_letters_digits_and_alone():
    tokenize = compiled().tokenize
    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 4096):
        text = "".join(f"a{c}1{c}2.{c} {c}-b" for c in points[i:i + 4096])
        assert tokenize(text, char_classes()) == tokenize_python(text), hex(ord(points[i]))


def test_every_code_point_gives_the_oracle_s_counts_and_lines():
    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 4096):
        chunk = points[i:i + 4096]
        for text in ("".join(f"a{c}1 {c}{c}{c} ...{c} {c}\n" for c in chunk), " ".join(chunk), "".join(chunk)):
            assert text_counts(text) == text_counts_python(text), hex(ord(chunk[0]))
            assert normalised_lines(text) == normalised_lines_python(text), hex(ord(chunk[0]))
            assert compiled().word_runs(text) == word_runs_python(text), hex(ord(chunk[0]))
            assert same_style_counts(text), hex(ord(chunk[0]))
        for c in chunk:  # each alone: a symbol token, or a digit, a wide character, whitespace, a line break
            assert text_counts(c) == text_counts_python(c), hex(ord(c))
            assert normalised_lines(c) == normalised_lines_python(c), hex(ord(c))
            assert compiled().word_runs(c) == word_runs_python(c), hex(ord(c))
            assert same_style_counts(c), hex(ord(c))


@pytest.mark.parametrize("seed", range(30))
def test_random_texts_give_the_oracle_s_words_and_counts(seed):
    rng = random.Random(seed)
    for n in (0, 1, 2, 5, rng.randint(10, 80), rng.randint(500, 4000)):
        text = random_text(rng, n)
        words = tokenize_python(text)
        assert compiled().tokenize(text, char_classes()) == words, (seed, n, text[:200])
        stop = frozenset(w.lower() for w in rng.sample(words, min(len(words), 5))) | {"i̇", "ss", "σ", "the"}
        for s in (stop, STOP["en"], frozenset(), None):
            assert compiled().word_stats(words, s or None, char_classes()) == word_stats_python(words, s), (seed, n)
        assert text_counts(text) == text_counts_python(text), (seed, n, text[:200])
        assert normalised_lines(text) == normalised_lines_python(text), (seed, n, text[:200])
        assert compiled().word_runs(text) == word_runs_python(text), (seed, n, text[:200])
        assert same_style_counts(text), (seed, n, text[:200])
        words_of = " ".join(rng.choice(sorted(STYLE_WORDS) + ["i", "I'm", "me", "MY", "don't", "o'", "'s", "x'd", "'"])
                            for _ in range(n // 4))  # the sets' words and the contractions, with the pool between
        assert same_style_counts(words_of + text[: n // 2]), (seed, n)
        # the ellipsis count's regex, with its lookahead for speed, finds what the plain one finds
        assert quality._ELLIPSIS_RE.findall(text) == re.findall(r"\.{3,}|[…⋯]+", text)


def real_texts() -> list[str]:
    """Every page's whole text (not only its main content) of the bundled multilingual Common Crawl excerpt
    and the mixed-dev slice."""
    from resiliparse.extract.html2text import extract_plain_text

    from extract.html import decode_html
    from extract.warc import iter_records

    texts = []
    for name in ("cc-main-2020-34-excerpt.warc.gz", "mixed-dev-slice.warc.gz"):
        with open(ROOT / "sample" / name, "rb") as stream:
            for record in iter_records(stream, 50_000_000):
                payload = getattr(record, "payload", None) or b""
                if b"<html" in payload[:4000].lower():
                    texts.append(extract_plain_text(decode_html(payload).text, main_content=False))
    return texts


def test_real_pages_give_the_oracle_s_words_and_counts():
    texts = real_texts()
    assert len(texts) > 100 and any(quality._CJK_RE.search(t) for t in texts)
    for text in texts:
        words = tokenize_python(text)
        assert compiled().tokenize(text, char_classes()) == words
        assert text_counts(text) == text_counts_python(text)
        assert normalised_lines(text) == normalised_lines_python(text)
        assert compiled().word_runs(text) == word_runs_python(text)
        assert same_style_counts(text)
        for lang in ("en", "de", "ru", "zh"):
            stop = STOP.get(lang)
            assert compiled().word_stats(words, stop, char_classes()) == word_stats_python(words, stop)


def test_bad_arguments_are_errors_not_crashes():
    words = compiled()
    with pytest.raises(TypeError):
        words.tokenize("text", b"short")
    with pytest.raises(TypeError):
        words.tokenize(b"bytes", char_classes())
    with pytest.raises(TypeError):
        words.word_stats(["a", 1], None, char_classes())
    with pytest.raises(TypeError):
        words.word_stats(["a"], ["a"], char_classes())
    with pytest.raises(TypeError):
        words.word_stats(("a",), None, char_classes())
    assert words.word_stats([], None, char_classes()) == (0, 0, 0)
    with pytest.raises(TypeError):
        words.text_counts("text", b"short")
    with pytest.raises(TypeError):
        words.normalised_lines(b"bytes")
    assert words.text_counts("", char_classes()) == (0, 0, 0, 0, False, False)
    assert words.normalised_lines("") == [""]
    with pytest.raises(TypeError):
        words.word_runs(b"bytes")
    assert words.word_runs("") == words.word_runs(" _-_ ") == ""
    with pytest.raises(TypeError):
        words.style_counts("text", "text", set(STYLE_WORDS))
    with pytest.raises(TypeError):
        words.style_counts(b"bytes", "text", STYLE_WORDS)
    assert words.style_counts("", "", STYLE_WORDS) == (0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(TypeError):
        words.paragraph_counts("text", char_classes(), b".,")
    with pytest.raises(TypeError):
        words.paragraph_counts("text", b"short", ".,")
    assert words.paragraph_counts("", char_classes(), ".,") == (0, 0)
    with pytest.raises(TypeError):
        words.anchors(b"bytes", char_classes(), False)
    with pytest.raises(TypeError):
        words.anchors("text", b"short", False)
    assert words.anchors("", char_classes(), True) == []
