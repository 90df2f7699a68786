"""Model-generated content scorers (filters/synthetic.py) and their training (filters/train_synthetic.py)."""

import json
import os
import pickle
import random

import pytest

from filters import train_synthetic as T
from filters.synthetic import LLM_MODEL, MT_MODEL, SyntheticTextScorer, normalize, prose_sample, text_stats

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "data", "synthetic")


def _rows(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def scorer():
    return SyntheticTextScorer().load()


def test_shipped_models_are_small_quantized_and_documented():
    for path in (LLM_MODEL, MT_MODEL):
        assert str(path).endswith(".ftz") and os.path.getsize(path) < 5 << 20
        meta = json.load(open(str(path)[:-4] + ".json"))
        assert 0.5 <= meta["threshold"] < 1 and meta["languages"]
    assert os.path.exists(os.path.join(os.path.dirname(LLM_MODEL), "MODEL_CARD.md"))


def test_scores_are_probabilities_with_support_flags(scorer):
    out = scorer.score("This is a perfectly ordinary sentence written by a person about the weather today. " * 5, "en")
    assert set(out) >= {"llm_generated", "poor_mt", "llm_generated_supported", "poor_mt_supported"}
    assert 0.0 <= out["llm_generated"] <= 1.0 and 0.0 <= out["poor_mt"] <= 1.0
    assert out["llm_generated_supported"] and out["poor_mt_supported"]
    de = scorer.score("Das ist ein ganz normaler Satz, den ein Mensch über das Wetter von heute geschrieben hat. " * 4, "de")
    assert de["poor_mt_supported"] and not de["llm_generated_supported"] and de["llm_generated"] == 0.0


@pytest.mark.parametrize("fixture,key", [("llm_heldout.jsonl", "llm_generated"), ("mt_heldout.jsonl", "poor_mt")])
def test_separates_held_out_real_examples(scorer, fixture, key):
    """Held-out generators/systems on held-out source items (see tests/data/synthetic/SOURCE.md)."""
    rows = _rows(fixture)
    labels = [r["label"] for r in rows]
    scores = [scorer.score(r["text"], r["lang"])[key] for r in rows]
    assert T.roc_auc(labels, scores) >= 0.75
    pos = sorted(s for s, y in zip(scores, labels) if y == 1)
    neg = sorted(s for s, y in zip(scores, labels) if y == 0)
    assert pos[len(pos) // 2] > neg[len(neg) // 2]  # median machine text above median human text


def test_page_noise_does_not_decide(scorer):
    """A title, byline and boilerplate lines around the same body barely move the score."""
    row = _rows("llm_heldout.jsonl")[0]
    page = "A Title Of Six Words Here\nBy Jane Doe | March 3, 2021\nShare\n" + row["text"] + "\nRead more\nComments (4)"
    a = scorer.score(row["text"], "en")["llm_generated"]
    b = scorer.score(page, "en")["llm_generated"]
    assert abs(a - b) < 0.05


def test_deterministic_and_picklable(scorer):
    row = _rows("mt_heldout.jsonl")[3]
    first = scorer.score(row["text"], row["lang"])
    assert scorer.score(row["text"], row["lang"]) == first
    fresh = pickle.loads(pickle.dumps(SyntheticTextScorer()))  # Beam: pickled before setup()
    assert fresh._llm is None and fresh.score(row["text"], row["lang"]) == first
    state = pickle.dumps(scorer)  # a loaded scorer pickles without its models
    assert len(state) < 10_000 and pickle.loads(state).score(row["text"], row["lang"]) == first


def test_robust_inputs(scorer):
    for text, lang in [("", "en"), ("   \n\n ", "en"), ("Hi", "en"), ("", ""), ("x" * 50, None)]:
        out = scorer.score(text, lang)
        assert out["llm_generated"] == 0.0 and out["poor_mt"] == 0.0
    long_text = ("Paragraph number one talks about many ordinary things in plain words. " * 20 + "\n") * 3000
    out = scorer.score(long_text, "en")  # ~4 MB: bounded sample, still a probability
    assert 0.0 <= out["llm_generated"] <= 1.0
    for text, lang in [("我希望大家能花点时间考虑一个非常简单的事实，我们对宇宙的大部分了解都来自于光。" * 5, "zh"),
                       ("Это обычный текст, написанный человеком о погоде и о жизни в большом городе. " * 5, "ru"),
                       ("هذا نص عادي كتبه شخص عن الطقس والحياة في مدينة كبيرة جدا اليوم. " * 5, "ar"),
                       ("Mixed 文字 and كلمات with émojis 🙂 and \x00 control \u200b chars " * 10, "en")]:
        out = scorer.score(text, lang)
        assert 0.0 <= out["llm_generated"] <= 1.0 and 0.0 <= out["poor_mt"] <= 1.0
        if lang != "en":
            assert not out["llm_generated_supported"] and out["llm_generated"] == 0.0


def test_prose_sample_skips_short_lines_and_is_bounded():
    text = "My Title\nBy Someone | 2020-01-01\nShare\n" + "This body line has well over eight words in it, clearly. " * 100
    sample = prose_sample(text)
    assert not sample.startswith("My Title") and len(sample) <= 1600
    assert prose_sample("Only\nshort\nlines") == "Only short lines"  # nothing long: use everything
    assert normalize("Hello, World 2024!") == "hello , world 0000 !"
    assert len(text_stats(sample)) == len(T.STAT_NAMES)


def test_normalize_writes_0_for_every_ascii_digit_and_nothing_else():
    """normalize's per-digit str.replace against the character map it stands for, on every code point and
    on random mixes of digits, letters whose lower case is special, marks, punctuation and whitespace."""
    import re
    import sys

    digits = str.maketrans("0123456789", "0000000000")

    def by_map(sample):
        return " ".join(re.findall(r"\w+|[^\w\s]", sample.lower().translate(digits)))

    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 2048):
        text = " 7".join(points[i:i + 2048])
        assert normalize(text) == by_map(text), i
    rng = random.Random(0)
    pool = "0123456789٣０aZİΣßé字 \t\n\u00a0.,!'’\u0301"
    for n in range(200):
        text = "".join(rng.choice(pool) for _ in range(n))
        assert normalize(text) == by_map(text), text


def test_split_never_straddles_source_items():
    """Every fast-detect-gpt source item is wholly train or wholly test, and held-out generators never train."""
    rows = _rows("llm_heldout.jsonl")
    for r in rows:
        assert r["system"] in T.LLM_TEST_GENERATORS or r["label"] == 0
    assert T.strip_prefix("One two three four five. Six seven eight.", 3) == "Six seven eight."
    assert T.cut_to_sentence("A full sentence here, and it is a long one. And a cut") == \
        "A full sentence here, and it is a long one."


def _tiny_items():
    items = []
    for i, r in enumerate(_rows("llm_heldout.jsonl")):
        items.append(T._item(r["text"], r["label"], "fixture", r["system"], f"g{i}", "en",
                             "test" if i % 4 == 0 else "train"))
    return items


_TRAIN = """
import json, sys
sys.path[:0] = [{root!r}, {tests!r}]
from filters import train_synthetic as T
from test_synthetic import _tiny_items
m = T.train_filter("llm", "unused", {out!r}, seed=0, items=_tiny_items(),
                   ft_params={{"epoch": 5, "bucket": 20000, "minCount": 1}})
print(json.dumps({{"threshold": m["threshold"]}}))
"""


def _train_tiny(out):
    # A fresh interpreter, like `curate train-filter`: in a long pytest process fastText training was
    # seen to report NaN at every learning rate after other tests had used fastText models.
    import subprocess
    import sys

    code = _TRAIN.format(root=os.path.dirname(HERE), tests=HERE, out=out)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_train_filter_tiny_slice_is_loadable_and_deterministic(tmp_path):
    out1, out2 = str(tmp_path / "a.ftz"), str(tmp_path / "b.ftz")
    m1 = _train_tiny(out1)
    _train_tiny(out2)
    assert open(out1, "rb").read() == open(out2, "rb").read()  # thread=1 + seed: byte-identical
    meta = json.load(open(str(tmp_path / "a.json")))
    assert meta["threshold"] == m1["threshold"] and "metrics" in meta
    s = SyntheticTextScorer(llm_model=out1, mt_model=str(MT_MODEL)).load()
    p = s.score(_rows("llm_heldout.jsonl")[1]["text"], "en")["llm_generated"]
    assert 0.0 <= p <= 1.0


def test_pageify_applies_same_noise_to_both_classes():
    rng = random.Random(0)
    page = T.pageify("First sentence here. Second one follows. Third ends it.", rng)
    assert "First sentence here." in page
    assert T.pageify("A. B.", random.Random(1), noise=False).count("\n") <= 1


def test_style_head_recognises_chat_model_essays_of_an_unseen_source(scorer):
    """ChatGPT vs student essays (AuthentiCheck/ASAP: a source and generator never trained on). The
    n-gram head, learnt mostly from weak base models, is near chance here; the style head is not, and
    the combined score keeps part of that."""
    rows = _rows("asap_heldout.jsonl")
    labels = [r["label"] for r in rows]
    out = [scorer.score(r["text"], "en") for r in rows]
    assert all(0.0 <= o["llm_style"] <= 1.0 and 0.0 <= o["llm_ngram"] <= 1.0 for o in out)
    style = T.roc_auc(labels, [o["llm_style"] for o in out])
    ngram = T.roc_auc(labels, [o["llm_ngram"] for o in out])
    combined = T.roc_auc(labels, [o["llm_generated"] for o in out])
    assert style >= 0.75 and combined > ngram


def test_heads_combine_as_added_log_odds(scorer):
    from filters.synthetic import combine, ft_logit

    out = scorer.score(_rows("llm_heldout.jsonl")[0]["text"], "en")
    assert out["llm_generated"] == pytest.approx(combine(out["llm_ngram"], out["llm_style"]), abs=2e-6)
    assert combine(0.5, 0.8) == pytest.approx(0.8) and combine(0.9, 0.9) > 0.9
    assert ft_logit(combine(0.2, 0.7)) == pytest.approx(ft_logit(0.2) + ft_logit(0.7))


def test_style_features_follow_their_definitions():
    from filters.synthetic import STYLE_NAMES, style_features

    chat = ("Additionally, this comprehensive approach fosters innovative insights. Overall, it is crucial "
            "to navigate the intricate landscape. Furthermore, robust collaboration ensures lasting value.")
    person = ('I didn\'t think I\'d win, but on May 3, 2019 I got a call from Tom. "You won!" he said. '
              "We laughed for an hour (really).")
    c, h = dict(zip(STYLE_NAMES, style_features(chat))), dict(zip(STYLE_NAMES, style_features(person)))
    assert len(c) == len(STYLE_NAMES)
    assert c["style_words"] > 30 and h["style_words"] == 0
    assert c["openers"] == 1.0 and h["openers"] == 0
    assert h["contractions"] > 0 == c["contractions"] and h["first_person"] > 0 and h["digits"] > 0
    assert h["quotes"] > 0 and h["parens"] > 0 and h["exclaim_question"] > 0
    assert all(v == v for v in style_features("") + style_features("..."))  # no NaN on empty input


def _newton_logreg(X, y, l2=1.0, iters=50):
    """Oracle: the hand-written Newton fit the scipy one replaced (L2, standardized features)."""
    import numpy as np

    X, y = np.asarray(X, float), np.asarray(y, float)
    Z = np.hstack([np.ones((len(X), 1)), (X - X.mean(0)) / (X.std(0) + 1e-9)])
    w = np.zeros(Z.shape[1])
    reg = np.eye(Z.shape[1]) * l2
    reg[0, 0] = 0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(Z @ w, -30, 30)))
        step = np.linalg.solve(Z.T @ (Z * (p * (1 - p))[:, None]) + reg, Z.T @ (p - y) + reg @ w)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def _newton_logistic_1d(x, y, iters=50):
    """Oracle: the hand-written Newton fit of sigmoid(a*x + b) the scipy one replaced."""
    import numpy as np

    X = np.c_[np.asarray(x, float), np.ones(len(x))]
    y = np.asarray(y, float)
    w = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(X @ w, -30, 30)))
        step = np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2), X.T @ (p - y))
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def test_logistic_fits_match_the_newton_oracle():
    """scipy's L-BFGS-B reaches the optimum Newton's method found, to 1e-6, on the heads' shapes:
    the stacker (fastText logit + statistics), the style head, and the 1-d LM head (near-separable too)."""
    import numpy as np

    from filters.logistic import fit_logistic_1d, fit_logreg
    from filters.synthetic import STYLE_NAMES

    rng = np.random.default_rng(0)
    for n, k, l2 in [(2400, len(STYLE_NAMES), 1.0), (900, len(T.STACK_NAMES), 1.0), (300, 3, 0.01), (120, 5, 10.0)]:
        X = rng.normal(size=(n, k)) * rng.uniform(0.1, 50, size=k) + rng.normal(size=k) * 10
        true = rng.normal(size=k) * 1.5
        y = (rng.random(n) < 1 / (1 + np.exp(-((X - X.mean(0)) / X.std(0)) @ true))).astype(int)
        head = fit_logreg(X, y, names=[f"f{i}" for i in range(k)], l2=l2)
        oracle = _newton_logreg(X, y, l2)
        assert abs(head["bias"] - oracle[0]) < 1e-6 and np.abs(np.subtract(head["coef"], oracle[1:])).max() < 1e-6
        assert head["features"] == [f"f{i}" for i in range(k)] and len(head["mean"]) == len(head["std"]) == k
    for n, slope, shift in [(300, 1.0, 0.0), (300, -3.0, 2.0), (60, 6.0, 3.0), (16, 0.5, -1.0)]:
        x = rng.normal(size=n) * 0.7 + shift
        y = (rng.random(n) < 1 / (1 + np.exp(-slope * (x - shift)))).astype(int)
        assert np.abs(np.subtract(fit_logistic_1d(x, y), _newton_logistic_1d(x, y))).max() < 1e-6
    a, b = fit_logistic_1d([1, 2, 3, 4], [0, 0, 1, 1])  # separable: no optimum, still finite, right sign
    assert np.isfinite([a, b]).all() and a > 0 and a * 2 + b < 0 < a * 3 + b
    assert fit_logistic_1d([], []) == (0.0, 0.0)


