"""ROC-AUC of document-level poor-MT features that need no source text: surface features (untranslated
script, repetition loops, punctuation, sentence length, type-token ratio, articles) and the tail of a
causal LM's token surprisal (mean, p90/p95, max, spike shares, the worst 5-token window, surprisal
beyond the model's own entropy, entropy, log-rank), each alone, per language pair and source.

    python benchmarks/mt_features_eval.py [--data ../shared/data] [--lm models/lm/gemma-3-270m-q4_k_m.gguf]
        [--max-tokens 128] [--dtype bfloat16] [--cache tokens.pkl] [--wmt-sxs DIR]

The texts: filters/training_data.py's MT items, every split (no feature is fitted, so nothing is
trained on): poor MT (blocks of TED segments with MQM <= the poor threshold; SMT output of
MT-Detection) against human translations of the same talks / sentences (`ref`, `refB`), and for zh-en
also against native English TED sources. `--lm none` skips the LM features. `--cache`: the LM's
per-token arrays are kept there (pickle) and reused.

Prints JSON: `n_pos_neg` per subset, `features`: ROC-AUC per subset, oriented as
benchmarks/lm_statistics_eval.py does (-(1 - AUC) where a lower value means MT), `seconds_per_doc`.
Caveat, measured: poor blocks are cut 3-8 segments long and human ones 5-12, so length (and TTR,
which falls with length) separates the classes by construction; read those two rows as the artefact.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import re
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root

from benchmarks.record import record  # noqa: E402

import numpy as np  # noqa: E402

from filters.synthetic_eval import roc_auc  # noqa: E402
from filters.training_data import load_mt, load_wmt_sxs  # noqa: E402

WORD = re.compile(r"\w+")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

SUBSETS = {
    "zh-en TED: poor MT vs human translations": lambda it: it["source"] == "ted_zhen",
    "zh-en TED: poor MT vs human translations + native English": lambda it: it["source"] in ("ted_zhen",
                                                                                            "ted_en_source"),
    "en-de TED: poor MT vs human translations": lambda it: it["source"] == "ted_ende",
    "zh-en MT-Detection: SMT vs human translations": lambda it: it["source"] == "mtdet_zhen",
}
WMT_SUBSETS = {  # with --wmt-sxs: MT of another year, domain and systems (never fitted on)
    "en-de WMT23 news: poor MT vs the reference": lambda it: it["source"] == "wmt23_ende",
    "zh-en WMT23 news: poor MT vs native English (TED)": lambda it: it["source"] in ("wmt23_zhen", "ted_en_source"),
}


def surface_features(text: str) -> dict:
    words = WORD.findall(text.lower())
    n = max(len(words), 1)
    sentence_words = np.array([len(WORD.findall(s)) for s in SENTENCE_END.split(text) if s.strip()] or [0])
    bigrams = collections.Counter(zip(words, words[1:]))
    return {
        "untranslated_script_share": sum(ord(c) >= 0x2E80 for c in text) / max(len(text), 1),  # CJK and up
        "immediate_word_repeats": sum(a == b for a, b in zip(words, words[1:])) / n,
        "top_bigram_share": max(bigrams.values(), default=0) / n,
        "space_before_punctuation": len(re.findall(r" [,.;:!?]", text)) / n,
        "article_share": sum(w in ("the", "a", "an") for w in words) / n,
        "comma_share": text.count(",") / n,
        "sentence_words_mean": float(sentence_words.mean()),
        "sentence_words_cv": float(sentence_words.std() / max(sentence_words.mean(), 1)),
        "type_token_ratio": len(set(words)) / n,
        "words": float(len(words)),
    }


def surprisal_features(lp: np.ndarray, entropy: np.ndarray, rank: np.ndarray) -> dict:
    s = -lp  # surprisal of each token
    excess = s - entropy  # beyond what the model itself expected at that position
    window = np.convolve(s, np.ones(5) / 5, "valid") if len(s) >= 5 else s
    return {"surprisal_mean": s.mean(), "surprisal_p90": np.percentile(s, 90), "surprisal_p95": np.percentile(s, 95),
            "surprisal_max": s.max(), "spikes_over_8_nats": (s > 8).mean(), "spikes_over_12_nats": (s > 12).mean(),
            "worst_5_token_window": window.max(), "excess_surprisal_mean": excess.mean(),
            "excess_surprisal_p95": np.percentile(excess, 95), "excess_spikes_over_5": (excess > 5).mean(),
            "entropy_mean": entropy.mean(), "log_rank_mean": np.log1p(rank).mean(),
            "rank_over_100_share": (rank > 100).mean(), "surprisal_std": s.std()}


def token_arrays(items, model: str, max_tokens: int, dtype: str | None, batch: int = 8):
    """Per item (label log-probabilities, entropies, ranks) of its first `max_tokens` tokens."""
    import torch

    from filters.lm_detect import SamplingDiscrepancy

    torch.set_num_threads(os.cpu_count() or 1)
    lm = SamplingDiscrepancy(model, None, "cpu", max_tokens, batch, dtype).load()
    out = []
    for start in range(0, len(items), batch):
        enc = lm.tokenizer([it["text"] for it in items[start:start + batch]], return_tensors="pt", padding=True,
                           truncation=True, max_length=max_tokens)
        with torch.inference_mode():
            logits = lm.model(**enc).logits[:, :-1].float()
        labels, mask = enc["input_ids"][:, 1:], enc["attention_mask"][:, 1:].bool()
        for b in range(logits.shape[0]):
            log_p = logits[b][mask[b]].log_softmax(-1)
            lp = log_p.gather(-1, labels[b][mask[b]][:, None]).squeeze(-1)
            out.append((lp.numpy(), -(log_p.exp() * log_p).sum(-1).numpy(), (log_p > lp[:, None]).sum(-1).numpy()))
    return out


def oriented_auc(y, x) -> float:
    a = roc_auc(y, x)
    return round(a if a >= 0.5 else -(1 - a), 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(sys.path[0]), "shared", "data"))
    ap.add_argument("--lm", default="models/lm/gemma-3-270m-q4_k_m.gguf", help="'none': surface features only")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", help="as configs/local_lm.yaml's lm_dtype; 'none': the file's")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--wmt-sxs", default=None, help="a folder with WMT 2023's sxs_mqm_generalMT2023_*.tsv "
                    "(filters/training_data.py load_wmt_sxs): its subsets too")
    args = ap.parse_args()

    items = [it for it in load_mt(args.data) if it["label"] in (0, 1)]
    subsets = dict(SUBSETS)
    if args.wmt_sxs:
        items += [it for it in load_wmt_sxs(args.wmt_sxs) if it["label"] in (0, 1)]
        subsets.update(WMT_SUBSETS)
    rows = [surface_features(it["text"]) for it in items]
    seconds = None
    if args.lm.lower() != "none":
        if args.cache and os.path.exists(args.cache):
            cached_items, arrays = pickle.load(open(args.cache, "rb"))
            assert [it["text"] for it in cached_items] == [it["text"] for it in items], "cache is of other texts"
        else:
            started = time.perf_counter()
            arrays = token_arrays(items, args.lm, args.max_tokens, None if args.dtype == "none" else args.dtype)
            seconds = round((time.perf_counter() - started) / len(items), 3)
            if args.cache:
                pickle.dump((items, arrays), open(args.cache, "wb"))
        rows = [{**row, **surprisal_features(*a)} for row, a in zip(rows, arrays)]
    report = {"lm": None if args.lm.lower() == "none" else args.lm, "max_tokens": args.max_tokens, "dtype": args.dtype,
              "seconds_per_doc": seconds, "n_pos_neg": {}, "features": {}}
    for name, keep in subsets.items():
        idx = [i for i, it in enumerate(items) if keep(it)]
        y = [items[i]["label"] for i in idx]
        report["n_pos_neg"][name] = [sum(y), len(y) - sum(y)]
        for key in rows[0]:
            report["features"].setdefault(key, {})[name] = oriented_auc(y, [float(rows[i][key]) for i in idx])
    print(json.dumps(report, indent=1))
    best = {name: max(report["features"], key=lambda k: report["features"][k][name]) for name in subsets}
    record(__file__, {**{f"{name}: best feature": f"{k} {report['features'][k][name]}" for name, k in best.items()},
                      "LM seconds a document": seconds}, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
