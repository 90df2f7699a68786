"""Train the shipped model-generated-content scorers (see filters/synthetic.py, filters/models/MODEL_CARD.md).

    train_filter("llm", "../shared/data", "filters/models/llm_generated.ftz")
    train_filter("mt",  "../shared/data", "filters/models/poor_mt.ftz")

Exact inputs (under data_dir):
  llm: llm_detect/fast_detect_gpt/exp_*/data/*.raw_data.json (human/machine pairs, 8 generators),
       llm_detect/authenticheck_asap/test.jsonl (evaluation only: unseen source + unseen generator),
       mt_quality/wmt_mqm_ted/mqm_ted_ende.tsv (English TED source sentences = native human text).
  mt:  mt_quality/wmt_mqm_ted/mqm_ted_{ende,zhen}.tsv (MT outputs with MQM annotations, human refs,
       English sources), mt_quality/mt_detection_zh_en/{train,test}.txt (SMT vs human, zh-en),
       llm_detect/fast_detect_gpt human texts (native English negatives).

Splits never cut by random rows: held-out generators/systems AND held-out source items (a fast-detect-gpt
human original with all its machine continuations; a TED talk with all its translations) are disjoint
from training. Machine continuations have the shared human prompt prefix (plus the rest of its sentence)
removed, and so do their human originals. Training texts are made page-like (random titles, bylines,
boilerplate, re-paragraphing) identically for both classes.

Deterministic given `seed` (fastText thread=1, seeded). Writes MODEL (quantized .ftz) and MODEL.json
(stacking weights, languages, thresholds, metrics) beside it.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import math
import os
import random
import re
import tempfile
import time
from collections import defaultdict

import numpy as np

from filters.synthetic import (MAX_CHARS as MAX_SAMPLE_CHARS, STAT_NAMES, STYLE_NAMES, _Classifier, ft_logit,
                               normalize, prose_sample, stacked_prob, style_features, text_stats)

# ---------------------------------------------------------------------------------------------- splits
LLM_TEST_GENERATORS = ("gpt-4", "gpt-neox-20b", "opt-2.7b")  # never trained on
# The llm style head learns chat/instruction-tuned writing from these training generators only (the
# weak base models' pure samples differ in the opposite direction, e.g. low type-token ratio).
STYLE_GENERATORS = ("davinci", "gpt-3.5-turbo")
MT_TEST_SYSTEMS = {"ende": ("Online-W", "UEdin", "metricsystem4"), "zhen": ("Online-W", "NiuTrans", "metricsystem2")}
# TED talks are the same 5 English talks in both pairs (ende talk.N <-> zhen talk.M); key = ende name.
ZHEN_TO_ENDE_TALK = {"talk.2": "talk.1", "talk.5": "talk.3", "talk.6": "talk.4", "talk.7": "talk.5", "talk.9": "talk.6"}
TED_TEST_TALKS = ("talk.3", "talk.4")  # held out, in both pairs, with every system's translation of them
ITEM_TEST_FOLD = 0  # fast-detect-gpt items with _fold(group) == 0 are test items (20%)
N_FOLDS = 5

MQM_POOR_SEGMENT = -5.0  # a segment with MQM <= -5 has (at least) one Major error
TARGET_HUMAN_FPR = 0.02  # threshold = 98th percentile of out-of-fold scores of human training pages
STACK_MIN_GAIN = 0.005  # statistics are stacked only if they raise out-of-fold (unseen-generator) AUC

# llm: word uni+bigrams only: char n-grams lowered held-out AUC (0.787 -> 0.752) and raised scores of
# human text from unseen registers (TED talks, student essays); see MODEL_CARD.md. mt: word + char 2-4-grams
# (char n-grams help zh-en translationese; 3-grams only, for speed).
FT_PARAMS = {
    "llm": dict(lr=0.1, epoch=30, wordNgrams=2, minn=0, maxn=0, dim=24, bucket=200000, minCount=2, loss="softmax"),
    "mt": dict(lr=0.3, epoch=12, wordNgrams=2, minn=3, maxn=3, dim=24, bucket=200000, minCount=2, loss="softmax"),
}


def _h(s: str) -> int:
    return int(hashlib.sha1(s.encode("utf-8")).hexdigest()[:12], 16)


def _fold(group: str) -> int:
    return _h(group) % N_FOLDS


# ------------------------------------------------------------------------------------------ text utils
_SENT_SPLIT = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+(?=\S)")
_SENT_END_CHARS = ".!?\"'”’)。！？"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT_SPLIT.split(" ".join(text.split())) if s.strip()]


def cut_to_sentence(text: str) -> str:
    """Drop a trailing incomplete sentence (the sources are cut at a token budget)."""
    text = " ".join(text.split())
    best = max(text.rfind(c) for c in ".!?。！？")
    if best < len(text) * 0.5:
        return text
    end = best + 1
    while end < len(text) and text[end] in "\"'”’)":
        end += 1
    return text[:end]


def strip_prefix(text: str, n_words: int) -> str:
    """Remove the first n_words words and the rest of the sentence they end in."""
    words = text.split()
    rest = " ".join(words[n_words:])
    m = re.search(r"[.!?][\"'”’)]*\s+", rest)
    rest = rest[m.end():] if m and m.start() < 400 else rest
    return rest


_ASAP_TAG = re.compile(r"@([A-Z]+)\d*")
_ASAP_FILL = {"PERSON": "Alex", "CAPS": "Jordan", "LOCATION": "Springfield", "CITY": "Springfield",
              "STATE": "Ohio", "ORGANIZATION": "the company", "DATE": "Monday", "TIME": "noon", "MONTH": "May",
              "NUM": "ten", "PERCENT": "ten percent", "MONEY": "ten dollars", "EMAIL": "my email", "DR": "Dr. Lee"}


def detok_ptb(s: str) -> str:
    """MT-Detection sentences are lower-cased PTB tokens; undo the tokenisation (casing: first letter, 'i')."""
    s = s.replace("-lrb-", "(").replace("-rrb-", ")").replace("``", '"').replace("''", '"')
    s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
    s = re.sub(r" ([,.;:!?%)])", r"\1", s)
    s = re.sub(r"([($]) ", r"\1", s)
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    s = re.sub(r"\bi\b", "I", s)
    return s[:1].upper() + s[1:]


# ----------------------------------------------------------------------------------------- page noise
_FIRST = ["Michael", "Sarah", "David", "Anna", "James", "Laura", "Thomas", "Maria", "Peter", "Julia", "Wei",
          "Li", "Jan", "Sophie", "Ahmed", "Chris", "Emma", "Lukas", "Yuki", "Carlos"]
_LAST = ["Smith", "Miller", "Schmidt", "Wang", "Brown", "Garcia", "Müller", "Chen", "Wilson", "Kowalski",
         "Meyer", "Taylor", "Nguyen", "Rossi", "Johnson", "Becker", "Zhang", "Clarke", "Dubois", "Khan"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_BYLINES = ["By {n}", "{n}", "By {n} | {d}", "{d}", "Posted on {d} by {n}", "{n} · {d}", "Published {d}",
            "Updated: {d}, {t}", "Written by {n} on {d}", "{d} — {n}", "Staff writer", "Von {n}, {dd}",
            "{dd} | {n}", "Autor: {n}", "{zd} 作者：{n}", "Author: {n} | {r} min read", "{d} {t} GMT",
            "{n}, Correspondent", "Last modified on {d}", "Admin | {d} | {c} Comments"]
_SHORT_BP = ["Share", "Tweet", "Home", "News", "Menu", "Search", "Read more", "Advertisement", "Comments",
             "Related", "Related articles", "Share this:", "Facebook Twitter Email", "Leave a reply",
             "Subscribe", "Log in", "Next article", "Previous post", "Tags: news, world", "Print",
             "Home » News » World", "Startseite", "Teilen", "Mehr lesen", "Anzeige", "首页", "新闻", "分享",
             "Copyright © {y}", "All rights reserved.", "Back to top", "Top stories", "Most popular",
             "Photo: Getty Images", "Image caption", "Kommentare ({c})", "{c} comments", "Sponsored"]
_LONG_BP = [
    "Sign up for our newsletter to get the best stories delivered straight to your inbox every morning.",
    "This article was originally published on our partner site and has been republished with permission.",
    "If you enjoyed this article, please consider sharing it with your friends and family on social media.",
    "Have a story idea or a tip for our reporters? Send us a message and we will get back to you.",
    "The views expressed in this post are those of the author and do not necessarily reflect those of the site.",
    "Our editors independently select the products we write about, and we may earn a commission on purchases.",
    "Copyright {y} by the publisher. All rights reserved. This material may not be republished without permission.",
    "You have reached the limit of free articles for this month. Subscribe now to continue reading without limits.",
    "Click here to read more stories like this one from our team of local reporters and contributors.",
    "Melden Sie sich für unseren Newsletter an und erhalten Sie jeden Morgen die wichtigsten Nachrichten.",
    "Dieser Artikel erschien zuerst in der Printausgabe und wurde für die Online-Ausgabe leicht gekürzt.",
    "Alle Rechte vorbehalten. Die Weiterverbreitung der Inhalte ist ohne vorherige Genehmigung nicht gestattet.",
    "本文仅代表作者本人观点，与本网站无关。未经许可，任何单位和个人不得转载、摘编或以其他方式使用本网站内容。",
    "Related: What we know so far about the story and what happens next, according to officials and experts.",
    "Leave a comment below and let us know what you think about this story and the issues it raises.",
    "Follow us on Facebook, Twitter and Instagram for the latest updates and behind-the-scenes stories.",
]


def _fill(s: str, rng: random.Random) -> str:
    n = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    y = rng.randint(2005, 2024)
    d = rng.choice([f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}, {y}", f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {y}",
                    f"{y}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{y}"])
    return s.format(n=n, d=d, y=y, t=f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                    dd=f"{rng.randint(1, 28)}.{rng.randint(1, 12)}.{y}", zd=f"{y}年{rng.randint(1, 12)}月{rng.randint(1, 28)}日",
                    r=rng.randint(2, 12), c=rng.randint(0, 99))


def pageify(text: str, rng: random.Random, noise: bool = True) -> str:
    """A document as an extractor returns a page: paragraphs of 1-5 sentences, and (with noise) an
    optional title, byline and boilerplate lines. Applied identically to both classes."""
    sents = sentences(text)
    paras, i = [], 0
    while i < len(sents):
        k = rng.randint(1, 5)
        paras.append(" ".join(sents[i:i + k]))
        i += k
    if not noise:
        return "\n".join(paras)
    head, tail = [], []
    if rng.random() < 0.7:  # title: the first words of the text, or of a random sentence
        src = (sents[0] if rng.random() < 0.6 else rng.choice(sents)) if sents else ""
        words = src.split()[: rng.randint(3, 11)]
        title = " ".join(words).rstrip(",.;:")
        head.append(title.title() if rng.random() < 0.5 else title)
    if rng.random() < 0.6:
        head.append(_fill(rng.choice(_BYLINES), rng))
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        (head if rng.random() < 0.4 else tail).append(_fill(rng.choice(_SHORT_BP), rng))
    if rng.random() < 0.3:
        line = _fill(rng.choice(_LONG_BP), rng)
        if rng.random() < 0.5:
            tail.append(line)
        else:
            paras.insert(rng.randint(0, len(paras)), line)
    return "\n".join(head + paras + tail)


# ------------------------------------------------------------------------------------------ data: llm
def _item(text, label, source, system, group, lang="en", split="train", **kw):
    return dict(text=text, label=label, source=source, system=system, group=group, lang=lang, split=split, **kw)


def load_fast_detect_gpt(data_dir: str) -> list[dict]:
    """Human continuations (one per source item) and machine continuations, shared prefix removed."""
    items, seen_human = [], set()
    files = sorted(glob.glob(os.path.join(data_dir, "llm_detect/fast_detect_gpt/exp_*/data/*.raw_data.json")))
    for path in files:
        dataset, generator = os.path.basename(path)[: -len(".raw_data.json")].split("_", 1)
        with open(path) as fh:
            data = json.load(fh)
        for orig, samp in zip(data["original"], data["sampled"]):
            group = f"fdg:{dataset}:{_h(' '.join(orig.split()[:40]))}"
            ow, sw = orig.split(), samp.split()
            k = 0
            while k < min(len(ow), len(sw)) and ow[k] == sw[k]:
                k += 1
            machine = cut_to_sentence(strip_prefix(samp, k))
            if len(machine.split()) >= 25:
                items.append(_item(machine, 1, f"fdg:{dataset}", generator, group))
            if group not in seen_human:
                human = cut_to_sentence(strip_prefix(orig, k))
                if len(human.split()) >= 25:
                    seen_human.add(group)
                    items.append(_item(human, 0, f"fdg:{dataset}", "human", group))
    for it in items:
        test_item = _fold(it["group"]) == ITEM_TEST_FOLD
        held_gen = it["system"] in LLM_TEST_GENERATORS
        if it["label"] == 0:
            it["split"] = "test" if test_item else "train"
        elif test_item:
            it["split"] = "test" if held_gen else "test_seen_generator"
        else:
            it["split"] = "unused" if held_gen else "train"
    return items


def load_asap(data_dir: str) -> list[dict]:
    """AuthentiCheck: ASAP student essays (human) vs ChatGPT essays: evaluation only."""
    items = []
    path = os.path.join(data_dir, "llm_detect/authenticheck_asap/test.jsonl")
    if not os.path.exists(path):
        return items
    with open(path) as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            text = _ASAP_TAG.sub(lambda m: _ASAP_FILL.get(m.group(1), "Jordan"), row["answer"])
            text = " ".join(text.split())
            if len(text.split()) < 25:
                continue
            gpt = bool(row["chatgpt"])
            items.append(_item(text, int(gpt), "asap", "chatgpt" if gpt else "human", f"asap:{i}", split="test_asap"))
    return items


# ------------------------------------------------------------------------------------------- data: mt
_MQM_W = {"major": 5.0, "minor": 1.0}


def _seg_penalty(category: str, severity: str) -> float:
    sev = severity.strip().lower()
    if sev == "major":
        return 25.0 if "non-translation" in category.lower() else 5.0
    if sev == "minor":
        return 0.1 if "punctuation" in category.lower() else 1.0
    return 0.0


def load_ted(data_dir: str, pair: str) -> dict:
    """{(system, seg): {"text", "mqm", "talk", "source"}}; mqm = -(MQM penalty), mean over raters."""
    path = os.path.join(data_dir, f"mt_quality/wmt_mqm_ted/mqm_ted_{pair}.tsv")
    pen = defaultdict(lambda: defaultdict(float))
    segs = {}
    with open(path, newline="") as fh:
        rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        for r in rows:
            system, talk, seg, rater, source, target, category, severity = r[0], r[1], int(r[3]), r[4], r[5], r[6], r[7], r[8]
            key = (system, seg)
            pen[key][rater] += _seg_penalty(category, severity)
            if key not in segs:
                talk = ZHEN_TO_ENDE_TALK.get(talk, talk) if pair == "zhen" else talk
                segs[key] = {"text": re.sub(r"</?v>", "", target).strip(), "talk": talk, "source": source.strip()}
    for key, s in segs.items():
        s["mqm"] = -sum(pen[key].values()) / max(len(pen[key]), 1)
    return segs


def _blocks(seq: list, rng: random.Random, lo: int, hi: int) -> list[list]:
    out, i = [], 0
    while i < len(seq):
        k = rng.randint(lo, hi)
        if len(seq) - i - k < lo:  # fold a short tail into the last block
            k = len(seq) - i
        out.append(seq[i:i + k])
        i += k
    return out


def load_mt(data_dir: str, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for pair, lang in (("ende", "de"), ("zhen", "en")):
        segs = load_ted(data_dir, pair)
        by_sys_talk = defaultdict(list)
        for (system, seg), s in sorted(segs.items()):
            by_sys_talk[(system, s["talk"])].append((seg, s))
        for (system, talk), rows in sorted(by_sys_talk.items()):
            split = "test" if talk in TED_TEST_TALKS else "train"
            human = system.startswith("ref")
            if not human and (system in MT_TEST_SYSTEMS[pair]) != (split == "test"):
                split = "unused"  # held-out systems only on held-out talks; train systems only on train talks
            src = f"ted_{pair}"
            if human:
                for off in (0, 1):  # two different block cuts of the human reference
                    for blk in _blocks(rows[off * 3:], rng, 5, 12):
                        items.append(_item(" ".join(s["text"] for _, s in blk), 0, src, system, f"ted:{talk}", lang,
                                           split, mqm=float(np.mean([s["mqm"] for _, s in blk])), kind="human_ref"))
                continue
            poor = [(seg, s) for seg, s in rows if s["mqm"] <= MQM_POOR_SEGMENT]
            for blk in _blocks(poor, rng, 3, 8):
                if len(blk) >= 3:
                    items.append(_item(" ".join(s["text"] for _, s in blk), 1, src, system, f"ted:{talk}", lang, split,
                                       mqm=float(np.mean([s["mqm"] for _, s in blk])), kind="poor_mt"))
            for blk in _blocks(rows, rng, 5, 12):  # ordinary consecutive MT output: evaluation category only
                mqm = float(np.mean([s["mqm"] for _, s in blk]))
                items.append(_item(" ".join(s["text"] for _, s in blk), -1, src, system, f"ted:{talk}", lang,
                                   split if split == "test" else "unused", mqm=mqm, kind="mt_all"))
        if pair == "ende":  # English TED sources: native English of the same talks (realistic negatives)
            src_rows = defaultdict(list)
            for (system, seg), s in sorted(segs.items()):
                if system == "ref":
                    src_rows[s["talk"]].append(s["source"])
            for talk, sents in sorted(src_rows.items()):
                split = "test" if talk in TED_TEST_TALKS else "train"
                for off in (0, 2):
                    for blk in _blocks(sents[off:], rng, 5, 12):
                        items.append(_item(" ".join(blk), 0, "ted_en_source", "native", f"ted:{talk}", "en", split,
                                           kind="native"))
    # MT-Detection zh-en: older SMT (M) vs human translation (H) + references; file-level split.
    for fname, split in (("train.txt", "train"), ("test.txt", "test")):
        path = os.path.join(data_dir, "mt_quality/mt_detection_zh_en", fname)
        if not os.path.exists(path):
            continue
        blocks = [b.split("\n") for b in open(path, encoding="utf-8").read().strip().split("\n\n")]
        cands = {"H": [], "M": []}
        refs = []
        for b in blocks:
            b = [x.strip() for x in b if x.strip()]
            if len(b) < 5:
                continue
            cands[b[4]].append(detok_ptb(b[1]))
            refs.append(detok_ptb(b[2]))
        for label, sents, kind in ((1, cands["M"], "poor_mt"), (0, cands["H"], "human_ref"), (0, refs, "human_ref")):
            for j, blk in enumerate(_blocks(sents, rng, 5, 10)):
                items.append(_item(" ".join(blk), label, "mtdet_zhen", "smt" if label else "human",
                                   f"mtdet:{fname}:{kind}:{j}", "en", split, kind=kind))
    return items


def load_web_pages(data_dir: str) -> list[dict]:
    """Real human web pages (scrapinghub article-extraction benchmark), extracted like the pipeline does
    (decode_html -> resiliparse main text -> C4 policy-line filter), real boilerplate included.
    Half the pages (by file hash) train, half are held out."""
    from extract.html import decode_html, extract_main_text
    from filters.clean import remove_boilerplate_lines
    from filters.language import LanguageIdentifier

    items = []
    paths = sorted(glob.glob(os.path.join(data_dir, "html/scrapinghub_aeb/html/*.html.gz")))
    if not paths:
        return items
    import gzip

    lid = LanguageIdentifier()
    for path in paths:
        try:
            with gzip.open(path, "rb") as fh:
                text = extract_main_text(decode_html(fh.read(), "").text, "resiliparse", 5000)
        except Exception:
            continue
        text, _ = remove_boilerplate_lines(text.strip())
        if len(text.split()) < 50:
            continue
        group = "web:" + os.path.basename(path).split(".")[0]
        items.append(_item(text, 0, "web_scrapinghub", "human", group, lid(text)[0],
                           "test" if _h(group) % 2 == 0 else "train", raw_page=True, kind="native"))
    return items


def load_data(kind: str, data_dir: str, seed: int = 0) -> list[dict]:
    if kind == "llm":
        items = load_fast_detect_gpt(data_dir) + load_asap(data_dir)
        items += [it for it in load_web_pages(data_dir) if it["lang"] == "en"]
        for it in load_mt(data_dir, seed):  # human English of other registers: TED talks, translations
            if it["label"] == 0 and it["lang"] == "en":
                items.append({**it, "source": "ted_en_source" if it["kind"] == "native" else f"{it['source']}_human"})
        return items
    if kind == "mt":
        items = load_mt(data_dir, seed)
        for it in load_fast_detect_gpt(data_dir):  # native English (news, wiki, stories, pubmed)
            if it["label"] == 0:
                items.append({**it, "system": "native", "kind": "native"})
        items += [it for it in load_web_pages(data_dir) if it["lang"] in ("en", "de")]
        return items
    raise ValueError(f"kind must be 'llm' or 'mt', not {kind!r}")


# --------------------------------------------------------------------------------------------- metrics
def roc_auc(labels, scores) -> float:
    y = np.asarray(labels, dtype=int)
    s = np.asarray(scores, dtype=float)
    npos, nneg = int(y.sum()), int((1 - y).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks for ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    return float((ranks[y == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def pr_at(labels, scores, threshold) -> dict:
    y = np.asarray(labels, dtype=int)
    pred = np.asarray(scores, dtype=float) >= threshold
    tp = int((pred & (y == 1)).sum())
    fp = int((pred & (y == 0)).sum())
    fn = int((~pred & (y == 1)).sum())
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "fpr": round(fp / int((y == 0).sum()), 4) if (y == 0).any() else None,
            "n_pos": int((y == 1).sum()), "n_neg": int((y == 0).sum())}


# --------------------------------------------------------------------------------------------- training
def _features(items, rng, copies_pos=1, copies_neg=1, noise=True):
    """(normalized fastText line, prose sample, label, item index) for each page-like variant."""
    out = []
    for idx, it in enumerate(items):
        for _ in range(copies_pos if it["label"] == 1 else copies_neg):
            page = it["text"] if it.get("raw_page") else pageify(it["text"], rng, noise)
            sample = prose_sample(page)
            out.append((normalize(sample), sample, it["label"], idx))
    return out


def _train_ft(rows, path, seed, params=None):
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


def _fit_logreg(X, y, l2=1.0, iters=50, names=("ft_logit", *STAT_NAMES)):
    """L2 logistic regression by Newton's method on standardized features; returns stack dict."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    mean, std = X.mean(0), X.std(0) + 1e-9
    Z = np.hstack([np.ones((len(X), 1)), (X - mean) / std])
    w = np.zeros(Z.shape[1])
    reg = np.eye(Z.shape[1]) * l2
    reg[0, 0] = 0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(Z @ w, -30, 30)))
        grad = Z.T @ (p - y) + reg @ w
        hess = Z.T @ (Z * (p * (1 - p))[:, None]) + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return {"mean": mean.tolist(), "std": std.tolist(), "coef": w[1:].tolist(), "bias": float(w[0]),
            "features": list(names)}


