"""Joint allocation of documents to training phases (DeepSeek-V4.1 report §4.1 and §4.2.2).

The report's run uses 64K-token sequences from the start and 1M-token sequences from 34T of 45T tokens,
so pretraining-phase tokens : context-extension tokens = 34 : 11 (the `share` of each phase). Samples
are "allocated jointly so that the two phases overlap as little as possible", long documents
preferentially to the long phase.

Rule. Lay the corpus out on one token axis [0, T), documents ordered by length, longest first: a
document of n tokens falls in length bucket q (exact below 4,096 tokens, 8 significant bits above,
i.e. < 0.8 % apart), the buckets are laid out longest first, and inside its bucket a document sits at
a point given by a hash of its id:  x = start(q) + u(id) * tokens(q),  u in [0, 1). Phases, ordered by
sequence length (longest first), take consecutive ranges of the axis of their budget's length:

    budget(p) = B * share(p) / sum(shares),   B = budget_tokens, or T (the corpus once) when null
    range(p)  = [a_p, a_p + min(budget(p), T)) mod T,   a_p = sum of the budgets before p

A document belongs to every phase whose range holds its point. With B = T (the default) the ranges
tile the axis: every document goes to exactly one phase, the longest ones (about 11/45 of the tokens)
to the long phase, overlap 0. With B > T a later range wraps round to the start of the axis: the
shared tokens are then taken from the *longest* documents, which is the fewest shared documents for
those tokens (minimal overlap); a phase never holds a document twice. With B < T the shortest
documents are left unused. Budgets are met up to the hash sampling of the boundary buckets; the
counted tokens per phase and the overlap are reported.

Not enough tokens: a phase whose budget cannot fill `min_sequences` sequences of its length is
marked "insufficient_tokens" (no shards, a manifest saying so); its share goes to the other phases,
most demanding phase (longest sequences) first. Never an error.

The plan needs only a histogram of (bucket -> documents, tokens): a few thousand numbers whatever the
corpus size, combined by a Beam Combine; the per-document decision is then local (doc id, length).
"""

from __future__ import annotations

from dataclasses import dataclass

import xxhash

EXACT_BELOW = 4096
SIGNIFICANT_BITS = 8
_HASH_SEED = 0x9E3779B9  # fixed: allocation must not change with the shuffle seed


@dataclass(frozen=True)
class Phase:
    name: str
    seq_len: int
    share: float
    chunk_tokens: int
    min_group_tokens: int


def length_bucket(n: int) -> int:
    """Monotone bucket of a document length: exact below 4,096, else its top 8 bits."""
    if n < EXACT_BELOW:
        return n
    shift = n.bit_length() - SIGNIFICANT_BITS
    return (n >> shift) << shift


def unit_hash(doc_id: str) -> float:
    """u(id) in [0, 1): where a document sits inside its length bucket."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), _HASH_SEED) / 2.0 ** 64


def make_plan(histogram: dict[int, tuple[int, int]], phases: list[Phase], budget_tokens: int | None = None,
              min_sequences: int = 1) -> dict:
    """The allocation plan from {bucket: (documents, tokens)}. JSON-able except for int bucket keys."""
    total = sum(t for _, t in histogram.values())
    starts, at = {}, 0
    for q in sorted(histogram, reverse=True):
        starts[q] = (at, histogram[q][1])
        at += histogram[q][1]
    ordered = sorted(phases, key=lambda p: (-p.seq_len, p.name))
    active = list(ordered)
    budgets: dict[str, int] = {}
    wanted: dict[str, int] = {}  # the budget a phase had when it was found too small
    while active:
        grand = total if budget_tokens is None else int(budget_tokens)
        shares = sum(p.share for p in active)
        budgets = {p.name: int(grand * p.share / shares) for p in active}
        short = [p for p in active if budgets[p.name] < min_sequences * p.seq_len]
        if not short:
            break
        wanted[short[0].name] = budgets[short[0].name]
        active.remove(short[0])  # ordered longest first: drop the most demanding phase
    out, at = {}, 0
    for p in ordered:
        entry = {"seq_len": p.seq_len, "share": p.share, "status": "insufficient_tokens",
                 "budget_tokens": wanted.get(p.name, 0), "needed_tokens": min_sequences * p.seq_len,
                 "start": 0, "length": 0}
        if p in active:
            entry.update(status="ok", budget_tokens=budgets[p.name], start=at % total if total else 0,
                         length=min(budgets[p.name], total))
            at += budgets[p.name]
        out[p.name] = entry
    return {"total_tokens": total, "total_docs": sum(d for d, _ in histogram.values()),
            "phases": out, "buckets": starts}


def assign(plan: dict, n_tokens: int, doc_id: str) -> list[str]:
    """Names of the phases that get this document (in the plan's order; possibly none)."""
    total = plan["total_tokens"]
    start, tokens = plan["buckets"][length_bucket(n_tokens)]
    x = start + unit_hash(doc_id) * tokens
    return [name for name, p in plan["phases"].items()
            if p["length"] and ((x - p["start"]) % total < p["length"] or p["length"] >= total)]

