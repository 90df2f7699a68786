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
  external_mt (with --wmt-sxs DIR): the poor-MT scorer on WMT 2023's news MT (other systems, year and domain;
      filters/training_data.py load_wmt_sxs), never fitted on.
Thresholds: --llm-threshold / --mt-threshold, else the `synthetic` section of --config
(`llm_generated_threshold`, `poor_mt_threshold`), else the thresholds shipped in the model JSONs.
LM head: --lm-model / --lm-logit / --lm-max-tokens, else the config's `lm_model`, `lm_logit`,
`lm_max_tokens` (e.g. --config configs/local_lm.yaml): llm_generated then includes the calibrated
Fast-DetectGPT discrepancy as in the pipeline, and each llm subset also reports the discrepancy's own
ROC-AUC (`lm_discrepancy_only_roc_auc`); throughput is then measured for the LM too. With the config's
`lm_band` (the cascade: the LM only for documents whose score without it lies in the band; off with
--no-lm-band), each llm subset reports instead the share of its documents in the band, the figures with
the LM on every document (`lm_on_every_document`, from the same discrepancies) and how many verdicts
differ from those.
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

from benchmarks.record import record  # noqa: E402

import numpy as np  # noqa: E402

from filters import train_synthetic as T  # noqa: E402
from filters.synthetic import SyntheticTextScorer  # noqa: E402


def _config_section(path) -> dict:
    if not path:
        return {}
    import yaml

    with open(path) as fh:
        return (yaml.safe_load(fh) or {}).get("synthetic") or {}


def thresholds(args, scorer) -> dict:
    thr = {"llm_generated": scorer._llm.meta.get("threshold", 0.5), "poor_mt": scorer._mt.meta.get("threshold", 0.5)}
    sec = _config_section(args.config)
    for key in ("llm_generated", "poor_mt"):
        if sec.get(f"{key}_threshold") is not None:
            thr[key] = sec[f"{key}_threshold"]
    if args.llm_threshold is not None:
        thr["llm_generated"] = args.llm_threshold
    if args.mt_threshold is not None:
        thr["poor_mt"] = args.mt_threshold
    return thr


def _fig(y, s, thr) -> dict:
    y, s = np.asarray(y), np.asarray(s)
    return {"roc_auc": round(T.roc_auc(y, s), 4), **T.pr_at(y, s, thr)}


class LLMScore:
    """`llm_generated` as the pipeline computes it: the shipped heads and, with an LM configured and
    `lm_logit` set, the calibrated Fast-DetectGPT discrepancy as a third head (pipelines/stages.py), only
    for documents in `lm_band` where one is set (the cascade). The discrepancy is computed for every
    judged document all the same, so that each call also leaves, for comparison, the score with the LM
    on every document (`every`) and which documents the band sent to the LM (`in_band`)."""

    def __init__(self, scorer, lm=None, lm_logit=None, max_chars=1500, lm_band=None):
        self.scorer, self.lm, self.lm_logit, self.max_chars, self.lm_band = scorer, lm, lm_logit, max_chars, lm_band
        self.every = self.in_band = None

    def __call__(self, texts, langs) -> tuple[np.ndarray, np.ndarray]:
        """(llm_generated, discrepancy or nan) per text; the discrepancy nan outside the band."""
        from filters.lm_detect import document_sample
        from filters.synthetic import in_lm_band, with_lm_head

        scores = [self.scorer.score(t, lg) for t, lg in zip(texts, langs)]
        p = np.array([s["llm_generated"] for s in scores])
        d = np.full(len(texts), np.nan)
        self.every, self.in_band = p.copy(), np.zeros(len(texts), bool)
        if self.lm is not None:
            idx = [i for i, s in enumerate(scores) if s["llm_generated_supported"]]
            for i, v in zip(idx, self.lm.score([document_sample(texts[i], self.max_chars) for i in idx])):
                if v is not None:
                    self.every[i] = with_lm_head(p[i], v, self.lm_logit)
                    if in_lm_band(p[i], self.lm_band):
                        self.in_band[i] = True
                        d[i], p[i] = v, self.every[i]
        return p, d


def _pages(items, rng) -> list[str]:
    """Each item's text made page-like (title, byline, boilerplate) unless it is a raw page."""
    return [it["text"] if it.get("raw_page") else T.pageify(it["text"], rng) for it in items]


def _fields(items, *names):
    """One array per named item field ("" where an item lacks it)."""
    return tuple(np.array([it.get(f, "") for it in items]) for f in names)