def _balance(items, rng):
    pos = sum(it["label"] == 1 for it in items)
    neg = sum(it["label"] == 0 for it in items)
    return max(1, round(neg / max(pos, 1))), max(1, round(pos / max(neg, 1)))


def _oof_rows(kind, train, seed, params):
    """Out-of-fold fastText probabilities: each fold leaves out a group of generators/systems and a
    fifth of the source items, so the stacker learns how fastText behaves on unseen generators."""
    systems = sorted({it["system"] for it in train if it["label"] == 1})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(N_FOLDS):
            held = set(systems[j::N_FOLDS])
            fit = [it for it in train if _fold(it["group"] + "#oof") != j and it["system"] not in held]
            ev = [it for it in train if _fold(it["group"] + "#oof") == j and (it["label"] == 0 or it["system"] in held)]
            if not ev or not fit:
                continue
            rng = random.Random(seed * 1000 + j)
            cp, cn = _balance(fit, rng)
            model = _train_ft(_features(fit, rng, cp, cn), os.path.join(tmp, "oof.txt"), seed, params)
            for line, sample, label, idx in _features(ev, rng):
                rows.append((_ft_pos(model, line), text_stats(sample, ev[idx]["lang"]), label, j))
    return rows


def _score_items(clf, items, seed, noise=True):
    """(n-gram, style or nan, final) probabilities of page-noised items through the shipped code path."""
    rng = random.Random(seed + 7)
    rows = []
    for line, sample, _, idx in _features(items, rng, noise=noise):
        parts = clf.parts(sample, items[idx]["lang"], line)
        rows.append((parts["ngram"], np.nan if parts["style"] is None else parts["style"], parts["prob"]))
    return np.array(rows, float).reshape(-1, 3).T


