"""Train the shipped model-generated-content scorers (filters/synthetic.py, filters/models/MODEL_CARD.md).

Code, so that everything shipped (fastText model, style head, optional stacker, LM head, thresholds) is
rebuilt from the data alone:

    train_filter("llm", "../shared/data", "filters/models/llm_generated.ftz")
    train_filter("mt",  "../shared/data", "filters/models/poor_mt.ftz")

Deterministic given `seed` (fastText thread=1, seeded). Writes MODEL (quantized .ftz) and MODEL.json
(heads, languages, threshold, held-out metrics) beside it. Data and splits: filters/training_data.py.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time

import numpy as np

from filters.logistic import fit_logistic_1d, fit_logreg
from filters.page_noise import feature_rows, pageify
from filters.synthetic import (MAX_CHARS as MAX_SAMPLE_CHARS, STAT_NAMES, STYLE_NAMES, _Classifier, add_evidence,
                               ft_logit, stacked_prob, style_features, text_stats)
from filters.synthetic_eval import evaluate, roc_auc, score_items
from filters.training_data import (ITEM_TEST_FOLD, LLM_TEST_GENERATORS, MT_TEST_SYSTEMS, N_FOLDS, TED_TEST_TALKS,
                                   fold, load_data)
# Re-exported: benchmarks/filters_eval.py and the tests reach these through this module.
from filters.synthetic_eval import pr_at  # noqa: F401
from filters.training_data import _item, cut_to_sentence, load_fast_detect_gpt, strip_prefix  # noqa: F401

# The llm style head learns chat/instruction-tuned writing from these training generators only (the
# weak base models' pure samples differ in the opposite direction, e.g. low type-token ratio).
STYLE_GENERATORS = ("davinci", "gpt-3.5-turbo")
TARGET_HUMAN_FPR = 0.02  # threshold = 98th percentile of the scores of calibration human pages (never trained on)
STACK_MIN_GAIN = 0.005  # statistics are stacked only if they raise out-of-fold (unseen-generator) AUC
STACK_NAMES = ("ft_logit", *STAT_NAMES)

# Word uni+bigrams only, for both. llm: char n-grams lowered held-out AUC (0.787 -> 0.752) and raised
# scores of human text from unseen registers (TED talks, student essays). mt: char 3-grams lowered the
# out-of-fold AUC on systems left out of training (_oof_rows) and every held-out slice; see MODEL_CARD.md.
FT_PARAMS = {
    "llm": dict(lr=0.1, epoch=30, wordNgrams=2, minn=0, maxn=0, dim=24, bucket=200000, minCount=2, loss="softmax"),
    "mt": dict(lr=0.3, epoch=12, wordNgrams=2, minn=0, maxn=0, dim=24, bucket=200000, minCount=2, loss="softmax"),
}


def _train_ft(rows, path, seed, params):
    import fasttext

    with open(path, "w", encoding="utf-8") as fh:
        for line, _, label, _ in rows:
            fh.write(f"__label__{'pos' if label == 1 else 'neg'} {line}\n")
    params = dict(params)
    errors = []
    for _ in range(4):  # fastText occasionally diverges ("Encountered NaN"): retry deterministically, lr/2
        try:
            return fasttext.train_supervised(input=path, thread=1, seed=seed, verbose=0, **params)
        except RuntimeError as err:
            if "NaN" not in str(err):
                raise
            errors.append(f"lr={params['lr']}: {err}")
            params["lr"] = params["lr"] / 2
    raise RuntimeError(f"fastText training diverged at every learning rate tried: {errors}")


def _ft_pos(model, line):
    labels, probs = model.predict(line, k=2)
    return next((min(float(p), 1.0) for lab, p in zip(labels, probs) if lab == "__label__pos"), 0.0)


def _balance(items):
    """Copies per positive and per negative item that roughly balance the classes."""
    pos = sum(it["label"] == 1 for it in items)
    neg = sum(it["label"] == 0 for it in items)
    return max(1, round(neg / max(pos, 1))), max(1, round(pos / max(neg, 1)))


def _oof_rows(train, seed, params):
    """Out-of-fold fastText probabilities: each fold leaves out a group of generators/systems and a
    fifth of the source items, so the stacker learns how fastText behaves on unseen generators."""
    systems = sorted({it["system"] for it in train if it["label"] == 1})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(N_FOLDS):
            held = set(systems[j::N_FOLDS])
            fit = [it for it in train if fold(it["group"] + "#oof") != j and it["system"] not in held]
            ev = [it for it in train if fold(it["group"] + "#oof") == j and (it["label"] == 0 or it["system"] in held)]
            if not ev or not fit:
                continue
            rng = random.Random(seed * 1000 + j)
            cp, cn = _balance(fit)
            model = _train_ft(feature_rows(fit, rng, cp, cn), os.path.join(tmp, "oof.txt"), seed, params)
            for line, sample, label, idx in feature_rows(ev, rng):
                rows.append((_ft_pos(model, line), text_stats(sample, ev[idx]["lang"]), label, j))
    return rows


def _fit_style_head(train, seed):
    """Logistic regression on style_features: chat-model training generators vs human, balanced."""
    rows = [it for it in train if it["label"] == 0 or it["system"] in STYLE_GENERATORS]
    rng = random.Random(seed + 3)
    cp, cn = _balance(rows)
    feats = feature_rows(rows, rng, cp, cn)
    head = fit_logreg([style_features(sample) for _, sample, _, _ in feats], [label for *_, label, _ in feats],
                       names=STYLE_NAMES)
    head["generators"] = list(STYLE_GENERATORS)
    return head


def _fit_stack(oof):
    """From out-of-fold rows: stacking weights, if they raise AUC by >= STACK_MIN_GAIN as judged by a
    nested cross-validation over the folds (else None), and the out-of-fold figures."""
    y = np.array([r[2] for r in oof])
    folds = np.array([r[3] for r in oof])
    ft = np.array([r[0] for r in oof])
    X = np.array([[ft_logit(r[0])] + list(r[1]) for r in oof])
    info = {"oof_rows": len(oof), "oof_auc_fasttext": round(roc_auc(y, ft), 4)}
    stack = None
    if len(set(y)) == 2:
        nested = np.zeros(len(y))
        for j in sorted(set(folds)):
            tr, te = folds != j, folds == j
            if len(set(y[tr])) < 2:
                nested[te] = ft[te]
                continue
            st = fit_logreg(X[tr], y[tr], STACK_NAMES)
            nested[te] = [stacked_prob(st, r[0], list(r[1])) for r, t in zip(oof, te) if t]
        info["oof_auc_stacked"] = round(roc_auc(y, nested), 4)
        if info["oof_auc_stacked"] >= info["oof_auc_fasttext"] + STACK_MIN_GAIN:
            stack = fit_logreg(X, y, STACK_NAMES)
    info["stacked"] = stack is not None
    return stack, info


def train_filter(kind: str, data_dir: str, out: str, seed: int = 0, threshold: float | None = None,
                 items: list | None = None, stats: bool = False, ft_params: dict | None = None) -> dict:
    """Train the `kind` ("llm" | "mt") scorer on data_dir, write `out` (.ftz) and `out`.json; return metrics."""
    t0 = time.time()
    items = items if items is not None else load_data(kind, data_dir, seed)
    train = [it for it in items if it["split"] == "train" and it["label"] in (0, 1)]
    if not train:
        raise ValueError(f"no training data for {kind!r} under {data_dir}")
    params = {**FT_PARAMS[kind], **(ft_params or {})}
    # Threshold calibration: a fifth of the human training items (by source group) is held back from
    # fastText and scored by the final model; threshold = (1 - TARGET_HUMAN_FPR) quantile of their scores.
    calib = [it for it in train if it["label"] == 0 and fold(it["group"] + "#cal") == 0]
    train = [it for it in train if not (it["label"] == 0 and fold(it["group"] + "#cal") == 0)]
    for it in calib:
        it["split"] = "calib"
    stack, oof_info = None, {"stacked": False}
    if stats:  # optional: stack text statistics, fitted on out-of-fold (unseen-generator) predictions
        stack, oof_info = _fit_stack(_oof_rows(train, seed, params))
    rng = random.Random(seed)
    cp, cn = _balance(train)
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = feature_rows(train, rng, cp, cn)
        train_txt = os.path.join(tmp, "train.txt")
        model = _train_ft(rows, train_txt, seed, params)
        model.quantize(input=train_txt, qnorm=True, retrain=False, cutoff=50000, thread=1, verbose=0)
    model.save_model(out)
    style_head = _fit_style_head(train, seed) if kind == "llm" else None
    meta_path = out[: -len(os.path.splitext(out)[1])] + ".json"
    with open(meta_path, "w") as fh:  # the heads first: evaluate exactly what ships, then add the figures
        json.dump({"stack": stack, "style_head": style_head}, fh)
    clf = _Classifier(out)
    cal_scores = score_items(clf, calib, seed + 1)[2]
    cal_thr = float(np.quantile(cal_scores, 1 - TARGET_HUMAN_FPR)) if len(cal_scores) else 0.5
    thr = threshold if threshold is not None else round(min(max(cal_thr, 0.5), 0.9999), 4)
    oof_info.update({"calibration_human_items": len(calib),
                     "threshold_rule": f"{1 - TARGET_HUMAN_FPR:.2f} quantile of calibration human page scores"})
    metrics = evaluate(kind, clf, items, thr, seed)
    meta = {
        "kind": kind, "model": os.path.basename(out), "seed": seed, "threshold": thr,
        "languages": ["en"] if kind == "llm" else ["en", "de"],
        "stack": stack, "style_head": style_head, "fasttext": params, "oof": oof_info,
        "splits": {"llm_test_generators": list(LLM_TEST_GENERATORS), "mt_test_systems": MT_TEST_SYSTEMS,
                   "ted_test_talks": list(TED_TEST_TALKS), "item_test_fold": f"sha1(group) % {N_FOLDS} == {ITEM_TEST_FOLD}"},
        "counts": {s: {str(lab): sum(1 for it in items if it["split"] == s and it["label"] == lab) for lab in (0, 1)}
                   for s in sorted({it["split"] for it in items})},
        "metrics": metrics, "train_seconds": round(time.time() - t0, 1),
        "model_bytes": os.path.getsize(out),
    }
    with open(meta_path, "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)
    return meta


# ---------------------------------------------------------------------------------- LM discrepancy head
def fit_lm_head(lm, data_dir: str, per_class: int = 150, seed: int = 0, scorer=None, items=None) -> dict:
    """Calibrate Fast-DetectGPT's discrepancy d of `lm` (a loaded filters.lm_detect.SamplingDiscrepancy)
    as a third head of `llm_generated`: log-odds a*d + b, fitted on `per_class` human and `per_class`
    machine training texts (training generators, page-noised like everything else), and the threshold
    that keeps TARGET_HUMAN_FPR of the calibration human pages (never trained on) for the combined score.
    The LM is zero-shot, so a 2-parameter fit on a few hundred texts is all it needs."""
    from filters.lm_detect import document_sample
    from filters.synthetic import SyntheticTextScorer, with_lm_head

    scorer = scorer or SyntheticTextScorer().load()
    items = items if items is not None else load_data("llm", data_dir, seed)
    train = [it for it in items if it["split"] == "train" and it["label"] in (0, 1)]
    is_calib = [it["label"] == 0 and fold(it["group"] + "#cal") == 0 for it in train]  # as in train_filter
    calib = [it for it, c in zip(train, is_calib) if c]
    fit = [it for it, c in zip(train, is_calib) if not c and it["source"].startswith("fdg:")]
    rng = random.Random(seed + 11)
    rng.shuffle(fit)
    fit = [it for it in fit if it["label"] == 0][:per_class] + [it for it in fit if it["label"] == 1][:per_class]

    def scored(rows):
        pages = [it["text"] if it.get("raw_page") else pageify(it["text"], rng) for it in rows]
        ds = lm.score([document_sample(p, MAX_SAMPLE_CHARS) for p in pages])
        ps = [scorer.score(p, it["lang"])["llm_generated"] for p, it in zip(pages, rows)]
        return [(d, p, it["label"]) for d, p, it in zip(ds, ps, rows) if d is not None]

    fit_rows = scored(fit)
    a, b = fit_logistic_1d([d for d, _, _ in fit_rows], [y for *_, y in fit_rows])
    calib_rows = scored(calib)
    combined = np.array([with_lm_head(p, d, [a, b]) for d, p, _ in calib_rows])
    thr = float(np.quantile(combined, 1 - TARGET_HUMAN_FPR)) if len(combined) else 0.5
    thr = round(min(max(thr, 0.5), 0.9999), 4)
    evidence = [a * d + b for d, _, _ in fit_rows + calib_rows]
    return {"lm_model": lm.model_name, "lm_max_tokens": lm.max_tokens, "lm_logit": [round(a, 6), round(b, 6)],
            "llm_generated_threshold": thr, "lm_band": lm_band(evidence, thr),
            "fit_texts": len(fit_rows), "calibration_human_pages": len(combined),
            "fit_auc_discrepancy": round(roc_auc([y for *_, y in fit_rows], [d for d, _, _ in fit_rows]), 4)}


LM_BAND_QUANTILES = (0.01, 0.99)


def lm_band(evidence: list[float], threshold: float, quantiles=LM_BAND_QUANTILES) -> list[float]:
    """[lo, hi] of `llm_generated` without the LM head, outside which the head's log-odds `evidence` (a*d + b
    of the fit and calibration texts), from its `quantiles[0]` to its `quantiles[1]` quantile, cannot carry
    a score across `threshold`: below lo, p with the most such evidence stays under it; above hi, p with
    the least stays over it. The pipeline computes the LM only inside (filters/synthetic.py in_lm_band), so
    the verdicts outside are the cheap heads' own. In logit space, as add_evidence adds the head, with
    the combined score's rounding allowed for; where an edge falls beyond the logits ft_logit can give (it
    clips p), the band is open on that side; rounded outwards."""
    low, high = (float(q) for q in np.quantile(evidence, quantiles))
    clip = ft_logit(1.0)
    below = threshold - 5e-7  # a combined score this close rounds (with_lm_head: 6 decimals) to the threshold
    lo = 0.0 if ft_logit(below) - high <= -clip else math.floor(add_evidence(below, -high) * 1e6) / 1e6
    hi = 1.0 if ft_logit(threshold) - low >= clip else math.ceil(add_evidence(threshold, -low) * 1e6) / 1e6
    return [lo, hi]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["llm", "mt"])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stats", action="store_true", help="try stacking the text statistics (off: see MODEL_CARD)")
    a = ap.parse_args()
    res = train_filter(a.kind, a.data, a.out, a.seed, stats=a.stats)
    print(json.dumps({k: res[k] for k in ("metrics", "counts", "model_bytes", "train_seconds")}, indent=1))