def heldout(scorer, data_dir, thr, seed=0, llm=None) -> dict:
    out = {}
    rng = random.Random(seed + 7)
    # ---- llm_generated
    llm = llm or LLMScore(scorer)
    items = [it for it in T.load_data("llm", data_dir, seed) if it["split"].startswith("test") and it["label"] in (0, 1)]
    s, d = llm(_pages(items, rng), [it["lang"] for it in items])
    y, split, system, source = _fields(items, "label", "split", "system", "source")
    t = thr["llm_generated"]
    main = split == "test"
    res = {"threshold": t, "held_out_generators": list(T.LLM_TEST_GENERATORS)}
    every, in_band = llm.every, llm.in_band
    if llm.lm is not None:
        res["lm"] = {"model": llm.lm.model_name, "max_tokens": llm.lm.max_tokens, "lm_logit": llm.lm_logit,
                     "lm_band": llm.lm_band, "unscored_items": int(np.isnan(d).sum()),
                     "in_band_share": round(float(in_band[main].mean()), 4)}
    subsets = {"all_heldout": main, "seen_generators_heldout_items": (split == "test_seen_generator") | (main & (y == 0)),
               "unseen_source_asap_chatgpt": split == "test_asap"}
    for g in T.LLM_TEST_GENERATORS:
        subsets[f"generator={g}"] = main & ((system == g) | (y == 0))
    for name, m in subsets.items():
        res[name] = _fig(y[m], s[m], t)
        if llm.lm is not None and llm.lm_band is None:  # the discrepancy alone, for comparison with the paper
            k = m & ~np.isnan(d)
            res[name]["lm_discrepancy_only_roc_auc"] = round(T.roc_auc(y[k], d[k]), 4)
        if llm.lm is not None and llm.lm_band is not None:  # the cascade against the LM on every document
            res[name]["lm_on_every_document"] = _fig(y[m], every[m], t)
            res[name]["in_band_share"] = round(float(in_band[m].mean()), 4)
            res[name]["verdicts_differing"] = int(((s[m] >= t) != (every[m] >= t)).sum())
    for src in sorted(set(source[main & (y == 0)])):
        m = main & (y == 0) & (source == src)
        res.setdefault("human_fpr_by_source", {})[src] = {"n": int(m.sum()), "fpr": round(float((s[m] >= t).mean()), 4)}
    out["llm_generated"] = res
    # ---- poor_mt
    items = [it for it in T.load_data("mt", data_dir, seed) if it["split"] == "test"]
    s = np.array([scorer.score(p, it["lang"])["poor_mt"] for p, it in zip(_pages(items, rng), items)])
    y, system, source, lang, kind = _fields(items, "label", "system", "source", "lang", "kind")
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


def throughput_lm(llm, data_dir, n=64, seed=0) -> dict:
    """The LM head alone on held-out-style pages: documents/s in this process, batched as configured."""
    from filters.lm_detect import document_sample

    items = T.load_fast_detect_gpt(data_dir)
    rng = random.Random(seed)
    docs = [document_sample(T.pageify(rng.choice(items)["text"], rng), llm.max_chars) for _ in range(n)]
    t0 = time.perf_counter()
    llm.lm.score(docs)
    dt = time.perf_counter() - t0
    return {"docs": n, "max_tokens": llm.lm.max_tokens, "batch": llm.lm.batch_size, "device": llm.lm.device,
            "seconds": round(dt, 3), "docs_per_s_single_process": round(n / dt, 2)}


def _grams(text, n=8):
    w = text.lower().split()
    return {hash(" ".join(w[i:i + n])) for i in range(max(len(w) - n + 1, 0))}


def corpus(scorer, path, labels_path, data_dir, thr, llm=None) -> dict:
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
    llm = llm or LLMScore(scorer)
    pages = []
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
            g = _grams(text)
            pages.append((cat, text, lid(text)[0], len(g & train_grams) / max(len(g), 1) >= 0.3,
                          labels[rec.record_id]["source"]))
    llm_scores, _ = llm([p[1] for p in pages], [p[2] for p in pages])
    per = collections.defaultdict(list)
    for (cat, text, lang, seen, source), p_llm in zip(pages, llm_scores):
        mt = scorer.score(text, lang)["poor_mt"]
        reason = ("llm_generated" if p_llm >= thr["llm_generated"] else "poor_mt" if mt >= thr["poor_mt"] else None)
        per[cat].append({"reason": reason, "seen": seen, "lang": lang, "llm": p_llm, "mt": mt, "source": source})

    def summary(rows):
        n = len(rows)
        c = collections.Counter(r["reason"] for r in rows)
        return {"pages": n, "dropped_frac": round(sum(v for k, v in c.items() if k) / n, 4) if n else None,
                "by_reason": {k or "kept": v for k, v in c.most_common()}}

    out = {"thresholds": thr}
    if llm.lm is not None and llm.lm_band is not None:
        out["lm_in_band_share"] = round(float(llm.in_band.mean()), 4) if len(pages) else None
        out["lm_verdicts_differing"] = int(((llm_scores >= thr["llm_generated"]) != (llm.every >= thr["llm_generated"])).sum())
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


