"""Held-out figures of the model-generated-content scorers, measured through the shipped scoring code so
that MODEL.json reports what ships: ROC-AUC, and precision/recall/FPR at the shipped threshold."""

from __future__ import annotations

import random

import numpy as np
from scipy.stats import mannwhitneyu

from filters.page_noise import feature_rows
from filters.training_data import LLM_TEST_GENERATORS, MT_TEST_SYSTEMS


def roc_auc(labels, scores) -> float:
    """P(a positive scores above a negative), ties counting 1/2: the Mann-Whitney U of the positives'
    scores over n_pos * n_neg. nan when a class is missing (empty input included)."""
    y = np.asarray(labels, dtype=int)
    s = np.asarray(scores, dtype=float)
    pos, neg = s[y == 1], s[y == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(mannwhitneyu(pos, neg, method="asymptotic").statistic / (len(pos) * len(neg)))


def pr_at(labels, scores, threshold) -> dict:
    """Precision, recall and false-positive rate of flagging scores >= threshold (None where undefined)."""
    y = np.asarray(labels, dtype=int)
    pred = np.asarray(scores, dtype=float) >= threshold
    tp = int((pred & (y == 1)).sum())
    fp = int((pred & (y == 0)).sum())
    fn = int((~pred & (y == 1)).sum())
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "fpr": round(fp / int((y == 0).sum()), 4) if (y == 0).any() else None,
            "n_pos": int((y == 1).sum()), "n_neg": int((y == 0).sum())}


def score_items(clf, items, seed, noise=True):
    """(n-gram, style or nan, final) probabilities of page-noised items through the shipped code path."""
    rng = random.Random(seed + 7)
    rows = []
    for line, sample, _, idx in feature_rows(items, rng, noise=noise):
        parts = clf.parts(sample, items[idx]["lang"], line)
        rows.append((parts["ngram"], np.nan if parts["style"] is None else parts["style"], parts["prob"]))
    return np.array(rows, float).reshape(-1, 3).T


def evaluate(kind, clf, items, threshold, seed=0) -> dict:
    """Held-out figures: overall, per held-out generator/system, per source; noisy pages and clean text."""
    report = {}
    ev = [it for it in items if it["split"].startswith("test")]
    for noise in (True, False):
        ft, style, st = score_items(clf, ev, seed, noise)
        key = "pages" if noise else "clean"
        res = {}
        y = np.array([it["label"] for it in ev])

        def sub(mask, name):
            m = np.asarray(mask) & (y >= 0)
            if m.sum() == 0:
                return
            res[name] = {"auc": round(roc_auc(y[m], st[m]), 4), "auc_fasttext_only": round(roc_auc(y[m], ft[m]), 4),
                         **pr_at(y[m], st[m], threshold)}
            if not np.isnan(style[m]).any():
                res[name]["auc_style_only"] = round(roc_auc(y[m], style[m]), 4)

        split = np.array([it["split"] for it in ev])
        system = np.array([it["system"] for it in ev])
        source = np.array([it["source"] for it in ev])
        lang = np.array([it["lang"] for it in ev])
        neg = y == 0
        if kind == "llm":
            main = (split == "test") & (source != "ted_en_source")
            sub(main, "heldout_generators")
            for g in LLM_TEST_GENERATORS:
                sub(main & ((system == g) | neg), f"generator={g}")
            for s in sorted(set(source[main])):
                sub(main & (source == s), f"source={s}")
            sub((split == "test_seen_generator") | ((split == "test") & neg & (source != "ted_en_source")),
                "seen_generators_heldout_items")
            sub(split == "test_asap", "asap_chatgpt_unseen_source")
            m = (split == "test") & (source == "ted_en_source")
            res["ted_native_en_fpr"] = round(float((st[m] >= threshold).mean()), 4) if m.any() else None
        else:
            main = split == "test"
            sub(main, "heldout_systems")
            for pair, systems in MT_TEST_SYSTEMS.items():
                pm = main & (source == f"ted_{pair}")
                sub(pm, f"ted_{pair}")
                for s in systems:
                    sub(pm & ((system == s) | neg), f"ted_{pair}:system={s}")
            sub(main & (source == "mtdet_zhen"), "mtdet_zhen_smt")
            for lg in ("en", "de"):
                sub(main & (lang == lg), f"lang={lg}")
            for s in ("native", "human_ref"):
                m = main & (np.array([it.get("kind") for it in ev]) == s)
                res[f"fpr_{s}"] = round(float((st[m] >= threshold).mean()), 4) if m.any() else None
            allm = np.array([it.get("kind") == "mt_all" for it in ev]) & main
            if allm.any():
                mq = np.array([it.get("mqm", 0.0) for it in ev])
                for lo, hi, nm in ((-99, -5, "mqm<=-5"), (-5, -2, "-5<mqm<=-2"), (-2, 0.01, "mqm>-2")):
                    m = allm & (mq > lo) & (mq <= hi)
                    if m.any():
                        res[f"flagged_frac_consecutive_mt_{nm}"] = {"n": int(m.sum()),
                                                                     "flagged": round(float((st[m] >= threshold).mean()), 4)}
        report[key] = res
    return report
