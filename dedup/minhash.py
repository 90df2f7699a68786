"""MinHash signatures and LSH banding for near-duplicate detection, vectorised with numpy (no Beam).

Method: Broder 1997 ("On the resemblance and containment of documents") estimates the Jaccard
similarity of two shingle sets from the share of equal per-permutation minima; LSH banding (Indyk &
Motwani 1998; Leskovec, Rajaraman & Ullman, "Mining of Massive Datasets" §3.4) makes two documents a
candidate pair when all `rows` minima of at least one of `bands` bands agree, which happens with
probability  P(J) = 1 - (1 - J**rows)**bands  (the S-curve).

Shingles are word 5-grams of the text after `dedup.exact.normalize_for_hash` (NFKC, casefold,
punctuation and whitespace runs -> one space), as in Gopher / FineWeb / datatrove near-dedup. Text
written mostly in Han or kana (Chinese, Japanese: no spaces between words) uses character 5-grams of
the normalized text with spaces removed instead: a "word" there would be a whole clause. A document
with fewer tokens than n has one shingle, its whole normalized text.

Defaults (dedup/near.py `DEFAULTS`, chosen on mixed-dev): threshold 0.5 on exact Jaccard, 96
permutations, 32 bands x 3 rows. After our extraction the 86 labelled near-duplicates have Jaccard
0.46-0.83 with their originals (median 0.66; the site boilerplate around the copied text lowers it
by ~0.05 from the recorded value), while no two unrelated pages exceed 0.21 (leaving out the
low_quality junk pages, which copy each other). 32 x 3 is
`lsh_params(0.45, 96, fp_weight=0.05, fn_weight=0.95)`: tuned for a point just below the
threshold, so pairs at the threshold are candidates with P = 0.986:

    J         0.1    0.2    0.3    0.4    0.45   0.5    0.6    0.7    0.8    0.9
    P(J)      0.032  0.227  0.584  0.880  0.953  0.986  1.000  1.000  1.000  1.000

LSH false positives cost only a verification (exact Jaccard on the shingle sets), never a document,
so the curve buys recall at the threshold with extra candidate pairs below it.

Hashing is vectorised over all shingles of a document (and over all documents of a batch):
  * a shingle's 64-bit hash is a polynomial hash of its UTF-8 bytes, computed for every shingle at
    once from prefix sums modulo 2^64 (Karp & Rabin 1987), then avalanched with the MurmurHash3
    64-bit finalizer; no Python loop over words or shingles;
  * permutation k maps the top 32 bits x of a shingle hash to ((a_k * x + b_k) mod 2^64) >> 32, the
    multiply-add-shift family, strongly universal from 32-bit keys to 32-bit values (Dietzfelbinger
    1996; Thorup 2015, "High speed hashing for integers and strings"). The shift is monotone, so the
    minimum is taken on the 64-bit products and shifted once per signature entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import xxhash

from dedup.exact import normalize_for_hash

NGRAM = 5
# Han ideographs (incl. extensions A and B, compatibility), hiragana and katakana.
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df]")
# Karp-Rabin base (odd, so invertible modulo 2^64) and its inverse.
_BASE = np.uint64(0x9E3779B97F4A7C15)
_BASE_INV = np.uint64(pow(int(_BASE), -1, 1 << 64))
_FMIX1, _FMIX2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
# Shingles per block in MinHasher: a block is block x num_perm uint64 (4 MiB at 128 permutations),
# so a 2 MB page costs the same working memory as a tweet.
_BLOCK = 4096


def uses_characters(normalized: str) -> bool:
    """True when most non-space characters are Han or kana: such text is shingled by characters."""
    letters = len(normalized) - normalized.count(" ")
    return letters > 0 and 2 * len(_CJK.findall(normalized)) > letters


def _fmix64(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(33)
    h *= _FMIX1
    h ^= h >> np.uint64(33)
    h *= _FMIX2
    h ^= h >> np.uint64(33)
    return h


_POWERS = {"base": np.ones(1, dtype=np.uint64), "inverse": np.ones(1, dtype=np.uint64)}
# Power tables up to 1 Mi entries stay cached per process (16 MiB); longer texts build their own.
_CACHED_POWERS = 1 << 20


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """base^0..base^(n-1) and the inverse powers modulo 2^64."""
    cached = _POWERS["base"].size
    if n > cached:
        size = max(n, min(2 * cached, _CACHED_POWERS))
        tables = {}
        for key, value in (("base", _BASE), ("inverse", _BASE_INV)):
            table = np.full(size, value, dtype=np.uint64)
            table[0] = 1
            tables[key] = np.cumprod(table, dtype=np.uint64)  # wraps modulo 2^64, as intended
        if size <= _CACHED_POWERS:
            _POWERS.update(tables)
        return tables["base"][:n], tables["inverse"][:n]
    return _POWERS["base"][:n], _POWERS["inverse"][:n]


def shingles(text: str, n: int = NGRAM) -> np.ndarray:
    """Sorted unique 64-bit hashes of the word (or, for CJK text, character) n-grams of `text`.
    Empty for text with no word characters."""
    norm = normalize_for_hash(text)
    if not norm:
        return np.empty(0, dtype=np.uint64)
    by_chars = uses_characters(norm)
    data = np.frombuffer((norm.replace(" ", "") if by_chars else norm).encode("utf-8"), dtype=np.uint8)
    size = data.size
    if by_chars:  # a token is one code point: starts are the bytes that are not UTF-8 continuations
        starts = np.flatnonzero((data & 0xC0) != 0x80)
        ends = np.append(starts[1:], size)
    else:  # tokens are separated by exactly one space after normalization
        spaces = np.flatnonzero(data == 32)
        starts, ends = np.append(0, spaces + 1), np.append(spaces, size)
    if starts.size >= n:
        first, last = starts[: starts.size - n + 1], ends[n - 1:]
    else:
        first, last = np.zeros(1, dtype=np.int64), np.full(1, size)
    # Prefix sums of byte * base^position; a span's sum times base^-start is its hash wherever it sits.
    powers, inverse = _powers(size)
    prefix = np.zeros(size + 1, dtype=np.uint64)
    np.cumsum((data.astype(np.uint64) + np.uint64(1)) * powers, out=prefix[1:])
    hashes = np.sort(_fmix64((prefix[last] - prefix[first]) * inverse[first]))
    # np.unique is several times slower than sort + mask on uint64 (numpy 2.x)
    return hashes[np.append(True, hashes[1:] != hashes[:-1])]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique shingle-hash arrays (0.0 if both are empty)."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - inter
    return inter / union if union else 0.0


class MinHasher:
    """`num_perm` multiply-add-shift permutations drawn from `seed`; same seed, same signatures on
    every worker. Signatures are uint32 arrays; the empty set's signature is all 0xFFFFFFFF."""

    def __init__(self, num_perm: int = 128, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self.a = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False)
        self.b = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False)

    def signature(self, shingle_hashes: np.ndarray) -> np.ndarray:
        return self.signatures([shingle_hashes])[0]

    def signatures(self, shingle_sets: Sequence[np.ndarray]) -> np.ndarray:
        """(len(shingle_sets), num_perm) uint32: all shingles of all sets hashed together, block by
        block, with a segmented minimum per set."""
        sizes = np.fromiter((s.size for s in shingle_sets), dtype=np.int64, count=len(shingle_sets))
        # permutations x documents: the minimum runs along contiguous rows of each block
        mins = np.full((self.num_perm, len(shingle_sets)), np.uint64(0xFFFFFFFFFFFFFFFF))
        if sizes.sum():
            keys = np.concatenate(shingle_sets) >> np.uint64(32)
            owner = np.repeat(np.arange(len(shingle_sets)), sizes)
            for lo in range(0, keys.size, _BLOCK):
                block = np.multiply.outer(self.a, keys[lo:lo + _BLOCK])
                block += self.b[:, None]
                who = owner[lo:lo + _BLOCK]
                starts = np.flatnonzero(np.append(True, who[1:] != who[:-1]))
                docs = who[starts]
                mins[:, docs] = np.minimum(mins[:, docs], np.minimum.reduceat(block, starts, axis=1))
        return (mins.T >> np.uint64(32)).astype(np.uint32)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One LSH bucket key per band: the band index and a 64-bit hash of its `rows` minima. Two
    documents share a key iff a band agrees (up to 2^-64 collisions, which verification catches)."""
    return [band.to_bytes(2, "big") + xxhash.xxh3_64_digest(signature[band * rows:(band + 1) * rows].tobytes())
            for band in range(bands)]


def s_curve(j, bands: int, rows: int):
    """P(two documents with Jaccard j share at least one band bucket) = 1 - (1 - j^rows)^bands."""
    return 1.0 - (1.0 - np.asarray(j, dtype=np.float64) ** rows) ** bands


def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm minimising
    fp_weight * integral_0^t P(j) dj + fn_weight * integral_t^1 (1 - P(j)) dj,
    datasketch's `MinHashLSH` rule (`_optimal_param`), integrated on a fine grid instead of quad."""
    below, above = np.linspace(0.0, threshold, 1001), np.linspace(threshold, 1.0, 1001)
    best, best_err = (1, 1), np.inf
    for bands in range(1, num_perm + 1):
        rows = np.arange(1, num_perm // bands + 1)[:, None]
        fp = np.trapezoid(s_curve(below[None, :], bands, rows), below, axis=1)
        fn = np.trapezoid(1.0 - s_curve(above[None, :], bands, rows), above, axis=1)
        err = fp_weight * fp + fn_weight * fn
        i = int(np.argmin(err))
        if err[i] < best_err:
            best, best_err = (bands, i + 1), err[i]
    return best
