"""How well the model-generated-content filters (filters/synthetic.py) work, on data they never saw.

    python benchmarks/filters_eval.py --data ../shared/data [--corpus ../shared/data/corpus/mixed-dev.warc.gz]

Prints JSON:
  heldout.llm_generated / heldout.poor_mt: ROC-AUC and precision/recall at the configured threshold of the
      shipped scorers (SyntheticTextScorer, the exact pipeline code path) on the held-out split of
      filters/train_synthetic.py: generators gpt-4, gpt-neox-20b, opt-2.7b (+ ChatGPT essays of an unseen
      source) and MT systems never trained on, on source items / TED talks never trained on; texts are made
      page-like (title, byline, boilerplate) with a fixed seed. Overall, per held-out generator/system.
  throughput: single-process docs/s on 3-5 KB pages (both scorers + text sampling).
  corpus (with --corpus): mixed-dev pages extracted exactly like the pipeline (pipelines/stages.py
      ExtractText: decode_html -> extract_main_text -> remove_boilerplate_lines, then lid.176): fraction of
      `human` pages either filter drops, recall on `llm` / `poor_mt` pages per reason; `unseen` repeats the
      figures for pages whose text does not overlap any training text (8-gram containment < 0.3).
Thresholds: --llm-threshold / --mt-threshold, else the `synthetic` section of --config
(`llm_generated_threshold`, `poor_mt_threshold`), else the thresholds shipped in the model JSONs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root, not benchmarks/ (its packing.py would shadow the package)

import numpy as np  # noqa: E402

from filters import train_synthetic as T  # noqa: E402
from filters.synthetic import SyntheticTextScorer  # noqa: E402


def thresholds(args, scorer) -> dict:
    thr = {"llm_generated": scorer._llm.meta.get("threshold", 0.5), "poor_mt": scorer._mt.meta.get("threshold", 0.5)}
    if args.config:
        import yaml

        with open(args.config) as fh:
            sec = (yaml.safe_load(fh) or {}).get("synthetic") or {}
        thr["llm_generated"] = sec.get("llm_generated_threshold", thr["llm_generated"])
        thr["poor_mt"] = sec.get("poor_mt_threshold", thr["poor_mt"])
    if args.llm_threshold is not None:
        thr["llm_generated"] = args.llm_threshold
    if args.mt_threshold is not None:
        thr["poor_mt"] = args.mt_threshold
    return thr


def _fig(y, s, thr) -> dict:
    y, s = np.asarray(y), np.asarray(s)
    return {"roc_auc": round(T.roc_auc(y, s), 4), **T.pr_at(y, s, thr)}


def _scored(items, scorer, key, rng, *fields):
    """Scores of each item's text (page-noised unless it is a raw page) under `key`, then one array
    per named field ("" where an item lacks it)."""
    pages = [it["text"] if it.get("raw_page") else T.pageify(it["text"], rng) for it in items]
    scores = np.array([scorer.score(p, it["lang"])[key] for p, it in zip(pages, items)])
    return (scores, *(np.array([it.get(f, "") for it in items]) for f in fields))


def heldout(scorer, data_dir, thr, seed=0) -> dict:
    out = {}
    rng = random.Random(seed + 7)
    # ---- llm_generated
    items = [it for it in T.load_data("llm", data_dir, seed) if it["split"].startswith("test") and it["label"] in (0, 1)]
    s, y, split, system, source = _scored(items, scorer, "llm_generated", rng, "label", "split", "system", "source")
    t = thr["llm_generated"]
    main = split == "test"
    res = {"threshold": t, "held_out_generators": list(T.LLM_TEST_GENERATORS),
           "all_heldout": _fig(y[main], s[main], t)}
    for g in T.LLM_TEST_GENERATORS:
        m = main & ((system == g) | (y == 0))
        res[f"generator={g}"] = _fig(y[m], s[m], t)
    m = (split == "test_seen_generator") | (main & (y == 0))
    res["seen_generators_heldout_items"] = _fig(y[m], s[m], t)
    m = split == "test_asap"
    res["unseen_source_asap_chatgpt"] = _fig(y[m], s[m], t)
    for src in sorted(set(source[main & (y == 0)])):
        m = main & (y == 0) & (source == src)
        res.setdefault("human_fpr_by_source", {})[src] = {"n": int(m.sum()), "fpr": round(float((s[m] >= t).mean()), 4)}
    out["llm_generated"] = res
    # ---- poor_mt
    items = [it for it in T.load_data("mt", data_dir, seed) if it["split"] == "test"]
    s, y, system, source, lang, kind = _scored(items, scorer, "poor_mt", rng, "label", "system", "source", "lang", "kind")
    t = thr["poor_mt"]
    lab = y >= 0
    res = {"threshold": t, "held_out_systems": T.MT_TEST_SYSTEMS, "held_out_ted_talks": list(T.TED_TEST_TALKS),
           "all_heldout": _fig(y[lab], s[lab], t)}
    for pair, lg in (("ende", "de"), ("zhen", "en")):
        for g in T.MT_TEST_SYSTEMS[pair]:
            m = lab & (((source == f"ted_{pair}") & (system == g)) | ((y == 0) & (lang == lg)))
            res[f"ted_{pair}:system={g}"] = _fig(y[m], s[m], t)
        m = lab & ((source == f"ted_{pair}") | ((y == 0) & (lang == lg)))
        res[f"ted_{pair}_vs_all_human_{lg}"] = _fig(y[m], s[m], t)
        m = lab & (source == f"ted_{pair}")
        res[f"ted_{pair}_vs_human_translations_only"] = _fig(y[m], s[m], t)
    m = lab & ((source == "mtdet_zhen") | ((y == 0) & (lang == "en")))
    res["mtdet_zhen_smt_vs_all_human_en"] = _fig(y[m], s[m], t)
    for k in ("native", "human_ref"):
        m = (y == 0) & (kind == k)
        res[f"fpr_{k}"] = round(float((s[m] >= t).mean()), 4)
    m = kind == "mt_all"
    mq = np.array([it.get("mqm", 0.0) for it in items])
    res["flagged_consecutive_mt_blocks"] = {
        name: {"n": int((m & sel).sum()), "flagged": round(float((s[m & sel] >= t).mean()), 4) if (m & sel).any() else None}
        for name, sel in (("mqm<=-5", mq <= -5), ("-5<mqm<=-2", (mq > -5) & (mq <= -2)), ("mqm>-2", mq > -2))}
    out["poor_mt"] = res
    return out


def heldout_lm(lm, data_dir, max_chars: int, seed=0) -> dict:
    """ROC-AUC of Fast-DetectGPT's discrepancy (filters/lm_detect.py) on the same held-out llm items
    and page noise as the fastText scorer (no threshold: the discrepancy has none shipped)."""
    from filters.lm_detect import document_sample

    rng = random.Random(seed + 7)
    items = [it for it in T.load_data("llm", data_dir, seed) if it["split"].startswith("test") and it["label"] in (0, 1)]
    pages = [it["text"] if it.get("raw_page") else T.pageify(it["text"], rng) for it in items]
    scores = lm.score([document_sample(p, max_chars) for p in pages])
    rows = [(it, s) for it, s in zip(items, scores) if s is not None]

    def auc(keep) -> float:
        sub = [(it["label"], s) for it, s in rows if keep(it)]
        return round(T.roc_auc([y for y, _ in sub], [s for _, s in sub]), 4)

    res = {"model": lm.model_name, "unscored_items": len(items) - len(rows),
           "all_heldout_roc_auc": auc(lambda it: it["split"] == "test"),
           "unseen_source_asap_chatgpt_roc_auc": auc(lambda it: it["split"] == "test_asap")}
    for g in T.LLM_TEST_GENERATORS:
        res[f"generator={g}_roc_auc"] = auc(lambda it, g=g: it["split"] == "test" and (it["label"] == 0 or it["system"] == g))
    return res


def throughput(scorer, data_dir, n=2000, seed=0) -> dict:
    items = [it for it in T.load_fast_detect_gpt(data_dir)]
    rng = random.Random(seed)
    docs = []
    while len(docs) < n:  # 3-5 KB pages: several texts joined, with title/byline/boilerplate
        target = rng.randint(3000, 5000)
        parts = []
        while sum(len(p) for p in parts) < target:
            parts.append(rng.choice(items)["text"])
        docs.append(T.pageify(" ".join(parts), rng)[:target])
    t0 = time.perf_counter()
    for d in docs:
        scorer.score(d, "en")
    dt = time.perf_counter() - t0
    return {"docs": n, "mean_doc_chars": int(np.mean([len(d) for d in docs])), "seconds": round(dt, 3),
            "docs_per_s_single_process": round(n / dt, 1)}


def _grams(text, n=8):
    w = text.lower().split()
    return {hash(" ".join(w[i:i + n])) for i in range(max(len(w) - n + 1, 0))}


def corpus(scorer, path, labels_path, data_dir, thr) -> dict:
    from extract.html import decode_html, extract_main_text
    from extract.records import route
    from extract.warc import ReadError, iter_records
    from filters.clean import remove_boilerplate_lines
    from filters.language import LanguageIdentifier

    labels = {}
    with open(labels_path) as fh:
        for line in fh:
            row = json.loads(line)
            labels[row["record_id"]] = row
    train_grams = set()
    for kind in ("llm", "mt"):
        for it in T.load_data(kind, data_dir):
            if it["split"] == "train":
                train_grams |= _grams(it["text"])
    lid = LanguageIdentifier()
    per = collections.defaultdict(list)
    with open(path, "rb") as fh:
        for rec in iter_records(fh):
            if isinstance(rec, ReadError) or rec.record_id not in labels:
                continue
            cat = labels[rec.record_id]["category"]
            if cat not in ("human", "llm", "poor_mt") or route(rec)[0] != "html":
                continue
            try:
                text = extract_main_text(decode_html(rec.payload, rec.http_charset or "").text, "resiliparse", 5000)
            except Exception:
                continue
            text, _ = remove_boilerplate_lines(text.strip())
            if not text:
                continue
            lang, _ = lid(text)
            sc = scorer.score(text, lang)
            g = _grams(text)
            seen = len(g & train_grams) / max(len(g), 1) >= 0.3
            reason = ("llm_generated" if sc["llm_generated"] >= thr["llm_generated"] else
                      "poor_mt" if sc["poor_mt"] >= thr["poor_mt"] else None)
            per[cat].append({"reason": reason, "seen": seen, "lang": lang, "llm": sc["llm_generated"],
                             "mt": sc["poor_mt"], "source": labels[rec.record_id]["source"]})

    def summary(rows):
        n = len(rows)
        c = collections.Counter(r["reason"] for r in rows)
        return {"pages": n, "dropped_frac": round(sum(v for k, v in c.items() if k) / n, 4) if n else None,
                "by_reason": {k or "kept": v for k, v in c.most_common()}}

    out = {"thresholds": thr}
    for cat in ("human", "llm", "poor_mt"):
        rows = per[cat]
        out[cat] = {"all": summary(rows), "unseen": summary([r for r in rows if not r["seen"]])}
    hum = per["human"]
    out["human"]["by_lang"] = {lg: summary([r for r in hum if r["lang"] == lg])
                               for lg, _ in collections.Counter(r["lang"] for r in hum).most_common(4)}
    out["human"]["by_source"] = {s: summary([r for r in hum if r["source"] == s])
                                 for s in sorted({r["source"] for r in hum})}
    out["llm"]["recall_llm_reason"] = round(sum(r["reason"] == "llm_generated" for r in per["llm"]) / max(len(per["llm"]), 1), 4)
    out["poor_mt"]["recall_poor_mt_reason"] = round(
        sum(r["reason"] == "poor_mt" for r in per["poor_mt"]) / max(len(per["poor_mt"]), 1), 4)
    out["poor_mt"]["by_lang"] = {lg: summary([r for r in per["poor_mt"] if r["lang"] == lg])
                                 for lg in sorted({r["lang"] for r in per["poor_mt"]})}
    # ROC-AUC on the corpus pages (human pages as negatives)
    for cat, key in (("llm", "llm"), ("poor_mt", "mt")):
        ys = [1] * len(per[cat]) + [0] * len(hum)
        ss = [r[key] for r in per[cat]] + [r[key] for r in hum]
        out[cat]["roc_auc_vs_human_pages"] = round(T.roc_auc(ys, ss), 4)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--labels", default=None, help="default: <corpus without .warc.gz>.labels.jsonl")
    ap.add_argument("--config", default=None)
    ap.add_argument("--llm-threshold", type=float, default=None)
    ap.add_argument("--mt-threshold", type=float, default=None)
    ap.add_argument("--llm-model", default=None)
    ap.add_argument("--mt-model", default=None)
    ap.add_argument("--throughput-docs", type=int, default=2000)
    ap.add_argument("--lm-model", default=None, help="a transformers causal LM: also report Fast-DetectGPT's AUC")
    ap.add_argument("--lm-device", default="cpu")
    args = ap.parse_args()
    scorer = SyntheticTextScorer(args.llm_model, args.mt_model).load()
    thr = thresholds(args, scorer)
    report = {"thresholds": thr, "heldout": heldout(scorer, args.data, thr),
              "throughput": throughput(scorer, args.data, args.throughput_docs)}
    if args.lm_model:
        from filters.lm_detect import SamplingDiscrepancy

        lm = SamplingDiscrepancy(args.lm_model, device=args.lm_device).load()
        report["heldout"]["llm_lm_discrepancy"] = heldout_lm(lm, args.data, 1500)
    if args.corpus:
        labels = args.labels or args.corpus.replace(".warc.gz", "").replace(".warc", "") + ".labels.jsonl"
        report["corpus"] = corpus(scorer, args.corpus, labels, args.data, thr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