def test_roc_auc_is_the_pairwise_probability_with_half_ties():
    import math

    import numpy as np

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300) + 0.3 * y, 1)  # coarse scores: many ties
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    pairwise = wins / (len(pos) * len(neg))
    assert T.roc_auc(y, s) == pytest.approx(pairwise, abs=1e-12)
    assert T.roc_auc([0, 1], [0.5, 0.5]) == 0.5 and T.roc_auc([1, 0, 1], [0.9, 0.1, 0.8]) == 1.0
    assert math.isnan(T.roc_auc([1, 1], [0.2, 0.3])) and math.isnan(T.roc_auc([], []))


def test_wmt_side_by_side_mqm_is_cut_into_poor_reference_and_consecutive_blocks():
    """WMT 2023's news MT (filters/training_data.py load_wmt_sxs; a real excerpt, tests/data/wmt23_sxs):
    poor blocks hold only segments with a Major error on average, the reference is a negative, every
    system's output is also cut into consecutive blocks, the raters' attention checks are no rating, and
    nothing of it is a training split."""
    from filters.training_data import MQM_POOR_SEGMENT, load_wmt_sxs

    items = load_wmt_sxs(os.path.join(HERE, "data", "wmt23_sxs"))
    kinds = {(it["system"], it["kind"]): it for it in items}
    assert set(kinds) == {("NLLB_MBR_BLEU", "poor_mt"), ("NLLB_MBR_BLEU", "mt_all"), ("ONLINE-W", "mt_all"),
                          ("refA", "human_ref")}
    assert [it["label"] for it in items] == [{"poor_mt": 1, "human_ref": 0, "mt_all": -1}[it["kind"]] for it in items]
    assert kinds["NLLB_MBR_BLEU", "poor_mt"]["mqm"] <= MQM_POOR_SEGMENT
    assert kinds["ONLINE-W", "mt_all"]["mqm"] > kinds["NLLB_MBR_BLEU", "mt_all"]["mqm"]
    assert all(it["split"] == "external" and it["lang"] == "de" and "<v>" not in it["text"] for it in items)
    assert load_wmt_sxs(os.path.join(HERE, "data")) == []  # a folder without the files: nothing