def external_mt(scorer, folder: str, data_dir: str, thr, seed=0) -> dict:
    """The shipped poor-MT scorer on MT of another year, other systems and another domain (WMT 2023's news,
    filters/training_data.py load_wmt_sxs; nothing is fitted on it): en-de poor blocks against the human
    reference's blocks, every en-de block against them, and zh-en poor blocks against the held-out native
    English of the TED talks (the set has no zh-en reference)."""
    from filters.training_data import load_wmt_sxs

    rng = random.Random(seed + 11)
    items = load_wmt_sxs(folder, seed)
    native = [it for it in T.load_data("mt", data_dir, seed)
              if it["split"] == "test" and it["label"] == 0 and it.get("kind") == "native" and it["lang"] == "en"]
    items += native
    s = np.array([scorer.score(p, it["lang"])["poor_mt"] for p, it in zip(_pages(items, rng), items)])
    y, source, kind = _fields(items, "label", "source", "kind")
    t = thr["poor_mt"]
    ende_ref = (source == "wmt23_ende") & (kind == "human_ref")
    out = {"threshold": t}
    for name, pos, neg in (("wmt23_ende_poor_vs_reference", (source == "wmt23_ende") & (y == 1), ende_ref),
                           ("wmt23_ende_any_mt_vs_reference", (source == "wmt23_ende") & (y == -1), ende_ref),
                           ("wmt23_zhen_poor_vs_native_english", (source == "wmt23_zhen") & (y == 1), kind == "native")):
        if pos.any() and neg.any():
            m = pos | neg
            out[name] = {"n_pos_neg": [int(pos.sum()), int(neg.sum())], **_fig(pos[m].astype(int), s[m], t)}
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
    ap.add_argument("--lm-model", default=None, help="a transformers causal LM (folder, hub id or .gguf): "
                    "also report Fast-DetectGPT's AUC (else the config's synthetic.lm_model)")
    ap.add_argument("--lm-logit", type=float, nargs=2, default=None, metavar=("A", "B"),
                    help="the LM's calibration (curate fit-lm-head; else the config's synthetic.lm_logit): "
                    "llm_generated then includes the LM head")
    ap.add_argument("--lm-max-tokens", type=int, default=None)
    ap.add_argument("--lm-device", default=None, help="else the config's lm_device, else cpu")
    ap.add_argument("--no-lm-band", action="store_true", help="the LM on every document, whatever the config's lm_band")
    ap.add_argument("--wmt-sxs", default=None, help="a folder with WMT 2023's sxs_mqm_generalMT2023_*.tsv: the poor-MT "
                    "scorer on MT of another year, domain and systems (filters/training_data.py load_wmt_sxs)")
    args = ap.parse_args()
    scorer = SyntheticTextScorer(args.llm_model, args.mt_model).load()
    thr = thresholds(args, scorer)
    llm = LLMScore(scorer)
    section = _config_section(args.config)
    lm_model = args.lm_model or section.get("lm_model")
    if lm_model:
        from filters.lm_detect import SamplingDiscrepancy

        max_tokens = args.lm_max_tokens or section.get("lm_max_tokens") or 256
        device = args.lm_device or section.get("lm_device") or "cpu"
        lm = SamplingDiscrepancy(lm_model, device=device, max_tokens=max_tokens, batch_size=section.get("lm_batch") or 16,
                                 dtype=section.get("lm_dtype")).load()
        llm = LLMScore(scorer, lm, args.lm_logit or section.get("lm_logit"), section.get("max_chars") or 1500,
                       None if args.no_lm_band else section.get("lm_band"))
    report = {"thresholds": thr, "heldout": heldout(scorer, args.data, thr, llm=llm),
              "throughput": throughput(scorer, args.data, args.throughput_docs)}
    if llm.lm is not None:
        report["throughput_lm"] = throughput_lm(llm, args.data)
    if args.wmt_sxs:
        report["external_mt"] = external_mt(scorer, args.wmt_sxs, args.data, thr)
    if args.corpus:
        labels = args.labels or args.corpus.replace(".warc.gz", "").replace(".warc", "") + ".labels.jsonl"
        report["corpus"] = corpus(scorer, args.corpus, labels, args.data, thr, llm)
    print(json.dumps(report, indent=1))
    held = report["heldout"]
    headline = {"llm_generated ROC-AUC, generators held out": held["llm_generated"]["all_heldout"]["roc_auc"],
                "poor_mt ROC-AUC, systems held out": held["poor_mt"]["all_heldout"]["roc_auc"],
                "ms per document, both scorers, one process": round(1000 / report["throughput"]["docs_per_s_single_process"], 3)}
    if "throughput_lm" in report:
        headline["ms per document, LM head"] = round(1000 / report["throughput_lm"]["docs_per_s_single_process"], 1)
    for name, fig in report.get("external_mt", {}).items():
        if isinstance(fig, dict):
            headline[f"poor_mt ROC-AUC, {name} (n {fig['n_pos_neg'][0]} / {fig['n_pos_neg'][1]})"] = fig["roc_auc"]
    if "corpus" in report:
        headline["human pages dropped (corpus)"] = report["corpus"]["human"]["all"]["dropped_frac"]
    record(__file__, headline, report)


if __name__ == "__main__":
    main()
