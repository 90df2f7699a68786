"""Phase allocation (packing/phases.py), the seeded permutation (packing/permute.py), config."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from packing.config import DEFAULT_PHASES, PackConfig, phases
from packing.permute import Permutation
from packing.phases import assign, length_bucket, make_plan

TINY = {"phases": {"pretrain": {"seq_len": 2048}, "long": {"seq_len": 8192}}}


def corpus(n=20000, seed=0):
    """Lognormal lengths like the real web-text sample (median ~900 tokens), with a long tail."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(2, np.rint(np.exp(rng.normal(np.log(900), 1.2, n)))).astype(int).tolist()
    return [(f"{i:032x}", n_) for i, n_ in enumerate(lengths)]


def allocate(docs, cfg, **kw):
    hist: dict = {}
    for _, n in docs:
        d, t = hist.get(length_bucket(n), (0, 0))
        hist[length_bucket(n)] = (d + 1, t + n)
    plan = make_plan(hist, phases(cfg), **kw)
    return plan, {doc: assign(plan, n, doc) for doc, n in docs}


def phase_tokens(docs, got):
    out = Counter()
    for doc, n in docs:
        for name in got[doc]:
            out[name] += n
    return out


def test_default_split_is_34_to_11_with_long_documents_to_the_long_phase():
    docs = corpus()
    plan, got = allocate(docs, PackConfig.model_validate(TINY))
    assert all(len(v) == 1 for v in got.values())  # a partition: overlap 0
    total = sum(n for _, n in docs)
    tokens = phase_tokens(docs, got)
    assert abs(tokens["long"] / total - 11 / 45) < 0.01 and tokens["pretrain"] + tokens["long"] == total
    shortest_long = min(n for d, n in docs if got[d] == ["long"])
    longest_pre = max(n for d, n in docs if got[d] == ["pretrain"])
    assert longest_pre <= shortest_long * 1.01  # only the boundary bucket is mixed
    assert plan["phases"]["long"]["status"] == plan["phases"]["pretrain"]["status"] == "ok"


def test_a_budget_beyond_the_corpus_shares_the_fewest_documents():
    docs = corpus()
    total = sum(n for _, n in docs)
    plan, got = allocate(docs, PackConfig.model_validate(TINY), budget_tokens=int(1.2 * total))
    tokens = phase_tokens(docs, got)
    shared = [n for d, n in docs if len(got[d]) == 2]
    assert shared and all(len(v) >= 1 for v in got.values())
    assert abs(sum(shared) / total - 0.2) < 0.01  # 20 % extra tokens come from reused documents
    assert min(shared) >= 0.99 * max(n for d, n in docs if len(got[d]) == 1)  # ... the longest ones
    assert abs(tokens["pretrain"] / (1.2 * total) - 34 / 45) < 0.01


def test_budget_below_the_corpus_leaves_the_shortest_documents_unused():
    docs = corpus()
    total = sum(n for _, n in docs)
    _, got = allocate(docs, PackConfig.model_validate(TINY), budget_tokens=total // 2)
    unused = [n for d, n in docs if not got[d]]
    assert abs(sum(unused) / total - 0.5) < 0.01
    assert max(unused) <= 1.01 * min(n for d, n in docs if got[d])


def test_not_enough_tokens_is_a_reported_state_not_an_error():
    docs = corpus(300)  # ~0.6M tokens: the 1M phase cannot fill one sequence
    plan, got = allocate(docs, PackConfig())
    assert plan["phases"]["long"]["status"] == "insufficient_tokens"
    assert plan["phases"]["pretrain"]["budget_tokens"] == sum(n for _, n in docs)
    assert all(v == ["pretrain"] for v in got.values())
    plan, got = allocate(corpus(5), PackConfig())  # not even one 64K sequence
    assert {p["status"] for p in plan["phases"].values()} == {"insufficient_tokens"}
    assert all(v == [] for v in got.values())
    assert make_plan({}, phases(PackConfig()))["total_tokens"] == 0


def test_length_buckets_are_monotone_and_few():
    lengths = np.unique(np.rint(np.geomspace(1, 2e9, 200000)).astype(int)).tolist()
    buckets = [length_bucket(n) for n in lengths]
    assert buckets == sorted(buckets) and all(b <= n < b * 1.01 + 1 for b, n in zip(buckets, lengths))
    assert len(set(buckets)) < 8000


def test_permutation_is_a_seeded_bijection():
    for n in (1, 2, 3, 17, 1000, 4097):
        perm = Permutation(n, seed=7)
        assert sorted(perm(i) for i in range(n)) == list(range(n))
    a, b = Permutation(1000, 1), Permutation(1000, 2)
    assert [a(i) for i in range(1000)] != [b(i) for i in range(1000)]
    assert [a(i) for i in range(1000)] != list(range(1000))
    with pytest.raises(IndexError):
        a(1000)


def test_config_defaults_and_validation():
    cfg = PackConfig()
    assert {name: {"seq_len": spec.seq_len, "share": spec.share} for name, spec in cfg.phases.items()} == DEFAULT_PHASES
    long, pre = phases(cfg)
    assert (long.name, long.seq_len, long.share, long.chunk_tokens) == ("long", 1048576, 11, 1048576)
    assert (pre.name, pre.seq_len, pre.share) == ("pretrain", 65536, 34)
    assert pre.min_group_tokens == 20000 * 65536
    small = phases(PackConfig.model_validate({**TINY, "padding_target": 1e-3}))
    assert [(p.seq_len, p.min_group_tokens) for p in small] == [(8192, 2000 * 8192), (2048, 2000 * 2048)]
    for bad in ({"nope": 1}, {"phases": {"pretrain": {"chunk_tokens": 70000}}}, {"phases": {"x": {"seq_len": 8}}},
                {"phases": {"Bad Name": {"seq_len": 8, "share": 1}}}, {"padding_target": 0}):
        with pytest.raises(ValueError):
            PackConfig.model_validate(bad)