def _fit_style_head(train, seed):
    """Logistic regression on style_features: chat-model training generators vs human, balanced."""
    rows = [it for it in train if it["label"] == 0 or it["system"] in STYLE_GENERATORS]
    rng = random.Random(seed + 3)
    cp, cn = _balance(rows, rng)
    feats = _features(rows, rng, cp, cn)
    head = _fit_logreg([style_features(sample) for _, sample, _, _ in feats], [label for *_, label, _ in feats],
                       names=STYLE_NAMES)
    head["generators"] = list(STYLE_GENERATORS)
    return head


def evaluate(kind, clf, items, threshold, seed=0) -> dict:
    """Held-out figures: overall, per held-out generator/system, per source; noisy pages and clean text."""
    report = {}
    ev = [it for it in items if it["split"].startswith("test")]
    for noise in (True, False):
        ft, style, st = _score_items(clf, ev, seed, noise)
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


def _stack_and_threshold(oof, use_stats=True):
    """From out-of-fold rows: stacking weights (if they help by >= STACK_MIN_GAIN AUC, judged by a nested
    cross-validation over the folds) and the threshold at TARGET_HUMAN_FPR of human pages."""
    y = np.array([r[2] for r in oof])
    folds = np.array([r[3] for r in oof])
    ft = np.array([r[0] for r in oof])
    X = np.array([[ft_logit(r[0])] + list(r[1]) for r in oof])
    info = {"oof_rows": len(oof), "oof_auc_fasttext": round(roc_auc(y, ft), 4)}
    final = ft
    stack = None
    if use_stats and len(set(y)) == 2:
        nested = np.zeros(len(y))
        for j in sorted(set(folds)):
            tr, te = folds != j, folds == j
            if len(set(y[tr])) < 2:
                nested[te] = ft[te]
                continue
            st = _fit_logreg(X[tr], y[tr])
            nested[te] = [stacked_prob(st, r[0], list(r[1])) for r, t in zip(oof, te) if t]
        info["oof_auc_stacked"] = round(roc_auc(y, nested), 4)
        if info["oof_auc_stacked"] >= info["oof_auc_fasttext"] + STACK_MIN_GAIN:
            stack = _fit_logreg(X, y)
            final = np.array([stacked_prob(stack, r[0], list(r[1])) for r in oof])
    info["stacked"] = stack is not None
    human = np.sort(final[y == 0])
    thr = float(np.quantile(human, 1 - TARGET_HUMAN_FPR)) if len(human) else 0.5
    info["threshold_rule"] = f"{1 - TARGET_HUMAN_FPR:.2f} quantile of out-of-fold human page scores"
    return stack, round(min(max(thr, 0.5), 0.999), 4), info


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
    calib = [it for it in train if it["label"] == 0 and _fold(it["group"] + "#cal") == 0]
    train = [it for it in train if not (it["label"] == 0 and _fold(it["group"] + "#cal") == 0)]
    for it in calib:
        it["split"] = "calib"
    stack, oof_info = None, {"stacked": False}
    if stats:  # optional: stack text statistics, fitted on out-of-fold (unseen-generator) predictions
        stack, _, oof_info = _stack_and_threshold(_oof_rows(kind, train, seed, params), True)
    rng = random.Random(seed)
    cp, cn = _balance(train, rng)
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = _features(train, rng, cp, cn)
        train_txt = os.path.join(tmp, "train.txt")
        model = _train_ft(rows, train_txt, seed, params)
        model.quantize(input=train_txt, qnorm=True, retrain=False, cutoff=50000, thread=1, verbose=0)
    model.save_model(out)
    style_head = _fit_style_head(train, seed) if kind == "llm" else None
    meta_path = out[: -len(os.path.splitext(out)[1])] + ".json"
    with open(meta_path, "w") as fh:  # the heads first: evaluate exactly what ships, then add the figures
        json.dump({"stack": stack, "style_head": style_head}, fh)
    clf = _Classifier(out)
    cal_scores = _score_items(clf, calib, seed + 1)[2]
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
def _fit_logistic_1d(x, y, iters=50) -> tuple[float, float]:
    """(a, b) of P(y=1) = sigmoid(a*x + b), by Newton's method (a tiny ridge keeps it defined)."""
    X = np.c_[np.asarray(x, float), np.ones(len(x))]
    y = np.asarray(y, float)
    w = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(X @ w, -30, 30)))
        step = np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2), X.T @ (p - y))
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(w[0]), float(w[1])


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
    is_calib = [it["label"] == 0 and _fold(it["group"] + "#cal") == 0 for it in train]  # as in train_filter
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
    a, b = _fit_logistic_1d([d for d, _, _ in fit_rows], [y for *_, y in fit_rows])
    combined = np.array([with_lm_head(p, d, [a, b]) for d, p, _ in scored(calib)])
    thr = float(np.quantile(combined, 1 - TARGET_HUMAN_FPR)) if len(combined) else 0.5
    return {"lm_model": lm.model_name, "lm_max_tokens": lm.max_tokens, "lm_logit": [round(a, 6), round(b, 6)],
            "llm_generated_threshold": round(min(max(thr, 0.5), 0.9999), 4),
            "fit_texts": len(fit_rows), "calibration_human_pages": len(combined),
            "fit_auc_discrepancy": round(roc_auc([y for *_, y in fit_rows], [d for d, _, _ in fit_rows]), 4)}


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
