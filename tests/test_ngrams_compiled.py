"""The compiled n-gram coverage (filters/_ngrams.c) against its Python oracle (filters/quality.py
ngram_coverage_python): the same integers on random word lists and on real pages' words."""

import gzip
import random
from pathlib import Path

import pytest

from filters import quality
from filters.quality import ngram_coverage_python, tokenize

DATA = Path(__file__).parent / "data"
NS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 20)


def compiled():
    from filters import _ngrams  # built by `pip install -e .` (setup.py); make setup builds it

    return _ngrams.ngram_coverage


def test_the_quality_rules_use_the_compiled_coverage():
    assert quality.ngram_coverage is compiled()


@pytest.mark.parametrize("seed", range(40))
def test_random_word_lists_give_the_oracle_s_integers(seed):
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcé字") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 30))]
    for length in (0, 1, 2, 3, rng.randint(4, 40), rng.randint(100, 3000)):
        words = [rng.choice(vocab) for _ in range(length)]
        if rng.random() < 0.3:  # a repeated phrase, overlapping itself
            phrase = words[:rng.randint(1, 6)]
            words += phrase * rng.randint(2, 5)
        top = tuple(rng.sample(NS, rng.randint(0, 4)))
        dup = tuple(rng.sample(NS, rng.randint(0, 4)))
        assert compiled()(words, top, dup) == ngram_coverage_python(words, top, dup), (seed, length, top, dup)


def test_ties_go_to_the_longest_then_the_first_seen():
    words = "x y a b x y c d a b".split()  # "x y" and "a b" twice each, same length: the first seen wins
    assert compiled()(words, (2,), ()) == ngram_coverage_python(words, (2,), ()) == (10, {2: 4}, {})
    words = "x y aa b x y aa b".split()
    assert compiled()(words, (1,), ()) == ngram_coverage_python(words, (1,), ()) == (10, {1: 4}, {})


def test_real_pages_give_the_oracle_s_integers():
    from resiliparse.extract.html2text import extract_plain_text

    pages = sorted((DATA / "boilerplate").glob("*.html.gz"))
    assert pages
    for page in pages:
        text = extract_plain_text(gzip.decompress(page.read_bytes()).decode("utf-8", "replace"),
                                  main_content=False)
        for words in (tokenize(text.lower()), tokenize(text)):
            assert len(words) > 100
            assert compiled()(words, (2, 3, 4), (5, 6, 7, 8, 9, 10)) == \
                ngram_coverage_python(words, (2, 3, 4), (5, 6, 7, 8, 9, 10)), page.name


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        compiled()(["a", 3], (1,), ())
    with pytest.raises(ValueError):
        compiled()(["a", "b"], (0,), ())
    with pytest.raises(TypeError):
        compiled()(("a", "b"), (1,), ())
