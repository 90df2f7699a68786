"""Held-out ROC-AUC of LM token statistics (filters/lm_detect.py TokenStatistics) for `llm_generated`,
alone and combined with the shipped cheap heads, with a whole generator held out at a time.

    python benchmarks/lm_statistics_eval.py [--data ../shared/data] [--per-group 40]
        [--observer models/lm/qwen2.5-coder-0.5b-instruct] [--performer models/lm/qwen2.5-coder-1.5b-instruct | none]
        [--max-tokens 128] [--rows rows.json] [--lm-logit A B]

The texts: filters/train_synthetic.py's held-out split of the llm data (generators gpt-4, gpt-neox-20b,
opt-2.7b never trained on, their human test pages, and ASAP ChatGPT essays vs student essays, an unseen
source), page-noised as benchmarks/filters_eval.py does, `--per-group` machine texts per generator and
twice as many human test pages, taken round robin so that any prefix is balanced. Each is scored by the
shipped scorer (its n-gram and style heads, `llm_generated`) and by TokenStatistics of the observer and
performer LMs on the scorer's prose sample (`--rows`: statistics are cached there and reused).

Prints JSON: `features`: each statistic's ROC-AUC per subset (oriented: a value below 0.5 is reported as
-(1 - AUC), i.e. lower means machine); `combiners`: a logistic regression (filters/logistic.fit_logreg)
over feature sets, fitted on every other held-out generator (ASAP: on the web-text generators) and half
of the human pages (by a hash of the source), scored on the held-out generator and the other half; the
shipped naive sum of heads beside it (and with --lm-logit the shipped LM head); the cheap and LM
combiners fitted apart and summed in units of the human pages' spread; `cascade`: the cheap score decides outside its middle band, the
combiner orders the band (the share of pages sent to the LMs). The held-out units are whole generators;
with --per-group 40 each subset has ~40 machine and ~40 human pages, so differences under ~0.05 are noise.
`seconds_per_doc`: both LMs, one process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root

from benchmarks.record import record  # noqa: E402

import numpy as np  # noqa: E402

from filters import train_synthetic as T  # noqa: E402
from filters.logistic import fit_logreg  # noqa: E402
from filters.synthetic import ft_logit as logit  # noqa: E402

CHEAP = ["ngram_logit", "style_logit"]
LM = ["perf_lp_p10", "obs_log_rank_mean", "perf_lp_std", "obs_lp_mean"]
LM_ONE = ["obs_lp_p10", "obs_log_rank_mean", "obs_lp_std", "obs_lp_mean"]  # no performer: the observer's alone


def feature_sets(pair: bool) -> dict:
    lm = LM if pair else LM_ONE
    sets = {"cheap_heads": CHEAP, "lm_statistics": lm, "cheap_heads+lm_statistics": CHEAP + lm}
    if pair:
        sets["cheap_heads+binoculars+d"] = CHEAP + ["binoculars", "perf_d"]
    else:
        sets["cheap_heads+d"] = CHEAP + ["obs_d"]
    return sets
HELD_OUT = ("gpt-4", "gpt-neox-20b", "opt-2.7b", "asap")


def pick(data_dir: str, per_group: int, seed: int = 7) -> list[dict]:
    items = [it for it in T.load_data("llm", data_dir, 0) if it["split"] in ("test", "test_asap") and it["label"] in (0, 1)]
    groups: dict = {}
    for it in items:
        groups.setdefault((it["split"], it["label"], it.get("system", "") if it["label"] else ""), []).append(it)
    rng = random.Random(seed)
    queues = []
    for key in sorted(groups, key=str):
        rng.shuffle(groups[key])
        human_test = key[0] == "test" and key[1] == 0
        queues.append((groups[key][:per_group * (2 if human_test else 1)], 2 if human_test else 1))
    out = []
    while any(q for q, _ in queues):
        for q, reps in queues:
            for _ in range(reps):
                if q:
                    out.append(q.pop(0))
    return out


def group_of(row: dict) -> str:
    if row["split"] == "test_asap":
        return "asap"
    return row["system"] if row["label"] == 1 else "human"


def auc(rows, key) -> float:
    y = np.array([r["label"] for r in rows])
    x = np.array([r[key] for r in rows], float)
    a = T.roc_auc(y, x) if len(set(y)) == 2 else float("nan")
    return round(a if a >= 0.5 else -(1 - a), 3)


def subsets(rows) -> dict:
    test = [r for r in rows if r["split"] == "test"]
    out = {"all_test": test, "asap": [r for r in rows if r["split"] == "test_asap"]}
    for g in HELD_OUT[:3]:
        out[g] = [r for r in test if r["label"] == 0 or r["system"] == g]
    return out


def split_for(rows, held: str):
    """(fit rows, eval rows) with generator `held` out."""
    def half(r):
        return int(hashlib.sha1(r["source"].encode() + r["text_id"].encode()).hexdigest(), 16) % 2

    if held == "asap":
        return [r for r in rows if r["split"] == "test"], [r for r in rows if r["split"] == "test_asap"]
    ev = [r for r in rows if r["split"] == "test" and (r["system"] == held if r["label"] else half(r) == 0)]
    fit = [r for r in rows if r["split"] == "test_asap" or (r["split"] == "test" and (
        r["system"] != held if r["label"] else half(r) == 1))]
    return fit, ev


def combiner_scores(fit, ev, names):
    head = fit_logreg([[r[f] for f in names] for r in fit], [r["label"] for r in fit], names=names, l2=1.0)
    w, m, s = (np.array(head[k]) for k in ("coef", "mean", "std"))
    return np.array([head["bias"] + float(((np.array([r[f] for f in names]) - m) / s) @ w) for r in ev])


def standardised_sum(fit, ev, cheap, lm):
    """A combiner of the cheap logits and one of the LM statistics, each fitted alone and put in units
    of its fit's human pages (mean 0, spread 1), summed: neither set's weights are learnt against the
    other's."""
    def z(names):
        scores = combiner_scores(fit, fit + ev, names)  # one fit, scored on both
        human = scores[:len(fit)][[r["label"] == 0 for r in fit]]
        return (scores[len(fit):] - human.mean()) / (human.std() + 1e-9)

    return z(cheap) + z(lm)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(sys.path[0]), "shared", "data"))
    ap.add_argument("--observer", default="models/lm/qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--performer", default="models/lm/qwen2.5-coder-1.5b-instruct",
                    help="'none': the observer's statistics alone (e.g. Gemma 3 270M, models/lm/gemma-3-270m-q4_k_m.gguf)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-group", type=int, default=40)
    ap.add_argument("--rows", default=None, help="JSON cache of the scored rows (read if present, written)")
    ap.add_argument("--lm-logit", type=float, nargs=2, default=None, metavar=("A", "B"),
                    help="with --performer none: also the shipped LM head, log-odds A*obs_d + B added to "
                         "llm_generated (configs/local_lm.yaml's lm_logit for Gemma)")
    args = ap.parse_args()
    performer = None if args.performer.lower() == "none" else args.performer
    sets = feature_sets(performer is not None)

    rows = json.load(open(args.rows)) if args.rows and os.path.exists(args.rows) else []
    items = pick(args.data, args.per_group)
    seconds = None
    if len(rows) < len(items):
        import torch

        from filters.lm_detect import TokenStatistics, document_sample
        from filters.synthetic import SyntheticTextScorer

        torch.set_num_threads(os.cpu_count() or 1)
        scorer = SyntheticTextScorer().load()
        lm = TokenStatistics(args.observer, performer, max_tokens=args.max_tokens, batch_size=1).load()
        rng = random.Random(11)
        started, done = time.perf_counter(), 0
        for it in items[len(rows):]:
            page = it["text"] if it.get("raw_page") else T.pageify(it["text"], rng)
            heads = scorer.score(page, it["lang"])
            (stats,) = lm.score([document_sample(page, 1500)])
            done += 1
            if stats is None:
                continue
            rows.append({"label": it["label"], "split": it["split"], "system": it.get("system", ""),
                         "source": it.get("source", ""), "text_id": hashlib.sha1(it["text"].encode()).hexdigest(),
                         "llm": heads["llm_generated"], "ngram_logit": logit(heads["llm_ngram"]),
                         "style_logit": logit(heads["llm_style"]), **stats})
            if args.rows:
                json.dump(rows, open(args.rows, "w"))
        seconds = (time.perf_counter() - started) / max(done, 1)
    report = {"observer": args.observer, "performer": performer, "max_tokens": args.max_tokens,
              "rows": len(rows), "seconds_per_doc": None if seconds is None else round(seconds, 2)}
    parts = subsets(rows)
    report["n_pos_neg"] = {k: [sum(r["label"] for r in v), sum(1 - r["label"] for r in v)] for k, v in parts.items()}
    keys = ["llm"] + [k for k in rows[0] if k not in ("label", "split", "system", "source", "text_id", "llm")]
    report["features"] = {k: {name: auc(v, k) for name, v in parts.items()} for k in keys}
    report["combiners"] = {"shipped_naive_sum": {}}
    for g in HELD_OUT:
        ev = split_for(rows, g)[1]
        report["combiners"]["shipped_naive_sum"][g] = round(T.roc_auc([r["label"] for r in ev], [r["llm"] for r in ev]), 3)
    for name, feats in sets.items():
        out = {}
        for g in HELD_OUT:
            fit, ev = split_for(rows, g)
            out[g] = round(T.roc_auc([r["label"] for r in ev], combiner_scores(fit, ev, feats)), 3)
        report["combiners"][name] = out
    lm_set = sets["lm_statistics"]
    report["combiners"]["cheap_heads+lm_statistics_standardised_sum"] = {
        g: round(T.roc_auc([r["label"] for r in ev], standardised_sum(fit, ev, CHEAP, lm_set)), 3)
        for g, (fit, ev) in ((g, split_for(rows, g)) for g in HELD_OUT)}
    if args.lm_logit and performer is None:
        from filters.synthetic import with_lm_head

        report["combiners"]["shipped_lm_head"] = {
            g: round(T.roc_auc([r["label"] for r in ev], [with_lm_head(r["llm"], r["obs_d"], args.lm_logit)
                                                            for r in ev]), 3)
            for g, ev in ((g, split_for(rows, g)[1]) for g in HELD_OUT)}
    report["cascade"] = {}
    for share in (0.3, 0.5, 0.7):
        out = {}
        for g in HELD_OUT:
            fit, ev = split_for(rows, g)
            comb = combiner_scores(fit, ev, sets["cheap_heads+lm_statistics"])
            cheap = np.array([logit(r["llm"]) for r in ev])
            lo, hi = np.quantile(cheap, [0.5 - share / 2, 0.5 + share / 2])  # no labels used
            inside = (cheap >= lo) & (cheap <= hi)
            if not inside.any():
                out[g] = float("nan")
                continue
            band = (comb - comb[inside].min()) / (np.ptp(comb[inside]) + 1e-9)  # into [0, 1]
            score = np.where(cheap < lo, -1.0, np.where(cheap > hi, 2.0, band))
            out[g] = round(T.roc_auc([r["label"] for r in ev], score), 3)
        report["cascade"][f"{share:.0%}_to_lm"] = out
    print(json.dumps(report, indent=1))
    cost = ({} if report["seconds_per_doc"] is None else
            {"seconds a document, the LMs' statistics and the cheap heads, one process": report["seconds_per_doc"]})
    record(__file__, {**cost, **{f"{name}, ROC-AUC by held-out generator": ", ".join(f"{g} {v}" for g, v in by.items())
                                 for name, by in report["combiners"].items()},
                      **{f"cascade, {share}": ", ".join(f"{g} {v}" for g, v in by.items())
                         for share, by in report["cascade"].items()}}, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
