"""MinHash, shingling and LSH parameters (dedup/minhash.py), checked against brute force and datasketch."""

import itertools
import re
from functools import lru_cache

import numpy as np
import pytest
from datasketch.lsh import _optimal_param

from dedup import minhash
from dedup.exact import normalize_for_hash
from dedup.minhash import MinHasher, band_keys, jaccard, lsh_params, s_curve, shingles, uses_characters
from tests.warc_factory import MINI


@lru_cache(maxsize=1)
def real_texts() -> tuple[tuple[str, str], ...]:
    """(doc id, extracted main text) of every HTML page in the mini WARC fixture (36 real pages)."""
    from extract.html import ExtractionError, decode_html, extract_main_text
    from extract.records import doc_id, route
    from extract.warc import ReadError, iter_records

    out = []
    with open(MINI, "rb") as fh:
        for rec in iter_records(fh):
            if isinstance(rec, ReadError) or route(rec)[0] != "html":
                continue
            try:
                out.append((doc_id(rec, str(MINI)), extract_main_text(decode_html(rec.payload, rec.http_charset).text)))
            except ExtractionError:
                continue
    return tuple(out)


def reference_shingles(text: str, n: int = 5) -> set[str]:
    norm = normalize_for_hash(text)
    if not norm:
        return set()
    tokens, sep = (list(norm.replace(" ", "")), "") if uses_characters(norm) else (norm.split(" "), " ")
    if len(tokens) < n:
        return {sep.join(tokens)}
    return {sep.join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def test_shingles_are_the_distinct_word_5grams_of_real_pages():
    texts = [t for _, t in real_texts()]
    by_hash, by_string = set(), set()
    for text in texts:
        hashes = shingles(text)
        assert hashes.dtype == np.uint64 and np.all(hashes[1:] > hashes[:-1])  # sorted, unique
        ref = reference_shingles(text)
        assert hashes.size == len(ref)
        by_hash |= set(hashes.tolist())
        by_string |= ref
    assert len(by_hash) == len(by_string) > 10_000  # no collision across the corpus either


def test_shingles_ignore_case_punctuation_and_unicode_forms():
    a = "The Quick brown fox -- jumps over the lazy dog, again and again."
    b = "the quick BROWN fox jumps   over the lazy dog again and ａｇａｉｎ"  # fullwidth: NFKC
    assert np.array_equal(shingles(a), shingles(b))
    assert shingles(a).size == 8
    assert shingles("two words").size == 1  # shorter than n: the whole text is one shingle
    assert shingles(" ,.;- ").size == 0
    assert not np.array_equal(shingles("one two three four five"), shingles("one two three four six"))


def test_a_shingle_hashes_the_same_wherever_it_sits(monkeypatch):
    # a tiny power-table cache, so the long text takes the uncached path
    monkeypatch.setattr(minhash, "_CACHED_POWERS", 64)
    monkeypatch.setattr(minhash, "_POWERS", {k: np.ones(1, dtype=np.uint64) for k in ("base", "inverse")})
    tokens = [f"w{i}" for i in range(300)]
    whole = shingles(" ".join(tokens))
    for start in (0, 37, 295):
        assert np.isin(shingles(" ".join(tokens[start:start + 5])), whole).all()
    assert np.array_equal(shingles(" ".join(tokens[:40])), shingles(" ".join(tokens[:40]).upper()))


def test_cjk_text_is_shingled_by_characters():
    text = "据称NHK是在与政界高层人士讨论后，删掉这个节目大部分的访问内容。"
    assert uses_characters(normalize_for_hash(text))
    assert not uses_characters(normalize_for_hash("NHK 据称 is a broadcaster in Japan with many programs"))
    assert shingles(text).size == len(reference_shingles(text)) == len(re.sub(r"[，。]", "", text)) - 4


def test_jaccard_is_exact():
    texts = [t for _, t in real_texts()][:12]
    for a, b in itertools.combinations(texts, 2):
        ra, rb = reference_shingles(a), reference_shingles(b)
        expected = len(ra & rb) / len(ra | rb) if ra | rb else 0.0
        assert jaccard(shingles(a), shingles(b)) == pytest.approx(expected)


def edit(text: str, share: float, seed: int) -> str:
    """Replace `share` of the words with fresh ones (a near-duplicate with scattered edits)."""
    rng = np.random.default_rng(seed)
    words = text.split()
    for i in rng.choice(len(words), size=int(share * len(words)), replace=False):
        words[i] = f"edit{seed}x{i}"
    return " ".join(words)


def test_signature_estimates_exact_jaccard():
    hasher = MinHasher(256, seed=7)
    long_texts = [t for _, t in real_texts() if len(t.split()) > 150]
    pairs = [(t, edit(t, share, i)) for i, t in enumerate(long_texts) for share in (0.02, 0.05, 0.1, 0.2)]
    pairs += list(itertools.combinations(long_texts[:8], 2))
    errors = []
    for a, b in pairs:
        sa, sb = shingles(a), shingles(b)
        estimate = float(np.mean(hasher.signature(sa) == hasher.signature(sb)))
        errors.append(abs(estimate - jaccard(sa, sb)))
    # standard error of a 256-permutation estimate is <= 0.5 / 16 = 0.031
    assert np.mean(errors) < 0.03 and max(errors) < 0.12, (np.mean(errors), max(errors))


def test_batched_signatures_equal_one_at_a_time_and_are_seeded():
    sets = [shingles(t) for _, t in real_texts()] + [np.empty(0, dtype=np.uint64)]
    big = np.unique(np.random.default_rng(0).integers(0, 2**63, size=3 * minhash._BLOCK + 5, dtype=np.uint64))
    sets.insert(3, big)  # spans several blocks
    hasher = MinHasher(64, seed=3)
    batched = hasher.signatures(sets)
    assert batched.shape == (len(sets), 64) and batched.dtype == np.uint32
    assert np.array_equal(batched, np.stack([hasher.signature(s) for s in sets]))
    assert np.array_equal(batched, MinHasher(64, seed=3).signatures(sets))
    assert not np.array_equal(batched[0], MinHasher(64, seed=4).signature(sets[0]))
    assert np.all(batched[-1] == 0xFFFFFFFF)  # the empty set


def test_band_keys_agree_exactly_on_equal_bands():
    sig = MinHasher(12).signature(shingles("a b c d e f g h i j"))
    other = sig.copy()
    other[5] += 1  # band 1 of 4 x 3
    keys, other_keys = band_keys(sig, 4, 3), band_keys(other, 4, 3)
    assert [k == o for k, o in zip(keys, other_keys)] == [True, False, True, True]
    assert len(set(band_keys(np.zeros(12, dtype=np.uint32), 4, 3))) == 4  # the band index is in the key


@pytest.mark.parametrize("threshold,num_perm,fp,fn", [(0.5, 128, 0.5, 0.5), (0.8, 128, 0.5, 0.5),
                                                       (0.7, 96, 0.1, 0.9), (0.45, 96, 0.05, 0.95)])
def test_lsh_params_match_datasketch(threshold, num_perm, fp, fn):
    bands, rows = lsh_params(threshold, num_perm, fp, fn)
    assert bands * rows <= num_perm
    assert (bands, rows) == _optimal_param(threshold, num_perm, fp, fn)


def test_s_curve_is_monotone_and_the_documented_table_holds():
    j = np.linspace(0, 1, 101)
    for bands, rows in [(32, 3), (20, 5), (9, 13), (1, 1)]:
        p = s_curve(j, bands, rows)
        assert p[0] == 0 and p[-1] == 1 and np.all(np.diff(p) >= 0)
    from dedup.near import NearDedupConfig

    DEFAULTS = NearDedupConfig().model_dump()

    table = re.search(r"P\(J\)\s+([\d. ]+)\n", minhash.__doc__).group(1).split()
    documented = re.search(r"J\s+([\d. ]+)\n", minhash.__doc__).group(1).split()
    computed = s_curve(np.array(documented, dtype=float), DEFAULTS["bands"], DEFAULTS["rows"])
    assert [f"{p:.3f}" for p in computed] == table
    assert lsh_params(0.45, DEFAULTS["num_perm"], 0.05, 0.95) == (DEFAULTS["bands"], DEFAULTS["rows"])
