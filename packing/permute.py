"""A seeded permutation of [0, n) evaluated one index at a time: it spreads documents across shards
and across sequence order (a seeded shuffle).

A balanced Feistel network over the smallest even bit width 2k with 4^k >= n, rounds keyed by xxh64
with the seed, made a bijection of [0, n) by cycle walking (re-encrypt until the value falls below n;
< 4 steps on average since 4^k < 4n). Standard format-preserving construction (Black & Rogaway 2002,
"Ciphers with arbitrary finite domains"). Each worker computes pi(i) for its own sequences without
seeing the others, and every worker gets the same answer.
"""

from __future__ import annotations

import xxhash

ROUNDS = 6


class Permutation:
    def __init__(self, n: int, seed: int):
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.n = n
        half = max(1, ((max(n, 2) - 1).bit_length() + 1) // 2)
        self.half, self.mask = half, (1 << half) - 1
        self.keys = [(seed * 0x100000001B3 + r) & 0xFFFFFFFFFFFFFFFF for r in range(ROUNDS)]

    def _encrypt(self, x: int) -> int:
        left, right = x >> self.half, x & self.mask
        for key in self.keys:
            f = xxhash.xxh64_intdigest(right.to_bytes(8, "little"), key) & self.mask
            left, right = right, left ^ f
        return (left << self.half) | right

    def __call__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(f"{i} outside [0, {self.n})")
        x = self._encrypt(i)
        while x >= self.n:
            x = self._encrypt(x)
        return x
